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

import fcntl
import importlib
import inspect
import os
import sys
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from fleet_ledger.agents.energy import IntervalMeter, Reading, transcript_park_idle
from fleet_ledger.agents.host import Host, HostRun
from fleet_ledger.agents.runtime.checkpoint import (
    ENTRY_OVERHEAD,
    Checkpoints,
    View,
    folder_key,
    mac_key,
)
from fleet_ledger.agents.runtime.context import Context, ContinueAsNew, Inbox, Park
from fleet_ledger.agents.runtime.journal import Entry, Journal, verify_chain
from fleet_ledger.fleet.address import format_address, parse_address
from fleet_ledger.fleet.env.manifest import Manifest
from fleet_ledger.fleet.jobs.job_id import item_unit
from fleet_ledger.fleet.record.kernel import genesis
from fleet_ledger.fleet.record.segment import CallAccount, TranscriptSnapshot, make_snapshot
from fleet_ledger.fleet.record.wait_proof import verdict_json, waited_inside
from fleet_ledger.fleet.runtime.runtime_errors import (
    CodeChanged,
    EnvironmentChanged,
    JournalTampered,
    NotTranscriptPark,
    ReplayDiverged,
    RunBusy,
    RunFinished,
    RuntimeError_,
    SignalConflict,
    ValueShredded,
    WorkflowUnknown,
)
from fleet_ledger.fleet.runtime.runtime_identity import code_version, run_manifest
from fleet_ledger.fleet.runtime.runtime_journal import (
    RESOLVE,
    SIGNAL,
    START,
    canon,
    interval_account,
    interval_root,
    run_ids,
    runtime_manifest,
)
from fleet_ledger.fleet.runtime.runtime_journal import genesis as journal_genesis
from fleet_ledger.fleet.subjects import run_token
from fleet_ledger.plumbing.transactions import immediate

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
    return obj


def run_address(name: str, workflow: str, grant: str | None = None,
                item: tuple[str, int] | None = None) -> str:
    """The run ``name`` of ``workflow``, under the grant at address ``grant`` (else the
    workflow's own grant set id: fleet.runtime.runtime_journal.run_ids); ``item``: (job
    address, index), the run is that job's item (its unit the item's,
    :func:`fleet.jobs.job_id.item_unit`)."""
    return format_address(genesis(*record_ids(name, workflow, grant, item)))


def record_ids(name: str, workflow: str, grant: str | None,
               item: tuple[str, int] | list[Any] | None = None) -> tuple[bytes, bytes]:
    unit, grants = run_ids(name, workflow)
    if item is not None:
        unit = item_unit(parse_address(item[0]), int(item[1]))
    return unit, (parse_address(grant) if grant else grants)


def module_bytes(fn: Workflow) -> bytes:
    """The bytes of the module that defines ``fn`` (its source, when it has no file)."""
    path = getattr(sys.modules.get(fn.__module__), "__file__", None)
    try:
        if path:
            return Path(path).read_bytes()
        return inspect.getsource(fn).encode()
    except (OSError, TypeError) as exc:
        raise WorkflowUnknown(f"cannot read the code of {workflow_name(fn)}: {exc}") from None


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
                 workflows: dict[str, Workflow] | None = None,
                 environment: Manifest | None = None) -> None:
        self.journal = Journal(data_dir)
        # Replay checkpoints (agents.runtime.checkpoint): MAC'd under a key derived from the
        # host's sealing key, so editing runtime.db alone cannot forge one.
        self.checkpoints = Checkpoints(self.journal.db, mac_key(bytes(host.key)) if host
                                       else folder_key(self.journal.dir))
        # The environment this process runs workflows in (a devcontainer.json's or a
        # manifest file's manifest): part of every run's manifest (fleet.runtime.runtime_identity).
        self.environment = environment
        # Code to run for a workflow name instead of importing it (a new version of the
        # code under running workflows, or workflows defined where they cannot be imported).
        self.workflows = dict(workflows or {})
        self.host = host
        self.inline_wait_s = inline_wait_s
        self.clock = clock
        self.inboxes: dict[str, Inbox] = {}
        self.held: dict[str, HostRun] = {}
        # The runs whose interval lock this process holds: an open file each, flock'd, so
        # the lock dies with the process (SIGKILL too) and a worker can tell an interval
        # still running from one whose process died (orphans).
        self._locks: dict[str, int] = {}

    def close(self) -> None:
        for run in list(self._locks):
            self.release(run)
        self.journal.close()

    def lock(self, run: str) -> bool:
        """Hold ``run``'s interval lock in this process (True), or False when another
        process holds it."""
        if run in self._locks:
            return True
        folder = self.journal.dir / "runtime-locks"
        folder.mkdir(exist_ok=True)
        fd = os.open(folder / f"{run_token(run)}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._locks[run] = fd
        return True

    def release(self, run: str) -> None:
        fd = self._locks.pop(run, None)
        if fd is not None:
            os.close(fd)  # closing the file releases its lock

    def busy(self, run: str) -> bool:
        """Whether another process on this host runs an interval of ``run`` now."""
        if run in self._locks:
            return False
        if not self.lock(run):
            return True
        self.release(run)
        return False

    def orphans(self) -> list[str]:
        """Local runs whose interval died with its process (started or running, nobody
        holding the lock), each now locked by this process: continue it with
        :meth:`advance`, or :meth:`release` it."""
        return [run for run, _n, _w, status, _m in self.journal.runs()
                if status in ("new", "running") and run not in self._locks and self.lock(run)]

    def identity(self, fn: Workflow, wf: str) -> tuple[str, bytes]:
        """The code version of ``fn`` (its declared ``code_version``, else its module's
        hash) and the manifest its runs park and resume under here."""
        version = code_version(module_bytes(fn), getattr(fn, "code_version", None))
        return version, run_manifest(wf, version, self.environment)

    def start(self, fn: Workflow | str, name: str, input: Any = None,
              grant: str | None = None, item: tuple[str, int] | None = None) -> str:
        """Create the run ``name`` of workflow ``fn`` (idempotent: the same name, workflow
        and grant is the same run), under the issued grant at address ``grant`` if given,
        as item ``item`` = (job address, index) of a job if given; returns its run
        address."""
        wf = fn if isinstance(fn, str) else workflow_name(fn)
        run = run_address(name, wf, grant, item)
        if not self.lock(run):  # held until this process's first advance ends
            raise RunBusy(f"another process on this host is running run {run}")
        self.journal.create_run(run, name, wf, {"open": False,
                                                **({"grant": grant} if grant else {}),
                                                **({"item": list(item)} if item else {})})
        # Two commits: a crash between them leaves a run with no start entry, written here.
        if self.journal.head(run, wf)[0] == 0:
            sealed = Journal.seal_value(input)
            self.journal.append(run, wf, START, "", {"workflow": wf,
                                                       "input": sealed[0].address}, (sealed,))
        return run

    def inbox(self, run: str) -> Inbox:
        return self.inboxes.setdefault(run, Inbox())

    def send(self, run: str, name: str, data: Any, signal_id: str) -> bool:
        """Queue a signal for ``run`` in this process (the worker feeds JetStream's here):
        False for an id already queued or delivered with the same name and data (a
        duplicate, delivered once), SignalConflict for one with anything else (nothing
        queued). A delivered value whose key is not here cannot be compared: a duplicate."""
        same = (name, canon(data))
        for queued, items in self.inbox(run).pending.items():
            for sid, queued_data in items:
                if sid == signal_id:
                    return self._duplicate(run, signal_id, same == (queued, canon(queued_data)))
        for entry in self.journal.with_id(run, (SIGNAL, RESOLVE), signal_id):
            body = entry.data()
            if body.get("id") == signal_id:
                got = body.get("name", name)
                try:
                    value = self.journal.value(body["value"]) if "value" in body else None
                except ValueShredded:
                    return False
                return self._duplicate(run, signal_id, same == (got, canon(value)))
        self.inbox(run).pending.setdefault(name, []).append((signal_id, data))
        return True

    @staticmethod
    def _duplicate(run: str, signal_id: str, same: bool) -> bool:
        if not same:
            raise SignalConflict(f"signal id {signal_id!r} was sent to {run} before with"
                                 " another name or other data: refused, nothing delivered")
        return False

    async def advance(self, run: str) -> Outcome:
        """One live interval of ``run``: replay, continue, seal, park or close (under the
        run's interval lock: RunBusy if another process on this host holds it)."""
        if not self.lock(run):
            raise RunBusy(f"another process on this host is running an interval of {run}")
        try:
            return await self._advance(run)
        finally:
            self.release(run)

    async def _advance(self, run: str) -> Outcome:
        row = self.journal.run_row(run)
        if row is None:
            raise KeyError(f"no run {run} in {self.journal.dir}")
        name, wf, status, meta = row
        try:  # from the last epoch a replay checkpoint names, else from genesis
            view = self.checkpoints.view(self.journal, run, wf)
        except JournalTampered as exc:
            self._refuse(run, meta, exc)
        entries = view.entries
        if status == "cancelled":
            return Outcome(run, "cancelled", error=meta.get("reason"), entries=view.end)
        if status in ("done", "failed"):
            last = entries[-1].data()
            return Outcome(run, status, self._end_value(last), last.get("error"),
                           entries=view.end)
        fn = self.workflows.get(wf) or load_workflow(wf)
        version, manifest = self.identity(fn, wf)
        # Every entry belongs to one interval: a new run's first interval holds its start.
        first = view.end if "next" in meta else 0
        if min(first, meta.get("first", first)) < view.epoch.seq:
            # An interval older than the checkpoint's epoch (not written by this code):
            # its account needs the entries before the epoch, so read from genesis.
            view = self.checkpoints.view(self.journal, run, wf, use=False)
            entries = view.entries
        hr, first = self._begin(run, name, wf, meta, first, view, version, manifest)
        meter = IntervalMeter().start()
        resume = self._resume_step(hr, manifest, meta, view)
        ctx = Context(self.journal, run, name, wf, entries, self.inbox(run),
                      inline_wait_s=self.inline_wait_s, clock=self.clock,
                      before_append=resume, cursor=view.epoch.cursor,
                      delivered=view.epoch.delivered)
        value = self.journal.value(entries[0].data()["input" if entries[0].kind == START
                                                   else "value"])
        wait: dict[str, Any] | None = None
        result: Any = None
        error: str | None = None
        # A divergence raises out of here: nothing more is journaled or sealed (an interval
        # that had journaled entries before is sealed as "lost" by the next advance).
        while True:
            try:
                result = await fn(ctx, value)
            except (ReplayDiverged, ValueShredded, JournalTampered, WorkflowUnknown):
                raise
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
            except Park as park:
                wait = park.wait
            except ContinueAsNew as again:  # a new epoch: enter the function again
                value = again.value
                continue
            break
        await ctx.settle()
        if wait is None:
            ctx.finish(result, error)
        if resume is not None:
            ctx._going_live()  # an interval with nothing new still resumed the run
        self.journal.flush(run)
        after = ctx.journal()  # what was read plus what this interval wrote: no re-read
        end, head = after[-1].seq + 1, after[-1].hash
        calls = account(after, first, end)
        status = "waiting" if wait is not None else ("failed" if error else "done")
        outcome = Outcome(run, status, result, error, wait, end, (first, end), calls)
        if hr is not None:
            self._seal(hr, first, end, head, calls, meter.stop(),
                       "ok" if error is None else "failed")
            if wait is not None:
                hr.suspend(make_snapshot(transcript=head), manifest)
            else:
                hr.close()
            outcome.segments = hr.state.index
            outcome.verdict = verdict_json(hr.state.wait.verdict())
        # The run's state and its replay checkpoint at the new end, in one commit (the next
        # resume replays from the last epoch on).
        with immediate(self.journal.db):
            self.journal.set_run(run, "parked" if wait is not None else status, {
                "open": False, "next": end, "wait": wait, "parked_at": self.clock(),
                "head": format_address(head), "code_version": version,
                "manifest": format_address(manifest),
                **({"grant": meta["grant"]} if meta.get("grant") else {})})
            self.checkpoints.take(run, end, head,
                                  view.epoch.moved(after, ctx.epoch, ctx.epoch_cursor))
        outcome.blocked = blocked(calls)
        return outcome

    # -- the record -------------------------------------------------------------------------

    def _begin(self, run: str, name: str, wf: str, meta: dict[str, Any], first: int,
               view: View, version: str | None = None,
               manifest: bytes | None = None) -> tuple[HostRun | None, int]:
        if self.host is None:
            self.journal.set_run(run, "running", {**meta, "open": True, "first": first},
                                 defer=True)
            return None, first
        hr = self.held.get(run) or self.host.open_run(*record_ids(name, wf, meta.get("grant"),
                                                                  meta.get("item")))
        self.held[run] = hr
        if hr.state.phase == "parked":
            self._check_park(hr, wf, meta, view.head)
            if manifest is not None:  # an interval will run: precondition 2 too
                self._check_identity(hr, meta, version, manifest)
        lost = False
        if (meta.get("open") and hr.state.index == meta.get("seg")
                and hr.state.phase != "parked" and view.end > meta["first"]):
            # The last process died inside an interval: seal what it journaled, honestly
            # (its account shows any call it dispatched and never resolved). One that
            # journaled nothing (it diverged, or died replaying) leaves nothing to seal.
            head = view.entries[-1].hash
            self._seal(hr, meta["first"], view.end, head,
                       account(view.entries, meta["first"], view.end),
                       Reading(1, "estimated", "estimate:lost-interval"), "lost")
            first = view.end
            lost = True
        # The mark that an interval is open needs to be durable only with its first entry
        # (a death before that leaves nothing to seal), so it rides that commit; after a
        # lost interval was sealed it is written now (it moves ``first`` past that one).
        self.journal.set_run(run, "running", {**meta, "open": True, "first": first,
                                              "seg": hr.state.index}, defer=not lost)
        return hr, first

    def _check_park(self, hr: HostRun, wf: str, meta: dict[str, Any],
                    head: bytes | None) -> None:
        """Resumption precondition 1, on every host: the journal this host would replay must
        end at the park's transcript address in the record verified from genesis (the
        host's own outbox, else the ledger's record and proof: Host.verified_state), else
        JournalTampered, the run marked refused and nothing sealed. The chain alone is no
        proof: whoever can write ``runtime.db`` can re-hash it after an edit."""
        assert self.host is not None
        if not hr.verified:
            hr.builder.state = self.host.verified_state(hr)
            hr.verified = True
        want = park_transcript(hr).transcript
        have = head if head is not None else journal_genesis(hr.run, wf)
        if have != want:
            detail = (f"the journal of {hr.run} ends at {format_address(have)}, not at its"
                      f" park's transcript address {format_address(want)} (segment"
                      f" {hr.state.index} of the verified record)")
            self._refuse(hr.run, meta, JournalTampered(detail))

    def _check_identity(self, hr: HostRun, meta: dict[str, Any], version: str | None,
                        manifest: bytes) -> None:
        """Precondition 2 before any step runs: the code and environment here must give the
        manifest the run parked under (fleet.runtime.runtime_identity), else CodeChanged (its code
        version differs) or EnvironmentChanged, the run marked refused, nothing sealed."""
        recorded = hr.state.parked_manifest
        if recorded == manifest:
            return
        was = meta.get("code_version")
        where = (f"run {hr.run} parked under manifest {format_address(recorded or b'')};"
                 f" here it is {format_address(manifest)}")
        exc: RuntimeError_
        if was is not None and was != version:
            exc = CodeChanged(f"{where}: its code version was {was}, this code is {version}"
                              " (to continue it, declare the old code_version and mark the"
                              " change with ctx.patched)")
        else:
            exc = EnvironmentChanged(f"{where}: the environment (or the code) differs")
        self._refuse(hr.run, meta, exc)

    def _refuse(self, run: str, meta: dict[str, Any], exc: RuntimeError_) -> NoReturn:
        """Mark ``run`` refused here with the reason, and raise it."""
        self.journal.set_run(run, "refused", {**meta, "refused": exc.rule, "detail": str(exc)})
        raise exc

    def _resume_step(self, hr: HostRun | None, manifest: bytes, meta: dict[str, Any],
                     view: View) -> Callable[[], None] | None:
        """The resume of a parked run, to seal when the interval first goes live."""
        if hr is None or hr.state.phase != "parked":
            return None

        def resume() -> None:
            idle = self._park_idle(meta, view.size())
            hr.resume(park_transcript(hr), manifest, idle_uj=idle.uj,
                      provenance=idle.provenance, meter=idle.meter)
            # Rides the first entry's commit too: a death before it left the run resumed
            # on its record with nothing journaled, which the next interval continues.
            self.journal.set_run(hr.run, "running", {**meta, "open": True, "first":
                                                     view.end, "seg": hr.state.index},
                                 defer=True)
        return resume

    def _park_idle(self, meta: dict[str, Any], size: int) -> Reading:
        """What the transcript park drew until now: the journal's stored bytes (``size``)
        over the time since it parked."""
        return transcript_park_idle(size, max(0.0, self.clock()
                                              - float(meta.get("parked_at") or self.clock())))

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
        view = View(entries)
        hr, _first = self._begin(run, name, wf, meta, len(entries), view)
        if hr is None:  # pragma: no cover - a host is required above
            raise KeyError(run)
        if hr.state.phase == "parked":
            idle = self._park_idle(meta, view.size())
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
    size = sum(len(b) + ENTRY_OVERHEAD for b in bodies)
    return transcript_park_idle(size, max(0.0, now - float(parked_at or now)))


def account(entries: list[Entry], first: int, end: int) -> CallAccount:
    """The call account of the interval holding the run's entries ``first .. end - 1``
    (:func:`fleet.runtime.runtime_journal.interval_account`: a step re-run after a lost
    interval counts as dispatched here too), given ``entries`` from some seq at or before
    ``first`` (an epoch's: no call dispatched before an epoch is resolved after it)."""
    base = entries[0].seq if entries else 0
    return CallAccount(*interval_account([(e.kind, e.call, e.body)
                                          for e in entries[:end - base]],
                                         first - base, end - base))


def blocked(calls: CallAccount) -> list[str]:
    """Calls the interval dispatched and resolved itself: it waited for them inside its
    receipt, which the wait proof reports as Blocked (the rule: wait_proof.waited_inside)."""
    return waited_inside(calls)


__all__ = ["Outcome", "Runtime", "Workflow", "account", "blocked", "load_workflow",
           "module_bytes", "park_transcript", "record_ids", "run_address", "run_ids",
           "runtime_manifest", "transcript_idle", "workflow_name"]
