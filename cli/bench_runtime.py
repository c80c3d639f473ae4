"""``fleet bench runtime``: what durability costs a workflow, against a DBOS-style baseline.

One run measures, in a fresh folder:

* **step**: µs per durable ``ctx.step`` of a no-op (a dispatch and a result entry, each its
  own ``BEGIN IMMEDIATE`` ... ``COMMIT`` with ``synchronous=FULL``, the result encrypted
  into the blob store), over ``--steps`` steps in one interval;
* **baseline**: µs per step of one SQLite row insert + fsync (WAL, ``synchronous=FULL``,
  autocommit: one commit per step), the durability a DBOS-style runtime pays, in the same
  file system in the same run;
* **resume**: ms to replay a run of ``--resume-entries`` journal entries whose workflow
  carries its state into a new epoch every ``--continue-every`` steps
  (``ctx.continue_as_new``): with the replay checkpoint the park took (the last epoch's
  entries read, verified to the checkpoint's head, replayed without running anything, up
  to the wait it is parked on), and the same from zero (the checkpoint deleted: every
  entry read and verified from genesis, every epoch replayed); ``resume_by_entries`` does
  both for each of ``--resume-sizes``, and (``no_epochs``) resumes a journal of the same
  length written by a workflow without epochs. The journal is built with fsync off (how
  it was written does not change how it replays);
* **signal_to_step_p50_ms / p99**: ``--signals`` rounds of a signal sent (as ``fleet
  signal`` does) to a run parked on it, with a worker waiting (woken by the signals
  stream's push, a full pass every ``--poll`` s; ``--signal-wake poll``: passes only, as
  before push), a real nats-server, until the step after the wait runs
  (``cli/_bench_runtime_signal``).
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import click

from fleet_ledger.cli._app import UserError, bench
from fleet_ledger.cli._common import emit_result


def noop() -> None:
    return None


async def noop_steps(ctx: Any, inp: dict[str, Any]) -> int:
    """``n`` durable no-op steps, then (with ``wait``) a wait for a signal; with ``every``,
    the state (steps done) carried into a new epoch every ``every`` steps
    (``ctx.continue_as_new``)."""
    n, every = int(inp["n"]), int(inp.get("every") or 0)
    for i in range(int(inp.get("done", 0)), n):
        await ctx.step("noop", noop)
        if every and (i + 1) % every == 0 and i + 1 < n:
            await ctx.continue_as_new({**inp, "done": i + 1})
    if inp.get("wait"):
        await ctx.signal("go")
    return n


def _baseline(path: Path, steps: int) -> float:
    from fleet_ledger.plumbing import sqlite

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
    from fleet_ledger.agents.runtime import Runtime

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


def _resume(folder: Path, entries: int, every: int) -> tuple[float, float, int, float, float]:
    """ms to resume a run of ``entries`` entries with its replay checkpoint, then from
    zero (the checkpoint deleted), each in a fresh process's view; the entries held; and
    the CPU ms of each (the wall time on a loaded machine is mostly waiting). The workflow
    carries its state into a new epoch every ``every`` steps (0: never, a plain coroutine
    replayed from its start)."""
    from fleet_ledger.agents.runtime import Runtime

    steps = max(1, (entries - 2) // 2)  # start, a dispatch and a result each, the wait
    while every and steps > 1 and 2 + 2 * steps + (steps - 1) // every > entries:
        steps -= 1  # and a ``continue`` entry per epoch after the first
    rt = Runtime(folder)
    rt.journal.db.execute("PRAGMA synchronous=OFF")
    try:
        run = rt.start(noop_steps, "resume", {"n": steps, "wait": True, "every": every})
        first = asyncio.run(rt.advance(run))
        # A run parked for a while has its WAL folded into the database: do it now, so the
        # resume's first commit does not pay for copying the build's WAL.
        rt.journal.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        rt.close()
    if first.status != "waiting":
        raise click.ClickException("bench runtime: the resume run did not park")
    took, cpu = [], []
    for from_zero in (False, True):
        rt = Runtime(folder)  # a fresh process's view: nothing cached
        try:
            if from_zero:
                rt.journal.db.execute("DELETE FROM checkpoints")
            start, start_cpu = time.perf_counter(), time.process_time()
            again = asyncio.run(rt.advance(run))
            took.append((time.perf_counter() - start) * 1000)
            cpu.append((time.process_time() - start_cpu) * 1000)
            held = again.entries
        finally:
            rt.close()
        if again.status != "waiting":
            raise click.ClickException("bench runtime: the replay did not reach the wait")
    return took[0], took[1], held, cpu[0], cpu[1]


@bench.command("runtime")
@click.option("--steps", type=int, default=300, show_default=True,
              help="Durable no-op steps timed (and baseline rows).")
@click.option("--resume-entries", type=int, default=10_000, show_default=True,
              help="Journal entries in the run whose resume is timed.")
@click.option("--resume-sizes", default="1000,10000,100000", show_default=True,
              help="Journal sizes whose resume is also timed (comma-separated).")
@click.option("--continue-every", "every", type=int, default=200, show_default=True,
              help="Steps per epoch of the resumed workflow (ctx.continue_as_new; 0: a"
              " plain workflow replayed from its start).")
@click.option("--signals", type=int, default=20, show_default=True,
              help="Signal -> resumed step rounds with a worker waiting (a real nats-server;"
              " 0: skip).")
@click.option("--poll", type=float, default=1.0, show_default=True,
              help="The waiting worker's seconds between full passes.")
@click.option("--signal-wake", type=click.Choice(["push", "poll"]), default="push",
              show_default=True, help="How the waiting worker learns of a signal: pushed by"
              " the signals stream, or only by its passes (the worker before push).")
@click.option("--rounds", type=int, default=3, show_default=True,
              help="Rounds of step and baseline, interleaved; medians are reported.")
@click.option("--dir", "where", type=click.Path(file_okay=False, path_type=Path),
              help="Where to put the files (default: a temporary folder).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON line.")
def bench_runtime(steps: int, resume_entries: int, resume_sizes: str, every: int,
                  signals: int, poll: float, signal_wake: str, rounds: int,
                  where: Path | None, as_json: bool) -> None:
    """µs per durable ctx.step vs one SQLite insert + fsync per step; resume latency."""
    if steps < 1 or resume_entries < 4 or rounds < 1:
        raise UserError("--steps and --rounds must be at least 1, --resume-entries 4")
    try:
        sizes = [int(x) for x in resume_sizes.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--resume-sizes takes numbers separated by commas, not"
                        f" {resume_sizes!r}") from None
    if every < 0:
        raise UserError("--continue-every must be at least 0")
    if signals < 0 or poll <= 0:
        raise UserError("--signals must be at least 0 and --poll positive")
    if any(n < 4 for n in sizes):
        raise UserError("each of --resume-sizes must be at least 4")
    with tempfile.TemporaryDirectory(dir=where) as tmp:
        base = Path(tmp)
        step_us, base_us = [], []
        for r in range(rounds):
            base_us.append(_baseline(base / f"baseline{r}.db", steps))
            step_us.append(_steps(base / f"steps{r}", steps))
        resume_ms, zero_ms, held, cpu_ms, zero_cpu_ms = _resume(base / "resume",
                                                                resume_entries, every)
        scale = {}
        for n in sizes:
            cp, zero, got, cp_cpu, zero_cpu = _resume(base / f"resume{n}", n, every)
            # The same journal length written by a workflow without epochs: its checkpoint
            # cannot skip the replay from the start.
            plain, _zero, _got, plain_cpu, _zero_cpu = _resume(base / f"plain{n}", n, 0)
            scale[str(got)] = {"checkpoint_ms": round(cp, 1), "from_zero_ms": round(zero, 1),
                               "checkpoint_cpu_ms": round(cp_cpu, 1),
                               "from_zero_cpu_ms": round(zero_cpu, 1),
                               "no_epochs_ms": round(plain, 1),
                               "no_epochs_cpu_ms": round(plain_cpu, 1)}
        latency: dict[str, Any] = {}
        if signals:
            from fleet_ledger.cli._bench_runtime_signal import signal_latency

            latency = signal_latency(base / "signal", signals, poll, signal_wake == "push")
    step, baseline = statistics.median(step_us), statistics.median(base_us)
    emit_result({
        "steps": steps, "rounds": rounds,
        "step_us": round(step, 1), "baseline_insert_fsync_us": round(baseline, 1),
        "step_vs_baseline": round(step / baseline, 2),
        "resume_entries": held, "resume_continue_every": every,
        "resume_ms": round(resume_ms, 1),
        "resume_us_per_entry": round(resume_ms * 1000 / held, 2),
        "resume_from_zero_ms": round(zero_ms, 1), "resume_cpu_ms": round(cpu_ms, 1),
        "resume_from_zero_cpu_ms": round(zero_cpu_ms, 1), "resume_by_entries": scale,
        **latency,
    }, as_json)
