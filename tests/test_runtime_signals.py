"""Signal ids (seed 003): a resend under a used id with the same data is a duplicate,
delivered once; with other data it is a conflict, refused by name to the sender
(``SignalConflict``, the CLI exits 1 with one line) and never delivered."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import runtime_flows as flows
from runtime_helpers import no_adopt, no_drain

from fleet_ledger.agents.host import Host
from fleet_ledger.agents.runtime import Runtime
from fleet_ledger.agents.runtime.fleet_store import FleetStore
from fleet_ledger.agents.runtime.worker import Worker
from fleet_ledger.fleet.subjects import run_token
from fleet_ledger.plumbing.nats_connect import connect
from fleet_ledger.plumbing.natsd import NatsServer

from pipeline_helpers import cli


def _signal(url: str, run: str, data: str, sid: str) -> Any:
    return cli("signal", run, "approve", "--data", data, "--id", sid, "--nats", url,
               "--json", check=False)


def test_without_an_id_record_the_server_drops_other_data_silently(
        nats_server: NatsServer):
    """The attack the record stops: JetStream's duplicate window alone acknowledges a
    resend with other data as a plain duplicate; the sender is never told it was lost."""
    async def main() -> bool:
        nc = await connect([nats_server.url])
        js = nc.jetstream()
        await FleetStore(js).open()
        subject, hdr = "fleet.runtime.signal.x", {"Nats-Msg-Id": "x/s1"}
        await js.publish(subject, b'{"name": "approve", "id": "s1", "data": 1}', headers=hdr)
        ack = await js.publish(subject, b'{"name": "approve", "id": "s1", "data": 2}',
                               headers=hdr)
        await nc.close()
        return bool(ack.duplicate)

    assert asyncio.run(main()) is True


def test_a_conflicting_signal_is_refused_by_name_and_never_delivered(
        nats_server: NatsServer, tmp_path: Path):
    """A run parks at its approval wait; `fleet signal` with id s1 is stored, the same id
    and data again is a duplicate (exit 0), the same id with other data exits 1 with one
    line naming SignalConflict; a message published around the CLI under that id with
    other data is not delivered either: the run gets the first data."""
    url = nats_server.url
    os.environ["RUNTIME_EFFECTS"] = str(tmp_path / "fx.db")

    async def park() -> str:
        nc = await connect([url])
        store = await FleetStore(nc.jetstream()).open()
        host = Host("A", tmp_path / "A")
        rt = Runtime(tmp_path / "A", host=host)
        try:
            run = rt.start(flows.approval, "sig", {"ticket": 1})
            await Worker(rt, store, no_adopt, no_drain).publish(await rt.advance(run))
        finally:
            rt.close()
            host.close()
            await nc.close()
        return run

    run = asyncio.run(park())

    async def forge() -> None:
        nc = await connect([url])
        # Around the CLI, first, under a message id the server does not dedupe.
        await nc.jetstream().publish(f"fleet.runtime.signal.{run_token(run)}", json.dumps(
            {"name": "approve", "id": "s1", "data": {"by": "mallory"}}).encode(),
            headers={"Nats-Msg-Id": "forged"})
        await nc.close()

    asyncio.run(forge())
    first = _signal(url, run, '{"by": "ana"}', "s1")
    same = _signal(url, run, '{"by": "ana"}', "s1")
    other = _signal(url, run, '{"by": "mallory"}', "s1")
    assert first.returncode == 0 and json.loads(first.stdout)["duplicate"] is False
    assert same.returncode == 0 and json.loads(same.stdout)["duplicate"] is True
    assert other.returncode == 1 and other.stdout == ""
    assert other.stderr.startswith("SignalConflict: ") and len(
        other.stderr.strip().splitlines()) == 1, other.stderr

    async def resume() -> dict[str, Any]:
        nc = await connect([url])
        store = await FleetStore(nc.jetstream()).open()
        host = Host("A", tmp_path / "A")
        rt = Runtime(tmp_path / "A", host=host)
        try:
            stored = [s["data"]["by"] for s in await store.signals(run)]
            assert stored == ["mallory", "ana"]  # the forged one first in the stream
            (report,) = await Worker(rt, store, no_adopt, no_drain).pass_once()
        finally:
            rt.close()
            host.close()
            await nc.close()
        return report

    report = asyncio.run(resume())
    assert report["status"] == "done" and report["result"]["decision"] == {"by": "ana"}, report
    entries = json.loads(cli("runtime", "journal", run, "--data", str(tmp_path / "A"),
                             "--json").stdout)["entries"]
    assert [e["body"]["id"] for e in entries if e["kind"] == "signal"] == ["s1"]
