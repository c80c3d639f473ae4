"""Proof bundles: built from parts, verified offline, each broken check named."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from fleet_ledger.fleet.address import format_address
from fleet_ledger.fleet.log.leaf import decode_leaf, encode_leaf
from fleet_ledger.fleet.log.log_errors import (
    BadSignature,
    InvalidProofRequest,
    LeafMismatch,
    MalformedBundle,
    MalformedLeaf,
    OriginMismatch,
    ProofLengthMismatch,
    RootMismatch,
    SizeMismatch,
    UnknownKey,
)
from fleet_ledger.fleet.log.note import generate_signer, parse_verifier_key
from fleet_ledger.fleet.log.proof_bundle import verify_bundle

VECTOR = json.loads(
    (Path(__file__).parent.parent / "docs" / "spec" / "vectors" / "bundle.json").read_text()
)
BUNDLE = VECTOR["bundle"]
VKEY = parse_verifier_key(VECTOR["verifier_key"])


def _with(**changes):
    bundle = copy.deepcopy(BUNDLE)
    bundle.update(changes)
    return bundle


def test_vector_bundle_verifies():
    """The checked-in bundle verifies with only the verifier key, and says what it proves."""
    proved = verify_bundle(BUNDLE, [VKEY])
    assert proved.leaf.index == BUNDLE["index"] == 21
    assert proved.checkpoint.size == BUNDLE["tree_size"] == 37


def _flip_hex(text: str, position: int = 0) -> str:
    digit = "0" if text[position] != "0" else "1"
    return text[:position] + digit + text[position + 1 :]


def _other_head() -> dict:
    """A leaf and head changed together: the binding holds, so only the root can catch it."""
    leaf = decode_leaf(bytes.fromhex(BUNDLE["leaf"]))
    head = bytes(32)
    return {"leaf": encode_leaf(leaf.run, leaf.index, head).hex(), "head": format_address(head)}


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"tree_size": "37"}, MalformedBundle),
        ({"inclusion": ["zz"]}, MalformedBundle),
        ({"leaf": BUNDLE["leaf"].upper()}, MalformedBundle),
        ({"origin": "other.example/log"}, OriginMismatch),
        ({"tree_size": 38}, SizeMismatch),
        ({"leaf": BUNDLE["leaf"][:-2]}, MalformedLeaf),
        ({"index": 22}, LeafMismatch),
        ({"run": BUNDLE["head"]}, LeafMismatch),
        ({"head": BUNDLE["run"]}, LeafMismatch),
        ({"leaf": _flip_hex(BUNDLE["leaf"], 100)}, LeafMismatch),
        (_other_head(), RootMismatch),
        ({"leaf_index": 21}, RootMismatch),
        ({"leaf_index": 37}, InvalidProofRequest),
        ({"inclusion": [_flip_hex(BUNDLE["inclusion"][0]), *BUNDLE["inclusion"][1:]]},
         RootMismatch),
        ({"inclusion": BUNDLE["inclusion"][:-1]}, ProofLengthMismatch),
        ({"checkpoint": BUNDLE["checkpoint"].replace("\n37\n", "\n38\n")}, BadSignature),
    ],
)
def test_each_failed_check_is_named(change, error):
    """Each kind of tampering fails with the error naming the check that caught it."""
    with pytest.raises(error):
        verify_bundle(_with(**change), [VKEY])


def test_other_key_is_unknown():
    """A bundle checked against a different ledger key fails as UnknownKey."""
    with pytest.raises(UnknownKey):
        verify_bundle(BUNDLE, [generate_signer("fleet.example/log").verifier()])


def test_missing_field_and_non_object():
    """A bundle without a field, or not an object at all, is MalformedBundle."""
    bundle = copy.deepcopy(BUNDLE)
    del bundle["checkpoint"]
    with pytest.raises(MalformedBundle):
        verify_bundle(bundle, [VKEY])
    with pytest.raises(MalformedBundle):
        verify_bundle([BUNDLE], [VKEY])
