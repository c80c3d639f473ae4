"""Appending to an RFC 9162 tree with O(log n) state: the compact range.

The *compact range* of a tree of ``size`` leaves is, for every bit ``L`` set in ``size``,
the hash of the complete subtree ``(L, (size >> L) - 1)``: at most one node per level. Its
right-to-left fold is the root, and it is all an append needs - appending never reads an
old leaf.

``extend`` appends a whole batch level by level rather than leaf by leaf: the new nodes of
level ``L`` are paired (after the compact node of that level when the first new node is a
right child) into the new nodes of level ``L + 1``. That is one list comprehension of
SHA-256 calls per level, and it reports every complete node it created so that a store can
write them in one ``executemany``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from hashlib import sha256
from typing import NamedTuple

from fleet_ledger.fleet.log.merkle import fold

__all__ = [
    "Extension",
    "compact_nodes",
    "compact_root",
    "extend",
]



class Extension(NamedTuple):
    """Result of appending a batch: the new size and compact range and the new nodes."""

    size: int
    compact: dict[int, bytes]
    """level -> hash of node ``(level, (size >> level) - 1)`` for each bit set in ``size``."""
    levels: list[tuple[int, int, list[bytes]]]
    """``(level, first index, hashes)``: the complete nodes this batch created, per level."""


def compact_nodes(size: int) -> list[tuple[int, int]]:
    """Node ids of the compact range of ``size`` leaves, largest (leftmost) first."""
    return [
        (level, (size >> level) - 1)
        for level in range(size.bit_length() - 1, -1, -1)
        if (size >> level) & 1
    ]


def compact_root(compact: Mapping[int, bytes]) -> bytes:
    """Root hash of the tree whose compact range is ``compact``."""
    return fold([compact[level] for level in sorted(compact, reverse=True)])


def extend(size: int, compact: Mapping[int, bytes], hashes: Sequence[bytes]) -> Extension:
    """Append leaf ``hashes`` to the tree of ``size`` leaves with compact range ``compact``."""
    new_size = size + len(hashes)
    levels: list[tuple[int, int, list[bytes]]] = []
    nodes = list(hashes)
    first, level = size, 0
    while nodes:
        levels.append((level, first, nodes))
        if first & 1:
            seq = [compact[level], *nodes]
            first -= 1
        else:
            seq = nodes
        pairs = iter(seq)  # an odd last node stays unpaired: it joins the compact range
        nodes = [
            sha256(b"\x01" + left + right).digest()
            for left, right in zip(pairs, pairs, strict=False)
        ]
        first >>= 1
        level += 1
    fresh = {lvl: row[-1] for lvl, _, row in levels}
    new_compact = {
        lvl: fresh[lvl] if lvl in fresh else compact[lvl]
        for lvl in range(new_size.bit_length())
        if (new_size >> lvl) & 1
    }
    return Extension(new_size, new_compact, levels)
