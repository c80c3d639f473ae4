"""An embedded nats-server and a ledger folding in this event loop, for the demos."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any


@asynccontextmanager
async def embedded_ledger(workdir: Path) -> AsyncIterator[tuple[Any, Any]]:
    """``(server, ledger)``: a nats-server storing in ``workdir/nats`` and a ledger named
    ``demo`` in ``workdir/ledger`` (checkpoints every 200 ms), stopped on exit."""
    from cli._wiring import make_ledger
    from ledger.service import LedgerConfig
    from plumbing.natsd import NatsServer

    with NatsServer(store_dir=workdir / "nats", die_with_parent=True) as server:
        ledger = make_ledger(LedgerConfig(data_dir=workdir / "ledger", servers=[server.url],
                                          name="demo", checkpoint_ms=200))
        stop = asyncio.Event()
        await ledger.start()
        task = asyncio.create_task(ledger.run(stop))
        try:
            yield server, ledger
        finally:
            stop.set()
            await task
            await ledger.close()
