"""The fleet-wide view of the record's honesty claims (``fleet audit``), over plain rows.

The shell reads the ledger store's rows; :func:`audit_run` makes one :class:`AuditRun` of
each run's (its wait-proof verdict and energy split from its state, its parks and warm
slots decoded from its folded segments, when each was folded) and :func:`audit` answers:

- **verdicts**: runs by wait-proof verdict, and for ``Blocked`` and ``Malformed`` the run
  and the segment that decided it;
- **hosts**: per host, energy of executed intervals (active), of parks (idle), of the warm
  slots its runs were claimed from (claim) and of the slots its pools evicted (overhead),
  each split measured / estimated;
- **parks**: per form (``image``, ``image+memory``, ``transcript``), how many, their idle
  energy, the hours parked and the idle energy per hour parked. Hours come from when the
  ledger folded the suspend and the resume; a park whose two segments were folded in one
  batch has no measurable duration and is counted, but not in the per-hour figure;
- **parked**: runs parked now, since when and for how long;
- **closed without idle**: parks ended by a close that carried no idle energy (the park's
  draw is missing from the record; a close ending a park should carry it: run-record.md
  §4), also a reason a host is suspicious;
- **reused slots**: warm slots whose energy the record counts more than once (claimed by
  two runs, or claimed and also evicted as overhead): the ledger folds runs one by one and
  cannot refuse that, so the audit names each such slot and the runs that count it;
- **suspicious**: hosts whose parks of one form cost less than ``cheap_factor`` of the
  idle energy per hour the *other* hosts' parks of that form cost, and hosts whose parks
  (or executed intervals) are all estimated, never measured;
- **effects**: runtime steps declared effectful that take no idempotency key, and those of
  them run again after an unknown outcome (possible duplicate effects), read off the call
  account ids' marks (docs/spec/runtime.md);
- **grant refusals**: the ledger's refusals by a grant rule (:mod:`fleet.grants.grant_errors`):
  segments a run's grant did not allow, and grant events not taken, by rule.

``since`` (Unix time) keeps runs active since then, parks that ended (or are still
open) since then, and refusals made since then. Nothing here does I/O: the same rows
give the same answer.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from fleet_ledger.fleet.grants import grant_errors
from fleet_ledger.fleet.record.kernel import CLAIMED, CLOSED, EVICTED, RESUMED, SUSPENDED
from fleet_ledger.fleet.record.record import RunState
from fleet_ledger.fleet.record.wait_proof import verdict_json
from fleet_ledger.fleet.record.wire import (
    ClaimedWire,
    ClosedWire,
    EvictedWire,
    ExecutedWire,
    ResumedWire,
    SuspendedWire,
    envelope_wire,
)
from fleet_ledger.fleet.runtime.runtime_journal import account_marks

__all__ = ["FORMS", "GRANT_RULES", "SEGMENT_KINDS", "VERDICTS", "AuditPark", "AuditRun",
           "audit", "audit_run", "effect_calls", "effect_flags", "format_uj", "format_when",
           "grant_refusals", "park_form"]

VERDICTS = ("NonBlocking", "Blocked", "Malformed", "Unproved")
FORMS = ("image", "image+memory", "transcript")
_HOUR = 3600.0

# Every grant refusal's rule name (a segment's, or a grant event's; UnknownGrant is either).
GRANT_RULES: frozenset[str] = frozenset(
    name for name in grant_errors.__all__
    if name not in ("GrantError", "GrantEventError", "GrantRefusal"))


def park_form(snapshot: Any) -> str:
    """The form (one of :data:`FORMS`) of a park's snapshot reference (anything with
    ``transcript`` and ``mem_image``, None when absent, as the kernel reads them)."""
    if snapshot.transcript is not None:
        return "transcript"
    return "image+memory" if snapshot.mem_image is not None else "image"


def format_uj(value: int) -> str:
    """Microjoules, readably."""
    for unit, scale in (("kJ", 10**9), ("J", 10**6), ("mJ", 10**3)):
        if abs(value) >= scale:
            return f"{value / scale:.2f} {unit}"
    return f"{value} uJ"


def format_when(ts: float | None) -> str:
    """A Unix time as UTC ``YYYY-MM-DD HH:MM:SS`` ("-" for None)."""
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts))


@dataclass(frozen=True)
class AuditPark:
    """One park: the suspend's segment index and form; the resume's idle energy (None
    while still parked) and when each was folded (None: unknown)."""

    segment: int
    form: str
    suspended_at: float | None
    resumed_at: float | None = None
    idle_uj: int | None = None
    provenance: str | None = None
    # Ended by a close that carried no idle energy: the park's draw is missing from the
    # record (run-record.md §4); ``resumed_at`` is then when it was closed.
    closed_bare: bool = False

    def hours(self) -> float | None:
        if self.suspended_at is None or self.resumed_at is None:
            return None
        seconds = self.resumed_at - self.suspended_at
        return seconds / _HOUR if seconds > 0 else None


@dataclass(frozen=True)
class AuditRun:
    run: str
    host: str
    phase: str
    verdict: str
    verdict_segment: int | None
    receipts_uj: dict[str, int]  # executed intervals, by provenance
    idle_uj: dict[str, int]  # parks, by provenance
    first_at: float | None
    last_at: float | None
    parks: Sequence[AuditPark] = field(default_factory=tuple)
    claim_uj: dict[str, int] = field(default_factory=dict)  # warm slot claimed, by provenance
    overhead_uj: dict[str, int] = field(default_factory=dict)  # slots evicted (a pool's run)
    slots: Sequence[tuple[str, str, int]] = ()  # (slot, "claimed"|"evicted", segment)
    # (segment, call id) of the runtime's call-account ids with an effect mark
    # (fleet.runtime.runtime_journal.account_marks): effectful steps without an idempotency key.
    effects: Sequence[tuple[int, str]] = ()


# The folded segments the audit reads beside each run's state: its parks' and its warm
# slots' (executed segments, the bulk of a store, are not read).
_PARK_KINDS: Final = (SUSPENDED, RESUMED, CLOSED)
_SLOT_KINDS: Final = (CLAIMED, EVICTED)
SEGMENT_KINDS: Final = _PARK_KINDS + _SLOT_KINDS


def audit_run(run: str, host: str, phase: str, state: RunState,
              segments: Iterable[tuple[int, str, float | None, bytes]],
              first_at: float | None = None, last_at: float | None = None,
              effects: Sequence[tuple[int, str]] = ()) -> AuditRun:
    """One run as the audit sees it: its verdict and energy from its ``state``; its parks
    and warm slots from its folded ``segments`` of :data:`SEGMENT_KINDS` ((index, kind, when
    folded, message) in index order; other kinds are passed over); ``first_at`` and
    ``last_at``: when its first and last segments were folded (None: unknown); ``effects``:
    its marked call ids (:func:`effect_calls`)."""
    verdict = verdict_json(state.wait_proof())
    segments = list(segments)
    slots = []
    for idx, kind, _at, payload in segments:
        if kind not in _SLOT_KINDS:
            continue
        wire = envelope_wire(payload)
        if wire is not None and isinstance(wire.segment, ClaimedWire | EvictedWire):
            slots.append((wire.segment.slot, kind, idx))
    energy = state.energy
    segment = verdict.get("segment")  # an int where the verdict names one
    return AuditRun(run, host, phase, str(verdict["verdict"]),
                    segment if isinstance(segment, int) else None,
                    dict(energy.receipts), dict(energy.idle), first_at, last_at,
                    tuple(_parks(s for s in segments if s[1] in _PARK_KINDS)),
                    dict(energy.claim), dict(energy.overhead), tuple(slots), tuple(effects))


def effect_calls(rows: Iterable[tuple[str, int, bytes]]) -> dict[str, list[tuple[int, str]]]:
    """Per run, ``(segment, call id)`` of every executed segment's account id that carries
    an effect mark (fleet.runtime.runtime_journal: ``!unkeyed``), from ``(run, index, message)``
    rows in index order."""
    out: dict[str, list[tuple[int, str]]] = {}
    for run, idx, payload in rows:
        wire = envelope_wire(payload)
        seg = None if wire is None else wire.segment
        if isinstance(seg, ExecutedWire) and seg.calls is not None:
            out.setdefault(run, []).extend(
                (idx, c) for c in [*seg.calls.dispatched, *seg.calls.resolved]
                if any(account_marks(c)))
    return out


def _parks(rows: Iterable[tuple[int, str, float | None, bytes]]) -> list[AuditPark]:
    """A run's parks from its suspend, resume and close segments (in index order)."""
    parks: list[AuditPark] = []
    for idx, _kind, at, payload in rows:
        wire = envelope_wire(payload)
        seg = None if wire is None else wire.segment
        if isinstance(seg, SuspendedWire):
            parks.append(AuditPark(idx, park_form(seg.snapshot), at))
        elif isinstance(seg, ResumedWire | ClosedWire) and parks \
                and parks[-1].idle_uj is None and not parks[-1].closed_bare:
            # A resume ends the park with its idle energy; so does a close that carries it
            # (run-record.md §4); a bare close ends it with its draw missing.
            open_park = parks[-1]
            parks[-1] = AuditPark(open_park.segment, open_park.form, open_park.suspended_at,
                                  at, seg.idle_uj, seg.idle_provenance,
                                  closed_bare=seg.idle_uj is None)
    return parks


def _active_since(run: AuditRun, since: float | None) -> bool:
    return since is None or (run.last_at is not None and run.last_at >= since)


def _park_since(park: AuditPark, since: float | None) -> bool:
    """A park ended since ``since``, or is still open."""
    if since is None or park.idle_uj is None:
        return True
    return park.resumed_at is not None and park.resumed_at >= since


def _rate(uj: int, hours: float) -> float | None:
    return round(uj / hours, 3) if hours > 0 else None


def grant_refusals(refusals: Iterable[tuple[str, float | None, bool]],
                   since: float | None = None) -> dict[str, Any]:
    """Counts of the grant rules among ``refusals`` ((rule, when refused, whether the
    refused message was a grant event)) since ``since``: ``total``, ``segments`` (runs
    held to their grants), ``events`` (grant events not taken) and ``by_rule``."""
    by_rule: dict[str, int] = defaultdict(int)
    events = 0
    for rule, at, is_event in refusals:
        if rule in GRANT_RULES and (since is None or (at is not None and at >= since)):
            by_rule[rule] += 1
            events += is_event
    total = sum(by_rule.values())
    return {"total": total, "segments": total - events, "events": events,
            "by_rule": dict(sorted(by_rule.items()))}


def audit(runs: Iterable[AuditRun], now: float, since: float | None = None,
          cheap_factor: float = 0.1,
          refusals: Iterable[tuple[str, float | None, bool]] = ()) -> dict[str, Any]:
    """The audit of ``runs`` at ``now`` (see the module docstring); ``refusals``: the
    ledger's refusals as (rule, when, of a grant event), for :func:`grant_refusals`."""
    runs = [r for r in runs if _active_since(r, since)]
    verdicts = {v: 0 for v in VERDICTS}
    decided: list[dict[str, Any]] = []
    unproved: list[dict[str, str]] = []
    hosts: dict[str, dict[str, Any]] = {}
    closed: list[tuple[str, AuditPark]] = []
    parked: list[dict[str, Any]] = []
    unpriced: list[dict[str, Any]] = []
    for r in runs:
        verdicts[r.verdict] = verdicts.get(r.verdict, 0) + 1
        if r.verdict in ("Blocked", "Malformed"):
            decided.append({"run": r.run, "host": r.host, "verdict": r.verdict,
                            "segment": r.verdict_segment})
        elif r.verdict == "Unproved":
            unproved.append({"run": r.run, "host": r.host})
        h = hosts.setdefault(r.host, {
            "host": r.host, "runs": 0, "active_uj": {"measured": 0, "estimated": 0},
            "idle_uj": {"measured": 0, "estimated": 0}, "parks": 0,
            "claim_uj": {"measured": 0, "estimated": 0},
            "overhead_uj": {"measured": 0, "estimated": 0}})
        h["runs"] += 1
        for p in ("measured", "estimated"):
            h["active_uj"][p] += r.receipts_uj.get(p, 0)
            h["idle_uj"][p] += r.idle_uj.get(p, 0)
            h["claim_uj"][p] += r.claim_uj.get(p, 0)
            h["overhead_uj"][p] += r.overhead_uj.get(p, 0)
        for park in r.parks:
            if not _park_since(park, since):
                continue
            if park.closed_bare:
                unpriced.append({"run": r.run, "host": r.host, "form": park.form,
                                 "segment": park.segment})
            elif park.idle_uj is None:
                parked.append({
                    "run": r.run, "host": r.host, "form": park.form, "segment": park.segment,
                    "since": park.suspended_at,
                    "parked_s": None if park.suspended_at is None
                    else round(max(0.0, now - park.suspended_at), 3)})
            else:
                h["parks"] += 1
                closed.append((r.host, park))
    reused = _reused_slots(runs)
    return {
        "now": now,
        "since": since,
        "runs": len(runs),
        "verdicts": verdicts,
        "blocked_or_malformed": decided,
        "unproved": unproved,
        "hosts": sorted(hosts.values(), key=lambda h: h["host"]),
        "parks": _by_form(closed),
        "parked": sorted(parked, key=lambda p: (p["since"] is None, p["since"] or 0)),
        "reused_slots": reused,
        "closed_without_idle": unpriced,
        "suspicious_hosts": _suspicious(runs, closed, cheap_factor, reused, unpriced),
        "cheap_factor": cheap_factor,
        "grant_refusals": grant_refusals(refusals, since),
        "effects": effect_flags(runs),
    }


def effect_flags(runs: Iterable[AuditRun]) -> dict[str, list[dict[str, Any]]]:
    """Effectful steps without an idempotency key (``unkeyed``: at least once, a loud
    warning) and those of them run again after an unknown outcome (``possible_duplicates``:
    the effect may have happened twice), each as run, host, segment and call id. A call
    appears once per segment that names it."""
    unkeyed: list[dict[str, Any]] = []
    duplicates: list[dict[str, Any]] = []
    for r in runs:
        seen: set[tuple[int, str]] = set()
        for segment, call in r.effects:
            if (segment, call) in seen:
                continue
            seen.add((segment, call))
            no_key, duplicate = account_marks(call)
            row = {"run": r.run, "host": r.host, "segment": segment, "call": call}
            if duplicate:
                duplicates.append(row)
            elif no_key:
                unkeyed.append(row)
    return {"unkeyed": unkeyed, "possible_duplicates": duplicates}


def _sums(parks: Iterable[AuditPark]) -> tuple[int, int, float, int, int]:
    """(count, idle uJ, hours measured, uJ of the parks with hours, estimated count)."""
    count = uj = timed_uj = estimated = 0
    hours = 0.0
    for p in parks:
        count += 1
        uj += p.idle_uj or 0
        estimated += p.provenance == "estimated"
        h = p.hours()
        if h is not None:
            hours += h
            timed_uj += p.idle_uj or 0
    return count, uj, hours, timed_uj, estimated


def _by_form(closed: Sequence[tuple[str, AuditPark]]) -> list[dict[str, Any]]:
    out = []
    for form in FORMS:
        count, uj, hours, timed_uj, estimated = _sums(p for _, p in closed if p.form == form)
        if not count:
            continue
        out.append({"form": form, "parks": count, "idle_uj": uj,
                    "hours_parked": round(hours, 6), "idle_uj_per_hour": _rate(timed_uj, hours),
                    "estimated": estimated, "measured": count - estimated})
    return out


def _reused_slots(runs: Sequence[AuditRun]) -> list[dict[str, Any]]:
    uses: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        for slot, kind, segment in r.slots:
            uses[slot].append({"run": r.run, "host": r.host, "kind": kind, "segment": segment})
    return [{"slot": slot, "uses": u} for slot, u in sorted(uses.items()) if len(u) > 1]


def _suspicious(runs: Sequence[AuditRun], closed: Sequence[tuple[str, AuditPark]],
                cheap_factor: float, reused: Sequence[dict[str, Any]],
                unpriced: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    reasons: dict[str, list[str]] = defaultdict(list)
    by_host: dict[str, list[AuditPark]] = defaultdict(list)
    for host, park in closed:
        by_host[host].append(park)
    for host, parks in sorted(by_host.items()):
        for form in FORMS:
            _, _, hours, uj, _ = _sums(p for p in parks if p.form == form)
            _, _, other_hours, other_uj, _ = _sums(
                p for h, p in closed if h != host and p.form == form)
            mine, others = _rate(uj, hours), _rate(other_uj, other_hours)
            if mine is not None and others and mine < cheap_factor * others:
                reasons[host].append(
                    f"{form} parks cost {mine:.0f} uJ/h, under {cheap_factor:g} of the other "
                    f"hosts' {others:.0f} uJ/h")
        if all(p.provenance == "estimated" for p in parks):
            reasons[host].append(f"all {len(parks)} parks' idle energy is estimated")
    active: dict[str, dict[str, int]] = defaultdict(lambda: {"measured": 0, "estimated": 0})
    for r in runs:
        for p in ("measured", "estimated"):
            active[r.host][p] += r.receipts_uj.get(p, 0)
    for host, split in sorted(active.items()):
        if split["estimated"] and not split["measured"]:
            reasons[host].append("all executed intervals' energy is estimated")
    for slot in reused:
        for host in sorted({u["host"] for u in slot["uses"]}):
            reasons[host].append(f"warm slot {slot['slot']} is counted "
                                 f"{len(slot['uses'])} times")
    for host in sorted({u["host"] for u in unpriced}):
        count = sum(u["host"] == host for u in unpriced)
        reasons[host].append(f"{count} parked runs closed without their park's idle energy")
    return [{"host": h, "reasons": reasons[h]} for h in sorted(reasons)]
