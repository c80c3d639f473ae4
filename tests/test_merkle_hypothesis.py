"""Property tests: every proof verifies, and a single flipped bit makes it fail."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from merkle_helpers import consistency, inclusion, node_map

from fleet_ledger.fleet.log.log_errors import ProofError
from fleet_ledger.fleet.log.merkle import (
    fold,
    leaf_hashes,
    root_plan,
    verify_consistency,
    verify_inclusion,
)

MAX = 3000
HASHES = leaf_hashes(i.to_bytes(4, "big") for i in range(MAX))
NODES = node_map(HASHES)


def _root(size: int) -> bytes:
    return fold([NODES[node] for node in root_plan(size)])


def _flip(data: bytes, bit: int) -> bytes:
    bit %= len(data) * 8
    out = bytearray(data)
    out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


def _inclusion_schedule(index: int, size: int) -> list[str] | None:
    """The hashing steps RFC 9162 §2.1.3.2 takes for (index, size): equal schedules, equal roots."""
    if not 0 <= index < size:
        return None
    fn, sn, steps = index, size - 1, []
    while sn:
        if fn & 1 or fn == sn:
            steps.append("L")
            if not fn & 1:
                while fn and not fn & 1:
                    fn, sn = fn >> 1, sn >> 1
        else:
            steps.append("R")
        fn, sn = fn >> 1, sn >> 1
    return steps


def _consistency_schedule(old: int, new: int) -> list[str] | None:
    """The hashing steps RFC 9162 §2.1.4.2 takes for (old, new)."""
    if not 0 < old < new:
        return None
    steps = ["P" if old & (old - 1) == 0 else "-"]
    fn, sn = old - 1, new - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    while sn:
        if fn & 1 or fn == sn:
            steps.append("B")
            if not fn & 1:
                while fn and not fn & 1:
                    fn, sn = fn >> 1, sn >> 1
        else:
            steps.append("S")
        fn, sn = fn >> 1, sn >> 1
    return steps


sizes = st.integers(min_value=2, max_value=MAX).flatmap(
    lambda n: st.tuples(st.integers(min_value=1, max_value=n - 1), st.just(n))
)


@settings(max_examples=300, deadline=None)
@given(sizes, st.integers(min_value=0, max_value=1 << 16), st.integers(min_value=0))
def test_inclusion_verifies_and_any_bit_flip_fails(mn, bit, choice):
    """An inclusion proof verifies; flipping one bit of proof, leaf, root or size breaks it."""
    m, n = mn
    index = m - 1 + choice % (n - m + 1)  # any leaf of the tree of n
    proof, leaf, root = inclusion(NODES, index, n), HASHES[index], _root(n)
    verify_inclusion(leaf, index, n, proof, root)
    with pytest.raises(ProofError):
        verify_inclusion(_flip(leaf, bit), index, n, proof, root)
    with pytest.raises(ProofError):
        verify_inclusion(leaf, index, n, proof, _flip(root, bit))
    if proof:
        k = choice % len(proof)
        bad = [*proof[:k], _flip(proof[k], bit), *proof[k + 1 :]]
        with pytest.raises(ProofError):
            verify_inclusion(leaf, index, n, bad, root)
    # RFC 9162 roots do not commit to the size (the signed checkpoint does): a changed size
    # must fail unless it makes verification hash exactly the same way.
    other = n ^ (1 << (bit % 13))
    if _inclusion_schedule(index, other) != _inclusion_schedule(index, n):
        with pytest.raises(ProofError):
            verify_inclusion(leaf, index, other, proof, root)


@settings(max_examples=300, deadline=None)
@given(sizes, st.integers(min_value=0, max_value=1 << 16), st.integers(min_value=0))
def test_consistency_verifies_and_any_bit_flip_fails(mn, bit, choice):
    """A consistency proof verifies; flipping one bit of proof, a root or a size breaks it."""
    m, n = mn
    proof, old_root, new_root = consistency(NODES, m, n), _root(m), _root(n)
    verify_consistency(m, n, proof, old_root, new_root)
    with pytest.raises(ProofError):
        verify_consistency(m, n, proof, _flip(old_root, bit), new_root)
    with pytest.raises(ProofError):
        verify_consistency(m, n, proof, old_root, _flip(new_root, bit))
    k = choice % len(proof)
    bad = [*proof[:k], _flip(proof[k], bit), *proof[k + 1 :]]
    with pytest.raises(ProofError):
        verify_consistency(m, n, bad, old_root, new_root)
    for old, new in ((m ^ (1 << (bit % 13)), n), (m, n ^ (1 << (bit % 13)))):
        if _consistency_schedule(old, new) != _consistency_schedule(m, n):
            with pytest.raises(ProofError):
                verify_consistency(old, new, proof, old_root, new_root)
