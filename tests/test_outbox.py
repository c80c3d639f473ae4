"""The durable outbox: fsync'd before send, bounded with a reserve for parking and closing."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from fleet_ledger.agents.outbox import Outbox, OutboxConflict, OutboxFull, RunStopped

RUN = "b3:" + "A" * 43
SUBJECT = "fleet.seg.host1." + "A" * 43


def _put(box: Outbox, idx: int, kind: str = "executed", size: int = 10, run: str = RUN) -> int:
    return box.put(run, idx, kind, SUBJECT, f"b3:msg-{run[-3:]}-{idx}", b"x" * size)  # type: ignore[arg-type]


def test_file_is_wal_and_fully_synchronous(tmp_path):
    """The outbox opens its SQLite file in WAL mode with synchronous=FULL."""
    with Outbox(tmp_path / "o.db") as box:
        assert box._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert box._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_rows_survive_reopen_in_order_until_acked(tmp_path):
    """Pending rows come back after reopening, oldest first, and leave pending once acked."""
    with Outbox(tmp_path / "o.db") as box:
        ids = [_put(box, i) for i in range(3)]
    with Outbox(tmp_path / "o.db") as box:
        pending = box.pending()
        assert [e.id for e in pending] == ids
        assert [e.idx for e in pending] == [0, 1, 2]
        assert pending[0].msg_id == "b3:msg-AAA-0" and pending[0].payload == b"x" * 10
        box.mark_acked(ids[0], 7)
    with Outbox(tmp_path / "o.db") as box:
        assert [e.id for e in box.pending()] == ids[1:]
        assert box.last_acked_seq(RUN) == 7
        assert box.get(ids[0]).acked_seq == 7  # type: ignore[union-attr]
        assert box.stats().pending_count == 2 and box.stats().pending_bytes == 20


def test_last_acked_seq_is_zero_before_any_ack(tmp_path):
    """A run with nothing acked reports stream sequence 0 (and an unknown run too)."""
    with Outbox(tmp_path / "o.db") as box:
        _put(box, 0)
        assert box.last_acked_seq(RUN) == 0
        assert box.last_acked_seq("b3:unknown") == 0


def test_same_segment_twice_is_one_row_a_different_one_is_refused(tmp_path):
    """Putting the same (run, idx, msg_id) again is idempotent; another msg_id is a conflict."""
    with Outbox(tmp_path / "o.db") as box:
        first = _put(box, 0)
        assert _put(box, 0) == first
        with pytest.raises(OutboxConflict):
            box.put(RUN, 0, "executed", SUBJECT, "b3:other", b"y")
        assert box.stats().pending_count == 1


def test_a_row_under_an_old_id_form_takes_its_own_bytes_again(tmp_path):
    """A segment written under its head as msg id (before ids named the whole envelope) is
    the same row when the host puts the same bytes under the new id; other bytes conflict."""
    with Outbox(tmp_path / "o.db") as box:
        first = box.put(RUN, 0, "executed", SUBJECT, "b3:head-0", b"sealed")
        assert box.put(RUN, 0, "executed", SUBJECT, "seg-0123", b"sealed") == first
        with pytest.raises(OutboxConflict):
            box.put(RUN, 0, "executed", SUBJECT, "seg-4567", b"other")


def test_backpressure_refuses_executed_but_admits_closed_in_reserve(tmp_path):
    """Past limit*(1-reserve) an executed segment is refused while closed fits up to limit."""
    with Outbox(tmp_path / "o.db", limit_bytes=1000, reserve=0.1) as box:
        assert box.executed_budget == 900
        _put(box, 0, size=850)
        with pytest.raises(OutboxFull) as refused:
            _put(box, 1, size=100)
        assert refused.value.kind == "executed" and refused.value.budget == 900
        assert box.stats().pending_count == 1
        _put(box, 1, kind="suspended", size=60)  # 910 bytes: inside the reserve
        _put(box, 2, kind="resumed", size=40)  # 950
        _put(box, 3, kind="closed", size=50)  # exactly the limit
        with pytest.raises(OutboxFull):
            _put(box, 4, kind="closed", size=1)
        assert box.stats().pending_bytes == 1000


def test_acked_bytes_free_the_budget(tmp_path):
    """Acknowledged segments no longer count against the byte budget."""
    with Outbox(tmp_path / "o.db", limit_bytes=1000, reserve=0.1) as box:
        first = _put(box, 0, size=900)
        with pytest.raises(OutboxFull):
            _put(box, 1, size=1)
        box.mark_acked(first, 1)
        _put(box, 1, size=900)


def test_stopped_run_is_not_pending_and_takes_no_more(tmp_path):
    """stop_run keeps the run's rows as stopped, out of pending, and refuses new segments."""
    other = "b3:" + "B" * 43
    with Outbox(tmp_path / "o.db") as box:
        _put(box, 0)
        _put(box, 0, run=other)
        box.stop_run(RUN, "fork: wrong last sequence 5")
        assert [e.run for e in box.pending()] == [other]
        assert box.stopped_runs() == {RUN: "fork: wrong last sequence 5"}
        assert box.stats().stopped_count == 1
        with pytest.raises(RunStopped, match="wrong last sequence 5"):
            _put(box, 1)


def test_prune_deletes_only_acked_rows(tmp_path):
    """prune() drops acked rows but keeps pending ones and the run's last acked seq."""
    with Outbox(tmp_path / "o.db") as box:
        first = _put(box, 0)
        _put(box, 1)
        box.mark_acked(first, 3)
        assert box.prune() == 1
        assert box.get(first) is None
        assert [e.idx for e in box.pending()] == [1]
        assert box.last_acked_seq(RUN) == 3


def test_prune_keeps_each_runs_newest_row_and_deletes_oldest_first(tmp_path):
    """prune(keep) deletes the oldest acked rows until at most ``keep`` bytes of acked
    payload remain; a run's newest row stays even when acked (a host killed before saving
    its run state catches up from it); pending and stopped rows are never touched."""
    other, third = "b3:" + "B" * 43, "b3:" + "C" * 43
    with Outbox(tmp_path / "o.db") as box:
        a = [_put(box, i, size=100) for i in range(5)]
        b = [_put(box, i, size=100, run=other) for i in range(3)]
        c = [_put(box, i, size=100, run=third) for i in range(2)]
        for n, row in enumerate(a + b):
            box.mark_acked(row, n + 1)
        box.stop_run(third, "fork: test")
        assert box.prune(keep_bytes=600) == 2  # 800 acked bytes: the two oldest go
        assert [box.get(r) is None for r in a + b] == [True, True] + [False] * 6
        assert box.prune(keep_bytes=0) == 4  # all but each run's newest
        kept = [r for r in a + b + c if box.get(r) is not None]
        assert kept == [a[-1], b[-1], *c]
        assert box.prune() == 0
        assert box.last_acked_seq(RUN) == 5 and box.last_acked_seq(other) == 8
        assert box.stopped_runs() == {third: "fork: test"}


def test_acked_rows_are_bounded_automatically(tmp_path, monkeypatch):
    """Every PRUNE_EVERY acks the outbox prunes its acked rows down to keep_acked_bytes."""
    import fleet_ledger.agents.outbox

    monkeypatch.setattr(fleet_ledger.agents.outbox, "PRUNE_EVERY", 4)
    with Outbox(tmp_path / "o.db", keep_acked_bytes=250) as box:
        rows = [_put(box, i, size=100) for i in range(12)]
        for n, row in enumerate(rows):
            box.mark_acked(row, n + 1)
        held = box._db.execute("SELECT coalesce(sum(length(payload)), 0) FROM segments"
                               " WHERE state = 'acked'").fetchone()[0]
        assert held <= 250 + 4 * 100  # pruned at the 12th ack, at most 4 acks since
        assert box.get(rows[-1]) is not None and box.get(rows[0]) is None
        assert box.last_acked_seq(RUN) == 12


def test_the_acked_bytes_kept_in_memory_match_the_file(tmp_path):
    """The bound is checked against a running total (no scan per check): after acks, a
    repeated ack, prunes and a reopen it equals the acked payload the file holds."""
    def on_disk(box: Outbox) -> int:
        return box._db.execute("SELECT coalesce(sum(length(payload)), 0) FROM segments"
                               " WHERE state = 'acked'").fetchone()[0]

    with Outbox(tmp_path / "o.db") as box:
        rows = [_put(box, i, size=50 + i) for i in range(8)]
        for n, row in enumerate(rows[:6]):
            box.mark_acked(row, n + 1)
        box.mark_acked(rows[0], 1)  # acked again: counted once
        assert box._acked_bytes == on_disk(box) == sum(50 + i for i in range(6))
        box.prune(keep_bytes=120)
        assert box._acked_bytes == on_disk(box) <= 120
    with Outbox(tmp_path / "o.db") as box:
        assert box._acked_bytes == on_disk(box)


def test_a_host_resumes_its_runs_after_its_outbox_is_pruned(tmp_path):
    """Pruning leaves the host what it needs: reopened, it continues each run where it
    was (its state is kept beside its newest row, which pruning never deletes)."""
    from fleet_ledger.agents.host import Host
    from fleet_ledger.fleet.address import digest

    host = Host("pruned", tmp_path / "h")
    runs = [host.open_run(digest(b"unit%d" % n), digest(b"grants")) for n in range(2)]
    for hr in runs:
        for i in range(4):
            hr.execute(uj=10 + i, provenance="estimated", meter="estimate:cpu-time@15W",
                       journal_root=digest(b"j%d" % i))
    runs[0].execute(uj=99, provenance="estimated", meter="estimate:cpu-time@15W",
                    journal_root=digest(b"late"))
    for n, entry in enumerate(host.outbox.pending()):
        host.outbox.mark_acked(entry.id, n + 1)
    assert host.outbox.prune() == 7  # 9 rows, each run's newest kept
    host.close()
    host = Host("pruned", tmp_path / "h")
    again = [host.open_run(digest(b"unit%d" % n), digest(b"grants")) for n in range(2)]
    assert [hr.state.index for hr in again] == [5, 4]
    nxt = again[0].execute(uj=1, provenance="estimated", meter="estimate:cpu-time@15W",
                           journal_root=digest(b"next"))
    assert nxt.index == 6
    host.close()


def test_put_wakes_listeners_after_commit(tmp_path):
    """Listeners registered with on_put run after the row is committed."""
    seen: list[int] = []
    with Outbox(tmp_path / "o.db") as box:
        other = sqlite3.connect(tmp_path / "o.db")
        count = "SELECT count(*) FROM segments"
        box.on_put(lambda: seen.append(other.execute(count).fetchone()[0]))
        _put(box, 0)
        other.close()
    assert seen == [1]


def test_segment_put_before_sigkill_is_still_there(tmp_path):
    """A host killed with SIGKILL right after put() returns leaves the segment in the outbox."""
    script = textwrap.dedent(
        f"""
        import sys, time
        from fleet_ledger.agents.outbox import Outbox
        box = Outbox({str(tmp_path / "o.db")!r})
        box.put({RUN!r}, 0, "executed", {SUBJECT!r}, "b3:seg0", b"sealed")
        print("put", flush=True)
        time.sleep(60)
        """
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"put\n"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(10)
    assert child.returncode == -signal.SIGKILL
    with Outbox(tmp_path / "o.db") as box:
        [entry] = box.pending()
        assert (entry.msg_id, entry.payload) == ("b3:seg0", b"sealed")


def test_a_refused_segment_changes_nothing_on_the_host(tmp_path):
    """A suspend the record refuses (a hand-built image park with an empty filesystem root)
    raises its named rule and leaves the host's state, its saved state and its outbox as
    they were: nothing is sealed or queued."""
    from fleet_ledger.agents.host import Host
    from fleet_ledger.fleet.address import digest
    from fleet_ledger.fleet.errors import MalformedSnapshot
    from fleet_ledger.fleet.record.segment import ImageSnapshot

    host = Host("strict", tmp_path / "h")
    run = host.open_run(digest(b"unit"), digest(b"grants"))
    run.execute(uj=5, provenance="measured", meter="m", journal_root=digest(b"j"))
    before = (run.state.index, run.state.head, run.state.phase, run.state.park)
    rows = host.outbox.payloads_after(run.run, 0)
    with pytest.raises(MalformedSnapshot):
        run.suspend(ImageSnapshot(b"", digest(b"mem")), digest(b"manifest"))
    assert (run.state.index, run.state.head, run.state.phase, run.state.park) == before
    assert host.outbox.payloads_after(run.run, 0) == rows and len(rows) == 1
    again = Host("strict", tmp_path / "h").open_run(digest(b"unit"), digest(b"grants"))
    assert again.state.index == 1
