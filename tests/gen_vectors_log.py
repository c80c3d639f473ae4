"""Regenerate docs/spec/vectors/{merkle,note,bundle}.json: ``python tests/gen_vectors_log.py``.

Tests read the checked-in files; they also check this script would write the same bytes.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import merkle_reference as ref
from merkle_helpers import consistency, inclusion, node_map

from fleet_ledger.fleet.log.checkpoint import make_checkpoint, sign_checkpoint
from fleet_ledger.fleet.log.leaf import encode_leaf
from fleet_ledger.fleet.log.log_errors import LogError
from fleet_ledger.fleet.log.merkle import (
    leaf_hash,
    leaf_hashes,
    verify_consistency,
    verify_inclusion,
)
from fleet_ledger.fleet.log.note import Signature, parse_note, sign_note, signer_from_seed
from fleet_ledger.fleet.log.proof_bundle import build_bundle

OUT = Path(__file__).parent.parent / "docs" / "spec" / "vectors"
RFC_LEAVES = ["", "00", "10", "2021", "3031", "40414243", "5051525354555657",
              "606162636465666768696a6b6c6d6e6f"]  # fmt: skip
ORIGIN = "fleet.example/log"


def _seed(label: str) -> bytes:
    return hashlib.sha256(label.encode()).digest()


def fleet_leaves(count: int) -> list[bytes]:
    """Deterministic fleet leaves: run r = SHA-256("run"), segment i, head SHA-256(i)."""
    run = _seed("run")
    return [encode_leaf(run, i + 1, _seed(f"head {i + 1}")) for i in range(count)]


def _flip(data: bytes, bit: int) -> bytes:
    out = bytearray(data)
    out[(bit // 8) % len(out)] ^= 1 << (bit % 8)
    return bytes(out)


def _fails(check: Any, *args: Any) -> bool:
    try:
        check(*args)
    except LogError:
        return True
    return False


def _inclusion_cases(tag: str, data: list[bytes], pairs: list[tuple[int, int]]) -> list[dict]:
    hashes, nodes, cases = leaf_hashes(data), node_map(leaf_hashes(data)), []
    for index, size in pairs:
        proof, root = inclusion(nodes, index, size), ref.mth(data[:size])
        good = {"kind": "inclusion", "leaf_index": index, "tree_size": size,
                "leaf_hash": hashes[index], "root": root, "proof": proof}  # fmt: skip
        name = f"{tag} leaf {index} of {size}"
        cases.append({"name": name, **good, "valid": True})
        bad: list[tuple[str, dict]] = []
        for k in range(len(proof)):
            bit = (k * 37 + 3) % 256
            mutated = [*proof[:k], _flip(proof[k], bit), *proof[k + 1 :]]
            bad.append((f"modified-proof[{k}]-bit-@{bit}", {"proof": mutated}))
        bad.append(("wrong-leaf", {"leaf_hash": leaf_hash(b"not this leaf")}))
        bad.append(("extra-hash", {"proof": [*proof, root]}))
        if proof:
            bad.append(("missing-hash", {"proof": proof[:-1]}))
        for other in (size + 1, size - 1, size * 2, size + 3):
            args = (good["leaf_hash"], index, other, proof, root)
            if other > 0 and _fails(verify_inclusion, *args):
                bad.append((f"wrong-size-{other}", {"tree_size": other}))
                break
        for label, change in bad:
            case = {**good, **change}
            args = (case["leaf_hash"], index, case["tree_size"], case["proof"], root)
            assert _fails(verify_inclusion, *args), (name, label)
            cases.append({"name": f"{name} {label}", **case, "valid": False})
    return cases


def _consistency_cases(tag: str, data: list[bytes], pairs: list[tuple[int, int]]) -> list[dict]:
    nodes, cases = node_map(leaf_hashes(data)), []
    for old, new in pairs:
        proof = consistency(nodes, old, new)
        good = {"kind": "consistency", "old_size": old, "new_size": new,
                "old_root": ref.mth(data[:old]), "new_root": ref.mth(data[:new]),
                "proof": proof}  # fmt: skip
        name = f"{tag} consistency {old} to {new}"
        cases.append({"name": name, **good, "valid": True})
        bad: list[tuple[str, dict]] = []
        for k in range(len(proof)):
            bit = (k * 37 + 5) % 256
            mutated = [*proof[:k], _flip(proof[k], bit), *proof[k + 1 :]]
            bad.append((f"modified-proof[{k}]-bit-@{bit}", {"proof": mutated}))
        bad.append(("wrong-old-root", {"old_root": _flip(good["old_root"], 9)}))
        bad.append(("wrong-new-root", {"new_root": _flip(good["new_root"], 9)}))
        bad.append(("extra-hash", {"proof": [*proof, good["new_root"]]}))
        if proof:
            bad.append(("missing-hash", {"proof": proof[:-1]}))
        for other in (new + 1, new - 1, new * 2, new + 3):
            args = (old, other, proof, good["old_root"], good["new_root"])
            if other >= old and _fails(verify_consistency, *args):
                bad.append((f"wrong-size-{other}", {"new_size": other}))
                break
        for label, change in bad:
            case = {**good, **change}
            args = (old, case["new_size"], case["proof"], case["old_root"], case["new_root"])
            assert _fails(verify_consistency, *args), (name, label)
            cases.append({"name": f"{name} {label}", **case, "valid": False})
    return cases


def _hexed(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, list):
        return [_hexed(item) for item in value]
    if isinstance(value, dict):
        return {key: _hexed(item) for key, item in value.items()}
    return value


def merkle_vectors() -> dict:
    rfc = [bytes.fromhex(x) for x in RFC_LEAVES]
    fleet = fleet_leaves(37)
    rfc_pairs = [(m, n) for n in range(1, 9) for m in range(n)]
    fleet_pairs = [(0, 37), (5, 37), (31, 37), (32, 37), (36, 37), (12, 13), (0, 32), (17, 32)]
    cons_rfc = [(m, n) for n in range(1, 9) for m in range(1, n + 1)]
    cons_fleet = [(1, 37), (13, 37), (16, 37), (32, 37), (36, 37), (5, 6), (7, 32)]
    return _hexed({
        "hash": "RFC 9162 SHA-256: leaf = H(0x00 || leaf), node = H(0x01 || left || right)",
        "trees": {
            "rfc6962": {"leaves": rfc, "roots": [ref.mth(rfc[:n]) for n in range(9)]},
            "fleet": {"leaves": fleet, "roots": [ref.mth(fleet[:n]) for n in range(38)]},
        },
        "cases": _inclusion_cases("rfc6962", rfc, rfc_pairs)
        + _inclusion_cases("fleet", fleet, fleet_pairs)
        + _consistency_cases("rfc6962", rfc, cons_rfc)
        + _consistency_cases("fleet", fleet, cons_fleet),
    })


def note_vectors() -> dict:
    signer = signer_from_seed(ORIGIN, _seed("fleet.example/log test key"))
    other = signer_from_seed("other.example/witness", _seed("other test key"))
    text = make_checkpoint(ORIGIN, 37, ref.mth(fleet_leaves(37))).body()
    note = sign_note(text, [signer])
    sig_line = parse_note(note)[1][0]
    flipped = Signature(sig_line.name, sig_line.key_id, _flip(sig_line.signature, 17)).line()
    cosigned = sign_note(text, [signer, other])
    cases = [
        {"name": "valid", "note": note, "valid": True},
        {"name": "valid with a cosignature by an unknown key", "note": cosigned, "valid": True},
        {"name": "text changed", "note": note.replace("\n37\n", "\n38\n"), "valid": False,
         "error": "BadSignature"},
        {"name": "signature bit flipped", "note": text + "\n" + flipped, "valid": False,
         "error": "BadSignature"},
        {"name": "signed by an unknown key only", "note": sign_note(text, [other]),
         "valid": False, "error": "UnknownKey"},
        {"name": "no blank line", "note": note.replace("\n\n", "\n"), "valid": False,
         "error": "MalformedNote"},
        {"name": "no final newline", "note": note[:-1], "valid": False, "error": "MalformedNote"},
    ]  # fmt: skip
    return {
        "signer_key": signer.text(),
        "verifier_key": signer.verifier().text(),
        "text": text,
        "note": note,
        "cases": cases,
    }


def bundle_vector() -> dict:
    signer = signer_from_seed(ORIGIN, _seed("fleet.example/log test key"))
    leaves = fleet_leaves(37)
    nodes = node_map(leaf_hashes(leaves))
    note = sign_checkpoint(make_checkpoint(ORIGIN, 37, ref.mth(leaves)), signer)
    bundle = build_bundle(origin=ORIGIN, tree_size=37, leaf_index=20, leaf=leaves[20],
                          inclusion=inclusion(nodes, 20, 37), checkpoint=note)  # fmt: skip
    return {"verifier_key": signer.verifier().text(), "bundle": bundle}


def render() -> dict[str, str]:
    """File name -> exact text this generator writes."""
    docs = {
        "merkle.json": merkle_vectors(),
        "note.json": note_vectors(),
        "bundle.json": bundle_vector(),
    }
    return {
        name: json.dumps(doc, indent=1, ensure_ascii=False) + "\n" for name, doc in docs.items()
    }


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    for name, text in render().items():
        (OUT / name).write_text(text)
        print(f"wrote {OUT / name} ({len(text)} bytes)")
