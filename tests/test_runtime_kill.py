"""SIGKILLed runtime processes resume exactly: a journaled step never runs again, a step
cut off before its result was journaled is retried under the same idempotency key (one
downstream effect), and the lost interval's account shows the call outstanding."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import runtime_flows as flows
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet_ledger.agents.host import Host
from fleet_ledger.agents.runtime.runtime import run_ids, workflow_name
from fleet_ledger.cli.runtime_verify_cmds import journal_file
from fleet_ledger.fleet.address import format_address
from fleet_ledger.fleet.record.wire import RecordWire, decode_envelope, segment_to_wire
from fleet_ledger.fleet.runtime.runtime_verify import parse_journal, verify_runtime

PROC = str(Path(__file__).with_name("runtime_proc.py"))
TESTS = str(Path(__file__).parent)


def proc(data: Path, effects: Path, name: str, *extra: str, inp: str = '{"n": 3}'
         ) -> tuple[int, dict[str, Any] | None]:
    env = {**os.environ, "RUNTIME_EFFECTS": str(effects),
           "PYTHONPATH": TESTS + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, PROC, str(data), name, inp, *extra],
                         capture_output=True, text=True, env=env, timeout=60,
                         stdin=subprocess.DEVNULL, check=False)
    if out.returncode == -signal.SIGKILL:
        return out.returncode, None
    assert out.returncode == 0, out.stderr[-2000:]
    return 0, json.loads(out.stdout.strip().splitlines()[-1])


def segments(data: Path, host: str) -> list[Any]:
    h = Host(host, data)
    try:
        rows = h.outbox.payloads_after(next(iter(_runs(h))), 0)
        return [decode_envelope(p).sealed.segment for p in rows]
    finally:
        h.close()


def _runs(h: Host) -> list[str]:
    return h.outbox.runs()


def test_killed_before_the_result_is_journaled_the_step_retries_with_its_key(tmp_path: Path):
    """SIGKILL after the first effect ran but before its result was journaled: the restart
    retries it with the same idempotency key (two attempts, one effect); the lost interval
    is sealed with the call dispatched and unresolved; the next dispatches and resolves
    the retry (``c0/retry``: it waited for the step it ran)."""
    data, effects = tmp_path / "h", tmp_path / "effects.db"
    code, _ = proc(data, effects, "k1", "--kill", "before", "3", "--host", "A")
    assert code == -signal.SIGKILL
    _, out = proc(data, effects, "k1", "--host", "A")
    assert out is not None and out["status"] == "done"
    applied, attempts = flows.effects(str(effects))
    assert attempts[0][0] == attempts[1][0] and attempts[0][1] == attempts[1][1] == "a0"
    assert len(applied) == len(attempts) - 1
    lost, live, _closed = segments(data, "A")
    assert lost.calls.dispatched == ("c0",) and lost.calls.resolved == ()
    assert live.calls.resolved[0] == "c0/retry" == live.calls.dispatched[0]
    assert "c0" not in live.calls.resolved


def test_killed_after_the_result_is_journaled_the_step_is_not_run_again(tmp_path: Path):
    """SIGKILL right after the first result was journaled: the restart replays it and runs
    the effect zero more times."""
    data, effects = tmp_path / "h", tmp_path / "effects.db"
    code, _ = proc(data, effects, "k2", "--kill", "after", "3")
    assert code == -signal.SIGKILL
    _, out = proc(data, effects, "k2")
    assert out is not None and out["status"] == "done"
    applied, attempts = flows.effects(str(effects))
    assert len(applied) == len(attempts)
    assert [w for _k, w in attempts].count("a0") == 1


@pytest.mark.parametrize("when,n", [("queued", "3"), ("before", "4")])
def test_killed_with_a_result_not_yet_committed_the_step_retries(tmp_path: Path, when: str,
                                                                 n: str):
    """Group commit: the first result (append 3) waits for the next dispatch's commit;
    SIGKILL after it was queued or just before that dispatch: the result never happened,
    the lost interval shows c0 outstanding and the restart retries it under its key (two
    attempts, one effect)."""
    data, effects = tmp_path / "h", tmp_path / "effects.db"
    code, _ = proc(data, effects, "g1", "--kill", when, n, "--host", "A")
    assert code == -signal.SIGKILL
    _, out = proc(data, effects, "g1", "--host", "A")
    assert out is not None and out["status"] == "done"
    applied, attempts = flows.effects(str(effects))
    assert [w for _k, w in attempts].count("a0") == 2 and len(applied) == len(attempts) - 1
    lost, _live, _closed = segments(data, "A")
    assert lost.calls.dispatched == ("c0",) and lost.calls.resolved == ()


def test_killed_after_the_group_commit_the_result_stands_and_the_next_call_is_out(
        tmp_path: Path):
    """SIGKILL right after the commit carrying c0's result and c1's dispatch (append 4):
    c0 is resolved and never run again; c1 is outstanding in the lost interval, run once on
    restart."""
    data, effects = tmp_path / "h", tmp_path / "effects.db"
    code, _ = proc(data, effects, "g2", "--kill", "after", "4", "--host", "A")
    assert code == -signal.SIGKILL
    _, out = proc(data, effects, "g2", "--host", "A")
    assert out is not None and out["status"] == "done"
    applied, attempts = flows.effects(str(effects))
    assert len(applied) == len(attempts)
    assert [w for _k, w in attempts].count("a0") == 1
    lost, _live, _closed = segments(data, "A")
    assert lost.calls.dispatched == ("c0", "c1") and lost.calls.resolved == ("c0",)


@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kills=st.lists(st.tuples(st.sampled_from(["before", "after", "queued"]),
                                st.integers(min_value=1, max_value=18)), max_size=2))
def test_killed_at_random_journal_positions_the_run_ends_as_an_uninterrupted_one(
        tmp_path_factory: Any, kills: list[tuple[str, int]]):
    """Processes SIGKILLed at random journal appends, then a clean one: the result and the
    applied effects (keys and order) equal an uninterrupted run's, and the host's record of
    the run (lost intervals included) verifies, closed, with an account that adds up, and
    its journal matches it (fleet runtime verify's rules)."""
    base = tmp_path_factory.mktemp("kill")
    _, clean = proc(base / "clean", base / "clean.db", "same", "--host", "A")
    for when, n in kills:
        proc(base / "killed", base / "killed.db", "same", "--kill", when, str(n),
             "--host", "A")
    _, out = proc(base / "killed", base / "killed.db", "same", "--host", "A")
    assert out is not None and clean is not None
    assert out["result"] == clean["result"]
    assert flows.effects(str(base / "killed.db"))[0] == flows.effects(str(base / "clean.db"))[0]
    host = Host("A", base / "killed")
    try:
        hr = host.open_run(*run_ids("same", workflow_name(flows.chain)))
        state = host.verified_state(hr)
        assert state.phase == "closed"
        # every call of chain is resolved in the interval that dispatched it
        assert state.wait.verdict().name == "Blocked", state.wait.verdict()
        # and the journal, lost intervals and retries included, matches the record
        run = hr.run
        record = RecordWire(format_address(state.unit_id), format_address(state.grants_id),
                            [segment_to_wire(decode_envelope(p).sealed)
                             for p in host.outbox.payloads_after(run, 0)],
                            run=run, host_key=host.public_key)
        journal = json.dumps(journal_file(run, base / "killed")).encode()
        assert verify_runtime(record, parse_journal(journal)).unsealed == 0
    finally:
        host.close()
