"""Item proofs: one item's leaf and its sum-tree path up to a job's receipt
(``docs/spec/jobs.md``, "Item proofs")::

    proof = "fleet.jobproof/1" || job[32] || items:u32 || index:u32 || leaf
            || count:u8 || (hash[32] || sums[84]) x count

``leaf`` is the item's leaf bytes (its first byte says its length: 0x01 a present item's
174 bytes, 0x00 a missing item's 5), the path RFC 9162's ``PATH(index, D[items])`` of
(hash, sums) nodes from the leaf up. :func:`verify_item_proof` checks one against a
receipt, raising the first named failure in the spec's order.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from fleet_ledger.fleet.jobs.job_errors import (
    ItemCountMismatch,
    ItemIndexMismatch,
    ItemMismatch,
    JobIdMismatch,
    JobRootMismatch,
    JobTotalsMismatch,
    MalformedItemProof,
    MissingItemsMismatch,
    VerdictCountsMismatch,
)
from fleet_ledger.fleet.jobs.receipt import Receipt, check_item, check_receipt
from fleet_ledger.fleet.jobs.sum_tree import (
    COUNT_NAMES,
    ENERGY_NAMES,
    MISSING_SIZE,
    PRESENT_SIZE,
    SUMS_SIZE,
    Item,
    Node,
    SumTree,
    decode_item_leaf,
    decode_sums,
    fold_path,
    leaf_node,
    leaf_path,
)

__all__ = ["PROOF_DOMAIN", "ItemProof", "check_against_record", "decode_item_proof",
           "encode_item_proof", "item_proof", "tree_item_proof", "verify_item_proof"]

PROOF_DOMAIN: Final = b"fleet.jobproof/1"
_HEAD = struct.Struct(">32sII")
_NODE = 32 + SUMS_SIZE


@dataclass(frozen=True, slots=True)
class ItemProof:
    """One item's leaf and path in the sum tree of job ``job`` of ``items`` items."""

    job: bytes
    items: int
    index: int
    leaf: bytes
    path: tuple[Node, ...]


def item_proof(job: bytes, leaves: Sequence[bytes], index: int) -> ItemProof:
    """The proof of item ``index`` from all the job's leaves (O(n) hashing: the ledger
    keeps leaves, not nodes)."""
    return ItemProof(job, len(leaves), index, leaves[index], tuple(leaf_path(leaves, index)))


def tree_item_proof(job: bytes, tree: SumTree, index: int, leaf: bytes) -> ItemProof:
    """The proof of item ``index`` (whose leaf bytes are ``leaf``) from a kept tree, in
    O(log n); :class:`MalformedItemProof` if the leaf is not the tree's at ``index``."""
    if tree.node(0, index) != leaf_node(leaf):
        raise MalformedItemProof(f"that leaf is not item {index}'s in this tree")
    return ItemProof(job, tree.size, index, leaf, tuple(tree.path(index)))


def encode_item_proof(p: ItemProof) -> bytes:
    if len(p.path) > 255 or any(len(h) != 32 or len(s) != SUMS_SIZE for h, s in p.path):
        raise MalformedItemProof("a path is at most 255 nodes of a 32-byte hash and sums")
    return (PROOF_DOMAIN + _HEAD.pack(p.job, p.items, p.index) + p.leaf
            + bytes((len(p.path),)) + b"".join(h + s for h, s in p.path))


def decode_item_proof(data: bytes) -> ItemProof:
    """The proof ``data`` encodes, or :class:`MalformedItemProof`."""
    at = len(PROOF_DOMAIN) + _HEAD.size
    if not data.startswith(PROOF_DOMAIN) or len(data) < at + 1:
        raise MalformedItemProof(f"an item proof starts {PROOF_DOMAIN!r} and names its job, "
                                 "item count and index")
    job, items, index = _HEAD.unpack_from(data, len(PROOF_DOMAIN))
    end = at + (PRESENT_SIZE if data[at] == 1 else MISSING_SIZE)
    leaf = data[at:end]
    if len(data) < end + 1:
        raise MalformedItemProof("an item proof is cut short")
    count = data[end]
    body = data[end + 1:]
    if len(body) != count * _NODE:
        raise MalformedItemProof(f"a path of {count} nodes is {count * _NODE} bytes, "
                                 f"got {len(body)}")
    path = tuple((body[i:i + 32], body[i + 32:i + _NODE]) for i in range(0, len(body), _NODE))
    return ItemProof(job, items, index, leaf, path)


def verify_item_proof(proof: ItemProof, receipt: Receipt) -> Item | int:
    """Check ``proof`` against ``receipt`` and return what the leaf states (an ``int``, the
    index, for a missing item). In order: the job (:class:`JobIdMismatch`), the item count
    (:class:`ItemCountMismatch`), the leaf's bytes (:class:`MalformedItemProof`), its index
    (:class:`ItemIndexMismatch`), its run (:class:`~fleet.jobs.job_errors.ItemRunMismatch`),
    its presence against the missing list (:class:`MissingItemsMismatch`), the path's length
    (:class:`MalformedItemProof`), the root hash (:class:`JobRootMismatch`), then the root's
    sums against the receipt's (:class:`JobTotalsMismatch`, :class:`VerdictCountsMismatch`)."""
    check_receipt(receipt)
    job = receipt.job
    if proof.job != job:
        raise JobIdMismatch("the proof is for another job than the receipt's",
                            expected=job, calculated=proof.job)
    if proof.items != receipt.items:
        raise ItemCountMismatch(f"the proof is for a job of {proof.items} items, the "
                                f"receipt's has {receipt.items}", expected=receipt.items,
                                calculated=proof.items)
    item = decode_item_leaf(proof.leaf)
    index = item if isinstance(item, int) else item.index
    if index != proof.index:
        raise ItemIndexMismatch(f"the proof is for item {proof.index}, its leaf is item "
                                f"{index}", expected=proof.index, calculated=index)
    if not isinstance(item, int):
        check_item(receipt.terms, job, index, item)
    if isinstance(item, int) != (index in receipt.missing):
        raise MissingItemsMismatch(
            f"item {index}'s leaf is {'missing' if isinstance(item, int) else 'present'}, "
            f"the receipt {'lists' if index in receipt.missing else 'does not list'} it "
            "missing", expected=index in receipt.missing, calculated=isinstance(item, int))
    root, sums = fold_path(leaf_node(proof.leaf), index, receipt.items, proof.path)
    if root != receipt.root:
        raise JobRootMismatch(f"item {index}'s path leads to another root than the "
                              "receipt's", expected=receipt.root, calculated=root)
    mine = decode_sums(sums)
    for name, stated, summed in zip(ENERGY_NAMES + COUNT_NAMES, receipt.sums, mine,
                                    strict=True):
        if stated != summed:
            error = JobTotalsMismatch if name in ENERGY_NAMES else VerdictCountsMismatch
            raise error(f"the receipt states {stated} for {name}, its root sums to {summed}",
                        expected=stated, calculated=summed)
    return item


def check_against_record(stated: Item | int, record: Item | None) -> None:
    """That a verified leaf says what the item's run record says (``record``: the values
    :func:`fleet.jobs.sum_tree.item_of` reads from the record, ``None`` for no closed run),
    else :class:`ItemMismatch` naming the first field that differs."""
    if record is None or isinstance(stated, int):
        if (record is None) != isinstance(stated, int):
            raise ItemMismatch("the leaf says the item is "
                               f"{'missing' if isinstance(stated, int) else 'present'}, the "
                               "records say otherwise", expected=stated, calculated=record)
        return
    for field in Item._fields:
        if getattr(stated, field) != getattr(record, field):
            raise ItemMismatch(f"item {stated.index}'s leaf and record differ in {field}",
                               expected=getattr(stated, field),
                               calculated=getattr(record, field))
