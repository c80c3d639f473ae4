"""An embedded nats-server and a ledger folding in this event loop, for the demos."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleet_ledger.cli._app import CheckFailed
from fleet_ledger.cli._common import progress

if TYPE_CHECKING:  # imported where used: the demos start without the ledger's imports
    from fleet_ledger.ledger.service import Ledger
    from fleet_ledger.plumbing.natsd import NatsServer


@asynccontextmanager
async def embedded_ledger(workdir: Path, grants: str = "enforce"
                          ) -> AsyncIterator[tuple[NatsServer, Ledger]]:
    """``(server, ledger)``: a nats-server storing in ``workdir/nats`` and a ledger named
    ``demo`` in ``workdir/ledger`` (checkpoints every 200 ms; ``grants`` as
    :attr:`LedgerConfig.grants`), stopped on exit."""
    from fleet_ledger.cli._wiring import make_ledger
    from fleet_ledger.ledger.service import LedgerConfig
    from fleet_ledger.plumbing.natsd import NatsServer

    with NatsServer(store_dir=workdir / "nats", die_with_parent=True) as server:
        ledger = make_ledger(LedgerConfig(data_dir=workdir / "ledger", servers=[server.url],
                                          name="demo", checkpoint_ms=200, grants=grants))
        stop = asyncio.Event()
        await ledger.start()
        task = asyncio.create_task(ledger.run(stop))
        try:
            yield server, ledger
        finally:
            stop.set()
            await task
            await ledger.close()


async def wait_folded(ledger: Any, js: Any, timeout: float = 60.0) -> None:
    """Until ``ledger`` has folded everything its fleet's stream holds (CheckFailed after
    ``timeout`` seconds)."""
    stream = ledger.names.stream
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = await js.stream_info(stream)
        if ledger.store.watermark() >= info.state.last_seq:
            return
        progress(f"folding: stream {info.state.last_seq}, folded {ledger.store.watermark()}")
        await asyncio.sleep(0.2)
    raise CheckFailed("the ledger did not fold the stream in time")
