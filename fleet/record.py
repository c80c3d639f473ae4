"""A run record as a pure state machine: genesis, the chain, phases, energy and wait proof.

``head0 = BLAKE3("sandbox.runrecord/1" || unit_id[32] || grants_id[32])`` and
``head_n = BLAKE3(head_{n-1} || canonical(segment_n))``. The genesis head is also the run's
identity (``run``): it binds the unit and the grant set, so two records can never be
spliced across either.

:class:`RunState` is the object API's way into :mod:`fleet.kernel`, where every rule and
state change is written: :meth:`RunState.step` turns a segment object into the kernel's
plain values and returns the kernel's step (or its named refusal), changing nothing;
:meth:`RunState.apply` makes the kernel's state change. A caller (a host program, the
ledger's fold or an offline verifier) that is refused keeps the state it had before.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fleet import kernel
from fleet.address import digest
from fleet.attestation import Attestation
from fleet.kernel import GENESIS_DOMAIN, Step, genesis, park_parts
from fleet.phases import FRESH
from fleet.segment import (
    Claimed,
    Closed,
    Evicted,
    Executed,
    Resumed,
    Segment,
    Snapshot,
    Suspended,
    snapshot_from_bytes,
)
from fleet.wait_proof import Verdict, WaitTracker

__all__ = ["GENESIS_DOMAIN", "Energy", "RunState", "chain", "genesis", "segment_step"]


def chain(head: bytes, segment: Segment) -> bytes:
    """The head after ``segment``."""
    return digest(head + segment.canonical())


def _zero() -> dict[str, int]:
    return {"measured": 0, "estimated": 0}


@dataclass(slots=True)
class Energy:
    """Microjoules of a run by source, each split by provenance: active receipts, idle
    parks, the warm slot a claim started it from (``claim``) and, in a pool's own run, the
    slots it evicted (``overhead``)."""

    receipts: dict[str, int] = field(default_factory=_zero)
    idle: dict[str, int] = field(default_factory=_zero)
    claim: dict[str, int] = field(default_factory=_zero)
    overhead: dict[str, int] = field(default_factory=_zero)
    # The sum of the four accounts: counted from them when made, then kept beside them by the
    # kernel's one state change (fleet.kernel.apply), so a grant's budget check on every
    # segment reads it instead of summing.
    spent: int = field(default=-1, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.spent < 0:
            self.spent = sum(sum(s.values()) for s in self._sources())

    def _sources(self) -> tuple[dict[str, int], ...]:
        return self.receipts, self.idle, self.claim, self.overhead

    @property
    def total_uj(self) -> int:
        return self.spent

    def by_provenance(self) -> dict[str, int]:
        return {p: sum(s[p] for s in self._sources()) for p in self.receipts}

    def copy(self) -> Energy:
        return Energy(dict(self.receipts), dict(self.idle), dict(self.claim),
                      dict(self.overhead), self.spent)

    def as_json(self) -> dict[str, object]:
        return {
            "total_uj": self.total_uj,
            "receipts_uj": dict(self.receipts),
            "idle_uj": dict(self.idle),
            "claim_uj": dict(self.claim),
            "overhead_uj": dict(self.overhead),
            "by_provenance_uj": self.by_provenance(),
        }


def segment_step(run: kernel.Position, index: int, segment: Segment,
                 attestation: Attestation | None) -> Step:
    """The kernel's step for a segment object at ``index`` (the object API's decoder)."""
    body = segment.canonical()
    if type(segment) is Executed:
        receipt = None if attestation is None else attestation.receipt
        return kernel.executed_step(
            run, index, body, segment.attestation,
            None if attestation is None else attestation.address(),
            0 if receipt is None else receipt.uj,
            "measured" if receipt is None else receipt.provenance, segment.calls)
    if type(segment) is Suspended:
        return kernel.suspended_step(run, index, body, segment.snapshot.canonical(),
                                     segment.manifest)
    if type(segment) is Resumed:
        return kernel.resumed_step(run, index, body, segment.snapshot.canonical(),
                                   segment.manifest, segment.idle_uj, segment.idle_provenance)
    if type(segment) is Closed:
        return kernel.closed_step(run, index, segment.canonical(), segment.idle_uj,
                                  segment.idle_provenance)
    if type(segment) is Claimed:
        return kernel.claimed_step(run, index, body, segment.manifest, segment.warm_uj,
                                   segment.warm_provenance, segment.idle_uj,
                                   segment.idle_provenance)
    if type(segment) is Evicted:
        return kernel.evicted_step(run, index, body, segment.warm_uj, segment.warm_provenance,
                                   segment.idle_uj, segment.idle_provenance)
    raise TypeError(f"not a segment: {segment!r}")


@dataclass(slots=True)
class RunState:
    """Where a run stands after the segments folded so far (``park``: the kernel's
    ``snapshot || manifest`` bytes while parked; ``manifest``: the environment manifest its
    claim or first park fixed)."""

    unit_id: bytes
    grants_id: bytes
    run: bytes
    head: bytes
    index: int = 0
    phase: str = FRESH
    park: bytes | None = None
    manifest: bytes | None = None
    energy: Energy = field(default_factory=Energy)
    wait: WaitTracker = field(default_factory=WaitTracker)

    @classmethod
    def open(cls, unit_id: bytes, grants_id: bytes) -> RunState:
        head0 = genesis(unit_id, grants_id)
        return cls(unit_id, grants_id, head0, head0)

    @property
    def parked(self) -> Snapshot | None:
        """The snapshot recorded at the park the run is in (or was closed in)."""
        return None if self.park is None else snapshot_from_bytes(park_parts(self.park)[0])

    @property
    def parked_manifest(self) -> bytes | None:
        return None if self.park is None else park_parts(self.park)[1]

    def copy(self) -> RunState:
        """An independent copy (a ledger's batch changes copies, never committed state)."""
        return RunState(self.unit_id, self.grants_id, self.run, self.head, self.index,
                        self.phase, self.park, self.manifest, self.energy.copy(),
                        self.wait.copy())

    def step(self, segment: Segment, attestation: Attestation | None = None) -> Step:
        """The kernel's step for the next segment, or the named refusal; changes nothing."""
        return segment_step(self, self.index + 1, segment, attestation)

    def prepare(self, segment: Segment, attestation: Attestation | None = None
                ) -> tuple[Step, bytes]:
        """The step and head ``segment`` would lead to, or the named refusal; changes nothing."""
        st = self.step(segment, attestation)
        return st, digest(self.head + st[0])

    def advance(self, segment: Segment, attestation: Attestation | None = None) -> bytes:
        """Fold ``segment`` and return the new head; a refusal leaves the state unchanged."""
        st, head = self.prepare(segment, attestation)
        kernel.apply(self, self.index + 1, head, st)
        return head

    def apply(self, step: Step, head: bytes) -> None:
        """The kernel's state change for ``step`` (from :meth:`prepare`), ending at ``head``."""
        kernel.apply(self, self.index + 1, head, step)

    def wait_proof(self) -> Verdict:
        return self.wait.verdict()
