"""Building a sealed run record: what a host program calls, with no I/O.

Every call checks the segment with the record's rules before anything is hashed or sealed;
a refused call raises the named rule and leaves the record as it was, so a refused segment
never exists, let alone leaves the host.

A segment is made in two steps: :func:`prepare` is a pure function of the run's state that
returns a :class:`Prepared` value (the sealed segment and the state after it, the state given
untouched), and :meth:`RecordBuilder.apply` moves the builder to it. A host puts the prepared
segment and its state durably between the two (agents.host), so a failed put leaves nothing
to roll back.
"""

from __future__ import annotations

from dataclasses import dataclass

from nacl.signing import SigningKey

from fleet_ledger.fleet.address import format_address
from fleet_ledger.fleet.record.attestation import Attestation, make_attestation
from fleet_ledger.fleet.record.record import RunState
from fleet_ledger.fleet.record.seal import encode_key, key_id, seal
from fleet_ledger.fleet.record.segment import (
    CallAccount,
    Claimed,
    Closed,
    Evicted,
    Executed,
    Segment,
    Snapshot,
    executed,
    resumed,
    suspended,
)
from fleet_ledger.fleet.record.wire import RecordWire, SealedSegment, segment_to_wire

__all__ = [
    "Prepared",
    "RecordBuilder",
    "StalePrepared",
    "execute_segment",
    "prepare",
]


class StalePrepared(ValueError):
    """A prepared segment applied to a state it was not prepared from."""


@dataclass(frozen=True, slots=True)
class Prepared:
    """A sealed segment and the run's state after it, not yet applied anywhere (``prior``:
    the head it follows)."""

    sealed: SealedSegment
    state: RunState
    prior: bytes


def prepare(key: SigningKey, state: RunState, segment: Segment,
            attestation: Attestation | None = None) -> Prepared:
    """Check, chain and seal ``segment`` as the next of ``state``; ``state`` is not changed
    (a refusal raises its named rule)."""
    step, head = state.prepare(segment, attestation)
    after = state.copy()
    after.apply(step, head)
    return Prepared(SealedSegment(after.index, segment, head,
                                  seal(key, after.run, after.index, head), attestation), after,
                    state.head)


def execute_segment(*, uj: int, provenance: str, meter: str, journal_root: bytes,
                    outcome: str = "ok", calls: CallAccount | None = None
                    ) -> tuple[Executed, Attestation]:
    """An executed segment and the attestation it commits to."""
    att = make_attestation(uj, provenance, meter, journal_root, outcome)
    return executed(att.address(), calls), att


class RecordBuilder:
    """One run's record on the host that runs it, sealed with the host's key."""

    def __init__(self, key: SigningKey, unit_id: bytes, grants_id: bytes) -> None:
        self._key = key
        self.state = RunState.open(unit_id, grants_id)
        self.sealed: list[SealedSegment] = []

    @property
    def run(self) -> bytes:
        return self.state.run

    @property
    def host_key(self) -> str:
        return encode_key(bytes(self._key.verify_key))

    @property
    def host_key_id(self) -> str:
        return key_id(bytes(self._key.verify_key))

    def prepare(self, segment: Segment, attestation: Attestation | None = None) -> Prepared:
        """The next segment and the state after it (:func:`prepare`); changes nothing."""
        return prepare(self._key, self.state, segment, attestation)

    def apply(self, prepared: Prepared, *, keep: bool = True) -> SealedSegment:
        """Move to ``prepared``'s state (``keep``: and hold its segment for
        :meth:`to_record`). A value prepared from another state is refused."""
        if prepared.prior != self.state.head or prepared.state.run != self.state.run:
            raise StalePrepared(f"segment {prepared.sealed.index} was not prepared from this"
                                f" run's state at index {self.state.index}")
        self.state = prepared.state
        if keep:
            self.sealed.append(prepared.sealed)
        return prepared.sealed

    def _append(self, segment: Segment, attestation: Attestation | None = None) -> SealedSegment:
        return self.apply(self.prepare(segment, attestation))

    def execute(
        self,
        *,
        uj: int,
        provenance: str,
        meter: str,
        journal_root: bytes,
        outcome: str = "ok",
        calls: CallAccount | None = None,
    ) -> SealedSegment:
        return self._append(*execute_segment(uj=uj, provenance=provenance, meter=meter,
                                             journal_root=journal_root, outcome=outcome,
                                             calls=calls))

    def suspend(self, snapshot: Snapshot, manifest: bytes) -> SealedSegment:
        return self._append(suspended(snapshot, manifest))

    def resume(
        self, snapshot: Snapshot, manifest: bytes, idle_uj: int, provenance: str, meter: str
    ) -> SealedSegment:
        return self._append(resumed(snapshot, manifest, idle_uj, provenance, meter))

    def close(self, idle_uj: int | None = None, provenance: str | None = None,
              meter: str | None = None) -> SealedSegment:
        """Close the run; closing a parked run, give the idle energy its park drew."""
        return self._append(Closed(idle_uj, provenance, meter))

    def claim(self, claimed: Claimed) -> SealedSegment:
        """Start the run from a warm slot (its first segment: docs/warm-pools.md)."""
        return self._append(claimed)

    def evict(self, evicted: Evicted) -> SealedSegment:
        """Record an evicted slot's energy in a pool's own run."""
        return self._append(evicted)

    def to_record(self) -> RecordWire:
        return RecordWire(
            unit_id=format_address(self.state.unit_id),
            grants_id=format_address(self.state.grants_id),
            run=format_address(self.state.run),
            host_key=self.host_key,
            segments=[segment_to_wire(s) for s in self.sealed],
        )
