"""docs/spec/vectors/jobs.json, both ways: the code reproduces the file, and the file's bytes,
rebuilt from the spec's text with struct and BLAKE3, decode and verify to the stated values."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import pytest
from blake3 import blake3
from gen_vectors_jobs import OUT, render

from fleet_ledger.fleet.jobs.item_proof import decode_item_proof, verify_item_proof
from fleet_ledger.fleet.jobs.job_id import decode_terms
from fleet_ledger.fleet.jobs.receipt import decode_receipt, verify_receipt
from fleet_ledger.fleet.jobs.sum_tree import Item, decode_item_leaf
from fleet_ledger.fleet.log.leaf import decode_job_leaf

V = json.loads(Path(OUT).read_text())
H = bytes.fromhex
SUMS = struct.Struct(">8Q5I")


def _items() -> list[Item | None]:
    return [None if e["item"] is None else Item(
        e["item"]["index"], H(e["item"]["run"]), H(e["item"]["grants"]), H(e["item"]["head"]),
        tuple(e["item"]["energy"]), e["item"]["verdict"], e["item"]["segment"])
        for e in V["items"]]


def test_the_code_reproduces_the_vector_file():
    """The generator, run now, writes exactly the checked-in file."""
    assert render() == Path(OUT).read_text()


def test_terms_and_job_id_are_the_layout_the_spec_writes():
    """terms = issuer || nonce || items:u32 || 0x01 || grant || text(name); job_id =
    BLAKE3("fleet.job/1" || terms); tag = job_id[:20]; and the bytes decode to the fields."""
    t = V["terms"]
    name = t["name"].encode()
    data = (H(t["issuer"]) + H(t["nonce"]) + struct.pack(">IB", t["items"], 1) + H(t["grant"])
            + struct.pack(">H", len(name)) + name)
    assert data.hex() == t["bytes"]
    assert blake3(b"fleet.job/1" + data).hexdigest() == t["job_id"]
    assert t["tag"] == t["job_id"][:40]
    got = decode_terms(data)
    assert (got.name, got.items, got.issuer.hex(), got.nonce.hex(), got.grant.hex()) == (
        t["name"], t["items"], t["issuer"], t["nonce"], t["grant"])


@pytest.mark.parametrize("u", V["units"], ids=lambda u: str(u["index"]))
def test_item_units_and_runs_are_the_layout_the_spec_writes(u):
    """unit = "jobitem1" || tag || index:u32; run = BLAKE3("sandbox.runrecord/1" || unit ||
    grant)."""
    unit = b"jobitem1" + H(V["terms"]["tag"]) + struct.pack(">I", u["index"])
    assert unit.hex() == u["unit"]
    assert blake3(b"sandbox.runrecord/1" + unit + H(V["terms"]["grant"])).hexdigest() == u["run"]


def _leaf(e: dict) -> tuple[bytes, bytes]:
    """A leaf and its sums from the vector's stated item, by the spec's tables."""
    it = e["item"]
    if it is None:
        index = V["items"].index(e)
        return b"\x00" + struct.pack(">I", index), SUMS.pack(*(0,) * 12, 1)
    leaf = (struct.pack(">BI", 1, it["index"]) + H(it["run"]) + H(it["grants"]) + H(it["head"])
            + struct.pack(">8QBQ", *it["energy"], it["verdict"], it["segment"]))
    counts = [int(it["verdict"] == c) for c in (1, 2, 3, 4)] + [0]
    return leaf, SUMS.pack(*it["energy"], *counts)


def _node(left: tuple[bytes, bytes], right: tuple[bytes, bytes]) -> tuple[bytes, bytes]:
    total = [a + b for a, b in zip(SUMS.unpack(left[1]), SUMS.unpack(right[1]), strict=True)]
    return (blake3(b"fleet.jobnode/1" + left[0] + left[1] + right[0] + right[1]).digest(),
            SUMS.pack(*total))


def _mth(nodes: list[tuple[bytes, bytes]]) -> tuple[bytes, bytes]:
    if len(nodes) == 1:
        return nodes[0]
    k = 1 << ((len(nodes) - 1).bit_length() - 1)
    return _node(_mth(nodes[:k]), _mth(nodes[k:]))


def test_leaves_root_and_receipt_are_the_layout_the_spec_writes():
    """Every leaf, its hash and sums; the RFC 9162-shaped root and totals; the receipt's
    bytes, digest and 76-byte log leaf - all rebuilt from the spec's text."""
    nodes = []
    for e in V["items"]:
        leaf, sums = _leaf(e)
        assert (leaf.hex(), sums.hex()) == (e["leaf"], e["sums"])
        assert blake3(b"fleet.jobleaf/1" + leaf).hexdigest() == e["leaf_hash"]
        nodes.append((blake3(b"fleet.jobleaf/1" + leaf).digest(), sums))
    root, totals = _mth(nodes)
    r = V["receipt"]
    assert (root.hex(), list(SUMS.unpack(totals))) == (r["root"], r["totals"])
    data = (b"fleet.jobreceipt/1" + H(V["terms"]["bytes"]) + root + totals
            + struct.pack(">Q", r["log_size"]) + b"".join(struct.pack(">I", i)
                                                         for i in r["missing"]))
    assert data.hex() == r["bytes"]
    assert blake3(data).hexdigest() == r["digest"]
    leaf = b"fleet.jobr/1" + H(V["terms"]["job_id"]) + blake3(data).digest()
    assert leaf.hex() == r["log_leaf"]
    assert hashlib.sha256(b"\x00" + leaf).hexdigest() == r["log_leaf_hash"]
    assert decode_job_leaf(leaf).receipt.hex() == r["digest"]


def test_the_files_bytes_decode_and_verify_to_the_stated_values():
    """The receipt decodes to its stated fields and verifies against the stated items;
    every leaf decodes to its item; every proof verifies and returns its item."""
    r = V["receipt"]
    receipt = decode_receipt(H(r["bytes"]))
    assert (receipt.root.hex(), list(receipt.sums), receipt.log_size, list(receipt.missing),
            receipt.job.hex()) == (r["root"], r["totals"], r["log_size"], r["missing"],
                                   V["terms"]["job_id"])
    items = _items()
    verify_receipt(receipt, items)
    for i, (e, it) in enumerate(zip(V["items"], items, strict=True)):
        assert decode_item_leaf(H(e["leaf"])) == (i if it is None else it)
        assert verify_item_proof(decode_item_proof(H(V["proofs"][i])), receipt) == (
            i if it is None else it)


@pytest.mark.parametrize("f", V["forgeries"], ids=lambda f: f["name"])
def test_each_forgery_fails_by_its_stated_name(f):
    """A forged receipt fails against the honest items, and the forged item's proof against
    it, each with the rule the file states."""
    receipt = decode_receipt(H(f["receipt"]))
    if f["from_items"] is None:
        verify_receipt(receipt, _items())
    else:
        with pytest.raises(Exception) as e:
            verify_receipt(receipt, _items())
        assert e.value.rule == f["from_items"]
    with pytest.raises(Exception) as e:
        verify_item_proof(decode_item_proof(H(f["proof"])), receipt)
    assert e.value.rule == f["from_proof"]


@pytest.mark.parametrize("name", list(V["malformed"]))
def test_each_malformed_vector_is_refused_by_its_stated_name(name):
    """Each malformed receipt, leaf or proof fails to decode with the file's rule."""
    m = V["malformed"][name]
    decoder = {"receipt": decode_receipt, "leaf": decode_item_leaf,
               "proof": decode_item_proof}[m["kind"]]
    with pytest.raises(Exception) as e:
        decoder(H(m["bytes"]))
    assert e.value.rule == m["rule"]
