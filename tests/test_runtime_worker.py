"""A worker in this process against a real nats-server: it keeps its claim fresh while a
long interval runs, so the run is not taken for a dead worker's."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import runtime_flows as flows

from fleet_ledger.agents.host import Host
from fleet_ledger.agents.runtime import Runtime
from fleet_ledger.agents.runtime import worker as worker_module
from fleet_ledger.agents.runtime.fleet_store import FleetStore
from fleet_ledger.agents.runtime.worker import Worker
from fleet_ledger.plumbing.nats_connect import connect
from fleet_ledger.plumbing.natsd import NatsServer


async def _no_adopt(run: str):  # type: ignore[no-untyped-def]
    raise AssertionError("the run is held here")


async def _no_drain() -> None:
    return None


@contextlib.asynccontextmanager
async def _parked(url: str, folder: Path, name: str, seconds: float
                  ) -> AsyncIterator[tuple[FleetStore, Runtime, Worker, str]]:
    """Host A's runtime and worker over a real nats-server, with ``slow_after_go`` run
    ``name`` parked on its signal (published); everything closed on exit."""
    nc = await connect([url])
    host = Host("A", folder)
    rt = Runtime(folder, host=host)
    try:
        store = await FleetStore(nc.jetstream()).open()
        worker = Worker(rt, store, _no_adopt, _no_drain)
        run = rt.start(flows.slow_after_go, name, {"seconds": seconds})
        await worker.publish(await rt.advance(run))
        yield store, rt, worker, run
    finally:
        host.close()
        rt.close()
        await nc.close()


def test_a_worker_renews_its_claim_while_a_long_interval_runs(
        nats_server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """With a 0.3 s lease, a 1 s step: the claim's time is renewed several times during the
    interval, and the run ends done."""
    monkeypatch.setattr(worker_module, "CLAIM_LEASE_S", 0.3)

    async def main() -> tuple[list[float], dict]:  # type: ignore[type-arg]
        async with _parked(nats_server.url, tmp_path / "A", "slow", 1.0) as (
                store, _rt, worker, run):
            await store.send_signal(run, "go", None, "g")
            seen: list[float] = []

            async def watch() -> None:
                while True:
                    got = await store.get(run.removeprefix("b3:"))
                    if got and got[0]["status"] == "claimed":
                        seen.append(got[0]["claimed_at"])
                    await asyncio.sleep(0.05)

            watcher = asyncio.create_task(watch())
            (report,) = await worker.pass_once()
            watcher.cancel()
        return sorted(set(seen)), report

    renewals, report = asyncio.run(main())
    assert report["status"] == "done" and report["result"] == "slow done"
    assert len(renewals) >= 3, renewals


def test_a_refusal_after_a_renewal_is_written_over_the_renewed_claim(
        nats_server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """With a 0.3 s lease, an interval refused after 0.5 s (the claim renewed meanwhile):
    the refusal lands (the run is ``refused``), not lost against the first revision."""
    from fleet_ledger.fleet.runtime.runtime_errors import JournalTampered

    monkeypatch.setattr(worker_module, "CLAIM_LEASE_S", 0.3)

    async def main() -> tuple[dict, dict]:  # type: ignore[type-arg]
        async with _parked(nats_server.url, tmp_path / "A", "slow", 1.0) as (
                store, rt, worker, run):
            await store.send_signal(run, "go", None, "g")

            async def refused_later(run: str):  # type: ignore[no-untyped-def]
                await asyncio.sleep(0.5)
                raise JournalTampered("made up for the test")

            rt.advance = refused_later  # type: ignore[method-assign]
            (report,) = await worker.pass_once()
            got = await store.get(run.removeprefix("b3:"))
        assert got is not None
        return got[0], report

    doc, report = asyncio.run(main())
    assert report["refused"] == "JournalTampered"
    assert doc["status"] == "refused" and doc["refused"] == "JournalTampered", doc


def test_a_waiting_worker_is_woken_by_a_signal_not_by_its_poll(
        nats_server: NatsServer, tmp_path: Path):
    """A worker whose full passes are 600 s apart (after its first) continues a parked run
    within seconds of a signal being stored: the signals stream pushes it the run (a
    worker that only polled would not move for ten minutes)."""

    async def main() -> list[dict]:  # type: ignore[type-arg]
        async with _parked(nats_server.url, tmp_path / "A", "pushed", 0.0) as (
                store, _rt, worker, run):
            reports: asyncio.Queue[dict] = asyncio.Queue()  # type: ignore[type-arg]
            stop = asyncio.Event()
            loop = asyncio.create_task(worker.run_forever(stop, reports.put_nowait,
                                                          poll=600.0))
            try:
                await asyncio.sleep(0.5)  # the first full pass: nothing to do yet
                assert reports.empty()
                await store.send_signal(run, "go", None, "g1")
                got = [await asyncio.wait_for(reports.get(), timeout=30.0)]
            finally:
                stop.set()
                await asyncio.wait_for(loop, timeout=30.0)
        return got

    (report,) = asyncio.run(main())
    assert report["status"] == "done" and report["result"] == "slow done"
