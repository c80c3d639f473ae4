"""The kinds table (fleet.record.kinds) is what the wire structs, the segment objects, the
kernel's bytes and the fast path's address walk hold."""

from __future__ import annotations

import contextlib
import inspect
import typing
from typing import Any

import pytest

from fleet_ledger.fleet.address import format_address, parse_address
from fleet_ledger.fleet.errors import FleetError
from fleet_ledger.fleet.record import kernel
from fleet_ledger.fleet.record.kinds import (
    FIELD_TYPES,
    KINDS,
    MAX_INDEX,
    TABLE,
    Kind,
    index_in_range,
)
from fleet_ledger.fleet.record.phases import PARKED, RAN
from fleet_ledger.fleet.record.segment import Segment
from fleet_ledger.fleet.record.verify_fast import segment_addresses, step
from fleet_ledger.fleet.record.wire import (
    WIRE_KIND,
    AttestationWire,
    CallsWire,
    ClaimedWire,
    ClosedWire,
    EvictedWire,
    ExecutedWire,
    ReceiptWire,
    ResumedWire,
    SnapshotWire,
    SuspendedWire,
)

_SEALING = ("host", "index", "head", "seal")


def _addr(n: int) -> str:
    return format_address(bytes([n]) * 32)


def _snapshots() -> list[SnapshotWire]:
    return [SnapshotWire(fs_root=_addr(3)), SnapshotWire(fs_root=_addr(3), mem_image=_addr(4)),
            SnapshotWire(transcript=_addr(5))]


def _samples() -> list[Any]:
    """One wire segment of each kind and each snapshot form, every address distinct."""
    base: dict[str, Any] = {"index": 2, "head": _addr(1), "seal": ""}
    energy = {"warm_uj": 5, "warm_provenance": "measured", "warm_meter": "m", "idle_uj": 6,
              "idle_provenance": "estimated", "idle_meter": "m"}
    att = AttestationWire(ReceiptWire(7, "measured", "m"), _addr(9), "ok")
    out: list[Any] = [ExecutedWire(**base, attestation=_addr(8), attestation_object=att),
                      ExecutedWire(**base, attestation=_addr(8), attestation_object=att,
                                   calls=CallsWire(["a"], ["a"])),
                      ClosedWire(**base), ClosedWire(**base, idle_uj=3, idle_provenance="measured",
                                                     idle_meter="m"),
                      EvictedWire(**base, slot=_addr(2), **energy)]
    for snap in _snapshots():
        out += [SuspendedWire(**base, snapshot=snap, manifest=_addr(6)),
                ResumedWire(**base, snapshot=snap, manifest=_addr(6), idle_uj=3,
                            idle_provenance="measured", idle_meter="m")]
        if snap.transcript is None:
            out.append(ClaimedWire(**base, slot=_addr(2), snapshot=snap, manifest=_addr(6),
                                   **energy))
    return out


def _table_addresses(wire: Any) -> list[str]:
    """The address texts of ``wire`` in the order the table gives (absent ones skipped)."""
    out = []
    for path in TABLE[WIRE_KIND[type(wire)]].addresses:
        value = wire
        for name in path.split("."):
            value = getattr(value, name)
        if value is not None:
            out.append(value)
    return out


class _Run:
    """A position in which every kind's step is allowed (the phase its kind needs)."""

    def __init__(self, kind: str) -> None:
        self.phase = {kernel.RESUMED: PARKED, kernel.CLAIMED: "fresh",
                      kernel.EVICTED: "fresh"}.get(kind, RAN)
        self.park = parse_address(_addr(3)) + b"\x00" + parse_address(_addr(6))
        self.manifest = None


def test_wire_structs_hold_the_tables_fields_and_names():
    """Each wire struct's fields and kind tag are its table row's, and every kind has one."""
    assert sorted(WIRE_KIND.values()) == sorted(KINDS) == sorted(TABLE)
    for cls, kind in WIRE_KIND.items():
        assert cls.__struct_config__.tag == kind
        fields = tuple(f for f in cls.__struct_fields__ if f not in _SEALING)
        assert fields == TABLE[kind].fields, kind


def test_segment_objects_hold_the_tables_fields_and_names():
    """Each segment object's fields and kind are its table row's (its attestation object
    travels beside it, in the sealed segment)."""
    classes = typing.get_args(Segment)
    assert sorted(c.kind for c in classes) == sorted(KINDS)
    for cls in classes:
        fields = tuple(f for f in cls.__struct_fields__ if not f.startswith("_"))
        assert fields == tuple(f for f in TABLE[cls.kind].fields if f != "attestation_object")


def test_kind_type_names_the_tables_kinds():
    """The Kind type (what the segment objects and the outbox declare) is the table's names."""
    assert typing.get_args(Kind) == KINDS


@pytest.mark.parametrize("wire", _samples(), ids=lambda w: WIRE_KIND[type(w)])
def test_segment_addresses_and_step_agree_with_the_table(wire):
    """segment_addresses lists, and step reads, exactly the table's addresses in its order."""
    expected = _table_addresses(wire)
    assert segment_addresses([wire]) == [wire.head, *expected]
    given = [parse_address(text) for text in expected]
    read: list[bytes] = []

    def take() -> bytes:
        read.append(given[len(read)])
        return read[-1]

    # A rule may refuse the made-up values; what the step read is the contract.
    with contextlib.suppress(FleetError):
        step(wire, take, _Run(WIRE_KIND[type(wire)]), 2)
    assert read == given


def test_index_bound_is_one_to_two_to_the_63_minus_one():
    """A segment index is an int in 1..2**63-1 (every store holds a signed 64-bit integer)."""
    assert MAX_INDEX == 2**63 - 1
    assert [index_in_range(i) for i in (1, MAX_INDEX)] == [True, True]
    assert not any(index_in_range(i) for i in (0, -1, 2**63, 1.0, "1", True))


def test_the_kernels_bytes_take_each_kinds_fields_by_the_tables_names():
    """The object API builds a kind's bytes by calling the kernel with the table's fields in
    order (the attestation object aside), so each kind's bytes take exactly those."""
    assert sorted(kernel.BODIES) == sorted(KINDS)
    for kind, body in kernel.BODIES.items():
        params = tuple(inspect.signature(body).parameters)
        assert params == tuple(f for f in TABLE[kind].fields if not FIELD_TYPES[f].beside), kind
