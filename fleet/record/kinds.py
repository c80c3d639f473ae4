"""The segment kinds of a run record as one table: names, tags, fields, address order, bounds.

Every other module reads the kinds from here (through :mod:`fleet.record.kernel`, which re-exports
them): the phase table (:mod:`fleet.record.phases`), the two decoders into the kernel (the object
API, :mod:`fleet.record.segment`, and the wire structs, :mod:`fleet.record.wire`), the fast path's
address
walk (:func:`fleet.record.verify_fast.segment_addresses`), the host's outbox. A new field of a kind
is written here and in the kernel's bytes and step for it; ``tests/test_kinds.py`` holds the
wire structs, the segment objects and the fast path's address order to this table.

This module imports nothing of the project: it sits below the kernel and the phases.
"""

from __future__ import annotations

from typing import Final, Literal, NamedTuple

__all__ = [
    "CLAIMED",
    "CLOSED",
    "EVICTED",
    "EXECUTED",
    "KINDS",
    "MAX_INDEX",
    "RESUMED",
    "SUSPENDED",
    "TABLE",
    "TAGS",
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
    beside ``index``/``head``/``seal`` (the wire's names, in wire order) and the address
    fields its step reads, in the order it reads them (a dotted path into a field; an
    absent optional address is skipped)."""

    name: str
    tag: int
    fields: tuple[str, ...]
    addresses: tuple[str, ...]


_SNAPSHOT: Final = ("snapshot.fs_root", "snapshot.mem_image", "snapshot.transcript")
_SLOT_ENERGY: Final = ("warm_uj", "warm_provenance", "warm_meter", "idle_uj",
                       "idle_provenance", "idle_meter")
_IDLE: Final = ("idle_uj", "idle_provenance", "idle_meter")

TABLE: Final[dict[str, KindSpec]] = {
    EXECUTED: KindSpec(EXECUTED, 0x01, ("attestation", "attestation_object", "calls"),
                       ("attestation", "attestation_object.journal_root")),
    SUSPENDED: KindSpec(SUSPENDED, 0x02, ("snapshot", "manifest"), (*_SNAPSHOT, "manifest")),
    RESUMED: KindSpec(RESUMED, 0x03, ("snapshot", "manifest", *_IDLE),
                      (*_SNAPSHOT, "manifest")),
    CLOSED: KindSpec(CLOSED, 0x04, _IDLE, ()),
    CLAIMED: KindSpec(CLAIMED, 0x05, ("slot", *_SLOT_ENERGY, "snapshot", "manifest"),
                      ("slot", *_SNAPSHOT, "manifest")),
    EVICTED: KindSpec(EVICTED, 0x06, ("slot", *_SLOT_ENERGY), ("slot",)),
}

TAGS: Final[dict[str, int]] = {spec.name: spec.tag for spec in TABLE.values()}
