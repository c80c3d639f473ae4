"""``fleet bench runtime``: what durability costs a workflow, against a DBOS-style baseline.

One run measures, in a fresh folder:

* **step**: µs per durable ``ctx.step`` of a no-op (a dispatch and a result entry, each its
  own ``BEGIN IMMEDIATE`` ... ``COMMIT`` with ``synchronous=FULL``, the result encrypted
  into the blob store), over ``--steps`` steps in one interval;
* **baseline**: µs per step of one SQLite row insert + fsync (WAL, ``synchronous=FULL``,
  autocommit: one commit per step), the durability a DBOS-style runtime pays, in the same
  file system in the same run;
* **resume**: ms to replay a run of ``--resume-entries`` journal entries (verify the chain,
  replay every step from the journal without running it, reach the wait it is parked on).
  The journal is built with fsync off (how it was written does not change how it replays).
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import click

from cli._app import UserError, bench
from cli._common import emit_result


def noop() -> None:
    return None


async def noop_steps(ctx: Any, inp: dict[str, Any]) -> int:
    """``n`` durable no-op steps, then (with ``wait``) a wait for a signal."""
    for _ in range(int(inp["n"])):
        await ctx.step("noop", noop)
    if inp.get("wait"):
        await ctx.signal("go")
    return int(inp["n"])


def _baseline(path: Path, steps: int) -> float:
    from plumbing import sqlite

    db = sqlite.connect(path)
    db.execute("CREATE TABLE steps (workflow TEXT, step INTEGER, output BLOB,"
               " PRIMARY KEY (workflow, step))")
    start = time.perf_counter()
    for i in range(steps):
        db.execute("INSERT INTO steps VALUES (?, ?, ?)", ("wf", i, b"null"))
    took = time.perf_counter() - start
    db.close()
    return took / steps * 1e6


def _steps(folder: Path, steps: int) -> float:
    from agents.runtime import Runtime

    rt = Runtime(folder)
    try:
        run = rt.start(noop_steps, "bench", {"n": steps})
        start = time.perf_counter()
        out = asyncio.run(rt.advance(run))
        took = time.perf_counter() - start
    finally:
        rt.close()
    if out.status != "done":
        raise click.ClickException(f"bench runtime: the step run ended {out.status}")
    return took / steps * 1e6


def _resume(folder: Path, entries: int) -> tuple[float, int]:
    from agents.runtime import Runtime

    steps = max(1, (entries - 2) // 2)  # start, a dispatch and a result each, the wait
    rt = Runtime(folder)
    rt.journal.db.execute("PRAGMA synchronous=OFF")
    try:
        run = rt.start(noop_steps, "resume", {"n": steps, "wait": True})
        first = asyncio.run(rt.advance(run))
    finally:
        rt.close()
    if first.status != "waiting":
        raise click.ClickException("bench runtime: the resume run did not park")
    rt = Runtime(folder)  # a fresh process's view: nothing cached
    try:
        start = time.perf_counter()
        again = asyncio.run(rt.advance(run))
        took = time.perf_counter() - start
        held = len(rt.journal.entries(run))
    finally:
        rt.close()
    if again.status != "waiting":
        raise click.ClickException("bench runtime: the replay did not reach the wait")
    return took * 1000, held


@bench.command("runtime")
@click.option("--steps", type=int, default=300, show_default=True,
              help="Durable no-op steps timed (and baseline rows).")
@click.option("--resume-entries", type=int, default=10_000, show_default=True,
              help="Journal entries in the run whose resume is timed.")
@click.option("--rounds", type=int, default=3, show_default=True,
              help="Rounds of step and baseline, interleaved; medians are reported.")
@click.option("--dir", "where", type=click.Path(file_okay=False, path_type=Path),
              help="Where to put the files (default: a temporary folder).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON line.")
def bench_runtime(steps: int, resume_entries: int, rounds: int, where: Path | None,
                  as_json: bool) -> None:
    """µs per durable ctx.step vs one SQLite insert + fsync per step; resume latency."""
    if steps < 1 or resume_entries < 4 or rounds < 1:
        raise UserError("--steps and --rounds must be at least 1, --resume-entries 4")
    with tempfile.TemporaryDirectory(dir=where) as tmp:
        base = Path(tmp)
        step_us, base_us = [], []
        for r in range(rounds):
            base_us.append(_baseline(base / f"baseline{r}.db", steps))
            step_us.append(_steps(base / f"steps{r}", steps))
        resume_ms, held = _resume(base / "resume", resume_entries)
    step, baseline = statistics.median(step_us), statistics.median(base_us)
    emit_result({
        "steps": steps, "rounds": rounds,
        "step_us": round(step, 1), "baseline_insert_fsync_us": round(baseline, 1),
        "step_vs_baseline": round(step / baseline, 2),
        "resume_entries": held, "resume_ms": round(resume_ms, 1),
        "resume_us_per_entry": round(resume_ms * 1000 / held, 2),
    }, as_json)
