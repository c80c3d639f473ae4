"""Workflows of the effect-class, retry and timeout tests (tests/test_runtime_effects.py).

Effects go to ``$RUNTIME_EFFECTS`` (runtime_flows' downstream "system"); a charge without a
key is applied on every attempt, like an API that takes no idempotency key.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

from runtime_flows import _db, crash_once

from fleet_ledger.agents.runtime import (
    Context,
    Invalid,
    OutcomeUnknown,
    Policy,
    StepFailed,
    StepTimeout,
)


def charge(what: str) -> str:
    """A downstream write with no key: every attempt applies it. The first attempt
    SIGKILLs its own process after the write when ``$RUNTIME_CRASH`` names a file that does
    not exist yet (the outcome the journal never saw)."""
    db = _db()
    db.execute("INSERT INTO attempts VALUES (NULL, ?)", (what,))
    db.execute("INSERT INTO effects VALUES (hex(randomblob(8)), ?)", (what,))
    db.close()
    marker = os.environ.get("RUNTIME_CRASH")
    if marker and not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    return f"charged:{what}"


async def pay_unkeyed(ctx: Context, inp: dict[str, Any]) -> str:
    """An effectful step that takes no idempotency key (may crash once)."""
    return await ctx.step("pay", charge, inp["what"], effect="effectful")


async def pay_keyed(ctx: Context, inp: dict[str, Any]) -> str:
    """An effectful step that forwards its idempotency key (may crash once)."""
    return await ctx.step("pay", crash_once, inp["what"], effect="effectful")


async def pay_strict(ctx: Context, inp: dict[str, Any]) -> str:
    """An effectful step without a key that is never run again after an unknown outcome."""
    try:
        return await ctx.step("pay", charge, inp["what"], effect="effectful",
                              retry=Policy(on_unknown="raise"))
    except OutcomeUnknown as exc:
        return f"unknown: {exc}"


_FLAKY: dict[str, int] = {}


def flaky(what: str, fails: int) -> str:
    """Fails ``fails`` times per ``what`` in this process, then answers."""
    _FLAKY[what] = _FLAKY.get(what, 0) + 1
    if _FLAKY[what] <= fails:
        raise ConnectionError(f"attempt {_FLAKY[what]} of {what} failed")
    return f"ok:{what}:{_FLAKY[what]}"


def invalid(what: str) -> str:
    _FLAKY[what] = _FLAKY.get(what, 0) + 1
    raise Invalid(f"{what} is not a ticket")


async def retries(ctx: Context, inp: dict[str, Any]) -> Any:
    """A step failing ``fails`` times under a policy of ``max`` attempts."""
    try:
        return await ctx.step("flaky", flaky, inp["what"], inp["fails"], effect="idempotent",
                              retry=Policy(max_attempts=inp["max"], backoff_s=0.01))
    except StepFailed as exc:
        return f"failed: {exc}"


async def validation(ctx: Context, inp: dict[str, Any]) -> Any:
    """A step raising a validation error under a retrying policy."""
    try:
        return await ctx.step("check", invalid, inp["what"], effect="pure",
                              retry=Policy(max_attempts=5, backoff_s=0.01))
    except StepTimeout:
        return "timeout"
    except StepFailed as exc:
        return f"{type(exc).__name__}: {exc}"


STARTED: list[str] = []


def sleepy(seconds: float) -> str:
    STARTED.append("sleepy")
    time.sleep(seconds)
    return "slept"


async def asleep(seconds: float) -> str:
    STARTED.append("asleep")
    await asyncio.sleep(seconds)
    return "slept"


async def slow(ctx: Context, inp: dict[str, Any]) -> Any:
    """A plain and an async step, each past its timeout, then a wait for "go" (so a later
    interval replays them)."""
    out = []
    for fn in (sleepy, asleep):
        try:
            out.append(await ctx.step(fn.__name__, fn, inp["seconds"], timeout=inp["timeout"]))
        except StepTimeout as exc:
            out.append(f"StepTimeout: {exc}")
    await ctx.signal("go")
    return out


async def always_fails(ctx: Context, inp: dict[str, Any]) -> Any:
    """A step that always fails, under three attempts."""
    try:
        return await ctx.step("flaky", flaky, inp["what"], 99, effect="idempotent",
                              retry=Policy(max_attempts=3, backoff_s=0.01))
    except StepFailed as exc:
        return f"failed: {exc}"
