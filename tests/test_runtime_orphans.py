"""A run nothing continued: ``fleet runtime start`` SIGKILLed inside its first step. The
runs bucket shows it from before its first step; a second ``start`` says what is true; a
worker on its host finds it (its interval lock died with the process), seals the lost
interval, retries the step under the same idempotency key and finishes it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
import runtime_flows as flows
from test_moving_runs import fleet as fleet  # the same three enrolled hosts and a ledger

from pipeline_helpers import FLEET_BIN, api, cli, wait_folded, wait_for

pytestmark = pytest.mark.timeout(240)

TESTS = str(Path(__file__).resolve().parent)


def test_a_start_killed_in_its_first_step_is_continued_by_a_worker(
        fleet, tmp_path: Path):  # type: ignore[no-untyped-def]
    """Start hangs in its first step (after the downstream write) and is SIGKILLed; list
    shows the run running on A; start again exits 2 saying its interval died; A's worker
    continues it: done, the step attempted twice under one key, each effect applied once,
    the record closed with the lost interval's call outstanding."""
    url, led, base = fleet
    env = {**os.environ, "RUNTIME_EFFECTS": str(tmp_path / "fx.db"),
           "RUNTIME_HANG": str(tmp_path / "hung")}
    args = ["runtime", "start", "runtime_flows:hangs_once", "orphan-1", "--path", TESTS,
            "--data", str(base / "A"), "--name", "A", "--nats", url]
    proc = subprocess.Popen([FLEET_BIN, *args], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: (tmp_path / "hung").exists() or proc.poll() is not None, 60,
                 "the first step to start")
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        (listed,) = json.loads(cli("runtime", "list", "--json", "--nats", url).stdout)["runs"]
        assert (listed["name"], listed["status"], listed["host"]) == ("orphan-1", "running", "A")
        busy = cli(*args, check=False, env=env)
        assert busy.returncode == 2 and "another process" in busy.stderr, busy.stderr
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    again = cli(*args, check=False, env=env)
    assert again.returncode == 2 and "its interval died" in again.stderr, again.stderr
    out = cli("runtime", "worker", "--once", "--json", "--path", TESTS, "--data",
              str(base / "A"), "--name", "A", "--vkey", str(led / "ledger.vkey"),
              "--nats", url, env=env)
    (report,) = [json.loads(line) for line in out.stdout.splitlines()]
    assert report["status"] == "done", report
    assert report["result"] == {"paid": "done:p1", "after": "done:after"}
    applied, attempts = flows.effects(str(tmp_path / "fx.db"))
    run = report["run"]
    assert applied == [(f"{run}/c0", "p1"), (f"{run}/c1", "after")]
    assert attempts == [(f"{run}/c0", "p1"), (f"{run}/c0", "p1"), (f"{run}/c1", "after")]
    wait_folded(url, led)
    shown = api(url, "run", {"run": run})
    assert shown["phase"] == "closed" and shown["segments"] == 3, shown
    (listed,) = json.loads(cli("runtime", "list", "--json", "--nats", url).stdout)["runs"]
    assert listed["status"] == "done"
    # a second pass finds nothing left behind
    assert cli("runtime", "worker", "--once", "--json", "--path", TESTS, "--data",
               str(base / "A"), "--name", "A", "--vkey", str(led / "ledger.vkey"),
               "--nats", url, env=env).stdout == ""
