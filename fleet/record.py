"""A run record as a pure state machine: genesis, the chain, phases, energy and wait proof.

``head0 = BLAKE3("sandbox.runrecord/1" || unit_id[32] || grants_id[32])`` and
``head_n = BLAKE3(head_{n-1} || canonical(segment_n))``. The genesis head is also the run's
identity (``run``): it binds the unit and the grant set, so two records can never be
spliced across either.

:meth:`RunState.advance` checks a segment against every rule first and changes nothing
when it refuses, like a protocol state machine that rejects an event: the caller (a host
program, the ledger's fold or an offline verifier) gets the named refusal and the state
it had before.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fleet.address import digest
from fleet.attestation import Attestation
from fleet.errors import (
    AttestationMismatch,
    ManifestMismatch,
    PhaseViolation,
    RecordClosed,
    SnapshotMismatch,
    ZeroIdleEnergy,
)
from fleet.phases import CLOSED, FRESH, TRANSITIONS
from fleet.segment import Executed, Resumed, Segment, Snapshot, Suspended, check_digest
from fleet.wait_proof import Verdict, WaitTracker

GENESIS_DOMAIN = b"sandbox.runrecord/1"


def genesis(unit_id: bytes, grants_id: bytes) -> bytes:
    """The genesis head, which is also the run's identity."""
    check_digest(unit_id, "unit_id")
    check_digest(grants_id, "grants_id")
    return digest(GENESIS_DOMAIN + unit_id + grants_id)


def chain(head: bytes, segment: Segment) -> bytes:
    """The head after ``segment``."""
    return digest(head + segment.canonical())


@dataclass(slots=True)
class Energy:
    """Microjoules of a run, split into active receipts and idle parks, by provenance."""

    receipts: dict[str, int] = field(default_factory=lambda: {"measured": 0, "estimated": 0})
    idle: dict[str, int] = field(default_factory=lambda: {"measured": 0, "estimated": 0})

    @property
    def total_uj(self) -> int:
        return sum(self.receipts.values()) + sum(self.idle.values())

    def by_provenance(self) -> dict[str, int]:
        return {p: self.receipts[p] + self.idle[p] for p in self.receipts}

    def as_json(self) -> dict[str, object]:
        return {
            "total_uj": self.total_uj,
            "receipts_uj": dict(self.receipts),
            "idle_uj": dict(self.idle),
            "by_provenance_uj": self.by_provenance(),
        }


@dataclass(slots=True)
class RunState:
    """Where a run stands after the segments folded so far."""

    unit_id: bytes
    grants_id: bytes
    run: bytes
    head: bytes
    index: int = 0
    phase: str = FRESH
    parked: Snapshot | None = None
    parked_manifest: bytes | None = None
    energy: Energy = field(default_factory=Energy)
    wait: WaitTracker = field(default_factory=WaitTracker)

    @classmethod
    def open(cls, unit_id: bytes, grants_id: bytes) -> RunState:
        head0 = genesis(unit_id, grants_id)
        return cls(unit_id, grants_id, head0, head0)

    def check(self, segment: Segment, attestation: Attestation | None = None) -> str:
        """The phase after ``segment``, or the named refusal; changes nothing."""
        index = self.index + 1
        if self.phase == CLOSED:
            raise RecordClosed("the record is closed; nothing may follow", segment=index)
        nxt = TRANSITIONS.get((self.phase, segment.kind))
        if nxt is None:
            raise PhaseViolation(
                f"a {segment.kind} segment is not allowed in phase {self.phase}", segment=index
            )
        if isinstance(segment, Executed):
            if attestation is None:
                raise AttestationMismatch("the attestation object is missing", segment=index)
            if attestation.address() != segment.attestation:
                raise AttestationMismatch(
                    "the attestation object does not hash to the recorded address",
                    segment=index,
                )
        elif isinstance(segment, Resumed):
            if segment.snapshot != self.parked:
                raise SnapshotMismatch(
                    "the offered snapshot is not the one recorded at suspension", segment=index
                )
            if segment.manifest != self.parked_manifest:
                raise ManifestMismatch(
                    "the resuming environment's manifest differs from the recorded one",
                    segment=index,
                )
            if segment.idle_uj == 0:
                raise ZeroIdleEnergy(
                    "a park is never free: idle_uj must be the energy its retained state drew",
                    segment=index,
                )
        return nxt

    def prepare(
        self, segment: Segment, attestation: Attestation | None = None
    ) -> tuple[str, bytes]:
        """The phase and head ``segment`` would lead to, or the named refusal; changes nothing."""
        nxt = self.check(segment, attestation)
        return nxt, chain(self.head, segment)

    def advance(self, segment: Segment, attestation: Attestation | None = None) -> bytes:
        """Fold ``segment`` and return the new head; a refusal leaves the state unchanged."""
        nxt, head = self.prepare(segment, attestation)
        self.apply(segment, attestation, nxt, head)
        return head

    def apply(
        self, segment: Segment, attestation: Attestation | None, nxt: str, head: bytes
    ) -> None:
        """Move to ``nxt``/``head`` as computed by :meth:`prepare` for this same segment."""
        self.index += 1
        self.head = head
        self.phase = nxt
        if isinstance(segment, Executed):
            assert attestation is not None
            r = attestation.receipt
            self.energy.receipts[r.provenance] += r.uj
            self.wait.add(self.index, segment.calls)
        elif isinstance(segment, Suspended):
            self.parked = segment.snapshot
            self.parked_manifest = segment.manifest
        elif isinstance(segment, Resumed):
            self.energy.idle[segment.idle_provenance] += segment.idle_uj
            self.parked = None
            self.parked_manifest = None

    def wait_proof(self) -> Verdict:
        return self.wait.verdict()
