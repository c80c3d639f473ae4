"""Replay checkpoints: a resume from a checkpoint is the resume from zero; a checkpoint
edited without the host's key is rejected and the resume verifies from genesis."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from pathlib import Path
from typing import Any

from fleet_ledger.agents.runtime import Context, Runtime
from fleet_ledger.agents.runtime.checkpoint import _mac, folder_key, pack, unpack
from fleet_ledger.fleet.runtime.runtime_journal import canon

STEPS = 40  # 80 entries and more: past MIN_TAIL, so the park takes a checkpoint


def plus(x: int) -> int:
    return x + 1


async def counted(ctx: Context, inp: dict[str, Any]) -> dict[str, Any]:
    """STEPS journaled steps, a clock read, then a signal."""
    total = 0
    for i in range(STEPS):
        total += await ctx.step("plus", plus, i)
    at = ctx.now()
    got = await ctx.signal("go")
    return {"total": total, "at": at, "got": got}


def parked(tmp_path: Path) -> tuple[Path, str]:
    """A host folder holding ``counted`` parked on its signal, with a checkpoint."""
    folder = tmp_path / "h"
    rt = Runtime(folder, clock=lambda: 1000.0)
    try:
        run = rt.start(counted, "cp", {})
        assert asyncio.run(rt.advance(run)).status == "waiting"
        assert len(rt.checkpoints.load(run)) == len(rt.journal.entries(run))
    finally:
        rt.close()
    return folder, run


def resume(folder: Path, run: str) -> tuple[Any, list[tuple[str, str]], int, int]:
    """Signal and resume ``run`` in a fresh process's view: its result, the journal's
    (kind, call) list, how many entries the checkpoint vouched for, how many rejected."""
    rt = Runtime(folder, clock=lambda: 2000.0)
    try:
        trusted = len(rt.checkpoints.load(run)) if _valid(rt, run) else 0
        rt.send(run, "go", {"by": "ana"}, "go-1")
        out = asyncio.run(rt.advance(run))
        kinds = [(e.kind, e.call) for e in rt.journal.entries(run)]
        return out.result, kinds, trusted, rt.checkpoints.rejected
    finally:
        rt.close()


def _valid(rt: Runtime, run: str) -> bool:
    try:
        rt.checkpoints.load(run)
    except Exception:
        return False
    return True


def forge_now(folder: Path, run: str, key: bytes) -> None:
    """Change the journaled clock read in the checkpoint's state and MAC it with ``key``."""
    db = sqlite3.connect(folder / "runtime.db")
    seq, head, state = db.execute("SELECT seq, head, state FROM checkpoints WHERE run = ?",
                                  (run,)).fetchone()
    entries = unpack(state)
    for i, e in enumerate(entries):
        if e.kind == "now":
            body = e.data()
            body["now"] = 1.0
            entries[i] = type(e)(e.seq, e.kind, e.call, canon(body).decode(), e.hash)
    forged = pack(entries)
    db.execute("UPDATE checkpoints SET state = ?, mac = ? WHERE run = ?",
               (forged, _mac(key, run, seq, head, forged), run))
    db.commit()
    db.close()


def test_resume_from_a_checkpoint_equals_resume_from_zero(tmp_path: Path):
    """The same parked run resumed with its checkpoint and with it deleted gives the same
    result and the same journal; the checkpoint vouched for every entry up to the park."""
    folder, run = parked(tmp_path)
    zero = tmp_path / "zero"
    shutil.copytree(folder, zero)
    db = sqlite3.connect(zero / "runtime.db")
    db.execute("DELETE FROM checkpoints")
    db.commit()
    db.close()
    with_cp, without = resume(folder, run), resume(zero, run)
    assert with_cp[2] == 2 * STEPS + 3 and without[2] == 0  # start, steps, now, wait
    assert with_cp[0] == without[0] == {"total": sum(range(1, STEPS + 1)), "at": 1000.0,
                                        "got": {"by": "ana"}}
    assert with_cp[1] == without[1]
    assert with_cp[3] == without[3] == 0


def test_a_checkpoint_forged_without_the_key_is_rejected(tmp_path: Path):
    """Attack: the clock read in the checkpoint's state is changed. MAC'd with the folder's
    key (the defence bypassed) the resume returns the forged value; MAC'd with any other
    key the checkpoint is rejected, counted, and the resume verifies from genesis and
    returns the journaled value."""
    folder, run = parked(tmp_path)
    attacked = tmp_path / "attacked"
    shutil.copytree(folder, attacked)
    forge_now(attacked, run, folder_key(attacked))
    result, _kinds, _trusted, rejected = resume(attacked, run)
    assert result["at"] == 1.0 and rejected == 0  # without the defence: the forgery wins
    forge_now(folder, run, bytes(32))
    result, _kinds, trusted, rejected = resume(folder, run)
    assert trusted == 0 and rejected == 1
    assert result["at"] == 1000.0


def test_a_checkpoint_over_a_cut_journal_is_not_used(tmp_path: Path):
    """Entries deleted from the table under a valid checkpoint: the checkpoint is not on
    the journal any more, so it is not used and the resume reads the table as it is."""
    folder, run = parked(tmp_path)
    db = sqlite3.connect(folder / "runtime.db")
    db.execute("DELETE FROM entries WHERE run = ? AND seq = (SELECT MAX(seq) FROM entries"
               " WHERE run = ?)", (run, run))
    db.commit()
    db.close()
    rt = Runtime(folder)
    try:
        entries, trusted = rt.checkpoints.entries(rt.journal, run)
        assert trusted == 0 and len(entries) == 2 * STEPS + 2
        assert rt.checkpoints.rejected == 1
    finally:
        rt.close()
