"""A run record as a pure state machine: genesis, the chain, phases, energy and wait proof.

``head0 = BLAKE3("sandbox.runrecord/1" || unit_id[32] || grants_id[32])`` and
``head_n = BLAKE3(head_{n-1} || canonical(segment_n))``. The genesis head is also the run's
identity (``run``): it binds the unit and the grant set, so two records can never be
spliced across either.

:class:`RunState` is the object API's way into :mod:`fleet.record.kernel`, where every rule, the
run's state (:class:`fleet.record.kernel.RunState`, :class:`fleet.record.kernel.Energy`) and its one
state change are written: :meth:`RunState.step` turns a segment object into the kernel's
plain values and returns the kernel's step (or its named refusal), changing nothing;
:meth:`RunState.apply` makes the kernel's state change. A caller (a host program, the
ledger's fold or an offline verifier) that is refused keeps the state it had before.
"""

from __future__ import annotations

from fleet_ledger.fleet.address import digest
from fleet_ledger.fleet.record import kernel
from fleet_ledger.fleet.record.attestation import Attestation
from fleet_ledger.fleet.record.kernel import GENESIS_DOMAIN, Energy, Step, genesis, park_parts
from fleet_ledger.fleet.record.segment import (
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

__all__ = ["GENESIS_DOMAIN", "Energy", "RunState", "chain", "genesis", "segment_step"]


def chain(head: bytes, segment: Segment) -> bytes:
    """The head after ``segment``."""
    return digest(head + segment.canonical())


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


class RunState(kernel.RunState):
    """:class:`fleet.record.kernel.RunState` with the object API's way in: the kernel's step for a
    segment object (:func:`segment_step`), and the park as a snapshot object."""

    __slots__ = ()

    @property
    def parked(self) -> Snapshot | None:
        """The snapshot recorded at the park the run is in (or was closed in)."""
        return None if self.park is None else snapshot_from_bytes(park_parts(self.park)[0])

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
