"""RFC 9162 Merkle tree hashing, proof planning, proof assembly and proof verification.

Pure: no storage, no I/O. The hash is SHA-256 with RFC 9162 (= RFC 6962) domain separation::

    leaf hash  = SHA-256(0x00 || leaf bytes)
    node hash  = SHA-256(0x01 || left || right)
    empty tree = SHA-256("")

A *node id* ``(level, index)`` names the complete subtree whose leaves are
``[index * 2**level, (index + 1) * 2**level)``; leaves are level 0. Only complete subtrees
ever get stored, because only they never change as the tree grows.

Proofs are made in three steps so that storage never enters this module:

1. *plan* (``inclusion_plan``, ``consistency_plan``): for each proof hash, the tuple of
   node ids whose right-to-left fold is that hash. A proof hash is one stored node, or -
   for the ragged right edge of a tree whose size is not a power of two - the fold of the
   few complete subtrees that cover that edge.
2. the caller looks up the hashes of ``plan_nodes(plan)`` (a store reads O(log n) rows).
3. *assemble* folds them into the RFC 9162 proof, ordered from the leaf to the root.

Verification (``verify_inclusion``, ``verify_consistency``) is the algorithm of RFC 9162
§2.1.3.2 and §2.1.4.2, step by step, raising typed errors that carry both roots.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from hashlib import sha256

from fleet_ledger.fleet.log.log_errors import (
    InvalidProofRequest,
    MalformedProof,
    ProofLengthMismatch,
    RootMismatch,
)

__all__ = [
    "EMPTY_ROOT",
    "HASH_SIZE",
    "NodeId",
    "Plan",
    "assemble",
    "consistency_plan",
    "fold",
    "inclusion_plan",
    "leaf_hash",
    "leaf_hashes",
    "node_hash",
    "plan_nodes",
    "range_nodes",
    "root_from_inclusion",
    "root_plan",
    "verify_consistency",
    "verify_inclusion",
]


HASH_SIZE = 32
EMPTY_ROOT = sha256(b"").digest()

NodeId = tuple[int, int]
"""``(level, index)`` of a complete subtree."""

Plan = list[tuple[NodeId, ...]]
"""One tuple of node ids per proof hash; the proof hash is their right-to-left fold."""


def leaf_hash(leaf: bytes) -> bytes:
    """RFC 9162 hash of one leaf's bytes."""
    return sha256(b"\x00" + leaf).digest()


def leaf_hashes(leaves: Iterable[bytes]) -> list[bytes]:
    """Leaf hashes of many leaves (one list comprehension, no per-leaf objects)."""
    return [sha256(b"\x00" + leaf).digest() for leaf in leaves]


def node_hash(left: bytes, right: bytes) -> bytes:
    """RFC 9162 hash of an interior node."""
    return sha256(b"\x01" + left + right).digest()


def fold(hashes: Sequence[bytes]) -> bytes:
    """Hash of the range covered by complete subtrees given left to right (largest first).

    The RFC 9162 tree splits at the largest power of two, so a ragged range is its first
    subtree hashed with the fold of the rest: fold from the right.
    """
    if not hashes:
        return EMPTY_ROOT
    acc = hashes[-1]
    for left in reversed(hashes[:-1]):
        acc = sha256(b"\x01" + left + acc).digest()
    return acc


def range_nodes(begin: int, end: int) -> tuple[NodeId, ...]:
    """Complete subtrees covering leaves ``[begin, end)``, left to right.

    ``begin`` must be a multiple of the largest power of two <= ``end - begin`` (true for
    every range RFC 9162 hashes: the whole tree and each right-hand remainder).
    """
    width = end - begin
    nodes = []
    pos = begin
    for level in range(width.bit_length() - 1, -1, -1):
        if (width >> level) & 1:
            nodes.append((level, pos >> level))
            pos += 1 << level
    return tuple(nodes)


def root_plan(size: int) -> tuple[NodeId, ...]:
    """Nodes whose fold is the root of the tree of ``size`` leaves (its compact range)."""
    return range_nodes(0, size)


def _split(width: int) -> int:
    """Largest power of two strictly less than ``width`` (``width`` >= 2)."""
    return 1 << ((width - 1).bit_length() - 1)


def inclusion_plan(index: int, size: int) -> Plan:
    """Plan of the RFC 9162 inclusion proof (``PATH``) of leaf ``index`` in ``size`` leaves."""
    if not 0 <= index < size:
        raise InvalidProofRequest(f"leaf index {index} is not below tree size {size}")
    start, end = 0, size
    siblings: list[tuple[int, int]] = []
    while end - start > 1:
        k = _split(end - start)
        if index < start + k:
            siblings.append((start + k, end))
            end = start + k
        else:
            siblings.append((start, start + k))
            start += k
    return [range_nodes(a, b) for a, b in reversed(siblings)]


def consistency_plan(old_size: int, new_size: int) -> Plan:
    """Plan of the RFC 9162 consistency proof (``PROOF``) from ``old_size`` to ``new_size``."""
    if not 0 <= old_size <= new_size:
        raise InvalidProofRequest(f"no consistency proof from size {old_size} to {new_size}")
    if old_size in (0, new_size):
        return []
    start, end, remaining = 0, new_size, old_size
    whole = True  # still on the leftmost path: the old root itself is known to the verifier
    siblings: list[tuple[int, int]] = []
    while remaining != end - start:
        k = _split(end - start)
        if remaining <= k:
            siblings.append((start + k, end))
            end = start + k
        else:
            siblings.append((start, start + k))
            start += k
            remaining -= k
            whole = False
    base = [] if whole else [(start, end)]
    return [range_nodes(a, b) for a, b in base + siblings[::-1]]


def plan_nodes(plan: Iterable[Iterable[NodeId]]) -> list[NodeId]:
    """Distinct node ids a plan needs, in first-use order."""
    return list(dict.fromkeys(node for element in plan for node in element))


def assemble(plan: Plan, hashes: Mapping[NodeId, bytes]) -> list[bytes]:
    """The proof: each planned element folded from the looked-up node hashes."""
    return [fold([hashes[node] for node in element]) for element in plan]


def _check_hashes(proof: Sequence[bytes]) -> None:
    for position, item in enumerate(proof):
        if not isinstance(item, bytes) or len(item) != HASH_SIZE:
            raise MalformedProof(f"proof hash {position} is not {HASH_SIZE} bytes")


def _to_odd(fn: int, sn: int) -> tuple[int, int]:
    """RFC 9162: "right-shift both fn and sn equally until either LSB(fn) is set or fn is 0"."""
    while fn and not fn & 1:
        fn >>= 1
        sn >>= 1
    return fn, sn


def root_from_inclusion(leaf: bytes, index: int, size: int, proof: Sequence[bytes]) -> bytes:
    """Root recomputed from a leaf hash and its inclusion proof (RFC 9162 §2.1.3.2 1-6)."""
    if not 0 <= index < size:
        raise InvalidProofRequest(f"leaf index {index} is not below tree size {size}")
    _check_hashes([leaf, *proof])
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            raise ProofLengthMismatch(f"inclusion proof for {index} in {size} is too long")
        if fn & 1 or fn == sn:
            r = sha256(b"\x01" + p + r).digest()
            fn, sn = _to_odd(fn, sn)
        else:
            r = sha256(b"\x01" + r + p).digest()
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofLengthMismatch(f"inclusion proof for {index} in {size} is too short")
    return r


def verify_inclusion(
    leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> None:
    """Raise unless ``proof`` shows leaf hash ``leaf`` at ``index`` of the tree ``root``."""
    calculated = root_from_inclusion(leaf, index, size, proof)
    if calculated != root:
        raise RootMismatch(
            f"inclusion proof for leaf {index} in {size}", expected=root, calculated=calculated
        )


def verify_consistency(
    old_size: int, new_size: int, proof: Sequence[bytes], old_root: bytes, new_root: bytes
) -> None:
    """Raise unless ``proof`` shows the tree ``new_root`` extends ``old_root`` (§2.1.4.2)."""
    if not 0 <= old_size <= new_size:
        raise InvalidProofRequest(f"no consistency proof from size {old_size} to {new_size}")
    _check_hashes([old_root, new_root, *proof])
    if old_size in (0, new_size):
        if proof:
            raise ProofLengthMismatch(f"consistency {old_size} -> {new_size} needs no hashes")
        expected = EMPTY_ROOT if old_size == 0 else new_root
        if old_root != expected:
            raise RootMismatch(
                f"old root of size {old_size}", expected=old_root, calculated=expected
            )
        return
    if not proof:
        raise ProofLengthMismatch(f"consistency proof {old_size} -> {new_size} is empty")
    path = list(proof)
    if old_size & (old_size - 1) == 0:
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofLengthMismatch(f"consistency proof {old_size} -> {new_size} is too long")
        if fn & 1 or fn == sn:
            fr = sha256(b"\x01" + c + fr).digest()
            sr = sha256(b"\x01" + c + sr).digest()
            fn, sn = _to_odd(fn, sn)
        else:
            sr = sha256(b"\x01" + sr + c).digest()
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofLengthMismatch(f"consistency proof {old_size} -> {new_size} is too short")
    if fr != old_root:
        raise RootMismatch(f"old root of size {old_size}", expected=old_root, calculated=fr)
    if sr != new_root:
        raise RootMismatch(f"new root of size {new_size}", expected=new_root, calculated=sr)
