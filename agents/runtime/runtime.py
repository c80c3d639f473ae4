"""Running workflows durably on one host, and recording each live interval on its record.

    rt = Runtime(Path("/var/lib/fleet/host"), host=Host("build-7", ...))
    run = rt.start(triage, "ticket-42", {"ticket": 42})
    outcome = await rt.advance(run)      # runs until the workflow ends or waits

One call of :meth:`Runtime.advance` is one live interval: the workflow is replayed from its
journal (journaled steps are not run again) and continues live until it returns or waits.
With a host, the interval is sealed as one executed segment whose journal root commits to
the interval's entries and whose call account lists the calls it dispatched and resolved;
a wait then parks the run as a transcript park whose address is the journal's head, and
a later ``advance`` resumes it with the park's idle energy (docs/spec/runtime.md).
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.energy import IntervalMeter, Reading, transcript_park_idle
from agents.host import Host, HostRun
from agents.runtime.context import Context, Inbox, Park
from agents.runtime.journal import Entry, Journal, verify_chain
from fleet.address import format_address
from fleet.kernel import genesis
from fleet.runtime_errors import (
    JournalTampered,
    NotTranscriptPark,
    ReplayDiverged,
    RunFinished,
    ValueShredded,
    WorkflowUnknown,
)
from fleet.runtime_journal import interval_account, interval_root, run_ids, runtime_manifest
from fleet.segment import CallAccount, TranscriptSnapshot, make_snapshot
from fleet.wait_proof import verdict_json

Workflow = Callable[..., Coroutine[Any, Any, Any]]


def workflow_name(fn: Workflow) -> str:
    return f"{fn.__module__}:{fn.__qualname__}"


def load_workflow(name: str) -> Workflow:
    module, _, qual = name.partition(":")
    try:
        obj: Any = importlib.import_module(module)
        for part in qual.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise WorkflowUnknown(f"cannot load workflow {name}: {exc}") from None
    return obj  # type: ignore[no-any-return]


def run_address(name: str, workflow: str) -> str:
    return format_address(genesis(*run_ids(name, workflow)))


def park_transcript(hr: HostRun) -> TranscriptSnapshot:
    """The transcript park ``hr`` is parked at (decoded by the kernel: RunState.parked);
    NotTranscriptPark if it is not parked at one."""
    parked = hr.state.parked
    if not isinstance(parked, TranscriptSnapshot):
        raise NotTranscriptPark(f"run {hr.run} is not parked at a transcript park"
                                f" ({type(parked).__name__})")
    return parked


@dataclass
class Outcome:
    """Where one interval left the run."""

    run: str
    status: str  # "done" | "failed" | "waiting" | "cancelled"
    result: Any = None
    error: str | None = None
    wait: dict[str, Any] | None = None
    entries: int = 0
    interval: tuple[int, int] = (0, 0)
    calls: CallAccount = field(default_factory=CallAccount)
    segments: int = 0
    verdict: dict[str, object] | None = None
    blocked: list[str] = field(default_factory=list)

    def json(self) -> dict[str, Any]:
        return {"run": self.run, "status": self.status, "result": self.result,
                "error": self.error, "wait": self.wait, "entries": self.entries,
                "interval": list(self.interval), "dispatched": list(self.calls.dispatched),
                "resolved": list(self.calls.resolved), "segments": self.segments,
                "verdict": self.verdict, "blocked": self.blocked}


class Runtime:
    """Workflows on one host folder: the journal in ``runtime.db``, the record via ``host``."""

    def __init__(self, data_dir: Path | str, *, host: Host | None = None,
                 inline_wait_s: float = 1.0, clock: Callable[[], float] = time.time,
                 workflows: dict[str, Workflow] | None = None) -> None:
        self.journal = Journal(data_dir)
        # Code to run for a workflow name instead of importing it (a new version of the
        # code under running workflows, or workflows defined where they cannot be imported).
        self.workflows = dict(workflows or {})
        self.host = host
        self.inline_wait_s = inline_wait_s
        self.clock = clock
        self.inboxes: dict[str, Inbox] = {}
        self.held: dict[str, HostRun] = {}

    def close(self) -> None:
        self.journal.close()

    def start(self, fn: Workflow | str, name: str, input: Any = None) -> str:
        """Create the run ``name`` of workflow ``fn`` (idempotent: the same name and
        workflow is the same run); returns its run address."""
        wf = fn if isinstance(fn, str) else workflow_name(fn)
        run = run_address(name, wf)
        self.journal.create_run(run, name, wf, {"open": False})
        # Two commits: a crash between them leaves a run with no start entry, written here.
        if self.journal.head(run, wf)[0] == 0:
            sealed = Journal.seal_value(input)
            self.journal.append(run, wf, "start", "", {"workflow": wf,
                                                       "input": sealed[0].address}, (sealed,))
        return run

    def inbox(self, run: str) -> Inbox:
        return self.inboxes.setdefault(run, Inbox())

    def send(self, run: str, name: str, data: Any, signal_id: str) -> None:
        """Queue a signal for ``run`` in this process (the worker feeds JetStream's here)."""
        self.inbox(run).pending.setdefault(name, []).append((signal_id, data))

    async def advance(self, run: str) -> Outcome:
        """One live interval of ``run``: replay, continue, seal, park or close."""
        row = self.journal.run_row(run)
        if row is None:
            raise KeyError(f"no run {run} in {self.journal.dir}")
        name, wf, status, meta = row
        entries = self.journal.entries(run)
        verify_chain(run, wf, entries)
        if status == "cancelled":
            return Outcome(run, "cancelled", error=meta.get("reason"), entries=len(entries))
        if status in ("done", "failed"):
            end = entries[-1].data()
            return Outcome(run, status, self._end_value(end), end.get("error"),
                           entries=len(entries))
        fn = self.workflows.get(wf) or load_workflow(wf)
        # Every entry belongs to one interval: a new run's first interval holds its start.
        first = len(entries) if "next" in meta else 0
        hr, first = self._begin(run, name, wf, meta, first, entries)
        meter = IntervalMeter().start()
        resume = self._resume_step(hr, wf, meta, entries)
        ctx = Context(self.journal, run, name, wf, entries, self.inbox(run),
                      inline_wait_s=self.inline_wait_s, clock=self.clock,
                      before_append=resume)
        input_value = self.journal.value(entries[0].data()["input"])
        wait: dict[str, Any] | None = None
        result: Any = None
        error: str | None = None
        # A divergence raises out of here: nothing more is journaled or sealed (an interval
        # that had journaled entries before is sealed as "lost" by the next advance).
        try:
            result = await fn(ctx, input_value)
        except (ReplayDiverged, ValueShredded, JournalTampered, WorkflowUnknown):
            raise
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
        except Park as park:
            wait = park.wait
        await ctx.settle()
        if wait is None:
            ctx.finish(result, error)
        if resume is not None:
            ctx._going_live()  # an interval with nothing new still resumed the run
        after = self.journal.entries(run)
        end, head = len(after), (after[-1].hash if after else b"")
        calls = account(after, first, end)
        status = "waiting" if wait is not None else ("failed" if error else "done")
        outcome = Outcome(run, status, result, error, wait, end, (first, end), calls)
        if hr is not None:
            self._seal(hr, first, end, head, calls, meter.stop(),
                       "ok" if error is None else "failed")
            if wait is not None:
                hr.suspend(make_snapshot(transcript=head), runtime_manifest(wf))
            else:
                hr.close()
            outcome.segments = hr.state.index
            outcome.verdict = verdict_json(hr.state.wait.verdict())
        self.journal.set_run(run, "parked" if wait is not None else status,
                             {"open": False, "next": end, "wait": wait, "parked_at": self.clock(),
                              "head": format_address(head) if head else None})
        outcome.blocked = blocked(calls)
        return outcome

    # -- the record -------------------------------------------------------------------------

    def _begin(self, run: str, name: str, wf: str, meta: dict[str, Any], first: int,
               entries: list[Entry]) -> tuple[HostRun | None, int]:
        if self.host is None:
            self.journal.set_run(run, "running", {**meta, "open": True, "first": first})
            return None, first
        hr = self.held.get(run) or self.host.open_run(*run_ids(name, wf))
        self.held[run] = hr
        if (meta.get("open") and hr.state.index == meta.get("seg")
                and hr.state.phase != "parked" and len(entries) > meta["first"]):
            # The last process died inside an interval: seal what it journaled, honestly
            # (its account shows any call it dispatched and never resolved). One that
            # journaled nothing (it diverged, or died replaying) leaves nothing to seal.
            head = entries[-1].hash
            self._seal(hr, meta["first"], len(entries), head,
                       account(entries, meta["first"], len(entries)),
                       Reading(1, "estimated", "estimate:lost-interval"), "lost")
            first = len(entries)
        self.journal.set_run(run, "running", {**meta, "open": True, "first": first,
                                              "seg": hr.state.index})
        return hr, first

    def _resume_step(self, hr: HostRun | None, wf: str, meta: dict[str, Any],
                     entries: list[Any]) -> Callable[[], None] | None:
        """The resume of a parked run, to seal when the interval first goes live."""
        if hr is None or hr.state.phase != "parked":
            return None

        def resume() -> None:
            idle = self._park_idle(meta, entries)
            hr.resume(park_transcript(hr), runtime_manifest(wf), idle_uj=idle.uj,
                      provenance=idle.provenance, meter=idle.meter)
            self.journal.set_run(hr.run, "running", {**meta, "open": True, "first":
                                                     len(entries), "seg": hr.state.index})
        return resume

    def _park_idle(self, meta: dict[str, Any], entries: list[Entry]) -> Reading:
        """What the transcript park drew until now: the journal's stored bytes over the
        time since it parked."""
        return transcript_idle([e.body for e in entries], meta.get("parked_at"), self.clock())

    def cancel(self, run: str, reason: str | None = None) -> Outcome:
        """Close ``run`` for good (``fleet runtime cancel``), whatever it waits on: a parked
        run's close carries the idle energy its park drew until now (run-record.md §4); a
        run whose last interval died is first sealed as ``lost``, then closed. Nothing of
        the workflow runs and nothing is journaled; the run is marked ``cancelled``."""
        row = self.journal.run_row(run)
        if row is None or self.host is None:
            raise KeyError(f"no run {run} held by a host in {self.journal.dir}")
        name, wf, status, meta = row
        if status in ("done", "failed", "cancelled"):
            raise RunFinished(f"run {run} is {status} already")
        entries = self.journal.entries(run)
        verify_chain(run, wf, entries)
        hr, _first = self._begin(run, name, wf, meta, len(entries), entries)
        if hr is None:  # pragma: no cover - a host is required above
            raise KeyError(run)
        if hr.state.phase == "parked":
            idle = self._park_idle(meta, entries)
            hr.close(idle_uj=idle.uj, provenance=idle.provenance, meter=idle.meter)
        else:
            hr.close()
        self.journal.set_run(run, "cancelled", {**meta, "open": False, "reason": reason,
                                                "cancelled_at": self.clock()})
        return Outcome(run, "cancelled", error=reason, entries=len(entries),
                       segments=hr.state.index,
                       verdict=verdict_json(hr.state.wait.verdict()))

    def _seal(self, hr: HostRun, first: int, end: int, head: bytes, calls: CallAccount,
              energy: Reading, outcome: str) -> None:
        hr.execute(uj=max(1, energy.uj), provenance=energy.provenance, meter=energy.meter,
                   journal_root=interval_root(first, end, head), outcome=outcome, calls=calls)

    def _end_value(self, end: dict[str, Any]) -> Any:
        address = end.get("value")
        return None if address is None else self.journal.value(address)


def transcript_idle(bodies: list[str], parked_at: float | None, now: float) -> Reading:
    """A transcript park's idle draw from ``parked_at`` to ``now``: the journal's stored
    bytes (each entry's body and its hash and framing)."""
    size = sum(len(b) + 64 for b in bodies)
    return transcript_park_idle(size, max(0.0, now - float(parked_at or now)))


def account(entries: list[Entry], first: int, end: int) -> CallAccount:
    """The call account of the interval holding ``entries[first:end]``
    (:func:`fleet.runtime_journal.interval_account`: a step re-run after a lost interval
    counts as dispatched here too)."""
    return CallAccount(*interval_account([(e.kind, e.call, e.body) for e in entries[:end]],
                                         first, end))


def blocked(calls: CallAccount) -> list[str]:
    """Calls the interval dispatched and resolved itself: it waited for them inside its
    receipt, which the wait proof reports as Blocked."""
    return [c for c in calls.resolved if c in set(calls.dispatched)]


__all__ = ["Outcome", "Runtime", "Workflow", "account", "blocked", "load_workflow",
           "park_transcript", "run_address", "run_ids", "runtime_manifest", "transcript_idle",
           "workflow_name"]
