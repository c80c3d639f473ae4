"""Regenerate docs/spec/vectors/jobs.json: ``python tests/gen_vectors_jobs.py``.

Tests read the checked-in file; they also check this script would write the same bytes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import struct
from pathlib import Path
from typing import Any

from fleet_ledger.fleet.address import digest, format_address
from fleet_ledger.fleet.errors import FleetError
from fleet_ledger.fleet.jobs.item_proof import (
    ItemProof,
    decode_item_proof,
    encode_item_proof,
    item_proof,
    verify_item_proof,
)
from fleet_ledger.fleet.jobs.job_id import encode_terms, item_run, item_unit, job_id, job_tag
from fleet_ledger.fleet.jobs.receipt import (
    RECEIPT_DOMAIN,
    Receipt,
    decode_receipt,
    encode_receipt,
    item_leaves,
    receipt_leaf,
    seal,
    seal_leaves,
    verify_receipt,
)
from fleet_ledger.fleet.jobs.sum_tree import Item, decode_item_leaf, encode_item_leaf, leaf_node

from job_helpers import items, seed, terms

OUT = Path(__file__).parent.parent / "docs" / "spec" / "vectors" / "jobs.json"
SIZE, MISSING, LOG_SIZE = 7, (3,), 1234


def _rule(call: Any) -> str | None:
    try:
        call()
    except FleetError as exc:
        return exc.rule
    return None


def _item_json(it: Item | None) -> dict[str, Any] | None:
    if it is None:
        return None
    return {"index": it.index, "run": it.run.hex(), "grants": it.grants.hex(),
            "head": it.head.hex(), "energy": list(it.energy), "verdict": it.verdict,
            "segment": it.segment}


def _receipt_json(r: Receipt) -> dict[str, Any]:
    data = encode_receipt(r)
    leaf = receipt_leaf(data)
    return {"root": r.root.hex(), "totals": list(r.sums), "log_size": r.log_size,
            "missing": list(r.missing), "bytes": data.hex(), "digest": digest(data).hex(),
            "log_leaf": leaf.hex(),
            "log_leaf_hash": hashlib.sha256(b"\x00" + leaf).digest().hex()}


def _forgery(name: str, forged: Receipt, proof: ItemProof, honest: list[Item | None]
             ) -> dict[str, Any]:
    data = encode_receipt(forged)
    return {
        "name": name, "receipt": data.hex(), "proof": encode_item_proof(proof).hex(),
        "from_items": _rule(lambda: verify_receipt(decode_receipt(data), honest)),
        "from_proof": _rule(lambda: verify_item_proof(proof, decode_receipt(data))),
    }


def _forgeries(t: Any, its: list[Item | None], leaves: list[bytes], honest: Receipt
               ) -> list[dict[str, Any]]:
    job = job_id(t)
    low = its[2]._replace(energy=(0, *its[2].energy[1:]))  # type: ignore[union-attr]
    under = [*leaves[:2], encode_item_leaf(low), *leaves[3:]]
    dropped = [*leaves[:4], encode_item_leaf(4), *leaves[5:]]
    twice = [*leaves[:5], leaves[1], *leaves[6:]]
    good = item_proof(job, leaves, 0)
    lowered = bytearray(good.path[0][1])
    lowered[7] -= 1  # receipts.measured of the sibling, lowered by 1 uJ
    sibling = ItemProof(job, good.items, 0, good.leaf,
                        ((good.path[0][0], bytes(lowered)), *good.path[1:]))
    return [
        _forgery("under-reports item 2's energy (receipts.measured lowered to 0)",
                 seal_leaves(t, under, LOG_SIZE),
                 dataclasses.replace(item_proof(job, under, 2), leaf=leaves[2]), its),
        _forgery("drops item 4 (lists it missing)", seal_leaves(t, dropped, LOG_SIZE),
                 dataclasses.replace(item_proof(job, dropped, 4), leaf=leaves[4]), its),
        _forgery("counts item 1 twice (its leaf in item 5's place)",
                 seal_leaves(t, twice, LOG_SIZE), item_proof(job, twice, 5), its),
        _forgery("lowers a sibling's sums in item 0's proof (honest receipt)", honest,
                 sibling, its),
    ]


def _malformed(t: Any, receipt: bytes, leaves: list[bytes], proof: bytes
               ) -> dict[str, dict[str, str]]:
    head = RECEIPT_DOMAIN + encode_terms(t)
    short = seal_leaves(t, leaves, LOG_SIZE)
    counts = list(short.sums)
    counts[8] -= 1  # 6 of 7 items counted: a tree one item short
    cases = {
        "receipt: a tail byte too many": ("receipt", receipt + b"\x00"),
        "receipt: missing list cut": ("receipt", receipt[:-1]),
        "receipt: counts add up to 6 of 7 items": (
            "receipt", head + short.root + struct.pack(">8Q5I", *counts)
            + struct.pack(">Q", LOG_SIZE) + struct.pack(">I", 3)),
        "receipt: another domain": ("receipt", b"fleet.jobreceipt/2" + receipt[18:]),
        "terms: grant flag 2": ("receipt", receipt[:18 + 52] + b"\x02" + receipt[18 + 53:]),
        "leaf: form 2": ("leaf", b"\x02" + leaves[0][1:]),
        "leaf: Blocked naming segment 0": ("leaf", leaves[1][:166] + bytes(8)),
        "leaf: verdict code 5": ("leaf", leaves[0][:165] + b"\x05" + leaves[0][166:]),
        "leaf: missing index 2^32 - 1": ("leaf", b"\x00\xff\xff\xff\xff"),
        "proof: path cut by one byte": ("proof", proof[:-1]),
        "proof: another domain": ("proof", b"fleet.jobproof/2" + proof[16:]),
    }
    return {name: {"kind": kind, "bytes": data.hex(), "rule": _decode_rule(kind, data)}
            for name, (kind, data) in cases.items()}


def _decode_rule(kind: str, data: bytes) -> str:
    decoder = {"receipt": decode_receipt, "leaf": decode_item_leaf,
               "proof": decode_item_proof}[kind]
    rule = _rule(lambda: decoder(data))
    assert rule is not None, f"{kind} {data.hex()} decodes"
    return rule


def build() -> dict[str, Any]:
    t = terms(SIZE, name="eval/arith-7", grant=seed("grant"))
    job = job_id(t)
    its = items(t, missing=MISSING)
    leaves = item_leaves(t, its)
    honest = seal(t, its, LOG_SIZE)
    receipt = encode_receipt(honest)
    proofs = [encode_item_proof(item_proof(job, leaves, i)) for i in range(SIZE)]
    assert t.grant is not None
    return {
        "comment": "Jobs (docs/spec/jobs.md): terms and job id, item units and runs, a job "
                   "of 7 items (item 3 missing) with its leaves, receipt and item proofs, "
                   "forged receipts and proofs with the rule refusing each (from the items, "
                   "section 10; from the proof of the forged item, section 9), malformed bytes.",
        "terms": {"name": t.name, "items": t.items, "issuer": t.issuer.hex(),
                  "nonce": t.nonce.hex(), "grant": t.grant.hex(),
                  "bytes": encode_terms(t).hex(), "job_id": job.hex(),
                  "job": format_address(job), "tag": job_tag(job).hex()},
        "units": [{"index": i, "unit": item_unit(job, i).hex(),
                   "run": item_run(job, i, t.grant).hex()} for i in (0, 6, 2**32 - 2)],
        "items": [{"item": _item_json(it), "leaf": leaf.hex(),
                   "leaf_hash": leaf_node(leaf)[0].hex(), "sums": leaf_node(leaf)[1].hex()}
                  for it, leaf in zip(its, leaves, strict=True)],
        "receipt": _receipt_json(honest),
        "proofs": [p.hex() for p in proofs],
        "forgeries": _forgeries(t, its, leaves, honest),
        "malformed": _malformed(t, receipt, leaves, proofs[0]),
    }


def render() -> str:
    return json.dumps(build(), indent=1) + "\n"


if __name__ == "__main__":
    OUT.write_text(render())
