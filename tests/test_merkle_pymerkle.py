"""Cross-check against pymerkle, an independent RFC 9162 implementation."""

from __future__ import annotations

import random

import pytest
from merkle_helpers import (
    consistency,
    inclusion,
    node_map,
    to_pymerkle_consistency,
    to_pymerkle_inclusion,
)

from fleet_ledger.fleet.log.merkle import (
    EMPTY_ROOT,
    leaf_hashes,
    verify_consistency,
    verify_inclusion,
)
from fleet_ledger.ledger.tree_store import TreeStore

pymerkle = pytest.importorskip("pymerkle")


def _entries(count: int) -> list[bytes]:
    return [i.to_bytes(8, "big") for i in range(count)]


def _picks(n: int, rng: random.Random) -> list[int]:
    """All of 0..n-1 for small n, else both ends and 16 random values in between."""
    if n <= 40:
        return list(range(n))
    return sorted({0, 1, n - 2, n - 1, *rng.sample(range(n), 16)})


def test_every_size_to_300_agrees_with_pymerkle():
    """For every size 1..300 roots agree, and our proofs verify under pymerkle's verifier."""
    data = _entries(300)
    hashes = leaf_hashes(data)
    nodes = node_map(hashes)
    theirs = pymerkle.InmemoryTree()
    for entry in data:
        theirs.append_entry(entry)
    roots = [EMPTY_ROOT] + [theirs.get_root(n) for n in range(1, 301)]
    converted = 0
    rng = random.Random(0)
    for n in range(1, 301):
        for m in _picks(n, rng):
            proof = inclusion(nodes, m, n)
            verify_inclusion(hashes[m], m, n, proof, roots[n])
            pymerkle.verify_inclusion(
                hashes[m], roots[n], to_pymerkle_inclusion(hashes[m], m, n, proof)
            )
        for m in (pick + 1 for pick in _picks(n, rng)):
            proof = consistency(nodes, m, n)
            verify_consistency(m, n, proof, roots[m], roots[n])
            theirs_format = to_pymerkle_consistency(m, n, roots[m], proof)
            if theirs_format is not None:
                pymerkle.verify_consistency(roots[m], roots[n], theirs_format)
                converted += 1
    assert converted > 2_000  # about half the pairs; see to_pymerkle_consistency


def test_pymerkle_rejects_a_mutated_converted_proof():
    """The conversion is not vacuous: pymerkle rejects our proof with one flipped bit."""
    hashes = leaf_hashes(_entries(21))
    nodes = node_map(hashes)
    theirs = pymerkle.InmemoryTree()
    for entry in _entries(21):
        theirs.append_entry(entry)
    proof = inclusion(nodes, 7, 21)
    proof[1] = bytes([proof[1][0] ^ 1]) + proof[1][1:]
    with pytest.raises(pymerkle.InvalidProof):
        pymerkle.verify_inclusion(
            hashes[7], theirs.get_root(21), to_pymerkle_inclusion(hashes[7], 7, 21, proof)
        )


def _compare_random_sizes(total: int, samples: int, tmp_path, seed: int) -> None:
    """Build both trees over ``total`` leaves; compare roots and proofs at random sizes."""
    import sqlite3

    rng = random.Random(seed)
    store = TreeStore(sqlite3.connect(tmp_path / "ours.db"))
    batch = 50_000
    for start in range(0, total, batch):
        stop = min(total, start + batch)
        store.append(leaf_hashes(i.to_bytes(8, "big") for i in range(start, stop)))
    store.conn.commit()
    theirs = pymerkle.SqliteTree(str(tmp_path / "theirs.db"))
    theirs.append_entries(i.to_bytes(8, "big") for i in range(total))
    sizes = [*sorted(rng.randrange(1, total + 1) for _ in range(samples)), total]
    for n in sizes:
        root = theirs.get_root(n)
        assert store.root(n) == root
        for _ in range(3):
            m = rng.randrange(n)
            leaf = leaf_hashes([m.to_bytes(8, "big")])[0]
            proof = store.inclusion_proof(m, n)
            verify_inclusion(leaf, m, n, proof, root)
            pymerkle.verify_inclusion(leaf, root, to_pymerkle_inclusion(leaf, m, n, proof))
            old = rng.randrange(1, n + 1)
            old_root = theirs.get_root(old)
            proof = store.consistency_proof(old, n)
            verify_consistency(old, n, proof, old_root, root)
            converted = to_pymerkle_consistency(old, n, old_root, proof)
            if converted is not None:
                pymerkle.verify_consistency(old_root, root, converted)
    theirs.close()


def test_random_sizes_to_20000_agree_with_pymerkle(tmp_path):
    """At random sizes up to 20,000, our stored roots and proofs agree with pymerkle's."""
    _compare_random_sizes(20_000, 8, tmp_path, seed=1)


@pytest.mark.slow
def test_random_sizes_to_a_million_agree_with_pymerkle(tmp_path):
    """At random sizes up to 10**6, our stored roots and proofs agree with pymerkle's."""
    _compare_random_sizes(1_000_000, 4, tmp_path, seed=2)
