"""A read never signs: the API's proof and checkpoint requests wait for the ledger's
checkpoint step to sign, and a ledger whose fold loop is not running signs nothing for them."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

import pytest
from anchor_helpers import publish_run, wait_for

from fleet_ledger.fleet.record.seal import encode_key
from fleet_ledger.ledger.client import ApiError, call
from fleet_ledger.ledger.service import Ledger, LedgerConfig
from fleet_ledger.plumbing.natsd import NatsServer

from fault_helpers import host_key


def test_a_proof_waits_for_the_checkpoint_step_and_never_signs_itself(
        nats_server: NatsServer, tmp_path: Path) -> None:
    """With the timer off, a proof of a folded leaf is answered once the checkpoint step
    signs for it; with the fold loop stopped nothing signs, so the same request is refused
    (503) and the store holds no checkpoint: the request wrote nothing."""
    async def scenario() -> None:
        config = LedgerConfig(data_dir=tmp_path / "led", servers=[nats_server.url],
                              checkpoint_every=10**9, checkpoint_ms=10**9)
        ledger = Ledger(config)
        ledger.store.enroll("h1", encode_key(bytes(host_key("h1").verify_key)))
        await ledger.start()
        stop = asyncio.Event()
        task = asyncio.create_task(ledger.run(stop))
        try:
            run = await publish_run(nats_server.url, "unit-reads", "eec")
            await wait_for(lambda: (ledger.store.run_row(run) or {}).get("segments") == 3,
                           20, "the run to fold")
            stop.set()
            await asyncio.wait_for(task, 10)
            assert ledger.store.last_checkpoint() is None  # the timer never signed

            with pytest.raises(ApiError) as err:  # no checkpoint step running: no proof
                await call(nats_server.url, "prove", {"run": run})
            assert err.value.code == "503" and "no signed checkpoint holds leaf" in str(
                err.value)
            with pytest.raises(ApiError) as err:
                await call(nats_server.url, "checkpoint")
            assert err.value.code == "503"
            assert ledger.store.last_checkpoint() is None  # the reads signed nothing

            stop = asyncio.Event()
            task = asyncio.create_task(ledger.run(stop))
            bundle = json.loads(await call(nats_server.url, "prove", {"run": run}))
            signed = ledger.store.last_checkpoint()
            assert signed is not None and bundle["tree_size"] == signed[0] >= 3
            cp = json.loads(await call(nats_server.url, "checkpoint"))
            assert cp["size"] == signed[0]
        finally:
            stop.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 10)
            await ledger.close()

    asyncio.run(scenario())
