"""What a runtime run's record says, checked against real processes, a real nats-server
and `fleet ledger serve`: a worker SIGKILLed inside a step and continued is `Blocked` at the
retrying segment in the ledger, in `fleet audit` and in `fleet verify` of the export, and
`fleet runtime verify` ties its exported journal to that record."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import runtime_flows as flows
from test_moving_runs import fleet as fleet  # the same three enrolled hosts and a ledger

from pipeline_helpers import api, cli, wait_folded

pytestmark = pytest.mark.timeout(240)

TESTS = str(Path(__file__).resolve().parent)


def fleet_json(*args: str, env: dict[str, str] | None = None, check: bool = True
               ) -> list[dict[str, Any]]:
    out = cli(*args, "--json", env=env, check=check)
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def worker(url: str, base: Path, led: Path, name: str, env: dict[str, str]
           ) -> subprocess.CompletedProcess[str]:
    return cli("runtime", "worker", "--once", "--json", "--path", TESTS, "--data",
               str(base / name), "--name", name, "--vkey", str(led / "ledger.vkey"),
               "--nats", url, env=env, check=False)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"RUNTIME_EFFECTS": str(tmp_path / "effects.db"),
            "RUNTIME_CRASH": str(tmp_path / "crashed"), "PYTHONPATH": TESTS}


def test_a_worker_killed_inside_a_step_then_continued_is_blocked_at_the_retry(
        fleet, env, tmp_path: Path):  # type: ignore[no-untyped-def]
    """A parks at "go"; the signal is sent; A's worker resumes the run and is SIGKILLed
    inside the step (effect applied, result not journaled). Once its claim has run out, a
    worker pass seals the lost interval (the step outstanding) and retries the step (one
    effect, two attempts): the ledger, `fleet audit` and `fleet verify` of the export all
    say Blocked at that retrying segment, 5 (before the retry rule: NonBlocking)."""
    url, led, base = fleet
    parked = fleet_json("runtime", "start", "runtime_flows:gated_step", "g-1", "--input",
                        '{"n": 1}', "--path", TESTS, "--data", str(base / "A"), "--name",
                        "A", "--nats", url, env=env)[0]
    run = parked["run"]
    cli("signal", run, "go", "--data", "{}", "--nats", url)
    killed = worker(url, base, led, "A", env)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    subprocess.run([sys.executable, "-c", EXPIRE_CLAIM, url, run], check=True, timeout=60)
    again = worker(url, base, led, "A", env)
    (done,) = [json.loads(line) for line in again.stdout.splitlines() if line]
    assert done["status"] == "done" and done["segments"] == 6, (done, again.stderr)
    assert done["verdict"] == {"verdict": "Blocked", "segment": 5}
    applied, attempts = flows.effects(env["RUNTIME_EFFECTS"])
    assert len(applied) == 1 and len(attempts) == 2 and attempts[0] == attempts[1]
    wait_folded(url, led)
    assert api(url, "run", {"run": run})["wait_proof"] == {"verdict": "Blocked", "segment": 5}
    audit = fleet_json("audit", "--nats", url)[0]
    assert {"run": run, "host": "A", "verdict": "Blocked", "segment": 5} in [
        {k: r[k] for k in ("run", "host", "verdict", "segment")}
        for r in audit["blocked_or_malformed"]]
    record = tmp_path / "g-1.json"
    cli("run", "export", run, "--out", str(record), "--nats", url)
    verified = fleet_json("verify", str(record))[0]
    assert verified["wait_proof"] == {"verdict": "Blocked", "segment": 5}
    segments = json.loads(record.read_text())["segments"]
    assert segments[3]["attestation_object"]["outcome"] == "lost"
    assert segments[3]["calls"] == {"dispatched": ["c1"], "resolved": []}
    assert segments[4]["calls"] == {"dispatched": ["c1/retry"], "resolved": ["c1/retry"]}
    check_offline(url, base, run, record, tmp_path)


def check_offline(url: str, base: Path, run: str, record: Path, tmp_path: Path) -> None:
    """`fleet runtime verify` of A's exported journal against the exported record: valid,
    the same verdict; with a value shredded, still valid and the value listed; with the
    last entry dropped, exit 1 naming the rule and segment."""
    journal = tmp_path / "g-1.journal.json"
    cli("runtime", "export", run, "--data", str(base / "A"), "--out", str(journal), "--nats",
        url)
    (ok,) = fleet_json("runtime", "verify", run, "--record", str(record), "--journal",
                       str(journal))
    assert ok["wait_proof"] == {"verdict": "Blocked", "segment": 5} and ok["shredded"] == []
    assert [(i["segment"], i["outcome"]) for i in ok["intervals"]] == [
        (1, "ok"), (4, "lost"), (5, "ok")]
    (from_ledger,) = fleet_json("runtime", "verify", run, "--data", str(base / "A"),
                                "--nats", url)
    assert from_ledger == ok
    value = json.loads(journal.read_text())["entries"][-1][3]
    address = json.loads(value)["value"]
    cli("runtime", "shred", address, "--data", str(base / "A"), "--nats", url)
    (shredded,) = fleet_json("runtime", "verify", run, "--record", str(record), "--data",
                             str(base / "A"), "--nats", url)
    assert shredded["shredded"] == [address] and shredded["values"] == ok["values"] - 1
    cut = json.loads(journal.read_text())
    cut["entries"].pop()
    journal.write_text(json.dumps(cut))
    bad = cli("runtime", "verify", run, "--record", str(record), "--journal", str(journal),
              check=False)
    assert bad.returncode == 1
    assert "at segment 5: JournalRootMismatch" in bad.stderr.strip(), bad.stderr


# The claim of the killed worker is 60 s old for every reader: the lease ran out.
EXPIRE_CLAIM = """
import asyncio, sys
from fleet_ledger.agents.runtime.fleet_store import CLAIM_LEASE_S, FleetStore
from fleet_ledger.plumbing.nats_connect import connect
async def main(url, run):
    nc = await connect([url])
    store = await FleetStore(nc.jetstream()).open()
    doc, rev = await store.get(run.removeprefix("b3:"))
    assert doc["status"] == "claimed", doc
    doc["claimed_at"] -= CLAIM_LEASE_S + 1
    assert await store.update(doc, rev) is not None
    await nc.close()
asyncio.run(main(*sys.argv[1:]))
"""


def test_cancel_of_a_parked_run_closes_it_with_its_park_idle_energy(
        fleet, env, tmp_path: Path):  # type: ignore[no-untyped-def]
    """A parks at "go" and its process exits; `fleet runtime cancel` closes the parked run:
    the close carries the park's idle energy (estimated, never zero), the ledger folds it
    into the run's idle energy, `fleet verify` of the export and `fleet runtime verify`
    agree, the audit counts the park as priced, and a later signal continues nothing."""
    url, led, base = fleet
    parked = fleet_json("runtime", "start", "runtime_flows:gated_step", "c-1", "--input",
                        '{"n": 2}', "--path", TESTS, "--data", str(base / "A"), "--name",
                        "A", "--nats", url, env=env)[0]
    run = parked["run"]
    (cancelled,) = fleet_json("runtime", "cancel", run, "--reason", "no longer needed",
                              "--data", str(base / "A"), "--name", "A", "--nats", url)
    assert cancelled["status"] == "cancelled" and cancelled["segments"] == 3
    assert cancelled["error"] == "no longer needed"
    wait_folded(url, led)
    shown = api(url, "run", {"run": run})
    assert shown["phase"] == "closed" and shown["segments"] == 3
    record = tmp_path / "c-1.json"
    cli("run", "export", run, "--out", str(record), "--nats", url)
    close = json.loads(record.read_text())["segments"][2]
    assert close["kind"] == "closed" and close["idle_uj"] >= 1
    assert close["idle_provenance"] == "estimated"
    assert close["idle_meter"].startswith("estimate:storage")
    assert shown["energy"]["idle_uj"]["estimated"] == close["idle_uj"]
    verified = fleet_json("verify", str(record))[0]
    assert verified["energy"]["idle_uj"] == {"measured": 0, "estimated": close["idle_uj"]}
    (offline,) = fleet_json("runtime", "verify", run, "--record", str(record), "--data",
                            str(base / "A"), "--nats", url)
    assert offline["phase"] == "closed" and offline["unsealed"] == 0
    audit = fleet_json("audit", "--nats", url)[0]
    assert audit["closed_without_idle"] == [] and audit["parked"] == []
    assert [p["parks"] for p in audit["parks"] if p["form"] == "transcript"] == [1]
    listed = {d["name"]: d for d in fleet_json("runtime", "list", "--nats", url)[0]["runs"]}
    assert listed["c-1"]["status"] == "cancelled"
    cli("signal", run, "go", "--data", "{}", "--nats", url)
    assert worker(url, base, led, "A", env).stdout.strip() == ""
    again = cli("runtime", "cancel", run, "--data", str(base / "A"), "--nats", url,
                check=False)
    assert again.returncode == 1 and "RunFinished" in again.stderr
    listed = {d["name"]: d for d in fleet_json("runtime", "list", "--nats", url)[0]["runs"]}
    assert listed["c-1"]["status"] == "cancelled"  # the refused cancel changed nothing


def test_cancel_on_another_host_adopts_the_parked_run_and_closes_it_with_its_idle(
        fleet, env, tmp_path: Path):  # type: ignore[no-untyped-def]
    """A run parked by A is cancelled from B (an empty folder): B verifies the record and
    its head under the ledger's key, then closes it with the park's idle energy priced on
    the stored journal; the ledger holds A then B, and no worker continues the run."""
    url, led, base = fleet
    run = fleet_json("runtime", "start", "runtime_flows:gated_step", "c-2", "--input",
                     '{"n": 3}', "--path", TESTS, "--data", str(base / "A"), "--name", "A",
                     "--nats", url, env=env)[0]["run"]
    wait_folded(url, led)
    (doc,) = fleet_json("runtime", "cancel", run, "--data", str(base / "B"), "--name", "B",
                        "--vkey", str(led / "ledger.vkey"), "--nats", url)
    assert (doc["status"], doc["host"], doc["segments"]) == ("cancelled", "B", 3)
    wait_folded(url, led)
    shown = api(url, "run", {"run": run})
    assert shown["phase"] == "closed"
    assert [h["host"] for h in shown["holders"]] == ["A", "B"]
    assert shown["energy"]["idle_uj"]["estimated"] >= 1
    cli("signal", run, "go", "--data", "{}", "--nats", url)
    assert worker(url, base, led, "A", env).stdout.strip() == ""


def test_cancel_of_a_crashed_running_run_needs_its_process_gone(
        fleet, env, tmp_path: Path):  # type: ignore[no-untyped-def]
    """`fleet runtime start` SIGKILLed inside its first step leaves a run its journal shows
    running, with no claim to say the process is gone: cancel refuses it (exit 2) until
    --force; then the cut-off interval is sealed lost, the run closed bare, the ledger
    folds both and the run is cancelled in JetStream."""
    url, led, base = fleet
    started = cli("runtime", "start", "runtime_flows:crash_first", "c-3", "--input",
                  '{"n": 1}', "--path", TESTS, "--data", str(base / "A"), "--name", "A",
                  "--nats", url, env=env, check=False)
    assert started.returncode == -signal.SIGKILL, started.stderr[-2000:]
    from fleet_ledger.agents.runtime import run_address, workflow_name

    run = run_address("c-3", workflow_name(flows.crash_first))
    refused = cli("runtime", "cancel", run, "--data", str(base / "A"), "--name", "A",
                  "--nats", url, check=False)
    assert refused.returncode == 2 and "--force" in refused.stderr
    (doc,) = fleet_json("runtime", "cancel", run, "--force", "--data", str(base / "A"),
                        "--name", "A", "--nats", url)
    assert (doc["status"], doc["segments"]) == ("cancelled", 2)
    wait_folded(url, led)
    record = tmp_path / "c-3.json"
    cli("run", "export", run, "--out", str(record), "--nats", url)
    segments = json.loads(record.read_text())["segments"]
    assert segments[0]["attestation_object"]["outcome"] == "lost"
    assert segments[1] == {k: segments[1][k] for k in ("kind", "index", "head", "seal")}
    assert fleet_json("verify", str(record))[0]["phase"] == "closed"


def test_cancel_of_a_run_killed_inside_an_interval_seals_it_lost_then_closes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A run whose process was SIGKILLed mid-interval (nothing parked) is cancelled on its
    host: the cut-off interval is sealed as lost, then the run is closed bare (no park, so
    no idle energy); the record verifies, the journal matches it, and the run never
    advances again."""
    from test_runtime_kill import proc

    from fleet_ledger.agents.host import Host
    from fleet_ledger.agents.runtime import Runtime, run_address, workflow_name
    from fleet_ledger.cli.runtime_verify_cmds import journal_file
    from fleet_ledger.fleet.address import format_address
    from fleet_ledger.fleet.record.verify import verify_record
    from fleet_ledger.fleet.record.wire import RecordWire, decode_envelope, segment_to_wire
    from fleet_ledger.fleet.runtime.runtime_journal import run_ids
    from fleet_ledger.fleet.runtime.runtime_verify import parse_journal, verify_runtime

    data, effects = tmp_path / "h", tmp_path / "effects.db"
    monkeypatch.setenv("RUNTIME_EFFECTS", str(effects))
    code, _ = proc(data, effects, "x1", "--kill", "before", "3", "--host", "A")
    assert code == -signal.SIGKILL
    host = Host("A", data)
    rt = Runtime(data, host=host)
    try:
        run = run_address("x1", workflow_name(flows.chain))
        out = rt.cancel(run, "stop")
        assert (out.status, out.segments, out.error) == ("cancelled", 2, "stop")
        sealed = [decode_envelope(p).sealed for p in host.outbox.payloads_after(run, 0)]
        assert sealed[0].attestation is not None and sealed[0].attestation.outcome == "lost"
        assert sealed[1].segment.canonical() == b"\x04"
        unit, grants = run_ids("x1", workflow_name(flows.chain))
        record = RecordWire(format_address(unit), format_address(grants),
                            [segment_to_wire(s) for s in sealed], run=run,
                            host_key=host.public_key)
        assert verify_record(record).phase == "closed"
        journal = json.dumps(journal_file(run, data)).encode()
        assert verify_runtime(record, parse_journal(journal)).intervals[0].outcome == "lost"
        assert asyncio.run(rt.advance(run)).status == "cancelled"
    finally:
        rt.close()
        host.close()
