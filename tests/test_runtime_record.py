"""Runtime intervals on the run record (one process, a real host folder): each advance is
one executed segment whose journal root and call account come from the journal; a wait is
a transcript park at the journal's head; a resume carries the park's idle energy; an
inline step is Blocked, a handed-off call NonBlocking."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import runtime_flows as flows

from fleet_ledger.agents.host import Host
from fleet_ledger.agents.runtime import ReplayDiverged, Runtime, workflow_name
from fleet_ledger.fleet.record.segment import Executed, Resumed, Suspended
from fleet_ledger.fleet.record.wire import decode_envelope
from fleet_ledger.fleet.runtime.runtime_journal import interval_root


@pytest.fixture(autouse=True)
def effects(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNTIME_EFFECTS", str(tmp_path / "effects.db"))


def sealed(host: Host, run: str) -> list:  # type: ignore[type-arg]
    return [decode_envelope(p).sealed.segment for p in host.outbox.payloads_after(run, 0)]


def roots(host: Host, run: str) -> list[tuple[bytes, str]]:
    """(journal root, outcome) of each executed segment's attestation."""
    out = []
    for payload in host.outbox.payloads_after(run, 0):
        att = decode_envelope(payload).sealed.attestation
        if att is not None:
            out.append((att.journal_root, att.outcome))
    return out


def test_a_wait_seals_the_interval_parks_at_the_journal_head_and_resumes(tmp_path: Path):
    """advance -> executed + transcript park at the journal's head; a signal -> resumed (idle
    energy > 0) + executed + closed; roots commit to each interval's entries."""
    host = Host("A", tmp_path / "A")
    rt = Runtime(tmp_path / "A", host=host)
    run = rt.start(flows.approval, "r1", {"ticket": 1})
    first = asyncio.run(rt.advance(run))
    assert first.status == "waiting" and first.segments == 2
    entries = rt.journal.entries(run)
    ex, park = sealed(host, run)
    assert isinstance(ex, Executed) and isinstance(park, Suspended)
    assert park.snapshot.transcript == entries[-1].hash
    assert ex.calls is not None and ex.calls.dispatched == ("c0",) == ex.calls.resolved
    rt.send(run, "approve", True, "s1")
    second = asyncio.run(rt.advance(run))
    assert second.status == "done" and second.segments == 5
    segs = sealed(host, run)
    assert isinstance(segs[2], Resumed) and segs[2].idle_uj > 0
    entries = rt.journal.entries(run)
    lo, hi = second.interval
    assert (lo, hi) == (first.entries, len(entries))
    assert roots(host, run) == [(interval_root(*first.interval, entries[lo - 1].hash), "ok"),
                                (interval_root(lo, hi, entries[-1].hash), "ok")]
    assert first.verdict == {"verdict": "Blocked", "segment": 1} and first.blocked == ["c0"]
    host.close()


def test_a_handed_off_call_keeps_the_run_non_blocking(tmp_path: Path):
    """A long call handed off: dispatched in one interval, resolved in the next after the
    park; the wait proof over the sealed record is NonBlocking."""
    host = Host("A", tmp_path / "A")
    rt = Runtime(tmp_path / "A", host=host)
    run = rt.start(flows.handed_off, "h1", {"commit": "abc"})
    first = asyncio.run(rt.advance(run))
    assert first.wait == {"result": "c0", "name": "build"}
    rt.send(run, "result:c0", {"ok": 1}, "r")
    done = asyncio.run(rt.advance(run))
    assert done.result == {"build": {"ok": 1}}
    assert done.verdict == {"verdict": "NonBlocking"} and done.blocked == []
    host.close()


def test_a_diverging_resume_seals_nothing_and_the_right_code_continues(tmp_path: Path):
    """Replaying a parked run under changed code raises ReplayDiverged before the resume is
    sealed (the record keeps its two segments); the original code then resumes it, with no
    empty "lost" interval in between."""
    host = Host("A", tmp_path / "A")
    rt = Runtime(tmp_path / "A", host=host)
    run = rt.start(flows.approval, "d1", {"ticket": 1})
    asyncio.run(rt.advance(run))
    changed = Runtime(tmp_path / "A", host=host,
                      workflows={workflow_name(flows.approval): flows.approval_other_args})
    changed.send(run, "approve", True, "s")
    with pytest.raises(ReplayDiverged):
        asyncio.run(changed.advance(run))
    assert len(sealed(host, run)) == 2
    rt.send(run, "approve", True, "s")
    done = asyncio.run(rt.advance(run))
    assert done.status == "done" and done.segments == 5
    assert [o for _r, o in roots(host, run)] == ["ok", "ok"]
    host.close()
