"""Wire and file forms of segments and run records (JSON via msgspec), decoded strictly.

A segment travels as one JSON object with its kind, its 1-based ``index``, the ``head`` after
it, its ``seal`` (base64 of 64 bytes) and the fields of its kind, named as in the spec:

    executed   attestation, attestation_object {receipt {uj, provenance, meter},
               journal_root, outcome}, calls {dispatched, resolved} (absent = unaccounted)
    suspended  snapshot {fs_root[, mem_image]} | {transcript}, manifest
    resumed    snapshot, manifest, idle_uj, idle_provenance, idle_meter
    closed     (nothing more), or idle_uj, idle_provenance, idle_meter when it ends a park
    claimed    slot, snapshot {fs_root[, mem_image]}, manifest, warm_uj, warm_provenance,
               warm_meter, idle_uj, idle_provenance, idle_meter
    evicted    slot, warm_uj, warm_provenance, warm_meter, idle_uj, idle_provenance,
               idle_meter

Each kind's struct is built from its row of the kinds table (:mod:`fleet.record.kinds`), and
each form is turned into the other field by field, by what the field holds.

A field that does not belong to the kind is refused (``MalformedSegment``), so no byte of the
wire form is ignored: every byte either feeds the hash or is checked against it. Decoding is
one msgspec tagged union (``kind`` selects the struct), so those checks run in C.

On NATS a segment goes inside an envelope that names its host and run and carries the unit
and grant ids, so the ledger can recompute the run identity from the first message.
A run record file is ``{"format", "unit_id", "grants_id", "run", "host_key", "segments"}``;
every one of its fields is checked (``run`` against genesis, ``host_key`` by the seals).
"""

from __future__ import annotations

import base64
import binascii
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias

import msgspec

from fleet_ledger.fleet.address import format_address, message_id, parse_address
from fleet_ledger.fleet.errors import FleetError, MalformedSegment, RecordError, ValueOutOfRange
from fleet_ledger.fleet.record.attestation import Attestation, make_attestation
from fleet_ledger.fleet.record.kinds import (
    ADDRESS,
    ATTESTATION,
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
    index_in_range,
)
from fleet_ledger.fleet.record.segment import (
    SEGMENT_CLASS,
    CallAccount,
    ImageSnapshot,
    Segment,
    Snapshot,
    make_snapshot,
)

__all__ = [
    "ENVELOPE_VERSION",
    "MAX_MESSAGE",
    "RECORD_FORMAT",
    "WIRE_KIND",
    "WIRE_STRUCT",
    "AttestationWire",
    "CallsWire",
    "ClaimedWire",
    "ClosedWire",
    "Envelope",
    "EnvelopeWire",
    "EvictedWire",
    "ExecutedWire",
    "ReceiptWire",
    "RecordWire",
    "ResumedWire",
    "SealedSegment",
    "SegmentWire",
    "SnapshotWire",
    "SuspendedWire",
    "decode_envelope",
    "decode_record",
    "encode_envelope",
    "encode_record",
    "envelope_from_wire",
    "envelope_wire",
    "identity",
    "seal_bytes",
    "segment_from_wire",
    "segment_id",
    "segment_to_wire",
    "snapshot_from_wire",
]


ENVELOPE_VERSION = 1
RECORD_FORMAT = "fleet.runrecord/1"
MAX_MESSAGE = 256 * 1024

# The wire structs are ``gc=False``: a decoded message is a tree (no struct can reach itself),
# and the fold decodes thousands a batch, which the cycle collector would otherwise scan
# over and over (about 5% of the fold's time).


class ReceiptWire(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    uj: int
    provenance: str
    meter: str


class AttestationWire(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    receipt: ReceiptWire
    journal_root: str
    outcome: str


class CallsWire(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    dispatched: list[str]
    resolved: list[str]


class SnapshotWire(msgspec.Struct, gc=False, forbid_unknown_fields=True, omit_defaults=True):
    fs_root: str | None = None
    mem_image: str | None = None
    transcript: str | None = None


class _Sealer(msgspec.Struct, gc=False, forbid_unknown_fields=True, omit_defaults=True,
              kw_only=True):
    # The host that sealed the segment: named in a record file sealed by several hosts;
    # absent on the wire (the envelope names it) and in a single-host file.
    host: str | None = None


class _SegmentBase(_Sealer, gc=False, forbid_unknown_fields=True, omit_defaults=True,
                   tag_field="kind"):
    index: int
    head: str
    seal: str


# Each kind's struct, built from its row of the table (fleet.record.kinds): its fields in the
# table's (and the wire's) order, typed by what they hold; an optional one may be absent.
_TYPES: dict[FieldType, Any] = {ADDRESS: str, SNAPSHOT: SnapshotWire, UJ: int, PROVENANCE: str,
                                TEXT: str, CALLS: CallsWire, ATTESTATION: AttestationWire}


def _wire_struct(spec: KindSpec) -> Any:
    fields = [(name, _TYPES[FIELD_TYPES[name]] | None, None) if name in spec.optional
              else (name, _TYPES[FIELD_TYPES[name]]) for name in spec.fields]
    return msgspec.defstruct(f"{spec.name.capitalize()}Wire", fields, bases=(_SegmentBase,),
                             tag=spec.name, module=__name__)


# The kind of each wire segment struct, and the struct of each kind.
WIRE_KIND: dict[type, str] = {_wire_struct(spec): kind for kind, spec in TABLE.items()}
WIRE_STRUCT: dict[str, Any] = {kind: cls for cls, kind in WIRE_KIND.items()}
ExecutedWire: Any = WIRE_STRUCT[EXECUTED]
SuspendedWire: Any = WIRE_STRUCT[SUSPENDED]
ResumedWire: Any = WIRE_STRUCT[RESUMED]
ClosedWire: Any = WIRE_STRUCT[CLOSED]
ClaimedWire: Any = WIRE_STRUCT[CLAIMED]
EvictedWire: Any = WIRE_STRUCT[EVICTED]

# A tagged union: msgspec picks the struct by "kind" and refuses any field of another kind.
# Its members are made from the table at import, so the type checker knows them only as
# their common base (index, head, seal); a decoder reads a kind's own fields as Any.
if TYPE_CHECKING:
    SegmentWire: TypeAlias = _SegmentBase
else:
    SegmentWire = (ExecutedWire | SuspendedWire | ResumedWire | ClosedWire | ClaimedWire
                   | EvictedWire)


class EnvelopeWire(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    v: int
    host: str
    run: str
    unit_id: str
    grants_id: str
    segment: SegmentWire


class RecordWire(msgspec.Struct, gc=False, forbid_unknown_fields=True, omit_defaults=True):
    unit_id: str
    grants_id: str
    segments: list[SegmentWire]
    format: str = RECORD_FORMAT
    run: str | None = None
    host_key: str | None = None
    # A run sealed by several hosts: each host's name and base64 key (each segment then
    # names its host); absent for a single-host record, sealed under ``host_key``.
    hosts: dict[str, str] | None = None



class SealedSegment(msgspec.Struct, frozen=True):
    """A segment with what travels beside it: its position, stated head, seal, attestation."""

    index: int
    segment: Segment
    head: bytes
    seal: bytes
    attestation: Attestation | None = None


class Envelope(msgspec.Struct, frozen=True):
    v: int
    host: str
    run: bytes
    unit_id: bytes
    grants_id: bytes
    sealed: SealedSegment


# -- decoding ------------------------------------------------------------------------------


# The last base64 character of 64 bytes carries 2 bits and 4 spare ones, zero when canonical.
_SEAL_LAST = frozenset("AQgw")


def seal_bytes(text: str) -> bytes:
    """The 64 bytes of a seal's canonical base64 text, or ``MalformedSegment``."""
    try:
        raw = binascii.a2b_base64(text, strict_mode=True)
    except (binascii.Error, ValueError, TypeError) as exc:
        raise MalformedSegment("a seal is the base64 of 64 bytes") from exc
    # Strict decoding of 64 bytes means 86 characters and "==": only the spare bits remain.
    if len(raw) != 64 or text[85] not in _SEAL_LAST:
        raise MalformedSegment("a seal is the canonical base64 of 64 bytes")
    return raw


def snapshot_from_wire(wire: SnapshotWire,
                       parse: Callable[[str], bytes] = parse_address) -> Snapshot:
    """The snapshot of a wire form; ``parse`` turns each present address (fs_root,
    mem_image, transcript, in that order) into bytes (a caller that parsed them already
    hands them back instead of parsing again)."""
    return make_snapshot(
        fs_root=None if wire.fs_root is None else parse(wire.fs_root),
        mem_image=None if wire.mem_image is None else parse(wire.mem_image),
        transcript=None if wire.transcript is None else parse(wire.transcript),
    )


def segment_from_wire(wire: SegmentWire) -> SealedSegment:
    """Turn a decoded wire segment into core objects; refusals carry the segment's index."""
    try:
        return _segment_from_wire(wire)
    except RecordError as exc:
        raise exc.at(wire.index) from None


def _calls(wire: CallsWire) -> CallAccount:
    return CallAccount(tuple(wire.dispatched), tuple(wire.resolved))


def _attestation(wire: AttestationWire) -> Attestation:
    r = wire.receipt
    return make_attestation(r.uj, r.provenance, r.meter, parse_address(wire.journal_root),
                            wire.outcome)


# How each type of field turns from its wire form into the object's (None: as it is).
_FROM_WIRE: dict[FieldType, Callable[[Any], Any] | None] = {
    ADDRESS: parse_address, SNAPSHOT: snapshot_from_wire, CALLS: _calls, UJ: None,
    PROVENANCE: None, TEXT: None}
# Per kind: the attestation object's field (or None), and (field, conversion) of the rest.
_DECODE: dict[type, tuple[str | None, tuple[tuple[str, Callable[[Any], Any] | None], ...]]] = {
    cls: (next((f for f in TABLE[kind].fields if FIELD_TYPES[f].beside), None),
          tuple((f, _FROM_WIRE[FIELD_TYPES[f]]) for f in TABLE[kind].fields
                if not FIELD_TYPES[f].beside))
    for cls, kind in WIRE_KIND.items()}


def _segment_from_wire(wire: SegmentWire) -> SealedSegment:
    if not index_in_range(wire.index):
        raise ValueOutOfRange(f"segment index out of range: {wire.index!r}")
    beside, fields = _DECODE[type(wire)]
    # The attestation object first: its refusal comes before the segment's own fields'.
    attestation = None if beside is None else _attestation(getattr(wire, beside))
    values = []
    for name, convert in fields:
        value = getattr(wire, name)
        values.append(value if convert is None or value is None else convert(value))
    segment = SEGMENT_CLASS[WIRE_KIND[type(wire)]](*values)
    return SealedSegment(wire.index, segment, parse_address(wire.head), seal_bytes(wire.seal),
                         attestation)


# Run, unit and grant ids repeat in every message of a run; their parses are memoised (a
# refused text raises and is not cached).
identity = functools.lru_cache(maxsize=16384)(parse_address)
_envelope_decoder = msgspec.json.Decoder(EnvelopeWire)
_record_decoder = msgspec.json.Decoder(RecordWire)


def envelope_wire(data: bytes) -> EnvelopeWire | None:
    """The message's wire struct for the fold's fast path, or ``None`` where
    :func:`decode_envelope` refuses it before its fields (size, JSON shape, version)."""
    try:
        return _wire(data)
    except FleetError:
        return None


def _wire(data: bytes) -> EnvelopeWire:
    if len(data) > MAX_MESSAGE:
        raise ValueOutOfRange(f"a message of {len(data)} bytes exceeds {MAX_MESSAGE}")
    try:
        wire = _envelope_decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise MalformedSegment(f"undecodable segment message: {exc}") from None
    if wire.v != ENVELOPE_VERSION:
        raise MalformedSegment(f"unknown envelope version {wire.v!r}")
    if wire.segment.host is not None:
        raise MalformedSegment("a segment on the wire names no host: its envelope does",
                               segment=wire.segment.index)
    return wire


def decode_envelope(data: bytes) -> Envelope:
    """Decode one NATS message; anything undecodable is ``MalformedSegment``."""
    return envelope_from_wire(_wire(data))


def envelope_from_wire(wire: EnvelopeWire) -> Envelope:
    """The core objects of an envelope already decoded by :func:`envelope_wire` (its
    fields still checked here: a refusal names the first that fails)."""
    return Envelope(
        wire.v, wire.host, identity(wire.run), identity(wire.unit_id),
        identity(wire.grants_id), segment_from_wire(wire.segment),
    )


def decode_record(data: bytes) -> RecordWire:
    """Decode a record file's JSON (segments stay in wire form until verification)."""
    try:
        return _record_decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise MalformedSegment(f"not a run record file: {exc}") from None


# -- encoding ------------------------------------------------------------------------------


def _snapshot_wire(snapshot: Snapshot) -> SnapshotWire:
    if isinstance(snapshot, ImageSnapshot):
        return SnapshotWire(
            fs_root=format_address(snapshot.fs_root),
            mem_image=None if snapshot.mem_image is None else format_address(snapshot.mem_image),
        )
    return SnapshotWire(transcript=format_address(snapshot.transcript))


def _calls_wire(calls: CallAccount) -> CallsWire:
    return CallsWire(list(calls.dispatched), list(calls.resolved))


# How each type of field turns from the object's form into its wire form (None: as it is).
_TO_WIRE: dict[FieldType, Callable[[Any], Any] | None] = {
    ADDRESS: format_address, SNAPSHOT: _snapshot_wire, CALLS: _calls_wire, UJ: None,
    PROVENANCE: None, TEXT: None}


# Per kind: (field, whether it is the attestation object, conversion) of each field.
_ENCODE: dict[str, tuple[tuple[str, bool, Callable[[Any], Any] | None], ...]] = {
    kind: tuple((f, FIELD_TYPES[f].beside, _TO_WIRE.get(FIELD_TYPES[f])) for f in spec.fields)
    for kind, spec in TABLE.items()}


def _attestation_wire(att: Attestation | None) -> AttestationWire:
    assert att is not None
    r = att.receipt
    return AttestationWire(ReceiptWire(r.uj, r.provenance, r.meter),
                           format_address(att.journal_root), att.outcome)


def segment_to_wire(sealed: SealedSegment, host: str | None = None) -> SegmentWire:
    """The wire form of a sealed segment; ``host``: the host that sealed it, named in a
    record file sealed by several hosts."""
    seg = sealed.segment
    values: list[Any] = [sealed.index, format_address(sealed.head),
                         base64.b64encode(sealed.seal).decode("ascii")]
    for name, beside, convert in _ENCODE[seg.kind]:
        if beside:
            values.append(_attestation_wire(sealed.attestation))
            continue
        value = getattr(seg, name)
        values.append(value if convert is None or value is None else convert(value))
    return WIRE_STRUCT[seg.kind](*values, host=host)  # type: ignore[no-any-return]  # made from the table


def encode_envelope(
    host: str, run: bytes, unit_id: bytes, grants_id: bytes, sealed: SealedSegment
) -> bytes:
    return msgspec.json.encode(EnvelopeWire(
        ENVELOPE_VERSION, host, format_address(run), format_address(unit_id),
        format_address(grants_id), segment_to_wire(sealed),
    ))


def segment_id(data: bytes) -> str:
    """The ``Nats-Msg-Id`` of an encoded envelope: ``seg-`` and 16 bytes of BLAKE3 of all of
    it. The head alone is not enough: two hosts resuming one park with the same snapshot,
    manifest and idle energy seal segments with one head, and the broker would drop the
    second as a duplicate of the first, even when the ledger refused the first."""
    return message_id("seg", data)


def encode_record(record: RecordWire) -> bytes:
    return msgspec.json.format(msgspec.json.encode(record), indent=2) + b"\n"
