"""The runtime in one process: journaled steps run once, waits park, replays that diverge
stop by name with nothing appended, shredded values fail by name, tampering is caught."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import runtime_flows as flows

from fleet_ledger.agents.runtime import (
    JournalTampered,
    ReplayDiverged,
    Runtime,
    SignalConflict,
    SignalTimeout,
    ValueShredded,
    workflow_name,
)
from fleet_ledger.fleet.address import format_address
from fleet_ledger.fleet.runtime.runtime_journal import projection_hash

APPROVAL = workflow_name(flows.approval)


@pytest.fixture
def effects(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "effects.db"
    monkeypatch.setenv("RUNTIME_EFFECTS", str(path))
    return path


def advance(rt: Runtime, run: str):  # type: ignore[no-untyped-def]
    return asyncio.run(rt.advance(run))


def test_a_run_completes_and_a_replay_runs_no_step_again(tmp_path: Path, effects: Path):
    """`chain` completes in one interval; advancing it again returns the journaled result
    and no effect is attempted twice."""
    rt = Runtime(tmp_path / "h")
    run = rt.start(flows.chain, "c1", {"n": 2})
    out = advance(rt, run)
    assert out.status == "done" and out.result["out"] == ["done:a0", "done:a1"]
    assert out.result["pair"] == [6, "done:g"] and out.result["tail"] == "done:last"
    again = advance(rt, run)
    assert again.result == out.result
    applied, attempts = flows.effects(str(effects))
    assert len(applied) == len(attempts) == 4


def test_a_signal_wait_parks_and_a_later_signal_continues(tmp_path: Path, effects: Path):
    """The run parks at the approval wait; a signal (sent twice with one id) resumes it once;
    the same id with other data is refused (SignalConflict), before and after delivery; the
    replay does not run the tool call again."""
    rt = Runtime(tmp_path / "h")
    run = rt.start(flows.approval, "t1", {"ticket": 7})
    out = advance(rt, run)
    assert out.status == "waiting" and out.wait["signal"] == "approve"
    assert rt.send(run, "approve", {"ok": True}, "sig-1") is True
    assert rt.send(run, "approve", {"ok": True}, "sig-1") is False
    with pytest.raises(SignalConflict):
        rt.send(run, "approve", {"ok": "again"}, "sig-1")
    done = advance(rt, run)
    assert done.status == "done" and done.result["decision"] == {"ok": True}
    assert rt.send(run, "approve", {"ok": True}, "sig-1") is False
    with pytest.raises(SignalConflict):
        rt.send(run, "approve", {"ok": "later"}, "sig-1")
    assert [w for _k, w in flows.effects(str(effects))[1]] == ["classify:7", "close:7"]


def test_a_signal_timeout_raises_by_name(tmp_path: Path, effects: Path):
    """A wait whose deadline passed resolves as a timeout: SignalTimeout in the workflow."""
    now = [1000.0]
    rt = Runtime(tmp_path / "h", clock=lambda: now[0])
    run = rt.start(flows.approval, "t2", {"ticket": 8, "timeout": 60})
    assert advance(rt, run).status == "waiting"
    now[0] += 61
    out = advance(rt, run)
    assert out.status == "failed" and out.error.startswith(SignalTimeout.__name__)
    assert advance(rt, run).error == out.error


@pytest.mark.parametrize("variant", ["approval_reordered", "approval_other_args",
                                     "approval_raw_random", "approval_raw_clock",
                                     "approval_extra_call"])
def test_each_kind_of_nondeterminism_stops_by_name_and_appends_nothing(
        tmp_path: Path, effects: Path, variant: str):
    """Replaying a parked run under changed code raises ReplayDiverged naming the entry, the
    expected and actual call and the source line; the journal is unchanged."""
    rt = Runtime(tmp_path / "h")
    run = rt.start(flows.approval, "nd", {"ticket": 9})
    advance(rt, run)
    before = rt.journal.entries(run)
    rt.send(run, "approve", True, "s")
    changed = Runtime(tmp_path / "h", workflows={APPROVAL: getattr(flows, variant)})
    changed.send(run, "approve", True, "s")
    with pytest.raises(ReplayDiverged) as err:
        advance(changed, run)
    assert err.value.seq == 1 and "runtime_flows.py:" in err.value.line
    assert "classify" in err.value.expected + err.value.actual
    assert changed.journal.entries(run) == before
    assert len(flows.effects(str(effects))[1]) == 1


def test_a_patch_marker_keeps_old_journals_on_the_old_path(tmp_path: Path, effects: Path):
    """A run that passed the patch point under old code replays under the patched code with
    patched() False (no new step); a new run takes the new path."""
    now = [1000.0]
    rt = Runtime(tmp_path / "h", clock=lambda: now[0])
    old = rt.start(flows.approval, "old", {"ticket": 1, "sleep": 100})
    advance(rt, old)
    rt.send(old, "approve", True, "s")
    assert advance(rt, old).wait["timer"]  # parked in the sleep, past the patch point
    now[0] += 101
    patched = Runtime(tmp_path / "h", clock=lambda: now[0],
                      workflows={APPROVAL: flows.approval_patched})
    assert advance(patched, old).status == "done"
    new = patched.start(flows.approval, "new", {"ticket": 2})
    advance(patched, new)
    patched.send(new, "approve", True, "s2")
    assert advance(patched, new).status == "done"
    whats = [w for _k, w in flows.effects(str(effects))[1]]
    assert "notify:1" not in whats and "notify:2" in whats


def test_a_shredded_value_fails_a_replay_by_name_and_the_chain_still_verifies(
        tmp_path: Path, effects: Path):
    """Shredding the tool result's blob: the journal's hashes still verify, and the replay
    that needs the value raises ValueShredded."""
    rt = Runtime(tmp_path / "h")
    run = rt.start(flows.approval, "sh", {"ticket": 3})
    advance(rt, run)
    resolved = next(e for e in rt.journal.entries(run) if e.kind == "resolve")
    assert rt.journal.shred(resolved.data()["value"])
    from fleet_ledger.agents.runtime.journal import verify_chain

    verify_chain(run, APPROVAL, rt.journal.entries(run))
    rt.send(run, "approve", True, "s")
    with pytest.raises(ValueShredded):
        advance(rt, run)


def test_a_tampered_journal_is_refused(tmp_path: Path, effects: Path):
    """An entry edited in the SQLite file: the next advance raises JournalTampered."""
    rt = Runtime(tmp_path / "h")
    run = rt.start(flows.approval, "tm", {"ticket": 4})
    advance(rt, run)
    rt.journal.db.execute("UPDATE entries SET body = replace(body, 'classify', 'clasify')"
                          " WHERE run = ? AND kind = 'dispatch'", (run,))
    with pytest.raises(JournalTampered):
        advance(rt, run)


def test_a_model_call_sees_a_named_projection_whose_hash_is_its_argument_hash(
        tmp_path: Path, effects: Path):
    """ctx.model gives the model tail(2) of the history; the dispatch records the
    projection's name and hash; replaying under a different projection diverges."""
    rt = Runtime(tmp_path / "h")
    run = rt.start(flows.agent_loop, "m", {})
    out = advance(rt, run)
    assert out.result == "done:t1|done:t2"
    (model,) = [e for e in rt.journal.entries(run) if e.kind == "dispatch"
                and e.data()["ask"]["name"] == "summarize"]
    view = [{"call": "c1", "step": "tool", "value": "done:t1"},
            {"call": "c2", "step": "tool", "value": "done:t2"}]
    assert model.data()["ask"] == {"name": "summarize", "projection": "tail/2",
                                   "args": format_address(projection_hash("tail/2", view))}
    rt.journal.db.execute("DELETE FROM entries WHERE run = ? AND seq > ?", (run, model.seq))
    rt.journal.set_run(run, "running", {"open": False, "next": model.seq + 1})
    wider = Runtime(tmp_path / "h", workflows={workflow_name(flows.agent_loop):
                                               flows.agent_loop_wider})
    with pytest.raises(ReplayDiverged) as err:
        advance(wider, run)
    assert err.value.seq == model.seq and "tail/3" in err.value.actual
