"""The rows :func:`fleet.audit.audit` reads, from the ledger's store: each run's state and
its folded segments of :data:`fleet.audit.SEGMENT_KINDS` (turned into an
:class:`~fleet.audit.AuditRun` by :func:`fleet.audit.audit_run`), when the ledger folded
them, and its refusals by a grant rule."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from fleet_ledger.fleet.audit import GRANT_RULES, SEGMENT_KINDS, AuditRun, audit, audit_run
from fleet_ledger.fleet.audit import effect_calls as marked_calls
from fleet_ledger.fleet.runtime.runtime_journal import UNKEYED
from fleet_ledger.fleet.subjects import is_grant_subject
from fleet_ledger.ledger.store import LedgerStore
from fleet_ledger.ledger.store_reads import SegmentRow


def effect_calls(store: LedgerStore, run: str | None = None
                 ) -> dict[str, list[tuple[int, str]]]:
    """Per run (or of ``run``), ``(segment, call id)`` of every executed segment's account id
    that carries an effect mark (:func:`fleet.audit.effect_calls`); only segments whose
    bytes hold the mark are read."""
    return marked_calls((s.run, s.idx, s.payload)
                        for s in store.executed_with_mark(UNKEYED, run))


def audit_runs(store: LedgerStore) -> list[AuditRun]:
    """Every run of the store as an :class:`AuditRun`."""
    times = store.fold_times()
    segments: dict[str, list[SegmentRow]] = defaultdict(list)
    for seg in store.segments_of_kinds(SEGMENT_KINDS):
        segments[seg.run].append(seg)
    effects = effect_calls(store)
    return [audit_run(r.run, r.host, r.phase, r.state,
                      ((s.idx, s.kind, s.at, s.payload) for s in segments.get(r.run, ())),
                      *times.get(r.run, (None, None)), effects=effects.get(r.run, ()))
            for r in store.run_rows()]


def audit_store(store: LedgerStore, since: float | None = None,
                cheap_factor: float = 0.1, now: float | None = None) -> dict[str, Any]:
    """The audit of the ledger's store (:func:`fleet.audit.audit`)."""
    refusals = [(r.rule, r.at, is_grant_subject(r.subject))
                for r in store.refusals_of(GRANT_RULES)]
    return audit(audit_runs(store), time.time() if now is None else now, since, cheap_factor,
                 refusals)
