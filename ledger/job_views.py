"""The ledger's answers about jobs (``fleet job show``, ``fleet job prove``, the explorer),
read from its store: a job's progress, totals, verdicts and missing items, and the proof
bundle of one item (:mod:`fleet.jobs.job_bundle`). The API and the CLI offline (``--data``)
both call these, as for runs (:mod:`ledger.views`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from fleet_ledger.fleet.errors import FleetError
from fleet_ledger.fleet.jobs.item_proof import tree_item_proof
from fleet_ledger.fleet.jobs.job_bundle import build_job_bundle
from fleet_ledger.fleet.jobs.job_id import decode_terms
from fleet_ledger.fleet.jobs.receipt import decode_receipt, receipt_json, receipt_leaf, seal_leaves
from fleet_ledger.fleet.jobs.sum_tree import SumTree, encode_item_leaf, split_leaves
from fleet_ledger.fleet.log.anchor_bundle import anchor_fields
from fleet_ledger.fleet.log.checkpoint import parse_checkpoint
from fleet_ledger.fleet.log.note import parse_note
from fleet_ledger.fleet.log.proof_bundle import log_fields
from fleet_ledger.ledger import job_store
from fleet_ledger.ledger.store import LedgerStore
from fleet_ledger.ledger.views import CheckpointWanted, NotFound
from fleet_ledger.plumbing.anchoring import ReceiptStore

# Items listed by ``fleet job show`` (a job may have 2**32 - 1): the first ones, then a count.
SHOWN_ITEMS = 200


def _job(store: LedgerStore, job: str) -> dict[str, Any]:
    if not job.startswith("b3:"):
        job = "b3:" + job
    row = job_store.job_row(store.conn, job) if job_store.has_tables(store.conn) else None
    if row is None:
        raise NotFound(f"no job {job} in this ledger")
    return row


def _leaves(store: LedgerStore, job: str, items: int, receipt: bytes | None) -> list[bytes]:
    """The job's sum-tree leaves in index order, as the fold made them: a sealed job's, the
    ones its receipt was made from (``receipt``: its bytes); an open job's, each closed
    item run's leaf from its state and a missing leaf for the others
    (:func:`fleet.jobs.job_records.item_from_state`'s rule)."""
    if receipt is not None:
        kept = job_store.sealed_leaves(store.conn, job)
        if kept is not None:
            return split_leaves(kept)
    left_out = set() if receipt is None else set(decode_receipt(receipt).missing)
    leaves = [encode_item_leaf(i) for i in range(items)]
    for index, state in job_store.item_states(store.conn, job):
        # A sealed job's receipt leaves out an item whose run closed after the seal.
        if index not in left_out:
            leaves[index] = job_store.state_item_leaf(index, state)
    return leaves


class JobTrees:
    """The sum trees of the sealed jobs proved last (a few; least recently used out): a
    sealed job's leaves never change (:mod:`fleet.fold.job_fold`), so its tree, built once
    (O(n)), answers every later item proof in O(log n)."""

    def __init__(self, keep: int = 4) -> None:
        self.keep = keep
        self._trees: OrderedDict[str, tuple[SumTree, list[bytes]]] = OrderedDict()

    def get(self, job: str, build: Callable[[], list[bytes]]) -> tuple[SumTree, list[bytes]]:
        held = self._trees.get(job)
        if held is None:
            leaves = build()
            held = self._trees[job] = (SumTree.from_leaves(leaves), leaves)
            if len(self._trees) > self.keep:
                self._trees.popitem(last=False)
        self._trees.move_to_end(job)
        return held


def jobs(store: LedgerStore) -> list[dict[str, Any]]:
    """Every job, newest first, with its progress (none in a store from before jobs)."""
    if not job_store.has_tables(store.conn):
        return []
    return [{**row, "sealed": row["sealed_seq"] is not None}
            for row in job_store.job_rows(store.conn)]


def job_status(store: LedgerStore, job: str, with_items: bool = False, first: int = 0
               ) -> dict[str, Any]:
    """A job's document: its terms, progress, totals (by source and provenance), verdict
    counts and missing items; sealed, its receipt's (``receipt``: its hex and what it
    states), else the same sums over the items closed so far. ``with_items``: up to
    :data:`SHOWN_ITEMS` bound items (index, run, closed) from the ``first``-th on, and how
    many follow (``item_runs_more``)."""
    row = _job(store, job)
    terms = decode_terms(row["terms"])
    sealed = row["receipt"] is not None
    left_out: tuple[int, ...] = ()  # a sealed job's missing items
    if sealed:
        receipt = decode_receipt(row["receipt"])
        left_out = receipt.missing
        stated = receipt_json(receipt)
    else:
        stated = receipt_json(seal_leaves(terms, _leaves(store, row["job"], terms.items, None),
                                          store.tree.size()))
    doc: dict[str, Any] = {
        "job": row["job"], "name": terms.name, "items": terms.items, "issuer": row["issuer"],
        "grant": row["grant"], "opened_seq": row["opened_seq"], "sealed": sealed,
        "sealed_seq": row["sealed_seq"],
        "progress": {"items": terms.items, "bound": row["bound"], "closed": row["closed"],
                     "running": row["bound"] - row["closed"] if not sealed else None,
                     "unstarted": terms.items - row["bound"]},
        "energy": stated["energy"], "verdicts": stated["verdicts"],
        "missing": stated["missing"],
        "receipt": None if not sealed else {**stated, "hex": row["receipt"].hex(),
                                            "leaf_index": row["leaf_index"]},
    }
    if with_items:
        rows = job_store.item_rows(store.conn, row["job"])
        missing = set(left_out)
        doc["item_runs"] = [{"index": i, "run": run, "bound_seq": seq,
                             "closed": closed and i not in missing}
                            for i, run, seq, closed in rows[first:first + SHOWN_ITEMS]]
        doc["item_runs_more"] = max(0, len(rows) - first - SHOWN_ITEMS)
    return doc


def job_prove(store: LedgerStore, job: str, item: int,
              checkpoint_for: Callable[[int], tuple[int, bytes, str] | None] | None = None,
              receipts: ReceiptStore | None = None,
              trees: JobTrees | None = None) -> dict[str, Any]:
    """The proof bundle of ``item`` of a sealed ``job``: its sum-tree path to the receipt
    and the receipt's leaf in the first signed checkpoint that holds it (with the anchors'
    receipts covering it). :class:`CheckpointWanted` when none does yet. ``trees``: kept
    trees to prove from (else the tree is built for this proof)."""
    row = _job(store, job)
    if row["receipt"] is None:
        raise NotFound(f"job {row['job']} is not sealed yet: it has no receipt to prove "
                       "against (fleet job seal)")
    terms = decode_terms(row["terms"])
    if not 0 <= item < terms.items:
        raise NotFound(f"job {row['job']} has items 0 .. {terms.items - 1}, not {item}")
    leaf_index = row["leaf_index"]
    found = (store.checkpoint_at_least(leaf_index + 1) if checkpoint_for is None
             else checkpoint_for(leaf_index))
    if found is None:
        raise CheckpointWanted(leaf_index + 1)
    size, _root, note = found
    tree, leaves = (trees or JobTrees(1)).get(
        row["job"], lambda: _leaves(store, row["job"], terms.items, row["receipt"]))
    try:
        proof = tree_item_proof(decode_receipt(row["receipt"]).job, tree, item, leaves[item])
    except FleetError as exc:  # pragma: no cover - the store holds what the fold made
        raise NotFound(f"{exc.rule}: {exc}") from None
    log = log_fields(origin=parse_checkpoint(parse_note(note)[0]).origin, tree_size=size,
                     leaf_index=leaf_index, leaf=receipt_leaf(row["receipt"]),
                     inclusion=store.tree.inclusion_proof(leaf_index, size), checkpoint=note)
    if receipts is not None:
        log.update(anchor_fields(size, receipts.receipts_covering(size),
                                 store.checkpoint_notes, store.tree.consistency_proof))
    return build_job_bundle(row["receipt"], proof, log)


__all__ = ["SHOWN_ITEMS", "JobTrees", "job_prove", "job_status", "jobs"]

