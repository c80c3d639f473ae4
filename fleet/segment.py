"""Segments of a run record and their canonical bytes.

A segment is one of four kinds. Its canonical bytes (what the chain folds) are::

    executed   0x01 || attestation[32]                      (no call account)
    executed   0x01 || attestation[32] || 0x01 || ids(dispatched) || ids(resolved)
    suspended  0x02 || snapshot || manifest[32]
    resumed    0x03 || snapshot || manifest[32] || idle_uj:u64 || provenance:u8 || text(meter)
    closed     0x04

    snapshot   fs_root[32] || 0x00                          image park, no memory image
               fs_root[32] || 0x01 || mem_image[32]         image park with a memory image
               transcript[32] || 0x02                       transcript park
    ids(s)     count:u32 || (len:u32 || utf8)*count
    text(t)    len:u16 || utf8

All integers are big-endian. ``docs/spec/run-record.md`` is the normative text.

References are validated when they are built, so a malformed one never reaches the hash.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final

import msgspec
from msgspec.structs import force_setattr

from fleet.errors import MalformedCallAccount, MalformedSnapshot, ValueOutOfRange

EXECUTED: Final = "executed"
SUSPENDED: Final = "suspended"
RESUMED: Final = "resumed"
CLOSED: Final = "closed"
KINDS: Final = (EXECUTED, SUSPENDED, RESUMED, CLOSED)

TAG_EXECUTED: Final = 0x01
TAG_SUSPENDED: Final = 0x02
TAG_RESUMED: Final = 0x03
TAG_CLOSED: Final = 0x04

FORM_IMAGE: Final = 0x00
FORM_IMAGE_WITH_MEMORY: Final = 0x01
FORM_TRANSCRIPT: Final = 0x02
ACCOUNT_PRESENT: Final = 0x01

PROVENANCES: Final = {"measured": 1, "estimated": 2}
MAX_U64: Final = 2**64 - 1
MAX_TEXT: Final = 128
MAX_CALL_ID: Final = 256
MAX_CALLS: Final = 4096

_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
_IDLE = struct.Struct(">QB")


def check_digest(value: object, what: str) -> bytes:
    if not isinstance(value, bytes) or len(value) != 32:
        raise ValueOutOfRange(f"{what} must be 32 bytes")
    return value


def check_u64(value: object, what: str) -> int:
    if type(value) is not int or not 0 <= value <= MAX_U64:
        raise ValueOutOfRange(f"{what} must be an integer in 0..2^64-1, got {value!r}")
    return value


def check_provenance(value: object) -> str:
    if value not in PROVENANCES:
        raise ValueOutOfRange(f"provenance must be 'measured' or 'estimated', got {value!r}")
    return value  # type: ignore[return-value]


# Meters and outcomes repeat across segments: their checked encodings are memoised
# (bounded; a refused text raises and is never stored).
_TEXTS: dict[str, bytes] = {}


def encode_text(value: object, what: str, limit: int = MAX_TEXT) -> bytes:
    """``len:u16 || utf8`` of a non-empty text without control characters."""
    if limit != MAX_TEXT:
        return _encode_text(value, what, limit)
    held = _TEXTS.get(value) if type(value) is str else None
    if held is None:
        held = _encode_text(value, what, limit)
        if len(_TEXTS) < 4096:
            _TEXTS[value] = held  # type: ignore[index]
    return held


def _encode_text(value: object, what: str, limit: int) -> bytes:
    if not isinstance(value, str) or not value or not value.isprintable():
        raise ValueOutOfRange(f"{what} must be non-empty printable text, got {value!r}")
    raw = value.encode("utf-8")
    if len(raw) > limit:
        raise ValueOutOfRange(f"{what} is {len(raw)} bytes, the limit is {limit}")
    return _U16.pack(len(raw)) + raw


class ImageSnapshot(msgspec.Struct, frozen=True):
    """An image park: a filesystem root and, where resident state was suspended, a memory image."""

    fs_root: bytes
    mem_image: bytes | None = None

    def canonical(self) -> bytes:
        if self.mem_image is None:
            return self.fs_root + b"\x00"
        return self.fs_root + b"\x01" + self.mem_image


class TranscriptSnapshot(msgspec.Struct, frozen=True):
    """A transcript park: the content address of the run's own transcript, nothing on the host."""

    transcript: bytes

    def canonical(self) -> bytes:
        return self.transcript + b"\x02"


Snapshot = ImageSnapshot | TranscriptSnapshot


def make_snapshot(
    *,
    fs_root: bytes | None = None,
    mem_image: bytes | None = None,
    transcript: bytes | None = None,
) -> Snapshot:
    """Build a snapshot reference in exactly one form, or refuse with MalformedSnapshot."""
    if transcript is not None:
        if mem_image is not None:
            raise MalformedSnapshot(
                "a transcript park beside a memory image claims to retain nothing on the host "
                "while holding an image on it"
            )
        if fs_root is not None:
            raise MalformedSnapshot("a snapshot reference names both an image and a transcript")
        return TranscriptSnapshot(check_digest(transcript, "transcript"))
    if fs_root is None:
        if mem_image is not None:
            raise MalformedSnapshot("an image park needs a filesystem root")
        raise MalformedSnapshot("a snapshot reference names neither an image nor a transcript")
    fs = check_digest(fs_root, "fs_root")
    mem = None if mem_image is None else check_digest(mem_image, "mem_image")
    return ImageSnapshot(fs, mem)


_NO_IDS = _U32.pack(0)


def encode_ids(ids: Sequence[str], what: str) -> bytes:
    """``count:u32 || (len:u32 || utf8)*`` of a call-id list, each id checked."""
    count = len(ids)
    if not count:
        return _NO_IDS
    if count > MAX_CALLS:
        raise MalformedCallAccount(f"{what} holds {count} ids, the limit is {MAX_CALLS}")
    parts = [_U32.pack(count)]
    for call_id in ids:
        if not isinstance(call_id, str) or not call_id or not call_id.isprintable():
            raise MalformedCallAccount(f"{what} ids must be non-empty printable text")
        raw = call_id.encode()
        if len(raw) > MAX_CALL_ID:
            raise MalformedCallAccount(f"a call id is {len(raw)} bytes, limit {MAX_CALL_ID}")
        parts += (_U32.pack(len(raw)), raw)
    return b"".join(parts)


class CallAccount(msgspec.Struct, frozen=True):
    """Calls an interval dispatched and results it resolved, by call id, in the host's order."""

    dispatched: tuple[str, ...] = ()
    resolved: tuple[str, ...] = ()

    def canonical(self) -> bytes:
        return (
            b"\x01"
            + encode_ids(self.dispatched, "dispatched")
            + encode_ids(self.resolved, "resolved")
        )


class Executed(msgspec.Struct, frozen=True):
    attestation: bytes
    calls: CallAccount | None = None
    # The canonical bytes, built (and so validated) once, when the segment is made.
    _raw: bytes = b""
    kind = EXECUTED

    def __post_init__(self) -> None:
        base = b"\x01" + self.attestation
        raw = base if self.calls is None else base + self.calls.canonical()
        force_setattr(self, "_raw", raw)

    def canonical(self) -> bytes:
        return self._raw


class Suspended(msgspec.Struct, frozen=True):
    snapshot: Snapshot
    manifest: bytes
    _raw: bytes = b""
    kind = SUSPENDED

    def __post_init__(self) -> None:
        force_setattr(self, "_raw", b"\x02" + self.snapshot.canonical() + self.manifest)

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
        raw = (
            b"\x03"
            + self.snapshot.canonical()
            + self.manifest
            + _IDLE.pack(self.idle_uj, PROVENANCES[self.idle_provenance])
            + encode_text(self.idle_meter, "meter")
        )
        force_setattr(self, "_raw", raw)

    def canonical(self) -> bytes:
        return self._raw


class Closed(msgspec.Struct, frozen=True):
    kind = CLOSED

    def canonical(self) -> bytes:
        return b"\x04"


Segment = Executed | Suspended | Resumed | Closed


def executed(attestation: bytes, calls: CallAccount | None = None) -> Executed:
    """An executed segment, its fields checked (malformed call ids refused before hashing)."""
    return Executed(check_digest(attestation, "attestation"), calls)


def suspended(snapshot: Snapshot, manifest: bytes) -> Suspended:
    return Suspended(snapshot, check_digest(manifest, "manifest"))


def resumed(
    snapshot: Snapshot, manifest: bytes, idle_uj: int, provenance: str, meter: str
) -> Resumed:
    """A resumed segment. Zero idle energy is refused by the record, not here, so that the
    refusal is the named rule ``ZeroIdleEnergy`` wherever the segment came from."""
    check_u64(idle_uj, "idle_uj")
    check_provenance(provenance)
    return Resumed(snapshot, check_digest(manifest, "manifest"), idle_uj, provenance, meter)
