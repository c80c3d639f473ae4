"""The runtime across host processes, a real nats-server and `fleet ledger serve`: a run
parks and its process exits; a signal sent while nothing runs (twice, one id) is read by a
worker on a host with an empty folder, which adopts the run and parks it at a timer; the
timer falls due while everything is down and a third host finishes it. A tampered journal
is refused on resume; two workers racing for one wait: one continues."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from test_moving_runs import fleet as fleet  # the same three enrolled hosts and a ledger

from fleet_ledger.fleet.log.note import parse_verifier_key
from fleet_ledger.fleet.record.verify import verify_record
from fleet_ledger.fleet.record.wire import decode_record

from fault_helpers import LedgerProc
from pipeline_helpers import FLEET_BIN, api, cli, host_keys, prove_all, wait_folded

pytestmark = pytest.mark.timeout(240)

EXAMPLES = str(Path(__file__).resolve().parent.parent / "examples")


def fleet_json(*args: str, env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    out = cli(*args, "--json", env=env)
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def start(url: str, base: Path, name: str, inp: dict[str, Any], env: dict[str, str]
          ) -> dict[str, Any]:
    return fleet_json("runtime", "start", "triage:triage", name, "--input", json.dumps(inp),
                      "--path", EXAMPLES, "--data", str(base / "A"), "--name", "A",
                      "--nats", url, env=env)[0]


def worker(url: str, base: Path, led: Path, name: str, env: dict[str, str]
           ) -> list[dict[str, Any]]:
    return fleet_json("runtime", "worker", "--once", "--path", EXAMPLES, "--data",
                      str(base / name), "--name", name, "--vkey", str(led / "ledger.vkey"),
                      "--nats", url, env=env)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "TRIAGE_TRACKER": str(tmp_path / "tracker.jsonl")}


def test_the_triage_agent_waits_with_nothing_running_and_finishes_on_another_host(
        fleet, env, tmp_path: Path):  # type: ignore[no-untyped-def]
    """A starts and parks at the approval wait; two sends of one signal id are stored once;
    B (empty runtime journal) adopts, delivers it once and parks at the sleep; the timer
    falls due with no process up; C finishes. The ledger holds A, B, C; the record verifies
    and proves; the effect is filed once."""
    url, led, base = fleet
    parked = start(url, base, "ticket-42", {"ticket": 42, "text": "Printer on fire",
                                            "cool_down": 8}, env)
    assert parked["status"] == "parked" and parked["wait"]["signal"] == "approve"
    run = parked["run"]
    listed = fleet_json("runtime", "list", "--nats", url)[0]["runs"]
    assert [(d["name"], d["status"]) for d in listed] == [("ticket-42", "parked")]
    first = fleet_json("signal", "ticket-42", "approve", "--data", '{"by": "ana"}', "--id",
                       "appr-1", "--nats", url)[0]
    again = fleet_json("signal", run, "approve", "--data", '{"by": "ana"}', "--id",
                       "appr-1", "--nats", url)[0]
    assert (first["duplicate"], again["duplicate"]) == (False, True)
    other = cli("signal", run, "approve", "--data", '{"by": "bob"}', "--id", "appr-1",
                "--nats", url, check=False)
    assert other.returncode == 1 and other.stderr.startswith("SignalConflict:")
    wait_folded(url, led)
    assert not (base / "B" / "runtime.db").exists()
    (b,) = worker(url, base, led, "B", env)
    assert b["status"] == "parked" and b["host"] == "B", b
    wait_folded(url, led)
    # The timer (8 s from B's park: room for the worker processes to start on a loaded
    # machine) is not due yet.
    assert worker(url, base, led, "C", env) == []
    time.sleep(8.2)  # nothing runs while the timer falls due
    (c,) = worker(url, base, led, "C", env)
    assert c["status"] == "done" and c["result"] == {
        "label": "outage", "approved_by": "ana", "ticket": 42, "filed": "outage"}
    wait_folded(url, led)
    shown = api(url, "run", {"run": run})
    assert shown["phase"] == "closed"
    assert [h["host"] for h in shown["holders"]] == ["A", "B", "C"]
    record = decode_record(json.dumps(api(url, "export", {"run": run})).encode())
    assert verify_record(record).segments == shown["segments"] == 8
    verifier = parse_verifier_key((led / "ledger.vkey").read_text().strip())
    (_bundle, proved), = prove_all(url, [run], [verifier])
    assert proved.leaf.index == 8
    assert len((tmp_path / "tracker.jsonl").read_text().splitlines()) == 1
    left = subprocess.run([sys.executable, "-c", SIGNALS_LEFT, url, run], check=True,
                          capture_output=True, text=True, timeout=60, env=env)
    assert json.loads(left.stdout) == []  # delivered signals are deleted from the stream
    assert api(url, "rejections")["rejections"] == []


def test_a_tampered_journal_is_refused_on_resume(fleet, env):  # type: ignore[no-untyped-def]
    """The parked journal in the object store is edited: the adopting worker refuses it
    (JournalTampered), marks the run refused and seals nothing. (Starting the run again
    on its host is a mistake: exit 2.)"""
    url, led, base = fleet
    run = start(url, base, "ticket-7", {"ticket": 7, "text": "how do I print"}, env)["run"]
    again = cli("runtime", "start", "triage:triage", "ticket-7", "--path", EXAMPLES, "--data",
                str(base / "A"), "--name", "A", "--nats", url, check=False, env=env)
    assert again.returncode == 2 and "exists on this host" in again.stderr
    cli("signal", run, "approve", "--data", "{}", "--nats", url)
    wait_folded(url, led)
    tamper = [sys.executable, "-c", TAMPER, url, run]
    subprocess.run(tamper, check=True, timeout=60, env=env)
    (b,) = worker(url, base, led, "B", env)
    assert b["refused"] == "JournalTampered", b
    wait_folded(url, led)
    assert api(url, "run", {"run": run})["segments"] == 2


SIGNALS_LEFT = """
import asyncio, json, sys
from fleet_ledger.agents.runtime.fleet_store import FleetStore
from fleet_ledger.plumbing.nats_connect import connect
async def main(url, run):
    nc = await connect([url])
    store = await FleetStore(nc.jetstream()).open()
    print(json.dumps(await store.signals(run)))
    await nc.close()
asyncio.run(main(*sys.argv[1:]))
"""

TAMPER = """
import asyncio, json, sys
from fleet_ledger.agents.runtime.fleet_store import FleetStore
from fleet_ledger.plumbing.nats_connect import connect
async def main(url, run):
    nc = await connect([url])
    store = await FleetStore(nc.jetstream()).open()
    doc, _ = await store.get(run.removeprefix("b3:"))
    export = await store.journal(doc["head"])
    export["entries"][1][3] = export["entries"][1][3].replace("classify", "classifx")
    await store.put_journal(doc["head"], export)
    await nc.close()
asyncio.run(main(*sys.argv[1:]))
"""


def test_two_workers_racing_for_one_wait_one_continues(fleet, env):  # type: ignore[no-untyped-def]
    """B and C run a pass at once for the same signalled wait: one continues the run, the
    other continues nothing; the ledger holds one resume."""
    url, led, base = fleet
    run = start(url, base, "ticket-9", {"ticket": 9, "text": "down", "cool_down": 0}, env)["run"]
    cli("signal", run, "approve", "--data", '{"by": "x"}', "--nats", url)
    wait_folded(url, led)
    cmd = ["runtime", "worker", "--once", "--json", "--path", EXAMPLES, "--vkey",
           str(led / "ledger.vkey"), "--nats", url]
    procs = [subprocess.Popen([FLEET_BIN, *cmd, "--data", str(base / n),
                               "--name", n], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for n in ("B", "C")]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    reports = [json.loads(line) for o, _e in outs for line in o.splitlines() if line]
    done = [r for r in reports if r.get("status") == "done"]
    assert len(done) == 1, reports
    wait_folded(url, led)
    shown = api(url, "run", {"run": run})
    assert shown["phase"] == "closed" and shown["host"] == done[0]["host"]
    assert [h["host"] for h in shown["holders"]] == ["A", done[0]["host"]]
    assert api(url, "rejections")["rejections"] == []


def test_a_shredded_value_keeps_the_record_proving_and_stops_the_replay_by_name(
        fleet, env):  # type: ignore[no-untyped-def]
    """The tool's result is shredded (here and in JetStream) while the run is parked: the
    record verifies and its head proves; the adopting worker's replay needs the value and
    refuses with ValueShredded, sealing nothing."""
    url, led, base = fleet
    run = start(url, base, "ticket-5", {"ticket": 5, "text": "down"}, env)["run"]
    entries = fleet_json("runtime", "journal", run, "--data", str(base / "A"))[0]["entries"]
    (result,) = [e["body"]["value"] for e in entries if e["kind"] == "resolve"]
    shred = fleet_json("runtime", "shred", result, "--data", str(base / "A"), "--nats", url)
    assert shred[0]["shredded_here"] is True
    again = fleet_json("runtime", "journal", run, "--data", str(base / "A"))[0]
    assert again["head"] == entries[-1]["hash"]  # the chain still verifies
    cli("signal", run, "approve", "--data", "{}", "--nats", url)
    wait_folded(url, led)
    record = decode_record(json.dumps(api(url, "export", {"run": run})).encode())
    assert verify_record(record).segments == 2
    verifier = parse_verifier_key((led / "ledger.vkey").read_text().strip())
    (_bundle, proved), = prove_all(url, [run], [verifier])
    assert proved.leaf.index == 2
    (b,) = worker(url, base, led, "B", env)
    assert b["refused"] == "ValueShredded", b
    wait_folded(url, led)
    assert api(url, "run", {"run": run})["segments"] == 2


def test_a_timer_falls_due_while_nats_the_ledger_and_every_host_are_down(
        nats_server, tmp_path: Path, env):  # type: ignore[no-untyped-def]
    """A run parks at a 3 s timer; the ledger is stopped and the nats-server SIGKILLed; the
    timer falls due with nothing running; after both restart, one worker pass fires it
    once and finishes the run, and a second pass finds nothing to do."""
    url, led, base = nats_server.url, tmp_path / "ledger", tmp_path / "hosts"
    keys = host_keys(base, ["A", "B"])
    ledger = LedgerProc(url, led, log=tmp_path / "ledger.log")
    with ledger:
        ledger.start()
        for name, key in keys.items():
            cli("host", "enroll", name, "--pubkey", key, "--data", str(led))
        run = start(url, base, "ticket-3", {"ticket": 3, "text": "down", "cool_down": 3},
                    env)["run"]
        cli("signal", run, "approve", "--data", '{"by": "z"}', "--nats", url)
        (a,) = worker(url, base, led, "A", env)
        assert a["status"] == "parked", a
        wait_folded(url, led)
        ledger.stop()
        nats_server.kill()
        time.sleep(3.2)  # the timer falls due: no nats-server, no ledger, no host process
        nats_server.start()
        ledger.start()
        (b,) = worker(url, base, led, "B", env)
        assert b["status"] == "done" and b["host"] == "B", b
        assert worker(url, base, led, "A", env) == []
        wait_folded(url, led)
        assert api(url, "run", {"run": run})["phase"] == "closed"
        fired = [e for e in fleet_json("runtime", "journal", run, "--data",
                                       str(base / "B"))[0]["entries"] if e["kind"] == "fired"]
        assert len(fired) == 1


def test_a_handed_off_call_resolved_on_another_host_is_non_blocking_in_the_ledger(
        fleet, env):  # type: ignore[no-untyped-def]
    """A hands a long call off and parks; its result arrives as signal result:c0; B adopts
    and resolves it. The ledger's wait proof over the folded record is NonBlocking (the
    interval that dispatched the call is not the one that resolved it)."""
    url, led, base = fleet
    tests = str(Path(__file__).resolve().parent)
    parked = fleet_json("runtime", "start", "runtime_flows:handed_off", "build-1", "--input",
                        '{"commit": "abc"}', "--path", tests, "--data", str(base / "A"),
                        "--name", "A", "--nats", url, env=env)[0]
    assert parked["wait"] == {"result": "c0", "name": "build"} and parked["blocked"] == []
    cli("signal", parked["run"], "result:c0", "--data", '{"artifact": "x.tar"}', "--nats", url)
    wait_folded(url, led)
    (b,) = fleet_json("runtime", "worker", "--once", "--path", tests, "--data",
                      str(base / "B"), "--name", "B", "--vkey", str(led / "ledger.vkey"),
                      "--nats", url, env=env)
    assert b["result"] == {"build": {"artifact": "x.tar"}}, b
    assert b["verdict"] == {"verdict": "NonBlocking"}
    wait_folded(url, led)
    assert api(url, "run", {"run": parked["run"]})["wait_proof"] == {"verdict": "NonBlocking"}
