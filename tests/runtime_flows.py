"""Workflows the runtime tests run (imported by name from the journal, like any user's).

Side effects go to a downstream "system" in ``$RUNTIME_EFFECTS`` (a SQLite file) that,
like a payment API, dedupes by idempotency key and counts every attempt.
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any

from fleet_ledger.agents.runtime import Context


def _db() -> sqlite3.Connection:
    db = sqlite3.connect(os.environ["RUNTIME_EFFECTS"], isolation_level=None, timeout=30)
    db.execute("CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, what TEXT)")
    db.execute("CREATE TABLE IF NOT EXISTS attempts (key TEXT, what TEXT)")
    return db


def effect(what: str, idempotency_key: str) -> str:
    """A downstream write: applied once per key however often it is attempted."""
    db = _db()
    db.execute("INSERT INTO attempts VALUES (?, ?)", (idempotency_key, what))
    db.execute("INSERT OR IGNORE INTO effects VALUES (?, ?)", (idempotency_key, what))
    db.close()
    return f"done:{what}"


def effects(path: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    db = sqlite3.connect(path)
    try:
        return (db.execute("SELECT key, what FROM effects ORDER BY rowid").fetchall(),
                db.execute("SELECT key, what FROM attempts ORDER BY rowid").fetchall())
    finally:
        db.close()


def double(x: int) -> int:
    return 2 * x


async def chain(ctx: Context, inp: dict[str, Any]) -> dict[str, Any]:
    """Five effects, a gather, a clock and a random read, a short durable sleep."""
    out = [await ctx.step("effect", effect, f"a{i}") for i in range(int(inp.get("n", 3)))]
    t = ctx.now()
    r = ctx.random()
    pair = await ctx.gather(ctx.step("double", double, 3), ctx.step("effect", effect, "g"))
    await ctx.sleep(0.01)
    tail = await ctx.step("effect", effect, "last")
    return {"out": out, "pair": pair, "tail": tail, "t_ok": t > 0, "r_ok": 0 <= r < 1}


async def epochs(ctx: Context, inp: dict[str, Any]) -> dict[str, Any]:
    """``n`` effects in epochs of two (the results so far carried by
    ``ctx.continue_as_new``); the second epoch opens with a durable sleep of ``park``
    seconds (a park, when longer than the inline wait)."""
    done = list(inp.get("done", []))
    n = int(inp.get("n", 6))
    if len(done) == 2:
        await ctx.sleep(float(inp.get("park", 0)))
    for i in range(len(done), n):
        done.append(await ctx.step("effect", effect, f"e{i}"))
        if len(done) % 2 == 0 and len(done) < n:
            await ctx.continue_as_new({**inp, "done": done})
    return {"done": done}


async def approval(ctx: Context, inp: dict[str, Any]) -> dict[str, Any]:
    """A tool call, a wait for an approval signal, a long sleep, a last tool call."""
    label = await ctx.step("classify", effect, f"classify:{inp['ticket']}")
    decision = await ctx.signal("approve", timeout=inp.get("timeout"))
    await ctx.sleep(float(inp.get("sleep", 0)))
    done = await ctx.step("close", effect, f"close:{inp['ticket']}")
    return {"label": label, "decision": decision, "done": done}


async def handed_off(ctx: Context, inp: dict[str, Any]) -> dict[str, Any]:
    """A long call handed off (the run parks until its result lands)."""
    build = await ctx.handoff("build", inp["commit"])
    return {"build": build}


# -- variants of `approval` for the non-determinism tests ------------------------------------

async def approval_reordered(ctx: Context, inp: dict[str, Any]) -> Any:
    """Waits before the tool call instead of after it."""
    await ctx.signal("approve")
    return await ctx.step("classify", effect, f"classify:{inp['ticket']}")


async def approval_other_args(ctx: Context, inp: dict[str, Any]) -> Any:
    """Calls the tool with another argument."""
    return await ctx.step("classify", effect, f"classify:{inp['ticket']}-v2")


async def approval_raw_random(ctx: Context, inp: dict[str, Any]) -> Any:
    """Draws a random number outside the context."""
    import random

    return await ctx.step("classify", effect, f"classify:{random.random()}")


async def approval_raw_clock(ctx: Context, inp: dict[str, Any]) -> Any:
    """Reads the wall clock outside the context."""
    import time

    return await ctx.step("classify", effect, f"classify:{time.time()}")


async def approval_extra_call(ctx: Context, inp: dict[str, Any]) -> Any:
    """Calls another tool first."""
    await ctx.step("audit", effect, "audit")
    return await ctx.step("classify", effect, f"classify:{inp['ticket']}")


async def approval_patched(ctx: Context, inp: dict[str, Any]) -> dict[str, Any]:
    """`approval` with a patch after the wait: old journals take the old path."""
    label = await ctx.step("classify", effect, f"classify:{inp['ticket']}")
    decision = await ctx.signal("approve", timeout=inp.get("timeout"))
    if ctx.patched("notify"):
        await ctx.step("notify", effect, f"notify:{inp['ticket']}")
    await ctx.sleep(float(inp.get("sleep", 0)))
    done = await ctx.step("close", effect, f"close:{inp['ticket']}")
    return {"label": label, "decision": decision, "done": done}


def summarize(view: Any) -> str:
    """A stand-in model: what it saw, flattened."""
    return "|".join(str(item["value"]) for item in view)


async def agent_loop(ctx: Context, inp: dict[str, Any]) -> Any:
    """Three tool calls, then a model call that sees the last two results (tail/2)."""
    from fleet_ledger.agents.runtime.projection import tail

    for i in range(3):
        await ctx.step("tool", effect, f"t{i}")
    return await ctx.model("summarize", summarize, tail(2))


async def agent_loop_wider(ctx: Context, inp: dict[str, Any]) -> Any:
    """`agent_loop` with a wider projection: the model would see something else."""
    from fleet_ledger.agents.runtime.projection import tail

    for i in range(3):
        await ctx.step("tool", effect, f"t{i}")
    return await ctx.model("summarize", summarize, tail(3))


async def slow_after_go(ctx: Context, inp: dict[str, Any]) -> str:
    """Waits for "go", then a step that takes ``seconds``."""
    import asyncio

    await ctx.signal("go")

    async def slow() -> str:
        await asyncio.sleep(float(inp["seconds"]))
        return "slow done"

    return await ctx.step("slow", slow)


def crash_once(what: str, idempotency_key: str) -> str:
    """A downstream write whose first attempt SIGKILLs its own process after applying the
    effect and before returning (``$RUNTIME_CRASH`` marks that it happened)."""
    import signal

    done = effect(what, idempotency_key)
    marker = os.environ.get("RUNTIME_CRASH")
    if marker and not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    return done


async def gated_step(ctx: Context, inp: dict[str, Any]) -> str:
    """Waits for "go", then one step (the run's only call) that may crash once."""
    await ctx.signal("go")
    return await ctx.step("work", crash_once, f"work:{inp['n']}")


async def crash_first(ctx: Context, inp: dict[str, Any]) -> str:
    """One step first thing (it may crash its process once), then the end."""
    return await ctx.step("work", crash_once, f"first:{inp['n']}")


def pay_then_hang(what: str, idempotency_key: str) -> str:
    """A downstream write, then (the first time, when ``$RUNTIME_HANG`` names a file that
    does not exist yet) a hang, for the test to kill the process inside the step."""
    out = effect(what, idempotency_key)
    marker = os.environ.get("RUNTIME_HANG")
    if marker and not os.path.exists(marker):
        open(marker, "w").close()
        import time

        time.sleep(300)
    return out


async def hangs_once(ctx: Context, inp: dict[str, Any]) -> dict[str, Any]:
    """A payment that hangs on its first attempt, then another effect."""
    paid = await ctx.step("pay", pay_then_hang, "p1")
    after = await ctx.step("effect", effect, "after")
    return {"paid": paid, "after": after}
