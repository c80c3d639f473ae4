"""The proof bundle ``fleet prove`` prints: a run's head tied to a signed checkpoint.

A bundle is a JSON object, verifiable offline with nothing but the ledger's verifier key::

    origin       the log's origin (= the checkpoint's first line)
    tree_size    the size of the checkpointed tree
    leaf_index   0-based position of the leaf in the log
    leaf         hex of the 84 leaf bytes (see fleet.log.leaf)
    run          b3: address of the run (its genesis head)
    index        1-based segment index within the run
    head         b3: address of the run head after that segment
    inclusion    hex hashes of the RFC 9162 inclusion proof, leaf to root
    checkpoint   the signed checkpoint note, verbatim

Optional keys ``anchors``, ``anchor_checkpoints`` and ``anchor_consistency`` carry anchor
receipts (witness cosignatures, RFC 3161 tokens); :mod:`fleet.log.anchor_bundle` checks them.

:func:`verify_bundle` checks, in this order, and raises the named error of the first check
that fails: the bundle's shape (:class:`~fleet.log.log_errors.MalformedBundle`), the note
signature (``UnknownKey`` / ``BadSignature`` / ``MalformedNote``), the checkpoint body
(``MalformedCheckpoint``), origin and size against the checkpoint (``OriginMismatch``,
``SizeMismatch``), that the leaf decodes (``MalformedLeaf``) and binds the stated run,
index and head (``LeafMismatch``), and that the inclusion proof leads from the leaf hash to
the checkpoint's root (``RootMismatch``, ``ProofLengthMismatch``, ``InvalidProofRequest``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from fleet_ledger.fleet.address import format_address
from fleet_ledger.fleet.log.checkpoint import Checkpoint, open_checkpoint
from fleet_ledger.fleet.log.leaf import Leaf, decode_leaf
from fleet_ledger.fleet.log.log_errors import (
    LeafMismatch,
    MalformedBundle,
    OriginMismatch,
    SizeMismatch,
)
from fleet_ledger.fleet.log.merkle import leaf_hash, verify_inclusion
from fleet_ledger.fleet.log.note import Verifier

__all__ = [
    "FIELDS",
    "LOG_FIELDS",
    "VerifiedBundle",
    "build_bundle",
    "log_fields",
    "verify_bundle",
    "verify_log_fields",
]


FIELDS: dict[str, type] = {
    "origin": str,
    "tree_size": int,
    "leaf_index": int,
    "leaf": str,
    "run": str,
    "index": int,
    "head": str,
    "inclusion": list,
    "checkpoint": str,
}


class VerifiedBundle(NamedTuple):
    """What a valid bundle proves: this leaf is in the tree of this signed checkpoint."""

    checkpoint: Checkpoint
    leaf: Leaf
    leaf_index: int


def build_bundle(
    *,
    origin: str,
    tree_size: int,
    leaf_index: int,
    leaf: bytes,
    inclusion: Sequence[bytes],
    checkpoint: str,
) -> dict[str, Any]:
    """The bundle dict; run, index and head are read from the leaf so they cannot disagree."""
    decoded = decode_leaf(leaf)
    return {
        "origin": origin,
        "tree_size": tree_size,
        "leaf_index": leaf_index,
        "leaf": leaf.hex(),
        "run": format_address(decoded.run),
        "index": decoded.index,
        "head": format_address(decoded.head),
        "inclusion": [item.hex() for item in inclusion],
        "checkpoint": checkpoint,
    }


# The keys that tie a leaf of any kind to a signed checkpoint (a job proof bundle,
# fleet.jobs.job_bundle, carries them for its receipt's leaf).
LOG_FIELDS: tuple[str, ...] = ("origin", "tree_size", "leaf_index", "leaf", "inclusion",
                               "checkpoint")


def log_fields(*, origin: str, tree_size: int, leaf_index: int, leaf: bytes,
               inclusion: Sequence[bytes], checkpoint: str) -> dict[str, Any]:
    """The :data:`LOG_FIELDS` of a leaf (any kind) in a signed checkpoint."""
    return {"origin": origin, "tree_size": tree_size, "leaf_index": leaf_index,
            "leaf": leaf.hex(), "inclusion": [item.hex() for item in inclusion],
            "checkpoint": checkpoint}


_HEX = re.compile(r"(?:[0-9a-f]{2})*\Z")


def _unhex(text: object, what: str) -> bytes:
    if not isinstance(text, str) or _HEX.match(text) is None:
        raise MalformedBundle(f"{what} is not lowercase hex")
    return bytes.fromhex(text)


def _check_shape(bundle: object, fields: dict[str, type] = FIELDS) -> dict[str, Any]:
    if not isinstance(bundle, dict):
        raise MalformedBundle("a proof bundle is a JSON object")
    for name, kind in fields.items():
        value = bundle.get(name)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise MalformedBundle(f"bundle field {name!r} is missing or not a {kind.__name__}")
    return bundle


def verify_bundle(bundle: object, verifiers: Iterable[Verifier]) -> VerifiedBundle:
    """Check a proof bundle; return what it proves or raise the first failing check's error."""
    fields = _check_shape(bundle)
    leaf_bytes = _unhex(fields["leaf"], "leaf")
    path = [_unhex(item, f"inclusion[{i}]") for i, item in enumerate(fields["inclusion"])]
    checkpoint = _checkpoint(fields, verifiers)
    leaf = decode_leaf(leaf_bytes)
    stated = {"run": fields["run"], "index": fields["index"], "head": fields["head"]}
    bound = {
        "run": format_address(leaf.run),
        "index": leaf.index,
        "head": format_address(leaf.head),
    }
    for name, value in stated.items():
        if bound[name] != value:
            raise LeafMismatch(f"leaf binds {name} {bound[name]!r}, the bundle states {value!r}")
    verify_inclusion(
        leaf_hash(leaf_bytes), fields["leaf_index"], checkpoint.size, path, checkpoint.root
    )
    return VerifiedBundle(checkpoint, leaf, fields["leaf_index"])


def verify_log_fields(bundle: object, leaf: bytes, verifiers: Iterable[Verifier]
                      ) -> Checkpoint:
    """The signed checkpoint of a bundle's :data:`LOG_FIELDS` that holds ``leaf`` (a leaf of
    any kind, which the caller recomputed from what it proves: the bundle's ``leaf`` must be
    those bytes), checked in :func:`verify_bundle`'s order; else the first failure."""
    fields = _check_shape(bundle, {name: FIELDS[name] for name in LOG_FIELDS})
    stated = _unhex(fields["leaf"], "leaf")
    path = [_unhex(item, f"inclusion[{i}]") for i, item in enumerate(fields["inclusion"])]
    checkpoint = _checkpoint(fields, verifiers)
    if stated != leaf:
        raise LeafMismatch("the bundle's leaf is not the leaf of what it proves")
    verify_inclusion(leaf_hash(leaf), fields["leaf_index"], checkpoint.size, path,
                     checkpoint.root)
    return checkpoint


def _checkpoint(fields: dict[str, Any], verifiers: Iterable[Verifier]) -> Checkpoint:
    """The bundle's checkpoint, its signature checked, and its origin and size the
    bundle's."""
    checkpoint = open_checkpoint(fields["checkpoint"], verifiers)
    if fields["origin"] != checkpoint.origin:
        raise OriginMismatch(
            f"bundle origin {fields['origin']!r} is not the checkpoint's {checkpoint.origin!r}"
        )
    if fields["tree_size"] != checkpoint.size:
        raise SizeMismatch(
            f"bundle tree size {fields['tree_size']} is not the checkpoint's {checkpoint.size}"
        )
    return checkpoint
