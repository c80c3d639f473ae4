"""Resumption precondition 1 on the host that parked the run: the journal it replays must
end at the park's transcript address in the record verified from genesis. A journal
edited in ``runtime.db`` (an entry deleted, a value forged with the chain re-hashed, an
entry edited) is refused (JournalTampered), the run marked refused, nothing sealed."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest
import runtime_flows as flows
import runtime_tamper as tamper
from runtime_helpers import EXAMPLES, no_adopt, no_drain
from test_moving_runs import fleet as fleet  # the same three enrolled hosts and a ledger

from fleet_ledger.agents.host import Host
from fleet_ledger.agents.runtime import Runtime
from fleet_ledger.agents.runtime.fleet_store import FleetStore
from fleet_ledger.agents.runtime.runtime import workflow_name
from fleet_ledger.agents.runtime.worker import Worker
from fleet_ledger.plumbing.nats_connect import connect
from fleet_ledger.plumbing.natsd import NatsServer

from pipeline_helpers import api, cli, wait_folded

pytestmark = pytest.mark.timeout(240)


def _forge_then_resume(url: str, folder: Path, effects: Path, check: bool
                       ) -> tuple[dict[str, Any], int, int]:
    """Park `approval` on host A, forge its tool result in runtime.db (chain re-hashed),
    signal it and let A's worker continue it: the report and the outbox's segment count
    before and after."""
    os.environ["RUNTIME_EFFECTS"] = str(effects)

    async def main() -> tuple[dict[str, Any], int, int]:
        nc = await connect([url])
        store = await FleetStore(nc.jetstream()).open()
        host = Host("A", folder)
        rt = Runtime(folder, host=host)
        try:
            run = rt.start(flows.approval, "forged", {"ticket": 1})
            await Worker(rt, store, no_adopt, no_drain).publish(await rt.advance(run))
            before = len(host.outbox.payloads_after(run, 0))
        finally:
            rt.close()
            host.close()
        tamper.forge_value(folder, run, workflow_name(flows.approval), "done:forged")
        await store.send_signal(run, "approve", {"by": "ana"}, "s1")
        host = Host("A", folder)  # a new worker process on the same host
        rt = Runtime(folder, host=host)
        if not check:
            rt._check_park = lambda *a: None  # type: ignore[method-assign]
        try:
            (report,) = await Worker(rt, store, no_adopt, no_drain).pass_once()
            after = len(host.outbox.payloads_after(run, 0))
        finally:
            rt.close()
            host.close()
            await nc.close()
        return report, before, after

    return asyncio.run(main())


def test_without_the_check_a_forged_value_is_sealed_and_returned(
        nats_server: NatsServer, tmp_path: Path):
    """The attack, without precondition 1: the re-hashed journal verifies as a chain, the
    worker resumes, seals new segments and closes the run with the forged value."""
    report, before, after = _forge_then_resume(nats_server.url, tmp_path / "A",
                                               tmp_path / "fx.db", check=False)
    assert report["status"] == "done" and report["result"]["label"] == "done:forged"
    assert after > before


def test_with_the_check_a_forged_value_is_refused_and_nothing_sealed(
        nats_server: NatsServer, tmp_path: Path):
    """The same attack with precondition 1: JournalTampered, no segment sealed, the run
    marked refused here (with the reason) and in the runs bucket."""
    report, before, after = _forge_then_resume(nats_server.url, tmp_path / "A",
                                               tmp_path / "fx.db", check=True)
    assert report["refused"] == "JournalTampered", report
    assert "transcript address" in report["detail"]
    assert after == before
    run = report["run"]
    status, meta = tamper.run_status(tmp_path / "A", run)
    assert status == "refused" and meta["refused"] == "JournalTampered"


TAMPERS = {
    "deleted": lambda folder, run, wf: tamper.delete_last(folder, run),
    "forged": lambda folder, run, wf: tamper.forge_value(folder, run, wf, "question"),
    "edited": lambda folder, run, wf: tamper.edit_entry(folder, run),
}


def test_each_tamper_of_a_parked_journal_on_its_own_host_is_refused(
        fleet, tmp_path: Path):  # type: ignore[no-untyped-def]
    """Real processes: A starts three runs that park at the approval wait; each journal is
    tampered one way in A's runtime.db; after a signal each, A's own worker (`fleet runtime
    worker --once`) refuses all three (JournalTampered), the ledger still holds two
    segments of each and the runs are marked refused."""
    url, led, base = fleet
    env = {**os.environ, "TRIAGE_TRACKER": str(tmp_path / "tracker.jsonl")}
    runs = {}
    for how in TAMPERS:
        out = cli("runtime", "start", "triage:triage", f"t-{how}", "--input",
                  json.dumps({"ticket": 1, "text": "down"}), "--path", EXAMPLES, "--data",
                  str(base / "A"), "--name", "A", "--nats", url, "--json", env=env)
        runs[how] = json.loads(out.stdout)["run"]
    wait_folded(url, led)
    for how, run in runs.items():
        TAMPERS[how](base / "A", run, "triage:triage")
        cli("signal", run, "approve", "--data", '{"by": "ana"}', "--nats", url)
    out = cli("runtime", "worker", "--once", "--json", "--path", EXAMPLES, "--data",
              str(base / "A"), "--name", "A", "--vkey", str(led / "ledger.vkey"),
              "--nats", url, env=env)
    reports = {r["run"]: r for r in map(json.loads, out.stdout.splitlines())}
    assert {how: reports[run].get("refused") for how, run in runs.items()} == dict.fromkeys(
        TAMPERS, "JournalTampered"), reports
    wait_folded(url, led)
    for run in runs.values():
        assert api(url, "run", {"run": run})["segments"] == 2
        assert tamper.run_status(base / "A", run)[0] == "refused"
    listed = json.loads(cli("runtime", "list", "--json", "--nats", url).stdout)["runs"]
    assert {d["status"] for d in listed} == {"refused"}
