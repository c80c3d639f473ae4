"""Shred everywhere: a value's key lives in one place, the fleet's key bucket. A host
keeps it only for the interval that needs it (the worker takes it back from the bucket and
deletes it after), so shredding it in the bucket makes the value unrecoverable on every
host that ever held the run, and no host can upload it again."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
import runtime_flows as flows
from runtime_helpers import EXAMPLES, no_adopt, no_drain
from test_moving_runs import fleet as fleet  # the same three enrolled hosts and a ledger

from fleet_ledger.agents.host import Host
from fleet_ledger.agents.runtime import Runtime
from fleet_ledger.agents.runtime.fleet_store import FleetStore
from fleet_ledger.agents.runtime.journal import Journal
from fleet_ledger.agents.runtime.worker import Worker
from fleet_ledger.fleet.runtime.runtime_errors import ValueShredded
from fleet_ledger.plumbing.nats_connect import connect
from fleet_ledger.plumbing.natsd import NatsServer

from pipeline_helpers import cli, wait_folded

pytestmark = pytest.mark.timeout(240)


def _readable(folder: Path, address: str) -> bool:
    journal = Journal(folder)
    try:
        journal.value(address)
        return True
    except ValueShredded:
        return False
    finally:
        journal.close()


def _shred_during_an_interval(url: str, folder: Path, defended: bool) -> tuple[bool, bool]:
    """Park `approval` through a worker's publish; as an interval would, take its tool
    result's key back from the bucket; shred it in the bucket meanwhile; end the interval
    (publish again). Then: can the host still read the value, does the bucket hold its key
    again? Undefended: the host keeps keys and uploads them with a plain put."""
    async def main() -> tuple[bool, bool]:
        nc = await connect([url])
        store = await FleetStore(nc.jetstream()).open()
        host = Host("A", folder)
        rt = Runtime(folder, host=host)
        if not defended:
            rt.journal.forget_keys = lambda run: 0  # type: ignore[method-assign]

            async def put_keys(keys: dict[str, list[str]]) -> None:
                for address, key in keys.items():
                    await store.keys.put(address.removeprefix("b3:"), json.dumps(key).encode())
            store.put_keys = put_keys  # type: ignore[method-assign]
        worker = Worker(rt, store, no_adopt, no_drain)
        try:
            run = rt.start(flows.approval, "shred", {"ticket": 1})
            outcome = await rt.advance(run)
            await worker.publish(outcome)
            (address,) = [e.data()["value"] for e in rt.journal.entries(run)
                          if e.kind == "resolve"]
            rt.journal.put_keys(await store.blob_keys([address]))  # the interval's copy
            await store.shred(address)
            await worker.publish(outcome)  # the interval ends
            readable = _readable(folder, address)
            again = bool(await store.blob_keys([address]))
        finally:
            rt.close()
            host.close()
            await nc.close()
        return readable, again

    return asyncio.run(main())


def test_without_the_defence_a_host_keeps_a_shredded_value_and_uploads_it_again(
        nats_server: NatsServer, tmp_path: Path):
    """The attack: a host that keeps keys still reads the value after the shred, and its
    next park puts the key back in the bucket."""
    os.environ["RUNTIME_EFFECTS"] = str(tmp_path / "fx.db")
    assert _shred_during_an_interval(nats_server.url, tmp_path / "A", False) == (True, True)


def test_with_the_defence_a_shredded_value_is_gone_from_the_host_and_stays_gone(
        nats_server: NatsServer, tmp_path: Path):
    """With the defence: the host gives the key up when its interval ends, and uploading a
    key never writes over a shred (create only), so the value is gone here and there."""
    os.environ["RUNTIME_EFFECTS"] = str(tmp_path / "fx.db")
    assert _shred_during_an_interval(nats_server.url, tmp_path / "A", True) == (False, False)


def _keys_held(folder: Path) -> int:
    journal = Journal(folder)
    try:
        return int(journal.db.execute("SELECT COUNT(*) FROM blob_keys").fetchone()[0])
    finally:
        journal.close()


def test_a_value_shredded_after_three_hosts_held_the_run_is_unrecoverable_everywhere(
        fleet, tmp_path: Path):  # type: ignore[no-untyped-def]
    """A starts the triage agent, B continues it (approval), C finishes it (timer); each
    host holds no key once its interval is over (and a start on A says where the run is); the
    tool's result is shredded once (in the bucket): no host and not the bucket can read it,
    while every other value is still readable through the bucket."""
    url, led, base = fleet
    env = {**os.environ, "TRIAGE_TRACKER": str(tmp_path / "tracker.jsonl")}

    def worker(name: str) -> dict[str, Any]:
        out = cli("runtime", "worker", "--once", "--json", "--path", EXAMPLES, "--data",
                  str(base / name), "--name", name, "--vkey", str(led / "ledger.vkey"),
                  "--nats", url, env=env)
        (report,) = [json.loads(line) for line in out.stdout.splitlines()]
        return report

    started = json.loads(cli(
        "runtime", "start", "triage:triage", "t-shred", "--input",
        json.dumps({"ticket": 5, "text": "down", "cool_down": 2}), "--path", EXAMPLES,
        "--data", str(base / "A"), "--name", "A", "--nats", url, "--json", env=env).stdout)
    run = started["run"]
    cli("signal", run, "approve", "--data", '{"by": "ana"}', "--nats", url)
    wait_folded(url, led)
    assert worker("B")["status"] == "parked"
    wait_folded(url, led)
    time.sleep(2.2)
    assert worker("C")["status"] == "done"
    hosts = [base / n for n in ("A", "B", "C")]
    assert [_keys_held(h) for h in hosts] == [0, 0, 0]
    again = cli("runtime", "start", "triage:triage", "t-shred", "--path", EXAMPLES, "--data",
                str(base / "A"), "--name", "A", "--nats", url, env=env, check=False)
    assert again.returncode == 2 and "it is done on host C now" in again.stderr, again.stderr
    entries = json.loads(cli("runtime", "journal", run, "--data", str(base / "C"),
                             "--json").stdout)["entries"]
    values = [e["body"]["value"] for e in entries if e["kind"] == "resolve"]
    cli("runtime", "shred", values[0], "--data", str(base / "A"), "--nats", url)
    assert [_readable(h, values[0]) for h in hosts] == [False, False, False]

    async def bucket() -> dict[str, Any]:
        nc = await connect([url])
        try:
            store = await FleetStore(nc.jetstream()).open()
            return await store.blob_keys(values)
        finally:
            await nc.close()

    held = asyncio.run(bucket())
    assert values[0] not in held and set(values[1:]) <= set(held)
