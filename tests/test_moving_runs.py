"""Runs moving between host processes through a real nats-server and `fleet ledger serve`:
A -> B -> C with image and transcript parks, a killed holder whose late segments are
refused and whose outbox stops the run, two adopters racing for one park, and adoptions
the host refuses."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fleet_ledger.fleet.log.note import parse_verifier_key
from fleet_ledger.fleet.record.verify import verify_record
from fleet_ledger.fleet.record.wire import decode_record
from fleet_ledger.plumbing.natsd import NatsServer

from fault_helpers import LedgerProc
from pipeline_helpers import api, cli, cli_json, host_keys, prove_all, stop, wait_folded

pytestmark = pytest.mark.timeout(240)

HOST_PROC = str(Path(__file__).with_name("host_proc.py"))
NAMES = ["A", "B", "C"]


def host(action: str, name: str, base: Path, url: str, *args: str,
         timeout: float = 60.0) -> dict[str, Any]:
    """Run one host process to its end; its JSON line (a refusal exits 3)."""
    out = subprocess.run([sys.executable, HOST_PROC, action, name, str(base / name), url, *args],
                         capture_output=True, text=True, timeout=timeout,
                         stdin=subprocess.DEVNULL, check=False)
    assert out.returncode in (0, 3), out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def park_then_kill(name: str, base: Path, url: str, unit: str, form: str) -> str:
    """A host process parks a run and is SIGKILLed once its park is published."""
    proc = subprocess.Popen([sys.executable, HOST_PROC, "park", name, str(base / name), url,
                             unit, form], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else "no output"
        return json.loads(line)["run"]
    finally:
        stop(proc, signal.SIGKILL)


@pytest.fixture
def fleet(nats_server: NatsServer, tmp_path: Path):  # type: ignore[no-untyped-def]
    url, led, base = nats_server.url, tmp_path / "ledger", tmp_path / "hosts"
    keys = host_keys(base, NAMES)
    with LedgerProc(url, led, log=tmp_path / "ledger.log") as ledger:
        ledger.start()
        for name, key in keys.items():
            cli("host", "enroll", name, "--pubkey", key, "--data", str(led))
        yield url, led, base


def test_a_run_moves_a_b_c_across_processes_and_proves(fleet):  # type: ignore[no-untyped-def]
    """A parks (image) and dies; B adopts, resumes and parks (transcript); C adopts, resumes
    and closes. Each adoption verifies the record and its proof; the ledger folds all of it,
    the record (three hosts' keys) verifies offline and the head proves."""
    url, led, base = fleet
    vkey = str(led / "ledger.vkey")
    run = park_then_kill("A", base, url, "unit-abc", "image")
    wait_folded(url, led)
    b = host("adopt", "B", base, url, run, vkey, "park-transcript")
    assert b == {"run": run, "segments": 5}
    wait_folded(url, led)
    c = host("adopt", "C", base, url, run, vkey, "close")
    assert c == {"run": run, "segments": 8}
    wait_folded(url, led)
    shown = cli_json("run", "show", run, "--json", "--nats", url)
    assert shown["phase"] == "closed" and shown["host"] == "C"
    assert [(h["host"], h["first"], h["last"]) for h in shown["holders"]] == [
        ("A", 1, 2), ("B", 3, 5), ("C", 6, 8)]
    assert "held by A 1-2, B 3-5, C 6-8" in cli("run", "show", run, "--nats", url).stdout
    record = decode_record(json.dumps(api(url, "export", {"run": run})).encode())
    assert sorted(record.hosts or {}) == NAMES
    for fast in (True, False):
        assert verify_record(record, fast=fast).segments == 8
    verifier = parse_verifier_key((led / "ledger.vkey").read_text().strip())
    (_bundle, proved), = prove_all(url, [run], [verifier])
    assert proved.leaf.index == 8
    assert api(url, "rejections")["rejections"] == []


def test_the_killed_holder_comes_back_its_resume_is_foreign_and_its_run_stops(fleet):  # type: ignore[no-untyped-def]
    """A is SIGKILLed after parking; B adopts and resumes; A restarts and resumes its own
    run: the ledger refuses it as ForeignRun, and A's outbox stops that run (its next
    segment raises RunStopped) instead of sending more."""
    url, led, base = fleet
    run = park_then_kill("A", base, url, "unit-killed", "transcript")
    wait_folded(url, led)
    assert host("adopt", "B", base, url, run, str(led / "ledger.vkey"), "close")["segments"] == 5
    wait_folded(url, led)
    late = host("resume-own", "A", base, url, "unit-killed")
    assert late["run"] == run and late["next_segment"] == "RunStopped", late
    assert late["stopped"].startswith("ForeignRun at segment 3")
    wait_folded(url, led)
    refused = api(url, "rejections", {"host": "A"})["rejections"]
    assert [(r["rule"], r["index"]) for r in refused] == [("ForeignRun", 3)]
    assert api(url, "run", {"run": run})["segments"] == 5


def test_two_hosts_adopting_one_park_at_once_one_resume_enters_the_log(fleet):  # type: ignore[no-untyped-def]
    """B and C adopt the same park and resume at the same time: exactly one resume is
    folded, the other is refused as ForeignRun, and the run continues on the winner."""
    url, led, base = fleet
    vkey = str(led / "ledger.vkey")
    run = park_then_kill("A", base, url, "unit-race", "image")
    wait_folded(url, led)
    procs = [subprocess.Popen([sys.executable, HOST_PROC, "adopt", n, str(base / n), url, run,
                               vkey, "close"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, stdin=subprocess.DEVNULL) for n in ("B", "C")]
    outs = dict(zip(("B", "C"), (p.communicate(timeout=60) for p in procs), strict=True))
    codes = dict(zip(("B", "C"), (p.returncode for p in procs), strict=True))
    assert set(codes.values()) <= {0, 3}, outs
    wait_folded(url, led)
    status = api(url, "run", {"run": run})
    assert status["segments"] == 5 and status["phase"] == "closed"
    winner = status["host"]
    loser = ({"B", "C"} - {winner}).pop()
    assert codes[winner] == 0
    # The loser either adopted in time and sealed a resume the ledger refused by name, or
    # fetched the record after the winner's resume was folded and refused to adopt it.
    refused = api(url, "rejections", {"host": loser})["rejections"]
    if codes[loser] == 0:
        assert {r["rule"] for r in refused} == {"ForeignRun"}
        assert min(r["index"] for r in refused) == 3
    else:
        assert json.loads(outs[loser][0].strip().splitlines()[-1])["refused"] == "NotParked"
        assert refused == []
    resumes = [h for h in status["holders"] if h["first"] == 3]
    assert resumes == [{"host": winner, "first": 3, "last": 5}]


def test_adoption_refused_by_the_cli(fleet, tmp_path: Path):  # type: ignore[no-untyped-def]
    """`fleet run adopt` exits 1 naming the reason for a run that is not parked and for a
    ledger key that is not the ledger's, 2 for a missing key; the host seals nothing."""
    url, led, base = fleet
    run = park_then_kill("A", base, url, "unit-cli", "transcript")
    wait_folded(url, led)
    stranger = tmp_path / "stranger"
    cli("keygen", "stranger", "--out", str(stranger))
    other = next(stranger.glob("*.vkey"), None) or next(stranger.glob("*.pub"))
    bad = cli("run", "adopt", run, "--data", str(base / "B"), "--name", "B", "--vkey",
              str(other), "--nats", url, check=False)
    assert bad.returncode in (1, 2) and "Traceback" not in bad.stderr, bad.stderr
    nokey = cli("run", "adopt", run, "--data", str(base / "B"), "--name", "B", "--nats", url,
                check=False)
    assert nokey.returncode == 2 and "no ledger key" in nokey.stderr
    ok = cli_json("run", "adopt", run, "--data", str(base / "B"), "--name", "B", "--vkey",
                  str(led / "ledger.vkey"), "--json", "--nats", url)
    assert ok["run"] == run and ok["phase"] == "parked" and ok["segments"] == 2
    done = host("adopt", "C", base, url, run, str(led / "ledger.vkey"), "close")
    assert done == {"run": run, "segments": 5}
    wait_folded(url, led)
    again = cli("run", "adopt", run, "--data", str(base / "B"), "--name", "B", "--vkey",
                str(led / "ledger.vkey"), "--nats", url, check=False)
    assert again.returncode == 1 and "NotParked" in again.stderr


def test_simulated_hosts_move_runs_between_processes(nats_server: NatsServer, tmp_path: Path):
    """`fleet host simulate --migrate 0.5`: three host processes hand runs to each other at
    parks; every run is folded without a refusal, moved runs show two holders, and every
    record verifies offline."""
    url, led, base = nats_server.url, tmp_path / "ledger", tmp_path / "hosts"
    with LedgerProc(url, led, log=tmp_path / "ledger.log") as ledger:
        ledger.start()
        summary = cli_json("host", "simulate", "--hosts", "3", "--runs", "8", "--migrate",
                           "0.5", "--vkey", str(led / "ledger.vkey"), "--nats", url, "--data",
                           str(base), "--enroll-into", str(led), "--json", timeout=180)
        assert summary["failed"] == []
        adopted = sum(h["adopted"] for h in summary["hosts"])
        assert adopted > 0 and all(h["remaining"] == 0 for h in summary["hosts"])
        wait_folded(url, led)
        assert api(url, "rejections")["rejections"] == []
        runs = api(url, "runs")["runs"]
        assert len(runs) == 24
        moved = 0
        for row in runs:
            shown = api(url, "run", {"run": row["run"]})
            hosts = {h["host"] for h in shown["holders"]}
            moved += len(hosts) > 1
            record = decode_record(json.dumps(api(url, "export", {"run": row["run"]})).encode())
            report = verify_record(record)
            assert report.sealed and report.segments == shown["segments"]
        assert moved == adopted
