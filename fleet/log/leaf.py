"""Fleet-log leaf bytes: one leaf per accepted segment.

Layout (84 bytes, fixed)::

    "fleet.leaf/1"   12 ASCII bytes, domain tag and version
    run              32 bytes, the run's genesis head
    index             8 bytes, unsigned big-endian, the segment's 1-based index in its run
    head             32 bytes, the run head after that segment

The tag keeps a fleet leaf from ever being read as another structure hashed with the same
function (a seal message has a different tag), and its version suffix lets a later layout
coexist in the same log. Decoding is strict: any other length, tag or an index of 0 is a
:class:`~fleet.log.log_errors.MalformedLeaf`.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from fleet_ledger.fleet.log.log_errors import MalformedLeaf
from fleet_ledger.fleet.record.kinds import index_in_range

__all__ = [
    "LEAF_DOMAIN",
    "LEAF_SIZE",
    "Leaf",
    "decode_leaf",
    "encode_leaf",
]


LEAF_DOMAIN = b"fleet.leaf/1"
LEAF_SIZE = 84
_LAYOUT = struct.Struct(">12s32sQ32s")


class Leaf(NamedTuple):
    """A decoded fleet-log leaf."""

    run: bytes
    index: int  # type: ignore[assignment]  # the spec's field name: it shadows tuple.index
    head: bytes


def encode_leaf(run: bytes, index: int, head: bytes) -> bytes:
    """The 84 leaf bytes binding segment ``index`` of ``run`` to the ``head`` after it."""
    if len(run) != 32 or len(head) != 32:
        raise MalformedLeaf("run and head are 32 bytes each")
    if not index_in_range(index):
        raise MalformedLeaf(f"segment index {index} is not in 1 .. 2**63 - 1")
    return _LAYOUT.pack(LEAF_DOMAIN, run, index, head)


def decode_leaf(data: bytes) -> Leaf:
    """The run, index and head a leaf binds, or :class:`MalformedLeaf`."""
    if len(data) != LEAF_SIZE:
        raise MalformedLeaf(f"a fleet leaf is {LEAF_SIZE} bytes, got {len(data)}")
    domain, run, index, head = _LAYOUT.unpack(data)
    if domain != LEAF_DOMAIN:
        raise MalformedLeaf(f"leaf domain tag is {domain!r}, expected {LEAF_DOMAIN!r}")
    if index == 0:
        raise MalformedLeaf("segment indexes start at 1")
    return Leaf(run, index, head)
