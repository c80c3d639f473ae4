"""The workflow context: what workflow code calls, replayed from the journal.

Workflow code issues *commands* (a step dispatched, a clock or random read, a wait, a
timer, a patch marker, the end); the journal holds them in the order they were issued, and
on replay the n-th command the code issues must be the n-th command in the journal (same
kind, same call id, same name and argument hash), else :class:`ReplayDiverged` and nothing
is appended. *Resolutions* (a step's result, a delivered signal, a fired timer) are found
by call id, so concurrent steps (``ctx.gather``) may finish in any order.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import struct
import sys
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, NoReturn

from fleet_ledger.agents.runtime.effects import (
    NO_RETRY,
    UNKNOWN,
    Invalid,
    Policy,
    StepFailed,
    check_effect,
    failure,
)
from fleet_ledger.agents.runtime.journal import Entry, Journal, Value
from fleet_ledger.agents.runtime.projection import History, Projected, Projection, summarized_view
from fleet_ledger.fleet.address import format_address
from fleet_ledger.fleet.runtime.runtime_errors import ReplayDiverged, SignalTimeout
from fleet_ledger.fleet.runtime.runtime_journal import (
    ATTEMPT,
    COMMANDS,
    CONTINUE,
    DISPATCH,
    END,
    FIRED,
    NOW,
    PATCH,
    RANDOM,
    RESOLUTIONS,
    RESOLVE,
    SIGNAL,
    TIMEOUT,
    TIMER,
    WAIT,
    args_hash,
    projection_hash,
)

_HERE = os.path.dirname(__file__)


class ContinueAsNew(BaseException):
    """Unwinds the workflow at ``ctx.continue_as_new``: the runtime enters the workflow
    function again with ``value`` as its input (an epoch starts)."""

    def __init__(self, value: Any) -> None:
        super().__init__("continue as new")
        self.value = value


class Park(BaseException):
    """Unwinds the workflow at a wait that cannot be satisfied in this interval."""

    def __init__(self, wait: dict[str, Any]) -> None:
        super().__init__(wait)
        self.wait = wait


@dataclass
class Inbox:
    """Signals that have arrived for a run and not yet been delivered: name -> [(id, data)]."""

    pending: dict[str, list[tuple[str, Any]]] = field(default_factory=dict)


def _site() -> str:
    """``file:line`` of the workflow code that called into the context."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and os.path.dirname(frame.f_code.co_filename) == _HERE:
        frame = frame.f_back
    if frame is None:
        return "?"
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


def _describe(kind: str, ask: dict[str, Any]) -> str:
    detail = ", ".join(f"{k}={v}" for k, v in sorted(ask.items()))
    return f"{kind}({detail})"


class Context:
    """The one argument every workflow function receives first."""

    def __init__(self, journal: Journal, run: str, name: str, workflow: str,
                 entries: list[Entry], inbox: Inbox, *, inline_wait_s: float = 1.0,
                 clock: Callable[[], float] = time.time,
                 before_append: Callable[[], None] | None = None, cursor: int = 0,
                 delivered: frozenset[str] = frozenset()) -> None:
        self.run = run
        self.name = name
        self._journal = journal
        self._workflow = workflow
        # The run's journal as this interval knows it: what it started from (entry 0 on, or
        # a ``continue`` entry on when a replay checkpoint lets the replay start at its
        # epoch) and each entry it appends (only the interval's context appends).
        self._entries = list(entries)
        self._start = entries[-1].seq + 1 if entries else 0  # earlier intervals' entries
        self._commands = [e for e in entries if e.kind in COMMANDS]
        self._resolved = {e.call: e for e in entries if e.kind in RESOLUTIONS}
        self._attempted: dict[str, list[Entry]] = {}  # a step's failed attempts, by call
        for e in entries:
            if e.kind == ATTEMPT:
                self._attempted.setdefault(e.call, []).append(e)
        # Signal ids delivered before ``entries`` (a checkpoint's), and in them.
        self._delivered = set(delivered) | {e.data().get("id") for e in entries
                                            if e.kind == SIGNAL}
        self._inbox = inbox
        # ``cursor`` commands come before ``entries`` (call ids number every command of
        # the run); the journal's commands are matched from there.
        self._cursor = self._base = cursor
        # The epoch: the seq of the ``continue`` the workflow last entered from (0: the
        # start), and the commands before it (what a checkpoint records).
        self.epoch, self.epoch_cursor = (entries[0].seq if entries else 0), cursor
        if entries and entries[0].kind == CONTINUE:  # entered from it: replay after it
            self._cursor += 1
        self._inline = inline_wait_s
        self._clock = clock
        self._tasks: list[asyncio.Future[Any]] = []
        # ctx.projection's summaries so far, per (name, head, tail): how many middle items
        # the last summary covers and its value (rebuilt by replay like any step result).
        self._summaries: dict[tuple[str, int, int], tuple[int, Any]] = {}
        # The journaled values a replay returns, read in one batch (each handed out once).
        self._replayed: dict[str, Any] | None = None
        self._live = 0  # step tasks not done yet (group commit defers only when alone)
        # Called once, before the first entry this interval appends: the runtime seals the
        # resume there, so a replay that diverges before going live seals nothing either.
        self._before = before_append

    def journal(self) -> list[Entry]:
        """The run's journal as this interval knows it: what it was replayed from and
        every entry it appended."""
        return list(self._entries)

    def _going_live(self) -> None:
        if self._before is not None:
            before, self._before = self._before, None
            before()

    # -- the journal's order ----------------------------------------------------------------

    @property
    def replaying(self) -> bool:
        return self._cursor - self._base < len(self._commands)

    def _journaled(self) -> Entry:
        """The journal's command at the cursor (while replaying)."""
        return self._commands[self._cursor - self._base]

    def _command(self, kind: str, ask: dict[str, Any], got: Callable[[], dict[str, Any]],
                 site: str) -> Entry:
        call = f"c{self._cursor}"
        if self.replaying:
            entry = self._journaled()
            data = entry.data()
            if entry.kind != kind or entry.call != call or data.get("ask") != ask:
                raise ReplayDiverged("replay diverged from the journal", seq=entry.seq,
                                     expected=_describe(entry.kind, data.get("ask", {}))
                                     + f" from {data.get('site', '?')}",
                                     actual=_describe(kind, ask), line=site)
            self._cursor += 1
            return entry
        self._cursor += 1
        self._going_live()
        body = {"ask": ask, "site": site, **got()}
        values = []
        for key in ("value", "request"):  # values live in the blob store, never in a body
            if key in body:
                sealed = Journal.seal_value(body.pop(key))
                body[key] = sealed[0].address
                values.append(sealed)
        entry = self._journal.append(self.run, self._workflow, kind, call, body,
                                     tuple(values))
        self._entries.append(entry)
        return entry

    def _resolve(self, kind: str, call: str, body: dict[str, Any], value: Any = None,
                 with_value: bool = False, defer: bool = False) -> Entry:
        self._going_live()
        values: tuple[tuple[Value, bytes, bytes], ...] = ()
        if with_value:
            sealed = Journal.seal_value(value)
            body = {**body, "value": sealed[0].address}
            values = (sealed,)
        entry = self._journal.append(self.run, self._workflow, kind, call, body, values,
                                     defer=defer)
        self._entries.append(entry)
        self._resolved[call] = entry
        return entry

    def _value(self, entry: Entry) -> Any:
        address = entry.data().get("value")
        if address is None:
            return None
        if self._replayed is None:  # the first value a replay needs: read them all at once
            self._replayed = self._journal.values(
                [a for e in self._resolved.values() if (a := e.data().get("value"))])
        if address in self._replayed:
            return self._replayed.pop(address)
        return self._journal.value(address)

    # -- the public API -----------------------------------------------------------------------

    def step(self, name: str, fn: Callable[..., Any], *args: Any, effect: str | None = None,
             retry: Policy | None = None, timeout: float | None = None, **kwargs: Any
             ) -> asyncio.Future[Any]:
        """Run ``fn(*args, **kwargs)`` once, durably: its result is journaled, and a replay
        returns the journaled result instead of calling ``fn`` again. The call id is
        assigned now (at dispatch), so ``gather`` order never depends on completion order.
        A ``fn`` with an ``idempotency_key`` parameter receives a key that is the same on
        every retry of this step (a retry happens when a process died after dispatching the
        step and before its result was journaled). Arguments and results are JSON.

        ``effect`` (``"pure"``, ``"idempotent"``, ``"effectful"``) is journaled in the
        dispatch's ask with whether ``fn`` takes a key; ``retry`` retries failed attempts
        with backoff, each failure journaled; past ``timeout`` seconds an attempt ends as
        :class:`StepTimeout` (agents.runtime.effects says what each outcome does)."""
        site = _site()
        ask: dict[str, Any] = {"name": name,
                               "args": format_address(args_hash(list(args), kwargs))}
        keyed = _takes_key(fn)
        if effect is not None:
            ask.update(effect=effect, keyed=keyed)
        if not self.replaying:
            check_effect(effect, name, keyed)
        extra: dict[str, Any] = {}
        if retry is not None:
            extra["retry"] = retry.json()
        if timeout is not None:
            extra["timeout"] = timeout
        entry = self._command(DISPATCH, ask, lambda: dict(extra), site)
        done = self._resolved.get(entry.call)
        if done is not None:  # replayed: no task, no turn of the event loop
            return self._replay(done)
        return self._track(asyncio.ensure_future(self._run_step(entry, fn, args, kwargs,
                                                                effect, retry, timeout)))

    def _replay(self, done: Entry) -> asyncio.Future[Any]:
        """A finished future holding a journaled step's result (or its failure, by its
        outcome: StepFailed, StepTimeout, OutcomeUnknown)."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        data = done.data()
        if data.get("error") is not None:
            future.set_exception(failure(data["error"], data.get("outcome")))
            self._tasks.append(future)  # settle() retrieves it if the workflow does not
        else:
            future.set_result(self._value(done))
        return future

    async def _run_step(self, entry: Entry, fn: Callable[..., Any], args: tuple[Any, ...],
                        kwargs: dict[str, Any], effect: str | None = None,
                        retry: Policy | None = None, timeout: float | None = None) -> Any:
        done = self._resolved.get(entry.call)
        if done is None:
            done = await self._attempts(entry, fn, args, kwargs, effect, retry, timeout)
        data = done.data()
        if data.get("error") is not None:
            raise failure(data["error"], data.get("outcome"))
        return self._value(done)

    async def _attempts(self, entry: Entry, fn: Callable[..., Any], args: tuple[Any, ...],
                        kwargs: dict[str, Any], effect: str | None, retry: Policy | None,
                        timeout: float | None) -> Entry:
        """Run the step's attempts until one answers or the policy gives up; each failed
        attempt journaled (``attempt``), the last one's outcome in the resolve."""
        call, name = entry.call, entry.data()["ask"].get("name")
        keyed = _takes_key(fn)
        if keyed:
            kwargs = {**kwargs, "idempotency_key": f"{self.run}/{call}"}
        policy = retry or NO_RETRY
        past = [e.data() for e in self._attempted.get(call, ())]
        n = len(past)
        unknown = sum(1 for a in past if a.get("outcome") in UNKNOWN)
        if entry.seq < self._start:
            # Dispatched by an earlier interval that ended before its result was journaled:
            # that attempt's outcome is unknown (a death during a backoff counts too).
            n, unknown = n + 1, unknown + 1
            self._note(call, {"attempt": n, "outcome": "lost"})
            if policy.on_unknown == "raise" or (retry is not None and n >= policy.max_attempts):
                return self._resolve(RESOLVE, call, {
                    "error": f"OutcomeUnknown: step {name} attempt {n} ended with an unknown"
                             " outcome (its process died in it)", "outcome": "lost",
                    "attempts": n})
        body: dict[str, Any] = {}
        while True:
            n += 1
            if unknown and effect == "effectful" and not keyed:
                body["duplicate"] = True  # run again after an unknown outcome, no key
            try:
                result = await _call(fn, args, kwargs, timeout)
            except TimeoutError:
                outcome, error = "timeout", (f"StepTimeout: step {name} ran past its timeout"
                                             f" of {timeout}s (attempt {n})")
            except Invalid as exc:
                outcome, error = "invalid", f"Invalid: {exc}"
            except Exception as exc:
                outcome, error = "error", f"{type(exc).__name__}: {exc}"
            else:
                if n > 1:
                    body["attempts"] = n
                if unknown:
                    body["unknown"] = unknown
                return self._resolve(RESOLVE, call, body, result, with_value=True,
                                     defer=self._alone())
            unknown += outcome in UNKNOWN
            if (outcome == "invalid" or n >= policy.max_attempts
                    or (outcome in UNKNOWN and policy.on_unknown == "raise")):
                body["error"] = error
                if outcome != "error":  # a plain error's body is as it always was
                    body["outcome"] = outcome
                if n > 1:
                    body["attempts"] = n
                return self._resolve(RESOLVE, call, body, defer=self._alone())
            delay = policy.delay(n)
            self._note(call, {"attempt": n, "outcome": outcome, "error": error,
                              "retry_in": delay})
            await asyncio.sleep(delay)

    def _note(self, call: str, body: dict[str, Any]) -> None:
        """Journal a failed attempt of step ``call`` (not a resolution: replay skips it)."""
        self._going_live()
        entry = self._journal.append(self.run, self._workflow, ATTEMPT, call, body)
        self._entries.append(entry)
        self._attempted.setdefault(call, []).append(entry)

    def _alone(self) -> bool:
        """Group commit: a step's result may ride the next entry's commit when no other
        step is running (nothing outside can have seen the result before that commit; a
        crash before it shows the call outstanding, as a crash before its own commit would).
        With steps in flight it is written now, so a long sibling does not hold it back."""
        return self._live <= 1

    def _track(self, task: asyncio.Future[Any]) -> asyncio.Future[Any]:
        """Count a live step's task until it is done (a counter, not a scan of every task:
        an interval of n steps stays O(n))."""
        self._live += 1
        task.add_done_callback(self._untrack)
        self._tasks.append(task)
        return task

    def _untrack(self, _task: asyncio.Future[Any]) -> None:
        self._live -= 1

    def model(self, name: str, fn: Callable[[Any], Any], projection: Projection | Projected
              ) -> asyncio.Future[Any]:
        """A model call whose input is ``projection`` of the run's history so far (step
        results and delivered signals before this call, in journal order), or a view
        ``ctx.projection`` computed: ``fn`` gets the projected value, and the journal
        records the projection's hash as the argument hash. Otherwise a step (journaled,
        run once, retried with its key)."""
        site = _site()
        if isinstance(projection, Projected):
            view = projection.view
        else:
            view = projection(self.history(self._next_seq()))
        ask = {"name": name, "projection": projection.name,
               "args": format_address(projection_hash(projection.name, view))}
        entry = self._command(DISPATCH, ask, dict, site)
        return self._track(asyncio.ensure_future(self._run_step(entry, fn, (view,), {})))

    def _next_seq(self) -> int:
        """The journal position of the next command (its entry when replaying)."""
        return (self._journaled().seq if self.replaying
                else self._journal.head(self.run, self._workflow)[0])

    async def projection(self, head: int, tail: int,
                         summarize: Callable[[Any, History], Any],
                         name: str = "summarize") -> Projected:
        """What a model sees of a long run: the first ``head`` history items (the task,
        pinned state), the last ``tail`` verbatim, and the middle compacted by
        ``summarize(previous_summary, new_items)``, a journaled step (its output replayed,
        never re-run) that runs only when the middle has grown. Pass the result to
        ``ctx.model``: the view's hash is the model call's argument hash. Summaries are not
        history items themselves."""
        if head < 0 or tail < 0:
            raise ValueError("a projection's head and tail are counts of items, not negative")
        site = _site()
        history = self.history(self._next_seq())
        cut = max(head, len(history) - tail)
        key = (name, head, tail)
        covered, summary = self._summaries.get(key, (0, None))
        if cut - head > covered:
            new = history[head + covered:cut]
            ask = {"name": name, "args": format_address(args_hash([summary, new], {})),
                   "summary": True}
            entry = self._command(DISPATCH, ask, dict, site)
            summary = await self._run_step(entry, summarize, (summary, new), {})
            self._summaries[key] = (cut - head, summary)
        return Projected(f"summary/{head}/{tail}/{name}",
                         summarized_view(history, head, tail, summary))

    def history(self, before: int) -> list[dict[str, Any]]:
        """Every step result and delivered signal journaled in this epoch (after the last
        ``continue``; all of the run without one) before entry ``before``."""
        entries = [e for e in self._entries if self.epoch <= e.seq < before]
        asks = {e.call: e.data()["ask"] for e in entries if e.kind == DISPATCH}
        names = {call: ask.get("name") for call, ask in asks.items()}
        out = []
        for e in entries:
            if e.kind == RESOLVE and asks.get(e.call, {}).get("summary") is True:
                continue  # ctx.projection's own summaries are not history
            if e.kind == RESOLVE and "value" in e.data():
                out.append({"call": e.call, "step": names.get(e.call), "value": self._value(e)})
            elif e.kind == SIGNAL:
                out.append({"call": e.call, "signal": e.data()["name"],
                            "value": self._value(e)})
        return out

    def gather(self, *steps: Awaitable[Any]) -> asyncio.Future[list[Any]]:
        """Await several steps at once; results come back in the order given."""
        return asyncio.gather(*steps)

    def now(self) -> float:
        """Wall-clock seconds, journaled: a replay sees the time the first run saw."""
        entry = self._command(NOW, {}, lambda: {"now": self._clock()}, _site())
        return float(entry.data()["now"])

    def random(self) -> float:
        """A float in [0, 1), journaled."""
        entry = self._command(RANDOM, {}, lambda: {"random": _random()}, _site())
        return float(entry.data()["random"])

    def patched(self, name: str) -> bool:
        """Version marker: True for runs that reached this point under code carrying the
        patch ``name`` (new runs and new code paths), False when replaying a journal written
        before the patch existed. Branch on it to change code under running workflows."""
        if self.replaying:
            entry = self._journaled()
            if entry.kind != PATCH or entry.data().get("ask") != {"patch": name}:
                return False
        self._command(PATCH, {"patch": name}, dict, _site())
        return True

    async def sleep(self, seconds: float) -> None:
        """Sleep durably: short sleeps (up to ``inline_wait_s``) inside the interval, longer
        ones by parking the run until a worker sees the timer due."""
        entry = self._command(TIMER, {"seconds": seconds},
                              lambda: {"due": self._clock() + seconds}, _site())
        if entry.call in self._resolved:
            return
        remaining = float(entry.data()["due"]) - self._clock()
        if remaining > self._inline:
            raise Park({"timer": entry.call, "due": float(entry.data()["due"])})
        await asyncio.sleep(max(0.0, remaining))
        self._resolve(FIRED, entry.call, {})

    async def signal(self, name: str, timeout: float | None = None) -> Any:
        """The data of the next signal ``name`` sent to this run (sent before or after this
        wait); parks the run until one arrives. With ``timeout`` (seconds), raises
        SignalTimeout once the deadline passes without one."""
        entry = self._command(
            WAIT, {"signal": name, "timeout": timeout},
            lambda: {"deadline": None if timeout is None else self._clock() + timeout},
            _site())
        return self._await_signal(entry, name)

    def _await_signal(self, entry: Entry, name: str) -> Any:
        done = self._resolved.get(entry.call)
        if done is None:
            done = self._deliver(entry.call, name)
        if done is None:
            deadline = entry.data().get("deadline")
            if deadline is not None and self._clock() >= deadline:
                done = self._resolve(TIMEOUT, entry.call, {})
            else:
                raise Park({"signal": name, "wait": entry.call, "deadline": deadline})
        if done.kind == TIMEOUT:
            raise SignalTimeout(f"no signal {name!r} before the deadline of {entry.call}")
        return self._value(done)

    def _deliver(self, call: str, name: str) -> Entry | None:
        queue = self._inbox.pending.get(name, [])
        while queue:
            signal_id, data = queue.pop(0)
            if signal_id in self._delivered:
                continue  # one signal id is delivered once
            self._delivered.add(signal_id)
            return self._resolve(SIGNAL, call, {"name": name, "id": signal_id}, data,
                                 with_value=True)
        return None

    async def handoff(self, name: str, *args: Any) -> Any:
        """Hand a long call to the outside world and park until its result lands (a signal
        named ``result:CALL`` where CALL is this call's id): the interval that dispatched it
        is not the one that resolves it, so the run stays NonBlocking."""
        site = _site()
        ask = {"name": name, "args": format_address(args_hash(list(args), {})),
               "handoff": True}
        entry = self._command(DISPATCH, ask, lambda: {"request": list(args)}, site)
        done = self._resolved.get(entry.call)
        if done is None:
            queue = self._inbox.pending.get(f"result:{entry.call}", [])
            if queue:
                _id, data = queue.pop(0)
                done = self._resolve(RESOLVE, entry.call, {"id": _id}, data,
                                     with_value=True)
            else:
                raise Park({"result": entry.call, "name": name})
        return self._value(done)

    async def continue_as_new(self, value: Any) -> NoReturn:
        """End this epoch: the workflow function is entered again with ``value`` (JSON) as
        its input, in the same run and journal. Steps still running finish first. A resume
        replays from the last ``continue`` instead of from the start (with a replay
        checkpoint), so a long-lived workflow that carries its state in ``value`` resumes
        in time that does not grow with its journal. ``ctx.history`` starts afresh."""
        site = _site()
        await self.settle()
        ask = {"args": format_address(args_hash([value], {}))}
        entry = self._command(CONTINUE, ask, lambda: {"value": value}, site)
        self.epoch, self.epoch_cursor = entry.seq, self._cursor - 1
        self._tasks, self._summaries = [], {}
        raise ContinueAsNew(self._value(entry))

    async def settle(self) -> None:
        """Let steps still running finish (their results belong to this interval)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def finish(self, value: Any, failed: str | None) -> Entry:
        got = {"error": failed} if failed is not None else {"value": value}
        return self._command(END, {}, lambda: got, "end")


def _takes_key(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` has an ``idempotency_key`` parameter (remembered per function: a
    replay asks once per replayed step, and ``inspect.signature`` is most of its cost)."""
    try:
        return _KEYED[fn]
    except (KeyError, TypeError):  # not asked yet, or not hashable
        pass
    try:
        keyed = "idempotency_key" in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin without a signature takes no key
        keyed = False
    with contextlib.suppress(TypeError):
        _KEYED[fn] = keyed
    return keyed


# Weak keys: a workflow's lambdas and closures are not kept alive by being asked about.
_KEYED: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


async def _call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                timeout: float | None) -> Any:
    """One attempt of a step; TimeoutError past ``timeout``. A plain function with a
    timeout runs in a daemon thread that is abandoned, not stopped, when the timeout
    passes (Python cannot stop a thread): its effect may still happen (outcome unknown)."""
    if timeout is None or inspect.iscoroutinefunction(fn):
        result = fn(*args, **kwargs)
    else:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()

        def work() -> None:
            out: Any = None
            err: BaseException | None = None
            try:
                out = fn(*args, **kwargs)
            except BaseException as exc:  # handed to the waiting step, whatever it is
                err = exc
            with contextlib.suppress(RuntimeError):  # the loop ended: nobody waits any more
                loop.call_soon_threadsafe(_settle, done, out, err)
        threading.Thread(target=work, daemon=True, name="fleet-step").start()
        result = done
    if inspect.isawaitable(result):
        result = await (result if timeout is None else asyncio.wait_for(result, timeout))
    return result


def _settle(done: asyncio.Future[Any], value: Any, exc: BaseException | None) -> None:
    if done.done():  # the step timed out: nobody waits for it any more
        return
    if exc is not None:
        done.set_exception(exc)
    else:
        done.set_result(value)


def _random() -> float:
    return (struct.unpack(">Q", os.urandom(8))[0] >> 11) / float(1 << 53)


__all__ = ["Context", "ContinueAsNew", "Inbox", "Invalid", "Park", "Policy", "StepFailed"]
