"""Segments of a run record as objects: the object API's decoder into :mod:`fleet.record.kernel`.

A segment is one of six kinds (executed, suspended, resumed, closed, and a warm pool's
claimed and evicted); a park's snapshot is an image (a filesystem root and, optionally, a
memory image) or a transcript. The canonical bytes of each, and every check of their
fields, are :mod:`fleet.record.kernel`'s: these classes hold the values and ask the kernel for the
bytes once, when built, so a malformed reference is refused before anything is hashed,
whichever way the object was made. The six classes are built from the kinds table
(:mod:`fleet.record.kinds`): a kind's fields are its row's, in its order.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

import msgspec
from msgspec.structs import force_setattr

from fleet_ledger.fleet.record import kernel
from fleet_ledger.fleet.record.kinds import (
    ADDRESS,
    CALLS,
    CLAIMED,
    CLOSED,
    EVICTED,
    EXECUTED,
    FIELD_TYPES,
    PROVENANCE,
    RESUMED,
    SNAPSHOT,
    SUSPENDED,
    TABLE,
    TEXT,
    UJ,
    FieldType,
    KindSpec,
)

__all__ = [
    "CLAIMED",
    "CLOSED",
    "EVICTED",
    "EXECUTED",
    "RESUMED",
    "SEGMENT_CLASS",
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
    assert fs_root is not None  # snapshot_bytes refused a reference of neither form
    return ImageSnapshot(fs_root, mem_image)


def snapshot_from_bytes(raw: bytes) -> Snapshot:
    """The snapshot whose canonical bytes are ``raw`` (as a park holds them)."""
    fs_root, mem_image, transcript = kernel.snapshot_parts(raw)
    if transcript is not None:
        return TranscriptSnapshot(transcript)
    assert fs_root is not None  # snapshot_parts gives an image form its root
    return ImageSnapshot(fs_root, mem_image)


class CallAccount(msgspec.Struct, frozen=True):
    """Calls an interval dispatched and results it resolved, by call id, in the host's order."""

    dispatched: tuple[str, ...] = ()
    resolved: tuple[str, ...] = ()


# Each kind's object, built from its row of the table (fleet.record.kinds): its fields in the
# table's order, typed by what they hold, and the canonical bytes built (and so checked) once,
# when the segment is made, by the kernel (kernel.BODIES, called with the fields in order).
_TYPES: dict[FieldType, Any] = {ADDRESS: bytes, SNAPSHOT: Snapshot, UJ: int, PROVENANCE: str,
                                TEXT: str, CALLS: CallAccount}
_DOCS = {
    EXECUTED: "An executed interval: its attestation's address and, where kept, its call "
              "account (its attestation object travels beside it).",
    SUSPENDED: "A park: the snapshot it holds and the run's environment manifest.",
    RESUMED: "A resume: the park's snapshot and manifest, and the idle energy the park drew "
             "(zero is refused by the record, ``ZeroIdleEnergy``, not here).",
    CLOSED: "A close; one that ends a park may carry the idle energy the park drew (all three "
            "idle fields, or none: ``kernel.closed_bytes``).",
    CLAIMED: "A run's first segment when it starts from a warm pool's slot: the slot, its "
             "image park and manifest, and the energy the slot drew (warm-up, then idle "
             "until the claim; zero is refused by the record, ``ZeroClaimEnergy``).",
    EVICTED: "A segment of a pool's own run: a slot evicted unclaimed and the energy it drew, "
             "the pool's overhead (zero refused by the record: ``ZeroOverheadEnergy``).",
}


def _segment_class(spec: KindSpec) -> type:
    names = tuple(f for f in spec.fields if not FIELD_TYPES[f].beside)
    body = kernel.BODIES[spec.name]
    snapshot = names.index("snapshot") if "snapshot" in names else -1
    values_of = attrgetter(*names, "_raw")  # a tuple, whatever the count of fields

    def __post_init__(self: Any) -> None:
        values = values_of(self)[:-1]
        if snapshot >= 0:
            values = (*values[:snapshot], values[snapshot].canonical(), *values[snapshot + 1:])
        force_setattr(self, "_raw", body(*values))

    def canonical(self: Any) -> bytes:
        return self._raw  # type: ignore[no-any-return]  # the class is made from the table (self: Any)

    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = [
        (name, _TYPES[FIELD_TYPES[name]] | None, None) if name in spec.optional
        else (name, _TYPES[FIELD_TYPES[name]]) for name in names]
    fields.append(("_raw", bytes, b""))
    return msgspec.defstruct(
        spec.name.capitalize(), fields, frozen=True, module=__name__,
        namespace={"kind": spec.name, "__doc__": _DOCS[spec.name],
                   "__post_init__": __post_init__, "canonical": canonical})


_CLASSES = {kind: _segment_class(spec) for kind, spec in TABLE.items()}
Executed: Any = _CLASSES[EXECUTED]
Suspended: Any = _CLASSES[SUSPENDED]
Resumed: Any = _CLASSES[RESUMED]
Closed: Any = _CLASSES[CLOSED]
Claimed: Any = _CLASSES[CLAIMED]
Evicted: Any = _CLASSES[EVICTED]
SEGMENT_CLASS: dict[str, Any] = _CLASSES  # a kind's segment class, by its name

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
