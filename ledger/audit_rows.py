"""The rows :func:`fleet.audit.audit` reads, from the ledger's store: each run's verdict and
energy from its state, its parks decoded from its folded suspend and resume segments, and
when the ledger folded them."""

from __future__ import annotations

import time
from typing import Any

import msgspec

from fleet.audit import GRANT_RULES, AuditPark, AuditRun, audit, park_form
from fleet.run_codec import state_from_json
from fleet.runtime_journal import UNKEYED, account_marks
from fleet.wait_proof import verdict_json
from fleet.wire import (
    ClaimedWire,
    ClosedWire,
    EvictedWire,
    ExecutedWire,
    ResumedWire,
    SuspendedWire,
    envelope_wire,
)
from ledger.store import LedgerStore


def _parks(rows: list[tuple[int, str, float | None, bytes]]) -> list[AuditPark]:
    """A run's parks from its suspend and resume segments (in index order)."""
    parks: list[AuditPark] = []
    for idx, _kind, at, payload in rows:
        wire = envelope_wire(bytes(payload))
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


def effect_calls(store: LedgerStore, run: str | None = None
                 ) -> dict[str, list[tuple[int, str]]]:
    """Per run (or of ``run``), ``(segment, call id)`` of every executed segment's account id
    that carries an effect mark (fleet.runtime_journal: ``!unkeyed``); only segments whose
    bytes hold the mark are decoded."""
    sql = ("SELECT run, idx, payload FROM segments WHERE kind = 'executed'"
           " AND instr(payload, CAST(? AS BLOB)) > 0")
    args: tuple[Any, ...] = (UNKEYED,)
    if run is not None:
        sql, args = sql + " AND run = ?", (UNKEYED, run)
    out: dict[str, list[tuple[int, str]]] = {}
    for r, idx, payload in store.conn.execute(sql + " ORDER BY run, idx", args):
        wire = envelope_wire(bytes(payload))
        seg = None if wire is None else wire.segment
        if isinstance(seg, ExecutedWire) and seg.calls is not None:
            out.setdefault(r, []).extend(
                (idx, c) for c in [*seg.calls.dispatched, *seg.calls.resolved]
                if any(account_marks(c)))
    return out


def audit_runs(store: LedgerStore) -> list[AuditRun]:
    """Every run of the store as an :class:`AuditRun`."""
    conn = store.conn
    # A store from before segments had a fold time, read without migrating it: no times.
    at_col = "at" if "at" in {row[1] for row in conn.execute("PRAGMA table_info(segments)")} \
        else "NULL AS at"
    times = {run: (first, last) for run, first, last in conn.execute(
        f"SELECT run, MIN({at_col}), MAX({at_col}) FROM segments GROUP BY run")}
    park_rows: dict[str, list[tuple[int, str, float | None, bytes]]] = {}
    slots: dict[str, list[tuple[str, str, int]]] = {}
    for run, idx, kind, at, payload in conn.execute(
            f"SELECT run, idx, kind, {at_col}, payload FROM segments WHERE kind IN"
            " ('suspended', 'resumed', 'closed', 'claimed', 'evicted') ORDER BY run, idx"):
        if kind in ("suspended", "resumed", "closed"):
            park_rows.setdefault(run, []).append((idx, kind, at, payload))
            continue
        wire = envelope_wire(bytes(payload))
        if wire is not None and isinstance(wire.segment, ClaimedWire | EvictedWire):
            slots.setdefault(run, []).append((wire.segment.slot, kind, idx))
    effects = effect_calls(store)
    out = []
    for run, host, phase, state_blob in conn.execute(
            "SELECT run, host, phase, state FROM runs ORDER BY first_seq"):
        state = state_from_json(msgspec.json.decode(state_blob))
        verdict = verdict_json(state.wait_proof())
        first, last = times.get(run, (None, None))
        out.append(AuditRun(run, host, phase, str(verdict["verdict"]),
                            verdict.get("segment"),  # type: ignore[arg-type]
                            dict(state.energy.receipts), dict(state.energy.idle), first, last,
                            tuple(_parks(park_rows.get(run, []))),
                            dict(state.energy.claim), dict(state.energy.overhead),
                            tuple(slots.get(run, ())), tuple(effects.get(run, ()))))
    return out


def audit_store(store: LedgerStore, since: float | None = None,
                cheap_factor: float = 0.1, now: float | None = None) -> dict[str, Any]:
    """The audit of the ledger's store (:func:`fleet.audit.audit`)."""
    # A grant event's subject is <fleet>.ctl.grant (fleet.subjects), whatever the fleet.
    refusals = [(rule, at, subject.endswith(".ctl.grant")) for rule, at, subject in
                store.conn.execute("SELECT rule, at, subject FROM rejections WHERE rule IN "
                                   f"({','.join('?' * len(GRANT_RULES))})",
                                   sorted(GRANT_RULES))]
    return audit(audit_runs(store), time.time() if now is None else now, since, cheap_factor,
                 refusals)
