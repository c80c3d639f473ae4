"""The segment kinds of a run record as one table: names, tags, fields, address order, bounds.

Every other module reads the kinds from here (through :mod:`fleet.record.kernel`, which re-exports
them): the phase table (:mod:`fleet.record.phases`), the two decoders into the kernel (the object
API, :mod:`fleet.record.segment`, and the wire structs, :mod:`fleet.record.wire`, both built from
this table: each kind's struct has its row's fields, typed by :data:`FIELD_TYPES`, and each
form is turned into the other field by field), the fast path's address walk
(:func:`fleet.record.verify_fast.segment_addresses`), the host's outbox. A new field of a kind
is written here (its row, its type) and in the kernel's bytes (a parameter of the field's name,
:data:`fleet.record.kernel.BODIES`) and step for it; ``tests/test_kinds.py`` holds the wire
structs, the segment objects, the kernel's bytes and the fast path's address order to this
table.

This module imports nothing of the project: it sits below the kernel and the phases.
"""

from __future__ import annotations

from typing import Final, Literal, NamedTuple

__all__ = [
    "ADDRESS",
    "ATTESTATION",
    "CALLS",
    "CLAIMED",
    "CLOSED",
    "EVICTED",
    "EXECUTED",
    "FIELD_TYPES",
    "KINDS",
    "MAX_INDEX",
    "PROVENANCE",
    "RESUMED",
    "SNAPSHOT",
    "SUSPENDED",
    "TABLE",
    "TAGS",
    "TEXT",
    "UJ",
    "FieldType",
    "Kind",
    "KindSpec",
    "index_in_range",
]

EXECUTED: Final = "executed"
SUSPENDED: Final = "suspended"
RESUMED: Final = "resumed"
CLOSED: Final = "closed"
CLAIMED: Final = "claimed"
EVICTED: Final = "evicted"
KINDS: Final = (EXECUTED, SUSPENDED, RESUMED, CLOSED, CLAIMED, EVICTED)
# The same names as a type (tests/test_kinds.py holds the two equal).
Kind = Literal["executed", "suspended", "resumed", "closed", "claimed", "evicted"]

# A segment's index is 1-based and below 2**63: every store holds it as a signed 64-bit
# integer, so a larger one is refused at the decoder (``ValueOutOfRange``), never stored.
MAX_INDEX: Final = 2**63 - 1


def index_in_range(index: object) -> bool:
    """Whether ``index`` is an int a segment may carry (``1 .. MAX_INDEX``)."""
    return type(index) is int and 1 <= index <= MAX_INDEX


class KindSpec(NamedTuple):
    """One kind: its name, its tag byte (the first byte of its canonical bytes), its fields
    beside ``index``/``head``/``seal`` (the wire's names, in wire order), the address
    fields its step reads, in the order it reads them (a dotted path into a field; an
    absent optional address is skipped), and the fields that may be absent (``None``)."""

    name: str
    tag: int
    fields: tuple[str, ...]
    addresses: tuple[str, ...]
    optional: tuple[str, ...] = ()


class FieldType(NamedTuple):
    """What a field holds, by name (each form maps the name to its own type): ``address``
    (32 bytes; on the wire, its address text), ``snapshot`` (a park reference), ``uj``
    (microjoules), ``provenance``, ``text``, ``calls`` (a call account), ``attestation``
    (the attestation object: it travels beside the segment, which holds only its address)."""

    name: str
    beside: bool = False


ADDRESS: Final = FieldType("address")
SNAPSHOT: Final = FieldType("snapshot")
UJ: Final = FieldType("uj")
PROVENANCE: Final = FieldType("provenance")
TEXT: Final = FieldType("text")
CALLS: Final = FieldType("calls")
ATTESTATION: Final = FieldType("attestation", beside=True)


_SNAPSHOT: Final = ("snapshot.fs_root", "snapshot.mem_image", "snapshot.transcript")
_SLOT_ENERGY: Final = ("warm_uj", "warm_provenance", "warm_meter", "idle_uj",
                       "idle_provenance", "idle_meter")
_IDLE: Final = ("idle_uj", "idle_provenance", "idle_meter")

TABLE: Final[dict[str, KindSpec]] = {
    EXECUTED: KindSpec(EXECUTED, 0x01, ("attestation", "attestation_object", "calls"),
                       ("attestation", "attestation_object.journal_root"), ("calls",)),
    SUSPENDED: KindSpec(SUSPENDED, 0x02, ("snapshot", "manifest"), (*_SNAPSHOT, "manifest")),
    RESUMED: KindSpec(RESUMED, 0x03, ("snapshot", "manifest", *_IDLE),
                      (*_SNAPSHOT, "manifest")),
    CLOSED: KindSpec(CLOSED, 0x04, _IDLE, (), _IDLE),
    CLAIMED: KindSpec(CLAIMED, 0x05, ("slot", *_SLOT_ENERGY, "snapshot", "manifest"),
                      ("slot", *_SNAPSHOT, "manifest")),
    EVICTED: KindSpec(EVICTED, 0x06, ("slot", *_SLOT_ENERGY), ("slot",)),
}

TAGS: Final[dict[str, int]] = {spec.name: spec.tag for spec in TABLE.values()}

# Each field's type, by its name (a name means one thing in every kind).
FIELD_TYPES: Final[dict[str, FieldType]] = {
    "attestation": ADDRESS, "attestation_object": ATTESTATION, "calls": CALLS,
    "snapshot": SNAPSHOT, "manifest": ADDRESS, "slot": ADDRESS,
    "warm_uj": UJ, "warm_provenance": PROVENANCE, "warm_meter": TEXT,
    "idle_uj": UJ, "idle_provenance": PROVENANCE, "idle_meter": TEXT,
}
