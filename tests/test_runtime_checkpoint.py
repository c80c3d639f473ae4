"""Replay checkpoints and epochs: a resume from a checkpoint reads and replays only the last
epoch and is the resume from zero; a checkpoint edited without the host's key, or not on
its journal, is rejected and the resume verifies from genesis; what a resume no longer
reads (entries before the epoch) is still caught from zero and by the verifier."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
import runtime_flows as flows
import runtime_tamper as tamper
from test_runtime_kill import proc

from fleet_ledger.agents.host import Host
from fleet_ledger.agents.runtime import Context, Runtime
from fleet_ledger.agents.runtime.checkpoint import Epoch, _mac, folder_key, unpack
from fleet_ledger.agents.runtime.journal import verify_chain
from fleet_ledger.agents.runtime.runtime import run_ids, workflow_name
from fleet_ledger.cli.runtime_verify_cmds import journal_file
from fleet_ledger.fleet.address import format_address
from fleet_ledger.fleet.record.wire import RecordWire, decode_envelope, segment_to_wire
from fleet_ledger.fleet.runtime.runtime_errors import JournalTampered
from fleet_ledger.fleet.runtime.runtime_verify import parse_journal, verify_runtime

STEPS = 40
EVERY = 10  # steps per epoch: the park's checkpoint names the fourth epoch


def plus(x: int) -> int:
    return x + 1


async def counted(ctx: Context, inp: dict[str, Any]) -> dict[str, Any]:
    """A signal "hello", then STEPS journaled steps in epochs of EVERY (the count and total
    carried), a clock read, then a signal "go"."""
    hello = inp.get("hello")
    if hello is None:
        hello = await ctx.signal("hello")
    done, total = int(inp.get("done", 0)), int(inp.get("total", 0))
    for i in range(done, STEPS):
        total += await ctx.step("plus", plus, i)
        if (i + 1) % EVERY == 0 and i + 1 < STEPS:
            await ctx.continue_as_new({"hello": hello, "done": i + 1, "total": total})
    at = ctx.now()
    got = await ctx.signal("go")
    return {"hello": hello, "total": total, "at": at, "got": got}


WORKFLOW = workflow_name(counted)


def parked(tmp_path: Path) -> tuple[Path, str]:
    """A host folder holding ``counted`` parked on "go", with a checkpoint at its last
    epoch."""
    folder = tmp_path / "h"
    rt = Runtime(folder, clock=lambda: 1000.0)
    try:
        run = rt.start(counted, "cp", {})
        assert asyncio.run(rt.advance(run)).status == "waiting"
        rt.send(run, "hello", "hi", "hello-1")
        assert asyncio.run(rt.advance(run)).status == "waiting"
        seq, _head, epoch = rt.checkpoints.load(run) or (0, b"", Epoch())
        assert seq == len(rt.journal.entries(run)) and epoch.seq > 0
        assert rt.journal.entries(run, epoch.seq)[0].kind == "continue"
    finally:
        rt.close()
    return folder, run


def resume(folder: Path, run: str, signal_id: str = "go-1"
           ) -> tuple[Any, list[tuple[str, str]], int, int]:
    """Signal and resume ``run`` in a fresh process's view: its result (None while it
    waits), the journal's (kind, call) list, the first seq the resume replayed from, how
    many checkpoints were rejected."""
    rt = Runtime(folder, clock=lambda: 2000.0)
    try:
        try:  # what the resume below will replay (it reads the same again)
            first = rt.checkpoints.view(rt.journal, run, WORKFLOW).entries[0].seq
        except JournalTampered:
            first = -1  # the resume below raises it too, and marks the run refused
        rejected = rt.checkpoints.rejected
        rt.send(run, "go", {"by": "ana"}, signal_id)
        out = asyncio.run(rt.advance(run))
        kinds = [(e.kind, e.call) for e in rt.journal.entries(run)]
        return out.result, kinds, first, rejected
    finally:
        rt.close()


def without_checkpoint(folder: Path, to: Path) -> Path:
    shutil.copytree(folder, to)
    db = sqlite3.connect(to / "runtime.db")
    db.execute("DELETE FROM checkpoints")
    db.commit()
    db.close()
    return to


def forge_delivered(folder: Path, run: str, key: bytes, signal_id: str) -> None:
    """Add ``signal_id`` to the checkpoint's delivered ids and MAC it with ``key``."""
    db = sqlite3.connect(folder / "runtime.db")
    seq, head, state = db.execute("SELECT seq, head, state FROM checkpoints WHERE run = ?",
                                  (run,)).fetchone()
    epoch = unpack(state)
    forged = Epoch(epoch.seq, epoch.cursor, epoch.size,
                   epoch.delivered | {signal_id}).state()
    db.execute("UPDATE checkpoints SET state = ?, mac = ? WHERE run = ?",
               (forged, _mac(key, run, seq, head, forged), run))
    db.commit()
    db.close()


def test_resume_from_a_checkpoint_equals_resume_from_zero(tmp_path: Path):
    """The same parked run resumed with its checkpoint (replaying from its last epoch's
    ``continue``) and with it deleted (from the start, through every ``continue``) gives
    the same result and the same journal, calls numbered the same."""
    folder, run = parked(tmp_path)
    zero = without_checkpoint(folder, tmp_path / "zero")
    with_cp, without = resume(folder, run), resume(zero, run)
    assert with_cp[2] == 3 + 2 * 30 + 2 and without[2] == 0  # the fourth continue
    assert with_cp[0] == without[0] == {"hello": "hi", "total": sum(range(1, STEPS + 1)),
                                        "at": 1000.0, "got": {"by": "ana"}}
    assert with_cp[1] == without[1]
    assert [k for k, _c in with_cp[1]].count("continue") == STEPS // EVERY - 1
    assert with_cp[3] == without[3] == 0


def test_a_signal_delivered_in_an_earlier_epoch_is_not_delivered_again(tmp_path: Path):
    """The checkpoint carries the ids delivered before its epoch: "hello-1" sent again is
    a duplicate (nothing queued), with the checkpoint and from zero."""
    folder, run = parked(tmp_path)
    for where in (folder, without_checkpoint(folder, tmp_path / "zero")):
        rt = Runtime(where)
        try:
            assert rt.send(run, "hello", "hi", "hello-1") is False
        finally:
            rt.close()


def test_a_checkpoint_forged_without_the_key_is_rejected(tmp_path: Path):
    """Attack: the signal id the run waits for is added to the checkpoint's delivered ids,
    so the signal would be dropped as a duplicate. MAC'd with the folder's key (the
    defence bypassed) the forgery wins and the run keeps waiting; MAC'd with any other key
    the checkpoint is rejected, counted, the resume verifies from genesis and the signal
    is delivered."""
    folder, run = parked(tmp_path)
    attacked = tmp_path / "attacked"
    shutil.copytree(folder, attacked)
    forge_delivered(attacked, run, folder_key(attacked), "go-1")
    result, _kinds, first, rejected = resume(attacked, run)
    assert result is None and first > 0 and rejected == 0  # the forgery wins
    forge_delivered(folder, run, bytes(32), "go-1")
    result, _kinds, first, rejected = resume(folder, run)
    assert first == 0 and rejected == 1
    assert result["got"] == {"by": "ana"}


def test_a_checkpoint_over_a_cut_journal_is_not_used(tmp_path: Path):
    """Entries deleted from the table under a valid checkpoint: the checkpoint is not on
    the journal any more, so it is not used and the resume reads the table as it is."""
    folder, run = parked(tmp_path)
    n = len(Runtime(folder).journal.entries(run))
    tamper.delete_last(folder, run)
    rt = Runtime(folder)
    try:
        view = rt.checkpoints.view(rt.journal, run, WORKFLOW)
    finally:
        rt.close()
    assert view.trusted == 0 and view.entries[0].seq == 0 and view.end == n - 1
    assert rt.checkpoints.rejected == 1


def test_an_edit_before_the_epoch_is_not_read_by_the_resume_but_caught_from_zero(
        tmp_path: Path):
    """The check that moved: an entry before the checkpoint's epoch edited in place. The
    resume with the checkpoint never reads it and replays the run right (the edited entry
    plays no part in what follows its epoch); the same journal without the checkpoint, and
    every entry verified from genesis (what `fleet runtime verify` does), is JournalTampered."""
    folder, run = parked(tmp_path)
    tamper.edit_entry(folder, run)  # the first dispatch: in the first epoch
    zero = without_checkpoint(folder, tmp_path / "zero")
    result, _kinds, first, rejected = resume(folder, run)
    assert first > 0 and rejected == 0 and result["got"] == {"by": "ana"}
    with pytest.raises(JournalTampered):
        resume(zero, run)
    rt = Runtime(folder)
    try:
        with pytest.raises(JournalTampered):
            verify_chain(run, WORKFLOW, rt.journal.entries(run))
    finally:
        rt.close()


def test_an_edit_inside_the_epoch_is_caught_by_the_resume(tmp_path: Path):
    """An entry the resume replays (after the epoch's ``continue``) edited in place:
    JournalTampered with the checkpoint too, and the run is marked refused."""
    folder, run = parked(tmp_path)
    rt = Runtime(folder)
    try:
        _seq, _head, epoch = rt.checkpoints.load(run)  # type: ignore[misc]
    finally:
        rt.close()
    db = sqlite3.connect(folder / "runtime.db")
    db.execute("UPDATE entries SET body = replace(body, 'test_runtime', 'forged_runtime')"
               " WHERE run = ? AND seq = ?", (run, epoch.seq + 1))
    db.commit()
    db.close()
    with pytest.raises(JournalTampered):
        resume(folder, run)
    rt = Runtime(folder)
    try:
        assert rt.journal.run_row(run)[2] == "refused"  # type: ignore[index]
    finally:
        rt.close()


def _epoch_of(folder: Path, run_name: str) -> int:
    db = sqlite3.connect(folder / "runtime.db")
    try:
        rows = db.execute("SELECT state FROM checkpoints").fetchall()
    finally:
        db.close()
    assert len(rows) == 1, run_name
    return unpack(rows[0][0]).seq


def test_killed_after_a_continue_the_resume_from_the_checkpoint_ends_as_an_uninterrupted_run(
        tmp_path: Path):
    """Real processes with a host: ``epochs`` parks on a timer at the start of its second
    epoch (the park's checkpoint names that epoch); the process resuming it is SIGKILLed
    right after its own ``continue`` is committed; the next process resumes from the
    checkpoint's epoch, through that ``continue``, seals the lost interval, and ends with
    an uninterrupted run's result and effects, each applied once; the record with its
    journal verifies (fleet runtime verify's rules)."""
    inp = json.dumps({"n": 6, "park": 1.2})
    outs = {}
    for where in ("clean", "killed"):
        data, effects = tmp_path / where, tmp_path / f"{where}.db"
        code, out = proc(data, effects, "ep", "--host", "A", "--workflow", "epochs", inp=inp)
        assert code == 0 and out is not None and out["status"] == "waiting"
        assert _epoch_of(data, "ep") > 0
        time.sleep(0.5)  # the timer's remainder is inside the inline wait from here on
        if where == "killed":
            code, _ = proc(data, effects, "ep", "--host", "A", "--workflow", "epochs",
                           "--kill", "after", "6", inp=inp)
            assert code == -signal.SIGKILL
        code, outs[where] = proc(data, effects, "ep", "--host", "A", "--workflow", "epochs",
                                 inp=inp)
    assert outs["killed"]["status"] == outs["clean"]["status"] == "done"  # type: ignore[index]
    assert outs["killed"]["result"] == outs["clean"]["result"]  # type: ignore[index]
    applied, attempts = flows.effects(str(tmp_path / "killed.db"))
    assert applied == flows.effects(str(tmp_path / "clean.db"))[0]
    assert len(attempts) == len(applied) == 6
    host = Host("A", tmp_path / "killed")
    try:
        hr = host.open_run(*run_ids("ep", workflow_name(flows.epochs)))
        state = host.verified_state(hr)
        assert state.phase == "closed"
        record = RecordWire(format_address(state.unit_id), format_address(state.grants_id),
                            [segment_to_wire(decode_envelope(p).sealed)
                             for p in host.outbox.payloads_after(hr.run, 0)],
                            run=hr.run, host_key=host.public_key)
        outcomes = [o.outcome for s in record.segments
                    if (o := getattr(s, "attestation_object", None)) is not None]
        assert outcomes.count("lost") == 1, outcomes
        journal = json.dumps(journal_file(hr.run, tmp_path / "killed")).encode()
        assert verify_runtime(record, parse_journal(journal)).unsealed == 0
    finally:
        host.close()
