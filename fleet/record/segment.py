"""Segments of a run record as objects: the object API's decoder into :mod:`fleet.record.kernel`.

A segment is one of six kinds (executed, suspended, resumed, closed, and a warm pool's
claimed and evicted); a park's snapshot is an image (a filesystem root and, optionally, a
memory image) or a transcript. The canonical bytes of each, and every check of their
fields, are :mod:`fleet.record.kernel`'s: these classes hold the values and ask the kernel for the
bytes once, when built, so a malformed reference is refused before anything is hashed,
whichever way the object was made.
"""

from __future__ import annotations

import msgspec
from msgspec.structs import force_setattr

from fleet_ledger.fleet.record import kernel
from fleet_ledger.fleet.record.kernel import (
    CLAIMED,
    CLOSED,
    EVICTED,
    EXECUTED,
    RESUMED,
    SUSPENDED,
)

__all__ = [
    "CLAIMED",
    "CLOSED",
    "EVICTED",
    "EXECUTED",
    "RESUMED",
    "SUSPENDED",
    "CallAccount",
    "Claimed",
    "Closed",
    "Evicted",
    "Executed",
    "ImageSnapshot",
    "Resumed",
    "Segment",
    "Snapshot",
    "Suspended",
    "TranscriptSnapshot",
    "executed",
    "make_snapshot",
    "resumed",
    "snapshot_from_bytes",
    "suspended",
]


class ImageSnapshot(msgspec.Struct, frozen=True):
    """An image park: a filesystem root and, where resident state was suspended, a memory image."""

    fs_root: bytes
    mem_image: bytes | None = None

    def canonical(self) -> bytes:
        return kernel.snapshot_bytes(self.fs_root, self.mem_image, None)


class TranscriptSnapshot(msgspec.Struct, frozen=True):
    """A transcript park: the content address of the run's own transcript, nothing on the host."""

    transcript: bytes

    def canonical(self) -> bytes:
        return kernel.snapshot_bytes(None, None, self.transcript)


Snapshot = ImageSnapshot | TranscriptSnapshot


def make_snapshot(
    *,
    fs_root: bytes | None = None,
    mem_image: bytes | None = None,
    transcript: bytes | None = None,
) -> Snapshot:
    """Build a snapshot reference in exactly one form, or refuse with MalformedSnapshot."""
    kernel.snapshot_bytes(fs_root, mem_image, transcript)
    if transcript is not None:
        return TranscriptSnapshot(transcript)
    return ImageSnapshot(fs_root, mem_image)  # type: ignore[arg-type]


def snapshot_from_bytes(raw: bytes) -> Snapshot:
    """The snapshot whose canonical bytes are ``raw`` (as a park holds them)."""
    fs_root, mem_image, transcript = kernel.snapshot_parts(raw)
    if transcript is not None:
        return TranscriptSnapshot(transcript)
    return ImageSnapshot(fs_root, mem_image)  # type: ignore[arg-type]


class CallAccount(msgspec.Struct, frozen=True):
    """Calls an interval dispatched and results it resolved, by call id, in the host's order."""

    dispatched: tuple[str, ...] = ()
    resolved: tuple[str, ...] = ()


class Executed(msgspec.Struct, frozen=True):
    attestation: bytes
    calls: CallAccount | None = None
    # The canonical bytes, built (and so validated) once, when the segment is made.
    _raw: bytes = b""
    kind = EXECUTED

    def __post_init__(self) -> None:
        force_setattr(self, "_raw", kernel.executed_bytes(self.attestation, self.calls))

    def canonical(self) -> bytes:
        return self._raw


class Suspended(msgspec.Struct, frozen=True):
    snapshot: Snapshot
    manifest: bytes
    _raw: bytes = b""
    kind = SUSPENDED

    def __post_init__(self) -> None:
        force_setattr(self, "_raw", kernel.suspended_bytes(self.snapshot.canonical(),
                                                           self.manifest))

    def canonical(self) -> bytes:
        return self._raw


class Resumed(msgspec.Struct, frozen=True):
    snapshot: Snapshot
    manifest: bytes
    idle_uj: int
    idle_provenance: str
    idle_meter: str
    _raw: bytes = b""
    kind = RESUMED

    def __post_init__(self) -> None:
        force_setattr(self, "_raw", kernel.resumed_bytes(
            self.snapshot.canonical(), self.manifest, self.idle_uj, self.idle_provenance,
            self.idle_meter))

    def canonical(self) -> bytes:
        return self._raw


class Closed(msgspec.Struct, frozen=True):
    """A close; one that ends a park may carry the idle energy the park drew (all three
    idle fields, or none: ``kernel.closed_bytes``)."""

    idle_uj: int | None = None
    idle_provenance: str | None = None
    idle_meter: str | None = None
    _raw: bytes = b""
    kind = CLOSED

    def __post_init__(self) -> None:
        force_setattr(self, "_raw", kernel.closed_bytes(self.idle_uj, self.idle_provenance,
                                                        self.idle_meter))

    def canonical(self) -> bytes:
        return self._raw


class _SlotEnergy(msgspec.Struct, frozen=True, kw_only=True):
    """A warm slot and the energy it drew: warm-up, then idle until it ended."""

    slot: bytes
    warm_uj: int
    warm_provenance: str
    warm_meter: str
    idle_uj: int
    idle_provenance: str
    idle_meter: str

    def _energy(self) -> tuple[int, str, str, int, str, str]:
        return (self.warm_uj, self.warm_provenance, self.warm_meter, self.idle_uj,
                self.idle_provenance, self.idle_meter)


class Claimed(_SlotEnergy, frozen=True, kw_only=True):
    """A run's first segment when it starts from a warm pool's slot: the slot, its image
    park and manifest, and the energy the slot drew (warm-up, then idle until the claim).
    Zero energy is refused by the record (``ZeroClaimEnergy``), not here."""

    snapshot: ImageSnapshot
    manifest: bytes
    _raw: bytes = b""
    kind = CLAIMED

    def __post_init__(self) -> None:
        force_setattr(self, "_raw", kernel.claimed_bytes(
            self.slot, self.snapshot.canonical(), self.manifest, *self._energy()))

    def canonical(self) -> bytes:
        return self._raw


class Evicted(_SlotEnergy, frozen=True, kw_only=True):
    """A segment of a pool's own run: a slot evicted unclaimed and the energy it drew, the
    pool's overhead (zero refused by the record: ``ZeroOverheadEnergy``)."""

    _raw: bytes = b""
    kind = EVICTED

    def __post_init__(self) -> None:
        force_setattr(self, "_raw", kernel.evicted_bytes(self.slot, *self._energy()))

    def canonical(self) -> bytes:
        return self._raw


Segment = Executed | Suspended | Resumed | Closed | Claimed | Evicted


def executed(attestation: bytes, calls: CallAccount | None = None) -> Executed:
    """An executed segment, its fields checked (malformed call ids refused before hashing)."""
    return Executed(attestation, calls)


def suspended(snapshot: Snapshot, manifest: bytes) -> Suspended:
    return Suspended(snapshot, manifest)


def resumed(
    snapshot: Snapshot, manifest: bytes, idle_uj: int, provenance: str, meter: str
) -> Resumed:
    """A resumed segment. Zero idle energy is refused by the record, not here, so that the
    refusal is the named rule ``ZeroIdleEnergy`` wherever the segment came from."""
    return Resumed(snapshot, manifest, idle_uj, provenance, meter)
