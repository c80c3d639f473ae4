"""A job's aggregate receipt: its bytes, its fleet-log leaf, sealing it from the items, and
checking a whole receipt against the items (``docs/spec/jobs.md``, "The receipt")::

    receipt = "fleet.jobreceipt/1" || terms || root[32] || sums[84] || log_size:u64
              || missing index:u32, ascending, as many as sums' missing count

``terms`` are the job's (:mod:`fleet.jobs.job_id`), so the job id and the item count are
recomputed from the receipt itself; ``root`` and ``sums`` are the sum tree's root hash and
root sums (:mod:`fleet.jobs.sum_tree`); ``log_size`` the fleet log's size when the ledger
sealed the job. The receipt enters the fleet log as a job leaf
(:func:`fleet.log.leaf.encode_job_leaf` of the job id and ``BLAKE3(receipt)``).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from fleet_ledger.fleet.address import digest, format_address
from fleet_ledger.fleet.jobs.job_errors import (
    ItemCountMismatch,
    ItemIndexMismatch,
    ItemRunMismatch,
    JobRootMismatch,
    JobTotalsMismatch,
    MalformedReceipt,
    MissingItemsMismatch,
    SumOverflow,
    VerdictCountsMismatch,
)
from fleet_ledger.fleet.jobs.job_id import JobTerms, encode_terms, item_run, job_id, read_terms
from fleet_ledger.fleet.jobs.sum_tree import (
    COUNT_NAMES,
    ENERGY_NAMES,
    PROVENANCES,
    SOURCES,
    SUMS_SIZE,
    Item,
    decode_sums,
    encode_item_leaf,
    encode_sums,
    leaf_node,
    subtree_root,
)
from fleet_ledger.fleet.log.leaf import encode_job_leaf

__all__ = [
    "RECEIPT_DOMAIN",
    "Receipt",
    "check_item",
    "check_receipt",
    "decode_receipt",
    "encode_receipt",
    "item_leaves",
    "receipt_json",
    "receipt_leaf",
    "seal",
    "seal_leaves",
    "verify_receipt",
]

RECEIPT_DOMAIN: Final = b"fleet.jobreceipt/1"
_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class Receipt:
    """A job's receipt as decoded; ``sums`` the 13 root sums (8 energies, 5 counts)."""

    terms: JobTerms
    root: bytes
    sums: tuple[int, ...]
    log_size: int
    missing: tuple[int, ...] = ()

    @property
    def job(self) -> bytes:
        return job_id(self.terms)

    @property
    def items(self) -> int:
        return self.terms.items


def check_receipt(r: Receipt) -> Receipt:
    """``r`` if it agrees with itself, else :class:`MalformedReceipt`: a 32-byte root, sums
    within their widths whose five counts add up to the item count, a missing count equal
    to the missing list's length, the list strictly ascending and below the item count."""
    if type(r.root) is not bytes or len(r.root) != 32:
        raise MalformedReceipt("a receipt's root is 32 bytes")
    try:
        encode_sums(r.sums)
    except SumOverflow as exc:
        raise MalformedReceipt(str(exc)) from exc
    if type(r.log_size) is not int or not 0 <= r.log_size < 2**64:
        raise MalformedReceipt("a receipt's log size is a u64")
    if sum(r.sums[8:]) != r.items:
        raise MalformedReceipt(f"the receipt's verdict and missing counts add up to "
                               f"{sum(r.sums[8:])}, its job has {r.items} items")
    if len(r.missing) != r.sums[12]:
        raise MalformedReceipt(f"the receipt counts {r.sums[12]} missing items and lists "
                               f"{len(r.missing)}")
    if any(not 0 <= i < r.items for i in r.missing) or any(
            a >= b for a, b in zip(r.missing, r.missing[1:], strict=False)):
        raise MalformedReceipt("a receipt's missing items are ascending, distinct indexes "
                               "below its item count")
    return r


def encode_receipt(r: Receipt) -> bytes:
    """The receipt's canonical bytes (checked first: :class:`MalformedReceipt`)."""
    check_receipt(r)
    return (RECEIPT_DOMAIN + encode_terms(r.terms) + r.root + encode_sums(r.sums)
            + _U64.pack(r.log_size) + b"".join(_U32.pack(i) for i in r.missing))


def decode_receipt(data: bytes) -> Receipt:
    """The receipt ``data`` encodes, checked, or :class:`MalformedReceipt` (terms that do
    not decode are :class:`~fleet.jobs.job_errors.MalformedJobTerms`)."""
    if not data.startswith(RECEIPT_DOMAIN):
        raise MalformedReceipt(f"a receipt starts {RECEIPT_DOMAIN!r}")
    terms, at = read_terms(data, len(RECEIPT_DOMAIN))
    fixed = 32 + SUMS_SIZE + 8
    if len(data) < at + fixed:
        raise MalformedReceipt("a receipt is cut short")
    root, sums = data[at:at + 32], decode_sums(data[at + 32:at + 32 + SUMS_SIZE])
    (log_size,) = _U64.unpack_from(data, at + 32 + SUMS_SIZE)
    tail = data[at + fixed:]
    if len(tail) != 4 * sums[12]:
        raise MalformedReceipt(f"a receipt counting {sums[12]} missing items ends with "
                               f"{4 * sums[12]} bytes of indexes, got {len(tail)}")
    missing = tuple(i for (i,) in _U32.iter_unpack(tail))
    return check_receipt(Receipt(terms, root, sums, log_size, missing))


def receipt_leaf(receipt_bytes: bytes) -> bytes:
    """The fleet-log leaf (job kind) of a receipt's bytes."""
    r = decode_receipt(receipt_bytes)
    return encode_job_leaf(r.job, digest(receipt_bytes))


def check_item(terms: JobTerms, job: bytes, position: int, item: Item) -> None:
    """That ``item`` may stand at ``position`` of ``job``: its index is the position
    (:class:`ItemIndexMismatch`), its run the genesis of the item's unit and its grants,
    and its grants the job's grant if the job names one (:class:`ItemRunMismatch`)."""
    if item.index != position:
        raise ItemIndexMismatch(f"the leaf at position {position} is item {item.index}",
                                expected=position, calculated=item.index)
    if terms.grant is not None and item.grants != terms.grant:
        raise ItemRunMismatch(f"item {position} runs under grants "
                              f"{format_address(item.grants)}, not the job's grant",
                              expected=terms.grant, calculated=item.grants)
    run = item_run(job, position, item.grants)
    if item.run != run:
        raise ItemRunMismatch(f"item {position}'s run is not the genesis of its item unit",
                              expected=run, calculated=item.run)


def item_leaves(terms: JobTerms, items: Sequence[Item | None]) -> list[bytes]:
    """The leaves of a job's items in index order (``None``: a missing item), each item
    checked by :func:`check_item`; :class:`ItemCountMismatch` for a list of another length."""
    if len(items) != terms.items:
        raise ItemCountMismatch(f"the job has {terms.items} items, got {len(items)}",
                                expected=terms.items, calculated=len(items))
    job = job_id(terms)
    leaves = []
    for i, item in enumerate(items):
        if item is not None:
            check_item(terms, job, i, item)
        leaves.append(encode_item_leaf(i if item is None else item))
    return leaves


def seal_leaves(terms: JobTerms, leaves: Sequence[bytes], log_size: int) -> Receipt:
    """The receipt over leaves as they are (a verifier's and a forger's view: no item is
    checked against its job here; :func:`seal` checks them)."""
    root, sums = subtree_root(leaf_node(leaf) for leaf in leaves)
    missing = tuple(i for i, leaf in enumerate(leaves) if leaf[0] == 0)
    return check_receipt(Receipt(terms, root, decode_sums(sums), log_size, missing))


def seal(terms: JobTerms, items: Sequence[Item | None], log_size: int) -> Receipt:
    """The receipt of a job whose items are ``items`` (index order, ``None`` for one with
    no closed run), sealed when the fleet log had ``log_size`` leaves."""
    return seal_leaves(terms, item_leaves(terms, items), log_size)


def verify_receipt(receipt: Receipt, items: Sequence[Item | None]) -> None:
    """Check a whole receipt against its job's items as their records give them, in this
    order: the item count (:class:`ItemCountMismatch`), each item's place in the job
    (:func:`check_item`), the missing list (:class:`MissingItemsMismatch`), the energy
    totals (:class:`JobTotalsMismatch`), the verdict counts
    (:class:`VerdictCountsMismatch`), the root (:class:`JobRootMismatch`)."""
    check_receipt(receipt)
    leaves = item_leaves(receipt.terms, items)
    absent = tuple(i for i, item in enumerate(items) if item is None)
    if absent != receipt.missing:
        dropped = sorted(set(receipt.missing) - set(absent))
        raise MissingItemsMismatch(
            f"the receipt lists items {dropped} as missing, their runs are there" if dropped
            else f"items {sorted(set(absent) - set(receipt.missing))} have no run and the "
            "receipt does not list them missing", expected=receipt.missing, calculated=absent)
    mine = seal_leaves(receipt.terms, leaves, receipt.log_size)
    for name, stated, summed in zip(ENERGY_NAMES, receipt.sums, mine.sums, strict=False):
        if stated != summed:
            raise JobTotalsMismatch(f"the receipt states {stated} uJ of {name}, the items "
                                    f"sum to {summed}", expected=stated, calculated=summed)
    for name, stated, summed in zip(COUNT_NAMES, receipt.sums[8:], mine.sums[8:],
                                    strict=True):
        if stated != summed:
            raise VerdictCountsMismatch(f"the receipt counts {stated} {name} items, the "
                                        f"items give {summed}", expected=stated,
                                        calculated=summed)
    if mine.root != receipt.root:
        raise JobRootMismatch("the items' sum tree has another root than the receipt's",
                              expected=receipt.root, calculated=mine.root)


def receipt_json(r: Receipt) -> dict[str, object]:
    """A receipt for ``--json`` output and the explorer."""
    energy = {f"{s}_uj": {p: r.sums[2 * i + j] for j, p in enumerate(PROVENANCES)}
              for i, s in enumerate(SOURCES)}
    return {
        "job": format_address(r.job),
        "name": r.terms.name,
        "items": r.items,
        "issuer": r.terms.issuer.hex(),
        "grant": None if r.terms.grant is None else format_address(r.terms.grant),
        "root": format_address(r.root),
        "log_size": r.log_size,
        "energy": {"total_uj": sum(r.sums[:8]), **energy,
                   "by_provenance_uj": {p: sum(r.sums[j:8:2]) for j, p in
                                        enumerate(PROVENANCES)}},
        "verdicts": {"NonBlocking": r.sums[8], "Blocked": r.sums[9],
                     "Malformed": r.sums[10], "Unproved": r.sums[11]},
        "missing": list(r.missing),
    }
