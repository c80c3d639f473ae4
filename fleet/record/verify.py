"""Offline verification of a whole run record, from genesis.

This is what ``fleet verify`` runs and what the ledger's fold decides segment by segment:
recomputed heads, phase rules, snapshot and manifest identity at every resume, attestation
addresses, idle energy, and (when a host key is known) every seal. The first failure is
raised as its named :class:`~fleet.errors.RecordError`, pinned to the failing segment.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nacl.signing import VerifyKey

from fleet_ledger.fleet.address import format_address, parse_address
from fleet_ledger.fleet.errors import HeadMismatch, IndexGap, MalformedSegment, RecordError
from fleet_ledger.fleet.record import kernel
from fleet_ledger.fleet.record.kernel import Energy
from fleet_ledger.fleet.record.record import RunState
from fleet_ledger.fleet.record.record_file import SINGLE, sealers
from fleet_ledger.fleet.record.seal import check_seal
from fleet_ledger.fleet.record.verify_fast import fast_check
from fleet_ledger.fleet.record.wait_proof import Verdict
from fleet_ledger.fleet.record.wire import (
    RECORD_FORMAT,
    WIRE_KIND,
    RecordWire,
    SealedSegment,
    segment_from_wire,
)

__all__ = [
    "RecordReport",
    "check_next",
    "fold_sealed",
    "verify_record",
    "verify_state",
]



@dataclass(frozen=True, slots=True)
class RecordReport:
    run: str
    segments: int
    head: str
    phase: str
    energy: Energy
    wait_proof: Verdict
    sealed: bool
    # Which decoder into the kernel decided: "wire" (the fast path) or "objects" (the
    # reference path, which also names every refusal). Not part of the verdict: two
    # reports of one record are equal whichever decoder made them.
    decoder: str = field(default="objects", compare=False)


def check_next(state: RunState, index: int) -> None:
    """``IndexGap`` unless ``index`` is the run's next segment."""
    if index != state.index + 1:
        raise IndexGap(f"segment {index} where {state.index + 1} was next", segment=index)


def fold_sealed(
    state: RunState, sealed: SealedSegment, verify_key: VerifyKey | None
) -> None:
    """Check one sealed segment against ``state`` and fold it; refusals leave state as it was."""
    check_next(state, sealed.index)
    # The seal first: a forged segment is BadSeal whatever else it breaks.
    if verify_key is not None:
        check_seal(verify_key, state.run, sealed.index, sealed.head, sealed.seal)
    st = state.step(sealed.segment, sealed.attestation)
    state.apply(st, kernel.check_head(state.head, st[0], sealed.head, sealed.index))


def verify_record(
    record: RecordWire, host_key: str | None = None, *, fast: bool = True
) -> RecordReport:
    """:func:`verify_state` as a report."""
    state, sealed, decoder = _verify(record, host_key, fast)
    return _report(state, sealed, decoder)


def verify_state(record: RecordWire, host_key: str | None = None, *, fast: bool = True
                 ) -> tuple[RunState, bool]:
    """The run's state after verifying ``record`` from genesis, and whether every segment's
    seal was checked (see :func:`_verify`)."""
    state, sealed, _decoder = _verify(record, host_key, fast)
    return state, sealed


def _verify(
    record: RecordWire, host_key: str | None, fast: bool
) -> tuple[RunState, bool, str]:
    """Verify ``record`` from genesis; ``host_key`` pins the key expected to seal it.

    Without a pinned key the record's own keys check the seals (:mod:`fleet.record.record_file`:
    one ``host_key``, or each listed host's key for the segments it sealed, with the
    kernel's rule on who may seal what); a single-host record naming no key at all
    verifies its chain only and reports ``sealed=False``. A record that passes the fast
    path (:mod:`fleet.record.verify_fast`) is valid; any other goes through the reference path,
    segment by segment, which raises the first failure by name (``fast=False`` forces the
    reference path for every record).
    """
    if record.format != RECORD_FORMAT:
        raise MalformedSegment(f"unknown record format {record.format!r}")
    names, keys = sealers(record, host_key)
    sealed = all(k is not None for k in keys.values())
    state = RunState.open(parse_address(record.unit_id), parse_address(record.grants_id))
    if record.run is not None and parse_address(record.run) != state.run:
        raise HeadMismatch("the record's run is not the genesis head of its unit and grants")
    if fast:
        found = fast_check(record, state.run, None, state.unit_id, state.grants_id,
                           (names, keys))
        if found is not None:
            return found, sealed, "wire"
    holder = names[0] if names else SINGLE
    for position, wire in enumerate(record.segments, start=1):
        try:
            host = names[position - 1]
            holder = kernel.next_holder(holder, host, state.phase, WIRE_KIND[type(wire)],
                                        position, state.index + 1)
            sealed_segment = segment_from_wire(wire)
            if sealed_segment.index != position:
                raise IndexGap(f"segment {position} states index {sealed_segment.index}")
            fold_sealed(state, sealed_segment, keys[host])
        except RecordError as exc:
            raise exc.at(position) from None
    return state, sealed, "objects"


def _report(state: RunState, sealed: bool, decoder: str = "objects") -> RecordReport:
    return RecordReport(
        run=format_address(state.run), segments=state.index, head=format_address(state.head),
        phase=state.phase, energy=state.energy, wait_proof=state.wait_proof(), sealed=sealed,
        decoder=decoder,
    )
