"""The Merkle-sum tree over a job's items (``docs/spec/jobs.md``, "The sum tree").

An item is a leaf; every node carries *sums*: 8 energy totals (4 sources x 2 provenances,
u64 microjoules) and 5 counts (the 4 wait-proof verdicts and missing items, u32)::

    sums = receipts.measured  receipts.estimated  idle.measured  idle.estimated
           claim.measured     claim.estimated     overhead.measured  overhead.estimated
           (8 x u64)
           non_blocking  blocked  malformed  unproved  missing      (5 x u32)

    present leaf = 0x01 || index:u32 || run[32] || grants[32] || head[32]
                   || energy (8 x u64, the order above) || verdict:u8 || segment:u64
    missing leaf = 0x00 || index:u32

    leaf hash = BLAKE3("fleet.jobleaf/1" || leaf)
    node hash = BLAKE3("fleet.jobnode/1" || left_hash || left_sums || right_hash || right_sums)

A leaf's sums are its energy and a count of 1 under its verdict (a missing leaf: zero energy
and ``missing`` 1); a node's sums are its children's, added field by field and refused
(:class:`SumOverflow`), never wrapped, past the field's width. A node hashes *both* children's
sums, not only their total: a node that bound only its total would let its maker lower one
child's sum and raise the other's in the two children's proofs alike (the flaw of the first
Merkle-sum trees), hiding cost from every single proof.

The tree's shape is RFC 9162's over the leaves in index order: n > 1 leaves split at the
largest power of two k < n, the first k to the left. Proof paths and their check are RFC
9162's too, with (hash, sums) in place of a hash.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter, itemgetter
from typing import Final, NamedTuple

from blake3 import blake3

from fleet_ledger.fleet.jobs.job_errors import MalformedItemProof, SumOverflow
from fleet_ledger.fleet.record.kernel import Energy, RunState
from fleet_ledger.fleet.record.wait_proof import Blocked, Malformed, NonBlocking, Unproved, Verdict

__all__ = [
    "COUNT_NAMES",
    "ENERGY_NAMES",
    "LEAF_DOMAIN",
    "MISSING_SIZE",
    "NODE_DOMAIN",
    "PRESENT_SIZE",
    "PROVENANCES",
    "SOURCES",
    "SUMS_SIZE",
    "VERDICTS",
    "ZERO_SUMS",
    "Item",
    "Node",
    "SumTree",
    "add_sums",
    "decode_item_leaf",
    "decode_sums",
    "encode_item_leaf",
    "encode_sums",
    "energy_of",
    "fold_path",
    "inclusion_path",
    "item_of",
    "leaf_node",
    "leaf_path",
    "node_hash",
    "path_length",
    "split_leaves",
    "state_leaf",
    "subtree_root",
    "verdict_code",
    "verdict_of",
]

LEAF_DOMAIN: Final = b"fleet.jobleaf/1"
NODE_DOMAIN: Final = b"fleet.jobnode/1"
SOURCES: Final = ("receipts", "idle", "claim", "overhead")
PROVENANCES: Final = ("measured", "estimated")
ENERGY_NAMES: Final = tuple(f"{s}.{p}" for s in SOURCES for p in PROVENANCES)
COUNT_NAMES: Final = ("non_blocking", "blocked", "malformed", "unproved", "missing")
# Verdict codes in the leaf; the count of code c is sums[8 + c - 1].
VERDICTS: Final = {1: "NonBlocking", 2: "Blocked", 3: "Malformed", 4: "Unproved"}

_SUMS = struct.Struct(">8Q5I")
SUMS_SIZE: Final = _SUMS.size
_LIMITS: Final = (2**64 - 1,) * 8 + (2**32 - 1,) * 5
ZERO_SUMS: Final = (0,) * 13
_PRESENT = struct.Struct(">BI32s32s32s8QBQ")
PRESENT_SIZE: Final = _PRESENT.size
_MISSING = struct.Struct(">BI")
MISSING_SIZE: Final = _MISSING.size
_ENERGY_AT, _VERDICT_AT = 1 + 4 + 3 * 32, 1 + 4 + 3 * 32 + 8 * 8
# The lowest bit of each field but the last, and the bit above the first: where a carry
# out of a field lands when the encoded sums are added as one integer (add_sums).
_CARRIES: Final = sum(1 << (8 * SUMS_SIZE - 64 * n) for n in range(9)) + sum(
    1 << (32 * n) for n in range(1, 5))
_COUNT = struct.Struct(">5I")
_COUNTS: Final = {code: _COUNT.pack(*(int(c == code) for c in range(1, 6))) for code in VERDICTS}
_MISSING_SUMS: Final = bytes(64) + _COUNT.pack(0, 0, 0, 0, 1)


class Item(NamedTuple):
    """What a job's leaf says of one item run: its index, run id, grants id, final head,
    energy (8 values, the order of :data:`ENERGY_NAMES`) and wait-proof verdict (its code
    and, for Blocked and Malformed, the segment it names; else 0)."""

    index: int  # type: ignore[assignment]  # the spec's field name shadows tuple.index
    run: bytes
    grants: bytes
    head: bytes
    energy: tuple[int, ...]
    verdict: int
    segment: int = 0


Node = tuple[bytes, bytes]
"""``(hash, encoded sums)`` of a leaf or a subtree."""


_ACCOUNTS = attrgetter(*SOURCES)
_SPLIT = itemgetter(*PROVENANCES)


def energy_of(energy: Energy) -> tuple[int, ...]:
    """A run's energy accounts as the leaf's 8 values (:data:`SOURCES` by
    :data:`PROVENANCES`)."""
    receipts, idle, claim, overhead = _ACCOUNTS(energy)
    return (*_SPLIT(receipts), *_SPLIT(idle), *_SPLIT(claim), *_SPLIT(overhead))


def item_of(index: int, state: RunState) -> Item:
    """The item a run's state makes at ``index`` (the ledger's and a verifier's view of a
    closed item run: its head, energy and wait-proof verdict now)."""
    code, segment = verdict_code(state.wait.verdict())
    return Item(index, state.run, state.grants_id, state.head, energy_of(state.energy), code,
                segment)


def state_leaf(index: int, state: RunState, energy: tuple[int, ...]) -> bytes:
    """``encode_item_leaf(item_of(index, state))`` packed straight from a closed item run's
    state, given its :func:`energy_of` (the fold's path, once per closing item: it reads the
    energy first to hold the job's totals within their width). The kernel made the run's
    ids and head 32 bytes and its verdict one of the four, and the packing refuses an
    energy past 2**64 - 1 (:class:`SumOverflow`), so the leaf is the checked one; a test
    holds the two paths equal."""
    code, segment = verdict_code(state.wait.verdict())
    try:
        return _pack_present(index, state.run, state.grants_id, state.head, energy, code,
                             segment)
    except struct.error as exc:
        raise SumOverflow("an item's energy exceeds its field's width") from exc


def verdict_code(verdict: Verdict) -> tuple[int, int]:
    """``(code, segment)`` of a wait-proof verdict."""
    if isinstance(verdict, NonBlocking):
        return 1, 0
    if isinstance(verdict, Blocked):
        return 2, verdict.segment
    if isinstance(verdict, Malformed):
        return 3, verdict.segment
    return 4, 0


def verdict_of(code: int, segment: int) -> Verdict:
    """The verdict a leaf's ``(code, segment)`` names (the inverse of :func:`verdict_code`)."""
    if code == 2:
        return Blocked(segment)
    if code == 3:
        return Malformed(segment)
    return NonBlocking() if code == 1 else Unproved()


def _check_item(item: Item) -> None:
    if type(item.index) is not int or type(item.verdict) is not int or type(
            item.segment) is not int:
        raise MalformedItemProof("an item's index, verdict and segment are integers")
    if not 0 <= item.index < 2**32 - 1:
        raise MalformedItemProof(f"an item index is in 0 .. 2**32 - 2, got {item.index}")
    for what in ("run", "grants", "head"):
        value = getattr(item, what)
        if type(value) is not bytes or len(value) != 32:
            raise MalformedItemProof(f"an item's {what} is 32 bytes")
    if len(item.energy) != 8 or any(type(e) is not int or not 0 <= e < 2**64
                                    for e in item.energy):
        raise MalformedItemProof("an item's energy is 8 integers in 0 .. 2**64 - 1")
    if item.verdict not in VERDICTS:
        raise MalformedItemProof(f"a verdict code is 1 .. 4, got {item.verdict}")
    names_segment = item.verdict in (2, 3)
    if names_segment != (1 <= item.segment < 2**64) or (not names_segment and item.segment):
        raise MalformedItemProof("Blocked and Malformed name a segment (1 .. 2**64 - 1); "
                                 "the other verdicts name none (0)")


def encode_item_leaf(item: Item | int) -> bytes:
    """A present item's leaf bytes, or a missing item's (``item`` is then its index)."""
    if isinstance(item, int):
        if type(item) is not int or not 0 <= item < 2**32 - 1:
            raise MalformedItemProof(f"an item index is in 0 .. 2**32 - 2, got {item}")
        return _MISSING.pack(0, item)
    _check_item(item)
    return _pack_present(item.index, item.run, item.grants, item.head, item.energy,
                         item.verdict, item.segment)


def _pack_present(index: int, run: bytes, grants: bytes, head: bytes,
                  energy: tuple[int, ...], verdict: int, segment: int) -> bytes:
    """The present leaf's bytes in their one order (both ways in: :func:`encode_item_leaf`
    and :func:`state_leaf`)."""
    return _PRESENT.pack(1, index, run, grants, head, *energy, verdict, segment)


def decode_item_leaf(data: bytes) -> Item | int:
    """The item a leaf states (an ``int``, its index, for a missing item), or
    :class:`MalformedItemProof`."""
    if len(data) == MISSING_SIZE and data[0] == 0:
        index: int = _MISSING.unpack(data)[1]
        encode_item_leaf(index)  # checks its range
        return index
    if len(data) != PRESENT_SIZE or data[0] != 1:
        raise MalformedItemProof(f"an item leaf is {PRESENT_SIZE} bytes after 0x01 or "
                                 f"{MISSING_SIZE} after 0x00, got {len(data)}")
    v = _PRESENT.unpack(data)
    item = Item(v[1], v[2], v[3], v[4], tuple(v[5:13]), v[13], v[14])
    _check_item(item)
    return item


def split_leaves(data: bytes) -> list[bytes]:
    """Leaves written one after the other (``b"".join(leaves)``) taken apart again, each
    leaf's length told by its first byte; :class:`MalformedItemProof` for bytes that are
    not whole leaves."""
    leaves = []
    at, end = 0, len(data)
    while at < end:
        size = PRESENT_SIZE if data[at] == 1 else MISSING_SIZE if data[at] == 0 else 0
        if not size or at + size > end:
            raise MalformedItemProof(f"the bytes at {at} of {end} are not a whole item leaf")
        leaves.append(data[at:at + size])
        at += size
    return leaves


def encode_sums(sums: Sequence[int]) -> bytes:
    """The 84 bytes of 13 sums, or :class:`SumOverflow` for one past its width."""
    if len(sums) != 13 or any(not 0 <= s <= m for s, m in zip(sums, _LIMITS, strict=True)):
        raise SumOverflow(f"sums are 8 u64 energies and 5 u32 counts, got {tuple(sums)}")
    return _SUMS.pack(*sums)


def decode_sums(data: bytes) -> tuple[int, ...]:
    if len(data) != SUMS_SIZE:
        raise MalformedItemProof(f"sums are {SUMS_SIZE} bytes, got {len(data)}")
    return _SUMS.unpack(data)


def add_sums(a: bytes, b: bytes) -> bytes:
    """Two encoded sums added field by field, or :class:`SumOverflow`.

    The fields are big-endian and back to back, so the two 84-byte strings added as
    integers are the field-by-field sums exactly when no field carries into the one above
    it (or out of the top): the carry into each bit is that bit of ``a ^ b ^ sum``, read
    at each field's lowest bit. Half the time of unpacking 13 fields twice and packing
    their sums, once per node of every tree."""
    if len(a) != SUMS_SIZE or len(b) != SUMS_SIZE:
        raise MalformedItemProof(f"sums are {SUMS_SIZE} bytes")
    x, y = int.from_bytes(a), int.from_bytes(b)
    total = x + y
    if (x ^ y ^ total) & _CARRIES:
        raise SumOverflow("a sum of the job's tree exceeds its field's width")
    return total.to_bytes(SUMS_SIZE)


def leaf_node(leaf: bytes) -> Node:
    """``(leaf hash, leaf sums)`` of a leaf's bytes. Only the form, length and verdict code
    are checked here (what the sums read); :func:`decode_item_leaf` checks the rest."""
    if len(leaf) == PRESENT_SIZE and leaf[0] == 1:
        counts = _COUNTS.get(leaf[_VERDICT_AT])
        if counts is None:
            raise MalformedItemProof(f"a verdict code is 1 .. 4, got {leaf[_VERDICT_AT]}")
        # A present leaf's 8 energies are already the sums' first 64 bytes.
        sums = leaf[_ENERGY_AT:_VERDICT_AT] + counts
    elif len(leaf) == MISSING_SIZE and leaf[0] == 0:
        sums = _MISSING_SUMS
    else:
        raise MalformedItemProof(f"an item leaf is {PRESENT_SIZE} bytes after 0x01 or "
                                 f"{MISSING_SIZE} after 0x00, got {len(leaf)}")
    return blake3(LEAF_DOMAIN + leaf).digest(), sums


def node_hash(left: Node, right: Node) -> Node:
    """The parent of two nodes: its hash binds both children's hashes and sums."""
    return (blake3(NODE_DOMAIN + left[0] + left[1] + right[0] + right[1]).digest(),
            add_sums(left[1], right[1]))


def subtree_root(nodes: Iterable[Node]) -> Node:
    """The root of the RFC 9162 tree over ``nodes`` (at least one), streamed: a stack holds
    one complete subtree per set bit of the count so far (O(log n) memory); at the end the
    stack folds right to left, which is the RFC's split at the largest power of two."""
    stack: list[tuple[int, Node]] = []
    for node in nodes:
        size = 1
        while stack and stack[-1][0] == size:
            node = node_hash(stack.pop()[1], node)
            size *= 2
        stack.append((size, node))
    if not stack:
        raise MalformedItemProof("a job has at least one item")
    root = stack.pop()[1]
    while stack:
        root = node_hash(stack.pop()[1], root)
    return root


def _split(n: int) -> int:
    """The largest power of two below ``n`` (n > 1)."""
    return 1 << ((n - 1).bit_length() - 1)


def inclusion_path(nodes: Sequence[Node], index: int) -> list[Node]:
    """RFC 9162 ``PATH(index, D[n])`` over ``nodes``: the siblings from the leaf up."""
    return _path(len(nodes), index, lambda lo, hi: subtree_root(nodes[lo:hi]))


def leaf_path(leaves: Sequence[bytes], index: int) -> list[Node]:
    """:func:`inclusion_path` over leaf bytes, each leaf hashed as its range is reached (no
    list of all the nodes is held)."""
    return _path(len(leaves), index,
                 lambda lo, hi: subtree_root(leaf_node(leaf) for leaf in leaves[lo:hi]))


def _path(size: int, index: int, root: Callable[[int, int], Node]) -> list[Node]:
    if not 0 <= index < size:
        raise MalformedItemProof(f"item {index} is not in a job of {size} items")
    path: list[Node] = []
    lo, hi = 0, size
    while hi - lo > 1:
        k = _split(hi - lo)
        if index < lo + k:
            path.append(root(lo + k, hi))
            hi = lo + k
        else:
            path.append(root(lo, lo + k))
            lo += k
    path.reverse()
    return path


def path_length(index: int, size: int) -> int:
    """How many siblings the path of leaf ``index`` in a tree of ``size`` has."""
    length, lo, hi = 0, 0, size
    while hi - lo > 1:
        k = _split(hi - lo)
        lo, hi = (lo, lo + k) if index < lo + k else (lo + k, hi)
        length += 1
    return length


def fold_path(leaf: Node, index: int, size: int, path: Iterable[Node]) -> Node:
    """The root a path yields from ``leaf`` at ``index`` (RFC 9162 section 2.1.3.2 with
    (hash, sums) nodes); :class:`MalformedItemProof` if its length does not fit."""
    siblings = list(path)
    if not 0 <= index < size or len(siblings) != path_length(index, size):
        raise MalformedItemProof(f"the path of item {index} of {size} has "
                                 f"{path_length(index, size) if 0 <= index < size else '?'} "
                                 f"nodes, got {len(siblings)}")
    if any(len(h) != 32 or len(s) != SUMS_SIZE for h, s in siblings):
        raise MalformedItemProof(f"a path node is a 32-byte hash and {SUMS_SIZE} bytes of sums")
    fn, sn, r = index, size - 1, leaf
    for p in siblings:
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    return r


_NODE_SIZE: Final = 32 + SUMS_SIZE


class SumTree:
    """A whole sum tree kept level by level (each level one ``bytes`` of 116-byte
    ``hash || sums`` records), so every item's path is read in O(log n) instead of rebuilt
    from the leaves. Built bottom-up, an odd last node carried up unchanged (the RFC 9162
    shape): a node's path is then its sibling at each level where it has one."""

    __slots__ = ("levels", "size")

    def __init__(self, levels: list[bytes]) -> None:
        if not levels or len(levels[-1]) != _NODE_SIZE or any(
                len(lv) % _NODE_SIZE for lv in levels):
            raise MalformedItemProof("a sum tree's levels are whole nodes, one at the top")
        self.levels = levels
        self.size = len(levels[0]) // _NODE_SIZE

    @classmethod
    def from_nodes(cls, nodes: Iterable[Node]) -> SumTree:
        level = [h + s for h, s in nodes]
        if not level:
            raise MalformedItemProof("a job has at least one item")
        levels = [b"".join(level)]
        while len(level) > 1:
            up = []
            for i in range(0, len(level) - 1, 2):
                h, s = node_hash(_split_node(level[i]), _split_node(level[i + 1]))
                up.append(h + s)
            if len(level) % 2:
                up.append(level[-1])
            level = up
            levels.append(b"".join(level))
        return cls(levels)

    @classmethod
    def from_leaves(cls, leaves: Iterable[bytes]) -> SumTree:
        return cls.from_nodes(leaf_node(leaf) for leaf in leaves)

    def node(self, level: int, index: int) -> Node:
        at = index * _NODE_SIZE
        return _split_node(self.levels[level][at:at + _NODE_SIZE])

    @property
    def root(self) -> Node:
        return self.node(len(self.levels) - 1, 0)

    def path(self, index: int) -> list[Node]:
        """RFC 9162 ``PATH(index, D[size])``, the siblings from the leaf up."""
        if not 0 <= index < self.size:
            raise MalformedItemProof(f"item {index} is not in a job of {self.size} items")
        path = []
        for level in range(len(self.levels) - 1):
            sibling = index ^ 1
            if sibling * _NODE_SIZE < len(self.levels[level]):
                path.append(self.node(level, sibling))
            index >>= 1
        return path


def _split_node(record: bytes) -> Node:
    return record[:32], record[32:]
