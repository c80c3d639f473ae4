"""Building a sealed run record: what a host program calls, with no I/O.

Every call checks the segment with the record's rules before anything is hashed or sealed;
a refused call raises the named rule and leaves the record as it was, so a refused segment
never exists, let alone leaves the host.
"""

from __future__ import annotations

from nacl.signing import SigningKey

from fleet.address import format_address
from fleet.attestation import Attestation, make_attestation
from fleet.record import RunState
from fleet.seal import encode_key, key_id, seal
from fleet.segment import (
    CallAccount,
    Claimed,
    Closed,
    Evicted,
    Segment,
    Snapshot,
    executed,
    resumed,
    suspended,
)
from fleet.wire import RecordWire, SealedSegment, segment_to_wire

__all__ = [
    "RecordBuilder",
]



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

    def _append(self, segment: Segment, attestation: Attestation | None = None) -> SealedSegment:
        head = self.state.advance(segment, attestation)
        index = self.state.index
        out = SealedSegment(index, segment, head, seal(self._key, self.state.run, index, head),
                            attestation)
        self.sealed.append(out)
        return out

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
        att = make_attestation(uj, provenance, meter, journal_root, outcome)
        return self._append(executed(att.address(), calls), att)

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
