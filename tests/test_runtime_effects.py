"""Effect classes, retry policies and timeouts: failed attempts journaled with their
backoff, a validation error never retried, a timeout failing by name, and (on real
processes, SIGKILLed inside the step) an effectful step without an idempotency key run
again after an unknown outcome flagged on its resolve and on the record's call account."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
from pathlib import Path
from typing import Any

import pytest
import runtime_effect_flows as ef
import runtime_flows as flows
from test_moving_runs import fleet as fleet  # three enrolled hosts and a ledger
from test_runtime_kill import proc, segments

from fleet_ledger.agents.host import Host
from fleet_ledger.agents.runtime import Runtime
from fleet_ledger.agents.runtime.runtime import run_ids, workflow_name
from fleet_ledger.cli.runtime_verify_cmds import journal_file
from fleet_ledger.fleet.address import format_address
from fleet_ledger.fleet.record.wire import RecordWire, decode_envelope, segment_to_wire
from fleet_ledger.fleet.runtime.runtime_journal import ATTEMPT, account_marks, interval_account
from fleet_ledger.fleet.runtime.runtime_verify import parse_journal, verify_runtime


@pytest.fixture
def effects(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "effects.db"
    monkeypatch.setenv("RUNTIME_EFFECTS", str(path))
    monkeypatch.setenv("RUNTIME_CRASH", str(tmp_path / "crashed"))
    return path


def advance(rt: Runtime, run: str):  # type: ignore[no-untyped-def]
    return asyncio.run(rt.advance(run))


def attempts(rt: Runtime, run: str) -> list[dict]:  # type: ignore[type-arg]
    return [e.data() for e in rt.journal.entries(run) if e.kind == ATTEMPT]


def test_failed_attempts_are_journaled_with_their_backoff_up_to_the_maximum(tmp_path: Path):
    """Two failures then an answer under three attempts: two attempt entries (error, backoff
    0.01 then 0.02) and a resolve counting three; with two attempts allowed the step fails
    by its last error."""
    rt = Runtime(tmp_path / "h")
    ok = rt.start(ef.retries, "r1", {"what": "r1", "fails": 2, "max": 3})
    assert advance(rt, ok).result == "ok:r1:3"
    got = attempts(rt, ok)
    assert [(a["attempt"], a["outcome"], a["retry_in"]) for a in got] == [
        (1, "error", 0.01), (2, "error", 0.02)]
    resolve = next(e.data() for e in rt.journal.entries(ok) if e.kind == "resolve")
    assert resolve["attempts"] == 3 and "duplicate" not in resolve
    bad = rt.start(ef.retries, "r2", {"what": "r2", "fails": 5, "max": 2})
    assert advance(rt, bad).result == "failed: ConnectionError: attempt 2 of r2 failed"
    assert len(attempts(rt, bad)) == 1


def test_a_validation_error_is_never_retried_and_is_not_an_unknown_outcome(tmp_path: Path):
    """A step raising Invalid under a five-attempt policy runs once and fails as StepFailed
    (outcome invalid), not as StepTimeout or OutcomeUnknown."""
    rt = Runtime(tmp_path / "h")
    run = rt.start(ef.validation, "v1", {"what": "v1"})
    assert advance(rt, run).result == "StepFailed: Invalid: v1 is not a ticket"
    assert ef._FLAKY["v1"] == 1 and attempts(rt, run) == []
    resolve = next(e.data() for e in rt.journal.entries(run) if e.kind == "resolve")
    assert resolve["outcome"] == "invalid"


def test_a_step_past_its_timeout_fails_by_name_and_replays_so(tmp_path: Path):
    """A plain and an async function past their timeout each raise StepTimeout in the
    workflow; after a park, the replay raises the same without running either again."""
    rt = Runtime(tmp_path / "h")
    run = rt.start(ef.slow, "t1", {"seconds": 3, "timeout": 0.2})
    ef.STARTED.clear()
    first = advance(rt, run)
    assert first.status == "waiting" and ef.STARTED == ["sleepy", "asleep"]
    rt.send(run, "go", True, "go-1")
    out = advance(rt, run)
    assert out.status == "done" and ef.STARTED == ["sleepy", "asleep"]
    assert [r.split(" ran past")[0] for r in out.result] == [
        "StepTimeout: StepTimeout: step sleepy", "StepTimeout: StepTimeout: step asleep"]
    outcomes = [e.data().get("outcome") for e in rt.journal.entries(run) if e.kind == "resolve"]
    assert outcomes == ["timeout", "timeout"]


def test_an_effectful_step_without_a_key_warns_loudly(
        tmp_path: Path, effects: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch):
    """Dispatching an effectful step that takes no idempotency key logs a warning naming
    it; the dispatch's ask records the class and that it has no key."""
    rt = Runtime(tmp_path / "h")
    run = rt.start(ef.pay_unkeyed, "w1", {"what": "w1"})
    monkeypatch.delenv("RUNTIME_CRASH")
    with caplog.at_level(logging.WARNING, logger="fleet.runtime"):
        assert advance(rt, run).result == "charged:w1"
    assert any("step pay is effectful and takes no idempotency_key" in r.getMessage()
               for r in caplog.records)
    ask = next(e.data()["ask"] for e in rt.journal.entries(run) if e.kind == "dispatch")
    assert ask["effect"] == "effectful" and ask["keyed"] is False


def test_killed_inside_an_unkeyed_effectful_step_the_rerun_is_a_possible_duplicate(
        tmp_path: Path, effects: Path):
    """SIGKILL inside an effectful step with no key, after its effect: the restart runs it
    again (at least once: the effect is applied twice), journals the lost attempt, flags
    the resolve "duplicate", and the record's account of the interval carries the marks
    (``c0!unkeyed!dup/retry``) while the lost interval shows ``c0!unkeyed`` outstanding."""
    data = tmp_path / "h"
    code, _ = proc(data, effects, "d1", "--module", "runtime_effect_flows", "--workflow",
                   "pay_unkeyed", "--host", "A", inp='{"what": "d1"}')
    assert code == -signal.SIGKILL
    _, out = proc(data, effects, "d1", "--module", "runtime_effect_flows", "--workflow",
                  "pay_unkeyed", "--host", "A", inp='{"what": "d1"}')
    assert out is not None and out["status"] == "done"
    applied, _ = flows.effects(str(effects))
    assert len(applied) == 2  # the irreducible boundary: no key, at least once
    lost, live, _closed = segments(data, "A")
    assert lost.calls.dispatched == ("c0!unkeyed",) and lost.calls.resolved == ()
    assert live.calls.dispatched[0] == live.calls.resolved[0] == "c0!unkeyed!dup/retry"
    assert account_marks(live.calls.resolved[0]) == (True, True)
    assert account_marks(lost.calls.dispatched[0]) == (True, False)
    assert verified(data, "d1", ef.pay_unkeyed) == 0


def verified(data: Path, name: str, fn: Any) -> int:
    """fleet runtime verify's rules over the host's record and the journal: sealed
    intervals that do not match (raises), else the count of unsealed ones."""
    host = Host("A", data)
    try:
        hr = host.open_run(*run_ids(name, workflow_name(fn)))
        state = host.verified_state(hr)
        record = RecordWire(format_address(state.unit_id), format_address(state.grants_id),
                            [segment_to_wire(decode_envelope(p).sealed)
                             for p in host.outbox.payloads_after(hr.run, 0)],
                            run=hr.run, host_key=host.public_key)
        journal = json.dumps(journal_file(hr.run, data)).encode()
        return verify_runtime(record, parse_journal(journal)).unsealed
    finally:
        host.close()


def test_killed_inside_a_keyed_effectful_step_the_rerun_is_not_flagged(
        tmp_path: Path, effects: Path):
    """The same SIGKILL inside an effectful step that forwards its key: run again under the
    same key (one effect downstream), no duplicate flag, the account as any retry's."""
    data = tmp_path / "h"
    args = ("--module", "runtime_effect_flows", "--workflow", "pay_keyed", "--host", "A")
    code, _ = proc(data, effects, "d2", *args, inp='{"what": "d2"}')
    assert code == -signal.SIGKILL
    _, out = proc(data, effects, "d2", *args, inp='{"what": "d2"}')
    assert out is not None and out["status"] == "done"
    applied, tried = flows.effects(str(effects))
    assert len(applied) == 1 and len(tried) == 2
    lost, live, _closed = segments(data, "A")
    assert lost.calls.dispatched == ("c0",)
    assert live.calls.resolved[0] == "c0/retry"
    assert account_marks("c0/retry") == (False, False)


def test_killed_inside_a_step_that_must_not_rerun_fails_outcome_unknown(
        tmp_path: Path, effects: Path):
    """With ``on_unknown="raise"`` the restart does not run the step again: the workflow
    sees OutcomeUnknown (one effect applied, to be reconciled from outside)."""
    data = tmp_path / "h"
    args = ("--module", "runtime_effect_flows", "--workflow", "pay_strict", "--host", "A")
    code, _ = proc(data, effects, "d3", *args, inp='{"what": "d3"}')
    assert code == -signal.SIGKILL
    _, out = proc(data, effects, "d3", *args, inp='{"what": "d3"}')
    assert out is not None and out["result"].startswith("unknown: OutcomeUnknown: step pay")
    applied, _ = flows.effects(str(effects))
    assert len(applied) == 1


def test_journals_without_effect_classes_keep_their_accounts():
    """The marks only appear where a dispatch declares an effectful step without a key:
    an old journal's account is unchanged; an unkeyed effectful one is marked."""
    old = [("start", "", "{}"), ("dispatch", "c0", '{"ask":{"name":"x"}}'),
           ("resolve", "c0", '{"value":"v"}')]
    assert interval_account(old, 0, 3) == (("c0",), ("c0",))
    new = [("start", "", "{}"),
           ("dispatch", "c0", '{"ask":{"effect":"effectful","keyed":false,"name":"x"}}'),
           ("attempt", "c0", '{"attempt":1,"outcome":"timeout"}'),
           ("resolve", "c0", '{"duplicate":true,"value":"v"}')]
    assert interval_account(new, 0, 4) == (("c0!unkeyed!dup",), ("c0!unkeyed!dup",))


@pytest.mark.timeout(240)
def test_audit_and_run_show_report_a_possible_duplicate_effect(
        fleet, tmp_path: Path):  # type: ignore[no-untyped-def]
    """`fleet runtime start` SIGKILLed inside an effectful step without a key, continued by
    a worker (an orphan): `fleet audit` lists the possible duplicate effect and the step
    without a key, `fleet run show` names both; a keyed run is in neither list."""
    from test_runtime_evidence import TESTS, fleet_json, worker

    from fleet_ledger.agents.runtime import run_address

    from pipeline_helpers import api, cli, wait_folded

    url, led, base = fleet
    env = {"RUNTIME_EFFECTS": str(tmp_path / "effects.db"),
           "RUNTIME_CRASH": str(tmp_path / "crashed"), "PYTHONPATH": TESTS}
    started = cli("runtime", "start", "runtime_effect_flows:pay_unkeyed", "fx-1", "--input",
                  '{"what": "fx-1"}', "--path", TESTS, "--data", str(base / "A"), "--name",
                  "A", "--nats", url, env=env, check=False)
    assert started.returncode == -signal.SIGKILL, started.stderr[-2000:]
    again = worker(url, base, led, "A", env)
    assert again.returncode == 0, again.stderr[-2000:]
    fleet_json("runtime", "start", "runtime_effect_flows:pay_keyed", "fx-2", "--input",
               '{"what": "fx-2"}', "--path", TESTS, "--data", str(base / "A"), "--name",
               "A", "--nats", url, env={**env, "RUNTIME_CRASH": ""})
    wait_folded(url, led)
    run = run_address("fx-1", workflow_name(ef.pay_unkeyed))
    audit = fleet_json("audit", "--nats", url)[0]["effects"]
    assert [(r["run"], r["call"]) for r in audit["possible_duplicates"]] == [
        (run, "c0!unkeyed!dup/retry")]
    assert [(r["run"], r["call"]) for r in audit["unkeyed"]] == [(run, "c0!unkeyed")]
    shown = api(url, "run", {"run": run})["effects"]
    assert [(e["call"], e["possible_duplicate"]) for e in shown] == [
        ("c0!unkeyed", False), ("c0!unkeyed!dup/retry", True)]
    text = cli("run", "show", run, "--nats", url).stdout
    assert "possible duplicate effect: segment" in text
    assert "possible duplicate effect" in cli("audit", "--nats", url).stdout


def test_killed_between_attempts_the_maximum_holds_across_processes(
        tmp_path: Path, effects: Path):
    """SIGKILL right after the first failed attempt was journaled: the restart journals the
    cut-off attempt as lost (2) and runs only the third, whose failure ends the step
    (three attempts in all, across two processes)."""
    data = tmp_path / "h"
    args = ("--module", "runtime_effect_flows", "--workflow", "always_fails")
    code, _ = proc(data, effects, "m1", *args, "--kill", "after", "3", inp='{"what": "m1"}')
    assert code == -signal.SIGKILL
    _, out = proc(data, effects, "m1", *args, inp='{"what": "m1"}')
    assert out is not None and out["result"] == "failed: ConnectionError: attempt 1 of m1 failed"
    rt = Runtime(data)
    try:
        run = rt.journal.runs()[0][0]
        assert [(a["attempt"], a["outcome"]) for a in attempts(rt, run)] == [
            (1, "error"), (2, "lost")]
        resolve = next(e.data() for e in rt.journal.entries(run) if e.kind == "resolve")
        assert resolve["attempts"] == 3 and resolve["error"].startswith("ConnectionError")
    finally:
        rt.close()
