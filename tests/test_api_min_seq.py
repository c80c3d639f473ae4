"""``min_seq`` on an API request: answered once the ledger has folded and committed the
stream up to it, else refused with the position it has reached."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from anchor_helpers import publish_run, running_ledger, wait_for

from fleet_ledger.ledger.client import ApiError, call
from fleet_ledger.plumbing.natsd import NatsServer


def test_min_seq_waits_for_the_committed_position(nats_server: NatsServer,
                                                   tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_ledger(nats_server.url, tmp_path / "data", []) as ledger:
            run = await publish_run(nats_server.url, "unit-a")
            await wait_for(lambda: ledger.store.run_row(run), 20, "the run to fold")
            written = ledger.store.watermark()  # the fold's view: maybe not yet committed
            await wait_for(lambda: ledger.committed_seq >= written, 20, "the commit")
            reached = ledger.committed_seq
            assert reached > 0
            status = json.loads(await call(nats_server.url, "status", min_seq=reached))
            assert status["origin"] == ledger.origin
            with pytest.raises(ApiError) as err:
                await call(nats_server.url, "status", min_seq=10**9)
            assert err.value.code == "503"
            # The rest of the run folded meanwhile (all published before the request).
            assert ledger.committed_seq >= reached
            assert str(err.value) == (f"behind: folded to stream sequence "
                                      f"{ledger.committed_seq}, asked min_seq {10**9}")

    asyncio.run(scenario())
