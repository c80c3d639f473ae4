"""Test helpers: an in-memory node map built with the fast appender, and pymerkle conversion."""

from __future__ import annotations

from fleet_ledger.fleet.log.merkle import (
    NodeId,
    assemble,
    consistency_plan,
    inclusion_plan,
    plan_nodes,
)
from fleet_ledger.fleet.log.merkle_append import extend


def node_map(hashes: list[bytes]) -> dict[NodeId, bytes]:
    """Every complete-subtree node of the tree over ``hashes``, appended in one batch."""
    nodes: dict[NodeId, bytes] = {}
    for level, first, row in extend(0, {}, hashes).levels:
        for offset, item in enumerate(row):
            nodes[(level, first + offset)] = item
    return nodes


def inclusion(nodes: dict[NodeId, bytes], index: int, size: int) -> list[bytes]:
    plan = inclusion_plan(index, size)
    return assemble(plan, {n: nodes[n] for n in plan_nodes(plan)})


def consistency(nodes: dict[NodeId, bytes], old: int, new: int) -> list[bytes]:
    plan = consistency_plan(old, new)
    return assemble(plan, {n: nodes[n] for n in plan_nodes(plan)})


def to_pymerkle_inclusion(leaf_hash: bytes, index: int, size: int, proof: list[bytes]):
    """Our RFC 9162 path as a pymerkle InclusionProof (its path = leaf hash, then siblings)."""
    from pymerkle import InclusionProof
    from pymerkle.core import _inclusion_path_layout

    rule, _ = _inclusion_path_layout(index + 1, size)
    return InclusionProof("sha256", True, size, index + 1, rule, [leaf_hash, *proof])


def to_pymerkle_consistency(old: int, new: int, old_root: bytes, proof: list[bytes]):
    """Our RFC 9162 proof as a pymerkle ConsistencyProof, or None where that is impossible.

    pymerkle's path names leaf ranges in its own order and always includes the old root's
    range; where the old size equals a left subtree exactly it descends right to a single
    leaf instead of stopping, so when that right part holds more than one leaf its proof
    needs hashes an RFC proof does not carry. Otherwise each of its ranges is a range whose
    hash our proof (or the known old root) provides: pick them by range, in its order.
    """
    from pymerkle import ConsistencyProof
    from pymerkle.core import _consistency_path_layout

    rule, subset, ranges = _consistency_path_layout(old, new)
    by_range = {(0, old): old_root}
    for element, item in zip(consistency_plan(old, new), proof, strict=True):
        first, last = element[0], element[-1]
        by_range[(first[1] << first[0], (last[1] + 1) << last[0])] = item
    if any(tuple(r) not in by_range for r in ranges):
        return None
    path = [by_range[tuple(r)] for r in ranges]
    return ConsistencyProof("sha256", True, new, old, rule, subset, path)
