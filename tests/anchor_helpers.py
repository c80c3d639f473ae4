"""Test helpers: an in-process ledger with anchors, fed genuine segments over a real broker."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import nats

from fleet_ledger.cli._wiring import make_ledger
from fleet_ledger.fleet.address import format_address
from fleet_ledger.fleet.record.seal import encode_key
from fleet_ledger.ledger import views
from fleet_ledger.ledger.service import Ledger, LedgerConfig

from fault_helpers import host_key, sealed_run

FLEET = [sys.executable, "-m", "fleet_ledger.cli"]


def fleet(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*FLEET, *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, check=False)


@contextlib.asynccontextmanager
async def running_ledger(url: str, data: Path, anchors: list[Any],
                         origin: str = "fleet-ledger.local/anchored") -> AsyncIterator[Ledger]:
    """A ledger with ``anchors`` folding from ``url``; stopped on exit, also on failure."""
    config = LedgerConfig(data_dir=data, servers=[url], origin=origin, checkpoint_ms=100)
    ledger = make_ledger(config, anchors)
    ledger.store.enroll("h1", encode_key(bytes(host_key("h1").verify_key)))
    stop = asyncio.Event()
    await ledger.start()
    task = asyncio.create_task(ledger.run(stop))
    try:
        yield ledger
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 10)
        await ledger.close()


async def publish_run(url: str, unit: str, plan: str = "eec") -> str:
    """Publish one genuine run of host h1; its ``b3:`` run id."""
    run = sealed_run("h1", unit, plan)
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        for subject, data in run.messages:
            await js.publish(subject, data)
    finally:
        await nc.close()
    return format_address(run.run)


async def wait_for(pred: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def anchored(ledger: Ledger, names: set[str]) -> bool:
    """Every anchor in ``names`` has anchored the ledger's current tree size."""
    size = ledger.store.tree.size()
    rows = {a["name"]: a for a in views.anchor_status(ledger.store, ledger.receipts)}
    return size > 0 and all((rows.get(n) or {}).get("anchored_size") == size for n in names)
