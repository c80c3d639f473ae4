"""A host process that continues runs whose wait has ended (``fleet runtime worker``).

One pass: read every run in ``RUNTIME_RUNS``; for each parked run whose wait is over (a
signal it waits for arrived, its timer or deadline is due, a handed-off call's result
landed), claim it (compare-and-set: one worker wins), and continue it:

1. a run parked on this host with the journal here is resumed in place; any other is
   adopted first (its record fetched and verified from genesis, its head against a proof
   under the ledger's key) and its journal fetched from ``RUNTIME_JOURNALS`` and checked
   to chain to the transcript address in the verified park (else JournalTampered: the run
   is marked ``refused`` and nothing is sealed);
2. the run's stored signals are handed to the runtime, which delivers each id once;
3. one interval runs (resumed segment with the park's idle energy, executed segment, then
   a park or a close), the outbox is drained to JetStream, and the run's new state (and, if
   it parked again, its journal) is published.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from nats.errors import BadSubscriptionError, ConnectionClosedError

from fleet_ledger.agents.adoption import ResumeRefused
from fleet_ledger.agents.host import Host, HostRun
from fleet_ledger.agents.runtime.fleet_store import (
    CLAIM_LEASE_S,
    FleetStore,
    claim_stale,
    wait_over,
)
from fleet_ledger.agents.runtime.runtime import Outcome, Runtime, park_transcript
from fleet_ledger.fleet.address import format_address
from fleet_ledger.fleet.errors import FleetError
from fleet_ledger.fleet.runtime.runtime_errors import (
    CodeChanged,
    EnvironmentChanged,
    JournalTampered,
    NotTranscriptPark,
    ReplayDiverged,
    SignalConflict,
    ValueShredded,
    WorkflowUnknown,
)
from fleet_ledger.fleet.runtime.runtime_journal import RESOLVE, SIGNAL

PERMANENT = (JournalTampered, ValueShredded, ReplayDiverged, WorkflowUnknown,
             NotTranscriptPark, CodeChanged, EnvironmentChanged)
Adopt = Callable[[str], Awaitable[HostRun]]
Drain = Callable[[], Awaitable[None]]


@dataclass
class _Claim:
    """This worker's claim of one run: the claimed document and its current revision,
    shared by the renewals and the refusal path."""

    doc: dict[str, Any]
    revision: int


class Worker:
    """Continues runs for one host: ``runtime`` (with its ``host``) over ``store``."""

    def __init__(self, runtime: Runtime, store: FleetStore, adopt: Adopt, drain: Drain,
                 clock: Callable[[], float] = time.time) -> None:
        assert runtime.host is not None
        self.runtime = runtime
        self.host: Host = runtime.host
        self.store = store
        self.adopt = adopt
        self.drain = drain
        self.clock = clock

    async def publish(self, outcome: Outcome) -> dict[str, Any]:
        """Drain the outbox, then publish where the run stands (and a parked journal)."""
        await self.drain()
        run = outcome.run
        row = self.runtime.journal.run_row(run)
        assert row is not None  # the run was just advanced here
        name, workflow, _status, meta = row
        entries = self.runtime.journal.entries(run)
        head = meta.get("head")
        journal, keys = self.runtime.journal.export(run)
        if outcome.status == "waiting" and head is not None:
            await self.store.put_journal(head, journal)
        await self._give_up_keys(run, keys)
        doc = {"run": run, "name": name, "workflow": workflow,
               "status": "parked" if outcome.status == "waiting" else outcome.status,
               "wait": outcome.wait, "head": head, "host": self.host.name,
               "parked_at": meta.get("parked_at"), "segments": outcome.segments,
               "verdict": outcome.verdict, "blocked": outcome.blocked,
               "delivered": sorted({i for e in entries if e.kind in (SIGNAL, RESOLVE)
                                    if (i := e.data().get("id")) is not None}),
               "error": outcome.error, "code_version": meta.get("code_version"),
               "manifest": meta.get("manifest"),
               "grant": format_address(self.runtime.held[run].state.grants_id)
               if run in self.runtime.held else meta.get("grant")}
        await self.store.put(doc)
        return doc

    def running_doc(self, run: str) -> dict[str, Any]:
        """Where a local run stands while an interval of it runs here."""
        row = self.runtime.journal.run_row(run)
        assert row is not None  # an interval of it runs here
        name, workflow, _status, meta = row
        return running_doc(run, name, workflow, self.host.name, meta.get("head"))

    async def continue_orphans(self) -> list[dict[str, Any]]:
        """Continue every local run whose interval died with its process (a ``start``
        killed in its first interval, a worker killed in one): its lost interval is sealed
        and its calls retried under the same idempotency keys (Runtime.advance)."""
        reports = []
        for run in self.runtime.orphans():
            try:
                claimed = await self.store.claim_run(self.running_doc(run), self.host.name)
                if claimed is None:
                    reports.append({"run": run, "lost": "claimed by another worker"})
                    continue
                signals = [s for s in await self.store.signals(run)
                           if await self.store.sent_as(run, s)]
                reports.append(await self._continue(claimed[0], *claimed, signals, here=True))
            finally:
                self.runtime.release(run)
        return reports

    async def pass_once(self, only: set[str] | None = None) -> list[dict[str, Any]]:
        """Continue every local orphan, then every run whose wait is over and that this
        worker wins; one report each (``{"run", "status", ...}`` or ``{"run", "refused":
        rule}``). With ``only`` (run tokens), just those runs: a pass woken by their
        signals."""
        if only is None:
            reports, docs = await self.continue_orphans(), await self.store.runs()
        else:
            reports = []
            docs = [got for token in sorted(only) if (got := await self.store.get(token))]
        for doc, revision in docs:
            now = self.clock()
            if doc.get("status") != "parked" and not claim_stale(doc, now):
                continue
            signals = [s for s in await self.store.signals(doc["run"])
                       if await self.store.sent_as(doc["run"], s)]
            if not wait_over(doc, signals, now):
                continue
            claimed = await self.store.claim(doc, revision, self.host.name)
            if claimed is None:
                reports.append({"run": doc["run"], "lost": "claimed by another worker"})
                continue
            reports.append(await self._continue(doc, *claimed, signals))
        return reports

    async def _continue(self, doc: dict[str, Any], claimed: dict[str, Any], revision: int,
                        signals: list[dict[str, Any]], here: bool = False) -> dict[str, Any]:
        run = doc["run"]
        rt = self.runtime
        claim = _Claim(claimed, revision)  # the renewals move it; a refusal writes over it
        try:
            local = rt.journal.run_row(run)
            here = here or (local is not None and doc.get("host") == self.host.name
                            and local[3].get("head") == doc.get("head"))
            if not here:
                hr = await self.adopt(run)
                transcript = park_transcript(hr).transcript
                export = await self.store.journal(format_address(transcript))
                if export is None:
                    raise JournalTampered(f"no journal stored for the park of {run} at"
                                          f" {format_address(transcript)}")
                keys = await self.store.blob_keys(sorted(export["blobs"]))
                rt.journal.import_run(export, transcript, {
                    "open": False, "next": len(export["entries"]),
                    "parked_at": doc.get("parked_at"), "head": format_address(transcript),
                    "wait": doc.get("wait"), "code_version": doc.get("code_version"),
                    "grant": format_address(hr.state.grants_id)}, keys)
                rt.held[run] = hr
            else:
                # The keys this host gave up after its last interval, back for this one
                # (a shredded one stays absent: a replay that needs it is ValueShredded).
                rt.journal.put_keys(await self.store.blob_keys(rt.journal.missing_keys(run)))
            for s in signals:
                with contextlib.suppress(SignalConflict):  # never delivered
                    rt.send(run, s["name"], s["data"], s["id"])
            renew = asyncio.create_task(self._renew(claim))
            try:
                outcome = await rt.advance(run)
            finally:
                renew.cancel()
        except (ResumeRefused, FleetError) as exc:
            rule = exc.rule
            # A record not folded yet (or taken meanwhile): give the wait back for a later
            # pass. A journal that does not match its park, a value shredded, code that
            # no longer replays: the run stays out until someone acts (nothing was sealed).
            status = "refused" if isinstance(exc, PERMANENT) else "parked"
            # Only over this worker's own claim: if the lease ran out and another worker
            # moved the run on meanwhile, its state stands.
            await self.store.update({**claim.doc, "status": status, "refused": rule,
                                     "detail": str(exc)}, claim.revision)
            await self._give_up_keys(run)
            return {"run": run, "refused": rule, "detail": str(exc)}
        published = await self.publish(outcome)
        delivered = set(published["delivered"])
        await self.store.forget_signals([s["seq"] for s in signals if s["id"] in delivered])
        return {"run": run, "status": published["status"], "host": self.host.name,
                "segments": outcome.segments, "verdict": outcome.verdict,
                "result": outcome.result}

    async def _give_up_keys(self, run: str, keys: dict[str, list[str]] | None = None
                            ) -> None:
        """The interval is over: its values' keys (``keys``, else read here) go to the
        bucket (where none is yet) and leave this host, so the bucket is the one place they
        live and a shred there reaches every host."""
        if self.runtime.journal.run_row(run) is not None:
            await self.store.put_keys(self.runtime.journal.export(run)[1] if keys is None
                                      else keys)
            self.runtime.journal.forget_keys(run)

    async def _renew(self, claim: _Claim) -> None:
        """Keep the claim fresh while the interval runs (a third of the lease each time),
        so a long interval is not taken for a dead worker's; ``claim`` follows each
        renewal (a refusal afterwards writes over the renewed revision)."""
        while True:
            await asyncio.sleep(CLAIM_LEASE_S / 3)
            renewed = await self.store.update({**claim.doc, "claimed_at": self.clock()},
                                              claim.revision)
            if renewed is None:
                return  # someone else moved the run on: the record's holder rule decides
            claim.doc, claim.revision = renewed

    async def run_forever(self, stop: asyncio.Event, report: Callable[[dict[str, Any]], None],
                          poll: float = 1.0, push: bool = True) -> None:
        """Passes until ``stop`` is set: a pass over the runs a signal was stored for as
        soon as it is (pushed by the signals stream; not without ``push``), and a full
        pass (orphans, timers, deadlines, anything missed) every ``poll`` seconds."""
        woken: set[str] = set()
        bell = asyncio.Event()

        def ring(token: str) -> None:
            woken.add(token)
            bell.set()

        sub = await self.store.watch_signals(ring) if push else None
        try:
            full_at = 0.0
            while not stop.is_set():
                now = time.monotonic()
                only = None if now - full_at >= poll else set(woken)
                woken.clear()
                bell.clear()
                if only is None:
                    full_at = now
                for done in await self.pass_once(only):
                    report(done)
                if not woken:
                    await _first(stop, bell, max(0.0, full_at + poll - time.monotonic()))
        finally:
            if sub is not None:
                with contextlib.suppress(ConnectionClosedError, BadSubscriptionError):
                    await sub.unsubscribe()  # a closed connection has nothing to stop


async def _first(stop: asyncio.Event, bell: asyncio.Event, timeout: float) -> None:
    """Wait until ``stop`` or ``bell`` is set, or ``timeout`` seconds pass."""
    waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(bell.wait())]
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


def running_doc(run: str, name: str, workflow: str, host: str, head: str | None = None
                ) -> dict[str, Any]:
    """The runs bucket's document of a run while an interval of it runs on ``host``."""
    return {"run": run, "name": name, "workflow": workflow, "status": "running",
            "wait": None, "head": head, "host": host, "parked_at": None, "segments": None,
            "verdict": None, "blocked": [], "delivered": [], "error": None}


def describe_local(status: str, meta: dict[str, Any], busy: bool) -> str:
    """What is true of a run this host holds, for a ``start`` of it."""
    if status in ("done", "failed"):
        return f"it has ended here ({status})"
    if status == "parked":
        return (f"it is parked here waiting on {meta.get('wait')}: a worker continues it"
                " when the wait is over")
    if status == "refused":
        return f"it was refused here ({meta.get('refused')}: {meta.get('detail')})"
    if busy:
        return "another process on this host is running an interval of it now"
    return ("its interval died with its process: `fleet runtime worker` on this host"
            " continues it")


__all__ = ["Worker", "describe_local", "running_doc"]
