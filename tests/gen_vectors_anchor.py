"""Regenerate docs/spec/vectors/cosignature.json: ``python tests/gen_vectors_anchor.py``.

C2SP cosignature/v1 lines and tlog-witness add-checkpoint decisions, from fixed seeds and a
fixed time. Tests read the checked-in file and check this script writes the same bytes.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

from merkle_helpers import consistency, node_map

from fleet_ledger.fleet.log.checkpoint import make_checkpoint, sign_checkpoint
from fleet_ledger.fleet.log.cosignature import cosignature_message, witness_signer_from_seed
from fleet_ledger.fleet.log.merkle import fold, leaf_hash, root_plan
from fleet_ledger.fleet.log.note import Signature, signer_from_seed
from fleet_ledger.fleet.log.witness import WitnessState, decide, format_request

OUT = Path(__file__).parent.parent / "docs" / "spec" / "vectors" / "cosignature.json"
ORIGIN = "fleet.example/log"
WITNESS = "witness.example/w1"
TIME = 1700000000


def _seed(label: str) -> bytes:
    return hashlib.sha256(label.encode()).digest()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _tree(tag: str, size: int) -> dict:
    return node_map([leaf_hash(_seed(f"{tag} {i}")) for i in range(size)])


def _root(nodes: dict, size: int) -> bytes:
    return fold([nodes[n] for n in root_plan(size)])


def _line(name: str, key_id: int, sig: bytes) -> str:
    return Signature(name, key_id, sig).line()


def cosignature_cases(log_note: str, body: str) -> list[dict[str, Any]]:
    witness = witness_signer_from_seed(WITNESS, _seed("witness"))
    good = witness.cosign(body, TIME)
    sig = good.signature
    flipped = sig[:20] + bytes([sig[20] ^ 1]) + sig[21:]
    later = (TIME + 1).to_bytes(8, "big") + sig[8:]
    huge = (1 << 63).to_bytes(8, "big") + sig[8:]
    return [
        {"name": "valid", "line": good.line(), "result": "valid", "timestamp": TIME},
        {"name": "signature bit flipped", "line": _line(WITNESS, witness.key_id, flipped),
         "result": "BadSignature"},
        {"name": "timestamp changed", "line": _line(WITNESS, witness.key_id, later),
         "result": "BadSignature"},
        {"name": "timestamp above 2^63-1", "line": _line(WITNESS, witness.key_id, huge),
         "result": "BadSignature"},
        {"name": "key id computed with type 0x01 (ignored as unknown)",
         "line": _line(WITNESS, int.from_bytes(hashlib.sha256(
             WITNESS.encode() + b"\n\x01" + witness.key().public_key).digest()[:4], "big"), sig),
         "result": "ignored"},
    ]


def witness_cases() -> list[dict[str, Any]]:
    log = signer_from_seed(ORIGIN, _seed("log"))
    other = signer_from_seed(ORIGIN, _seed("impostor"))
    witness = witness_signer_from_seed(WITNESS, _seed("witness"))
    honest, forked = _tree("leaf", 12), _tree("fork", 12)

    def note(nodes: dict, size: int, signer: Any = log) -> str:
        return sign_checkpoint(make_checkpoint(ORIGIN, size, _root(nodes, size)), signer)

    held = WitnessState(5, _root(honest, 5), note(honest, 5))
    proof = consistency(honest, 5, 12)
    bad = [proof[0][:31] + bytes([proof[0][31] ^ 1]), *proof[1:]]
    requests = [
        ("first checkpoint, old 0", None, format_request(0, [], note(honest, 5))),
        ("extends with a consistency proof", held, format_request(5, proof, note(honest, 12))),
        ("stale old size", held, format_request(0, [], note(honest, 12))),
        ("same size, other root (fork)", held, format_request(5, [], note(forked, 5))),
        ("proof does not verify", held, format_request(5, bad, note(honest, 12))),
        ("signed by an unknown key", held, format_request(5, proof, note(honest, 12, other))),
        ("old size above checkpoint size", held, format_request(13, [], note(honest, 12))),
        ("unknown origin", None, format_request(0, [], sign_checkpoint(
            make_checkpoint("other.example/log", 1, _root(honest, 1)),
            signer_from_seed("other.example/log", _seed("other"))))),
    ]
    cases = []
    for name, state, body in requests:
        states = {} if state is None else {ORIGIN: state}
        outcome = decide(body, {ORIGIN: [log.verifier()]}, states, witness, TIME)
        case: dict[str, Any] = {
            "name": name, "request": body.decode(),
            "witness_size": None if state is None else state.size,
            "witness_root": None if state is None else _b64(state.root),
            "status": outcome.status,
        }
        if outcome.status in (200, 409):
            case["response"] = outcome.body.decode()
        cases.append(case)
    return cases


def vectors() -> dict[str, Any]:
    log = signer_from_seed(ORIGIN, _seed("log"))
    witness = witness_signer_from_seed(WITNESS, _seed("witness"))
    nodes = _tree("leaf", 12)
    checkpoint = make_checkpoint(ORIGIN, 12, _root(nodes, 12))
    body = checkpoint.body()
    log_note = sign_checkpoint(checkpoint, log)
    return {
        "log_vkey": log.verifier().text(),
        "witness_signer_key": witness.text(),
        "witness_vkey": witness.key().text(),
        "time": TIME,
        "checkpoint": body,
        "signed_message": cosignature_message(body, TIME).decode(),
        "log_note": log_note,
        "cosigned_note": log_note + witness.cosign(body, TIME).line(),
        "cosignature_cases": cosignature_cases(log_note, body),
        "add_checkpoint_cases": witness_cases(),
    }


def render() -> str:
    return json.dumps(vectors(), indent=1, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    OUT.write_text(render(), encoding="utf-8")
    print(f"wrote {OUT}")
