"""RFC 9162 hashing, planning and verification against the RFC text and the RFC 6962 vectors."""

from __future__ import annotations

import merkle_reference as ref
import pytest
from merkle_helpers import consistency, inclusion, node_map

from fleet_ledger.fleet.log.log_errors import (
    InvalidProofRequest,
    MalformedProof,
    ProofLengthMismatch,
    RootMismatch,
)
from fleet_ledger.fleet.log.merkle import (
    EMPTY_ROOT,
    fold,
    leaf_hash,
    leaf_hashes,
    node_hash,
    root_from_inclusion,
    root_plan,
    verify_consistency,
    verify_inclusion,
)
from fleet_ledger.fleet.log.merkle_append import compact_root, extend

# RFC 6962 test leaves and roots (as used by every CT implementation's tests).
RFC_LEAVES = [
    bytes.fromhex(x)
    for x in (
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    )
]
RFC_ROOTS = [
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]


def test_empty_tree_root():
    """The empty tree's root is SHA-256 of the empty string."""
    assert EMPTY_ROOT.hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert fold([]) == EMPTY_ROOT


def test_rfc6962_roots_appending_one_at_a_time():
    """Appending the RFC 6962 leaves one by one yields the published root at every size."""
    size, compact = 0, {}
    for leaf, want in zip(RFC_LEAVES, RFC_ROOTS, strict=True):
        size, compact, _ = extend(size, compact, [leaf_hash(leaf)])
        assert compact_root(compact).hex() == want


def test_rfc6962_consistency_vectors():
    """Published RFC 6962 consistency proofs (6 -> 8, 2 -> 5) are reproduced and verify."""
    nodes = node_map(leaf_hashes(RFC_LEAVES))
    p68 = consistency(nodes, 6, 8)
    assert [h.hex()[:8] for h in p68] == ["0ebc5d34", "ca854ea1", "d37ee418"]
    verify_consistency(6, 8, p68, bytes.fromhex(RFC_ROOTS[5]), bytes.fromhex(RFC_ROOTS[7]))
    p25 = consistency(node_map(leaf_hashes(RFC_LEAVES[:5])), 2, 5)
    assert [h.hex()[:8] for h in p25] == ["5f083f0a", "bc1a0643"]
    with pytest.raises(RootMismatch) as err:
        verify_consistency(6, 8, p68, bytes.fromhex(RFC_ROOTS[4]), bytes.fromhex(RFC_ROOTS[7]))
    assert err.value.expected == bytes.fromhex(RFC_ROOTS[4])


def test_batch_append_equals_reference_for_all_splits():
    """Appending in two batches at any split point gives the RFC root of the whole."""
    hashes = [leaf_hash(bytes([i])) for i in range(70)]
    for split in range(71):
        size, compact, _ = extend(0, {}, hashes[:split])
        size, compact, _ = extend(size, compact, hashes[split:])
        assert compact_root(compact) == ref.mth([bytes([i]) for i in range(70)])


def test_plans_match_reference_for_small_trees():
    """Every inclusion and consistency proof up to 64 leaves equals the RFC's PATH and PROOF."""
    data = [i.to_bytes(2, "big") for i in range(64)]
    nodes = node_map(leaf_hashes(data))
    for n in range(1, 65):
        assert fold([nodes[x] for x in root_plan(n)]) == ref.mth(data[:n])
        for m in range(n):
            assert inclusion(nodes, m, n) == ref.path(m, data[:n])
        for m in range(1, n + 1):
            assert consistency(nodes, m, n) == ref.proof(m, data[:n])


def test_every_small_proof_verifies():
    """Every inclusion and consistency proof up to 40 leaves verifies against the roots."""
    data = [i.to_bytes(2, "big") for i in range(40)]
    hashes = leaf_hashes(data)
    nodes = node_map(hashes)
    roots = [EMPTY_ROOT] + [ref.mth(data[:n]) for n in range(1, 41)]
    for n in range(1, 41):
        for m in range(n):
            verify_inclusion(hashes[m], m, n, inclusion(nodes, m, n), roots[n])
        for m in range(n + 1):
            verify_consistency(m, n, consistency(nodes, m, n), roots[m], roots[n])


def test_inclusion_failures_are_typed():
    """Wrong root, extra or missing hash, bad index and short hashes each raise their own error."""
    data = [bytes([i]) for i in range(13)]
    hashes = leaf_hashes(data)
    nodes = node_map(hashes)
    root = ref.mth(data)
    proof = inclusion(nodes, 5, 13)
    with pytest.raises(RootMismatch) as err:
        verify_inclusion(hashes[6], 5, 13, proof, root)
    assert err.value.expected == root
    assert err.value.calculated == root_from_inclusion(hashes[6], 5, 13, proof)
    with pytest.raises(ProofLengthMismatch):
        verify_inclusion(hashes[5], 5, 13, [*proof, root], root)
    with pytest.raises(ProofLengthMismatch):
        verify_inclusion(hashes[5], 5, 13, proof[:-1], root)
    with pytest.raises(InvalidProofRequest):
        verify_inclusion(hashes[5], 13, 13, proof, root)
    with pytest.raises(MalformedProof):
        verify_inclusion(hashes[5], 5, 13, [proof[0][:31], *proof[1:]], root)


def test_consistency_edge_cases():
    """Equal sizes need an empty proof and equal roots; size 0 needs the empty root."""
    a, b = node_hash(b"a" * 32, b"b" * 32), node_hash(b"c" * 32, b"d" * 32)
    verify_consistency(3, 3, [], a, a)
    verify_consistency(0, 3, [], EMPTY_ROOT, a)
    with pytest.raises(RootMismatch):
        verify_consistency(3, 3, [], a, b)
    with pytest.raises(ProofLengthMismatch):
        verify_consistency(3, 3, [a], a, a)
    with pytest.raises(RootMismatch):
        verify_consistency(0, 3, [], a, a)
    with pytest.raises(ProofLengthMismatch):
        verify_consistency(2, 3, [], a, b)
    with pytest.raises(InvalidProofRequest):
        verify_consistency(4, 3, [], a, b)
