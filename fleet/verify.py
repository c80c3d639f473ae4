"""Offline verification of a whole run record, from genesis.

This is what ``fleet verify`` runs and what the ledger's fold decides segment by segment:
recomputed heads, phase rules, snapshot and manifest identity at every resume, attestation
addresses, idle energy, and (when a host key is known) every seal. The first failure is
raised as its named :class:`~fleet.errors.RecordError`, pinned to the failing segment.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nacl.signing import VerifyKey

from fleet.address import format_address, parse_address
from fleet.errors import HeadMismatch, IndexGap, MalformedSegment, RecordError
from fleet.record import Energy, RunState
from fleet.seal import check_seal, decode_key
from fleet.verify_fast import fast_check
from fleet.wait_proof import Verdict
from fleet.wire import RECORD_FORMAT, RecordWire, SealedSegment, segment_from_wire

__all__ = [
    "RecordReport",
    "check_next",
    "fold_sealed",
    "verify_record",
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
    st, head = state.prepare(sealed.segment, sealed.attestation)
    if head != sealed.head:
        raise HeadMismatch(
            "the stated head is not the head recomputed from genesis", segment=sealed.index
        )
    state.apply(st, head)


def verify_record(
    record: RecordWire, host_key: str | None = None, *, fast: bool = True
) -> RecordReport:
    """Verify ``record`` from genesis; ``host_key`` pins the key expected to seal it.

    Without a pinned key the record's own ``host_key`` checks the seals; a record naming no
    key at all verifies its chain only and reports ``sealed=False``. A record that passes
    the fast path (:mod:`fleet.verify_fast`) is valid; any other goes through the reference
    path, segment by segment, which raises the first failure by name (``fast=False`` forces
    the reference path for every record).
    """
    if record.format != RECORD_FORMAT:
        raise MalformedSegment(f"unknown record format {record.format!r}")
    key_text = host_key if host_key is not None else record.host_key
    if host_key is not None and record.host_key not in (None, host_key):
        raise RecordError("the record is sealed by a different host key than the pinned one")
    try:
        verify_key = None if key_text is None else decode_key(key_text)
    except ValueError as exc:
        raise MalformedSegment(str(exc)) from None
    state = RunState.open(parse_address(record.unit_id), parse_address(record.grants_id))
    if record.run is not None and parse_address(record.run) != state.run:
        raise HeadMismatch("the record's run is not the genesis head of its unit and grants")
    if fast:
        found = fast_check(record, state.run, verify_key, state.unit_id, state.grants_id)
        if found is not None:
            return _report(found, verify_key is not None, "wire")
    for position, wire in enumerate(record.segments, start=1):
        try:
            sealed = segment_from_wire(wire)
            if sealed.index != position:
                raise IndexGap(f"segment {position} states index {sealed.index}")
            fold_sealed(state, sealed, verify_key)
        except RecordError as exc:
            raise exc.at(position) from None
    return _report(state, verify_key is not None)


def _report(state: RunState, sealed: bool, decoder: str = "objects") -> RecordReport:
    return RecordReport(
        run=format_address(state.run), segments=state.index, head=format_address(state.head),
        phase=state.phase, energy=state.energy, wait_proof=state.wait_proof(), sealed=sealed,
        decoder=decoder,
    )
