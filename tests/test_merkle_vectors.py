"""Checked-in vectors in docs/spec/vectors/: the code reproduces them, and they judge the code."""

from __future__ import annotations

import json
from pathlib import Path

import gen_vectors_log
import pytest
from merkle_helpers import consistency, inclusion, node_map

from fleet_ledger.fleet.log.log_errors import LogError
from fleet_ledger.fleet.log.merkle import (
    fold,
    leaf_hashes,
    root_plan,
    verify_consistency,
    verify_inclusion,
)

VECTORS = Path(__file__).parent.parent / "docs" / "spec" / "vectors"
MERKLE = json.loads((VECTORS / "merkle.json").read_text())


def _check(case: dict) -> None:
    h = bytes.fromhex
    if case["kind"] == "inclusion":
        verify_inclusion(
            h(case["leaf_hash"]), case["leaf_index"], case["tree_size"],
            [h(x) for x in case["proof"]], h(case["root"]),
        )  # fmt: skip
    else:
        verify_consistency(
            case["old_size"], case["new_size"], [h(x) for x in case["proof"]],
            h(case["old_root"]), h(case["new_root"]),
        )  # fmt: skip


@pytest.mark.parametrize("case", MERKLE["cases"], ids=lambda case: case["name"])
def test_vector_case(case):
    """A valid vector verifies; a mutated one (bit flip, wrong leaf/size, extra/missing) fails."""
    if case["valid"]:
        _check(case)
    else:
        with pytest.raises(LogError):
            _check(case)


def test_code_reproduces_roots_and_proofs():
    """Roots and every valid proof in merkle.json are what our planner and store produce."""
    for name, tree in MERKLE["trees"].items():
        leaves = [bytes.fromhex(x) for x in tree["leaves"]]
        nodes = node_map(leaf_hashes(leaves))
        for size, root in enumerate(tree["roots"]):
            assert fold([nodes[n] for n in root_plan(size)]).hex() == root, (name, size)
    trees = {name: node_map(leaf_hashes([bytes.fromhex(x) for x in tree["leaves"]]))
             for name, tree in MERKLE["trees"].items()}  # fmt: skip
    for case in MERKLE["cases"]:
        if not case["valid"]:
            continue
        nodes = trees[case["name"].split()[0]]
        if case["kind"] == "inclusion":
            proof = inclusion(nodes, case["leaf_index"], case["tree_size"])
        else:
            proof = consistency(nodes, case["old_size"], case["new_size"])
        assert [x.hex() for x in proof] == case["proof"], case["name"]


def test_rfc6962_eight_leaf_root_is_in_the_vectors():
    """The published RFC 6962 8-leaf root is the vectors' root at size 8."""
    root = "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"
    assert MERKLE["trees"]["rfc6962"]["roots"][8] == root


def test_generator_writes_the_checked_in_files():
    """tests/gen_vectors_log.py regenerates every vector file byte for byte."""
    for name, text in gen_vectors_log.render().items():
        assert (VECTORS / name).read_text() == text, name
