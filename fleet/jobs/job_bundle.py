"""The job proof bundle ``fleet job prove`` prints: one item of a job tied to the job's
receipt, and the receipt tied to a signed checkpoint of the fleet log. A JSON object,
verifiable offline with nothing but the ledger's verifier key (``docs/spec/jobs.md``)::

    format       "fleet-job-proof/1"
    job          b3: address of the job id
    item         the item's index
    receipt      hex of the receipt's bytes (fleet.jobs.receipt)
    item_proof   hex of the item proof's bytes (fleet.jobs.item_proof)
    origin, tree_size, leaf_index, leaf, inclusion, checkpoint
                 the receipt's job leaf in a signed checkpoint, as in a run's proof bundle
                 (fleet.log.proof_bundle.LOG_FIELDS); optional anchor receipts beside them
                 (fleet.log.anchor_bundle), as there

:func:`verify_job_bundle` checks, in this order, raising the first failure: the shape
(``MalformedBundle``), the receipt's bytes (``MalformedReceipt``), the job named is the
receipt's (``JobIdMismatch``), the leaf is the receipt's job leaf and is in the signed
checkpoint (:func:`fleet.log.proof_bundle.verify_log_fields`: ``UnknownKey``,
``BadSignature``, ``OriginMismatch``, ``SizeMismatch``, ``LeafMismatch``,
``RootMismatch``, ...), the item proof's bytes and its item (``MalformedItemProof``,
``ItemIndexMismatch``), then the proof against the receipt
(:func:`fleet.jobs.item_proof.verify_item_proof`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, NamedTuple

from fleet_ledger.fleet.address import format_address
from fleet_ledger.fleet.jobs.item_proof import (
    ItemProof,
    decode_item_proof,
    encode_item_proof,
    verify_item_proof,
)
from fleet_ledger.fleet.jobs.job_errors import ItemIndexMismatch, JobIdMismatch
from fleet_ledger.fleet.jobs.receipt import Receipt, decode_receipt, receipt_leaf
from fleet_ledger.fleet.jobs.sum_tree import Item
from fleet_ledger.fleet.log.checkpoint import Checkpoint
from fleet_ledger.fleet.log.log_errors import MalformedBundle
from fleet_ledger.fleet.log.note import Verifier
from fleet_ledger.fleet.log.proof_bundle import verify_log_fields

__all__ = ["FORMAT", "VerifiedJobBundle", "build_job_bundle", "verify_job_bundle"]

FORMAT = "fleet-job-proof/1"
_HEX = re.compile(r"(?:[0-9a-f]{2})+\Z")


class VerifiedJobBundle(NamedTuple):
    """What a valid bundle proves: this receipt is in the checkpoint's log, and the item
    (an ``int``, its index, when the receipt has it missing) is in the receipt."""

    checkpoint: Checkpoint
    receipt: Receipt
    item: Item | int
    leaf_index: int


def build_job_bundle(receipt: bytes, proof: ItemProof, log: dict[str, Any]) -> dict[str, Any]:
    """The bundle of ``proof``'s item under ``receipt``; ``log``: the receipt leaf's
    :data:`~fleet.log.proof_bundle.LOG_FIELDS` (and anchor keys, if any)."""
    return {"format": FORMAT, "job": format_address(proof.job), "item": proof.index,
            "receipt": receipt.hex(), "item_proof": encode_item_proof(proof).hex(), **log}


def _unhex(bundle: dict[str, Any], name: str) -> bytes:
    value = bundle.get(name)
    if not isinstance(value, str) or _HEX.match(value) is None:
        raise MalformedBundle(f"bundle field {name!r} is missing or not lowercase hex")
    return bytes.fromhex(value)


def verify_job_bundle(bundle: object, verifiers: Iterable[Verifier]) -> VerifiedJobBundle:
    """Check a job proof bundle (the module's docstring gives the order)."""
    if not isinstance(bundle, dict) or bundle.get("format") != FORMAT:
        raise MalformedBundle(f"a job proof bundle is a JSON object of format {FORMAT!r}")
    item = bundle.get("item")
    if not isinstance(bundle.get("job"), str) or type(item) is not int:
        raise MalformedBundle("bundle fields 'job' (text) and 'item' (integer) are required")
    receipt_bytes = _unhex(bundle, "receipt")
    proof_bytes = _unhex(bundle, "item_proof")
    receipt = decode_receipt(receipt_bytes)
    if bundle["job"] != format_address(receipt.job):
        raise JobIdMismatch("the bundle names another job than its receipt's",
                            expected=format_address(receipt.job), calculated=bundle["job"])
    checkpoint = verify_log_fields(bundle, receipt_leaf(receipt_bytes), verifiers)
    proof = decode_item_proof(proof_bytes)
    if proof.index != item:
        raise ItemIndexMismatch(f"the bundle names item {item}, its proof item {proof.index}",
                                expected=item, calculated=proof.index)
    return VerifiedJobBundle(checkpoint, receipt, verify_item_proof(proof, receipt),
                             bundle["leaf_index"])
