"""Segments of a run record as objects: the object API's decoder into :mod:`fleet.kernel`.

A segment is one of four kinds (executed, suspended, resumed, closed); a park's snapshot is
an image (a filesystem root and, optionally, a memory image) or a transcript. The canonical
bytes of each, and every check of their fields, are :mod:`fleet.kernel`'s: these classes
hold the values and ask the kernel for the bytes once, when built, so a malformed reference
is refused before anything is hashed, whichever way the object was made.
"""

from __future__ import annotations

import msgspec
from msgspec.structs import force_setattr

from fleet import kernel
from fleet.errors import MalformedSnapshot
from fleet.kernel import (
    CLOSED,
    EXECUTED,
    FORM_IMAGE,
    FORM_IMAGE_WITH_MEMORY,
    FORM_TRANSCRIPT,
    RESUMED,
    SUSPENDED,
)

__all__ = [
    "CLOSED",
    "EXECUTED",
    "RESUMED",
    "SUSPENDED",
    "CallAccount",
    "Closed",
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
    form = raw[32:33]
    if len(raw) == 33 and form == bytes((FORM_TRANSCRIPT,)):
        return TranscriptSnapshot(raw[:32])
    if len(raw) == 33 and form == bytes((FORM_IMAGE,)):
        return ImageSnapshot(raw[:32])
    if len(raw) == 65 and form == bytes((FORM_IMAGE_WITH_MEMORY,)):
        return ImageSnapshot(raw[:32], raw[33:])
    raise MalformedSnapshot("not the canonical bytes of a snapshot")


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
    kind = CLOSED

    def canonical(self) -> bytes:
        return kernel.CLOSED_BYTES


Segment = Executed | Suspended | Resumed | Closed


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
