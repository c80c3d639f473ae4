"""Anchor receipts in a proof bundle, and their offline verification.

``fleet prove`` adds three optional keys to a bundle (the keys of
:mod:`fleet.log.proof_bundle` are unchanged), written by :func:`anchor_fields` and read by
:func:`verify_anchors`, both here::

    anchors              [{"anchor", "kind", "size", "receipt"}]  one per anchor: its receipt
                         of the smallest anchored checkpoint >= the bundle's tree size
    anchor_checkpoints   {"<size>": signed note}   the ledger's checkpoints of those sizes
                         when larger than the bundle's
    anchor_consistency   {"<size>": [hex, ...]}    RFC 9162 consistency proofs from the
                         bundle's tree size to each of those sizes

:func:`verify_anchors` runs after :func:`fleet.log.proof_bundle.verify_bundle`. For each
receipt it takes the checkpoint it covers - the bundle's own, or a later one that must be
signed by the ledger's key, have the same origin and extend the bundle's tree by its
consistency proof - and checks the receipt against that checkpoint's body: witness
cosignatures under the witness keys given (:mod:`fleet.log.cosignature`; unknown witnesses
are reported unchecked), RFC 3161 receipts by the ``tsa_check`` callable given (the
caller's, since X.509 lives outside this pure core), NATS receipts are pointers and
reported as such. Cosignatures carried in the bundle's checkpoint note count too.
``require_witnesses = K`` raises :class:`~fleet.log.log_errors.MissingCosignatures` unless K
distinct known witnesses cosigned.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fleet_ledger.fleet.log.checkpoint import Checkpoint, open_checkpoint
from fleet_ledger.fleet.log.cosignature import (
    WitnessKey,
    cosignatures,
    parse_signature_lines,
    verify_cosignature_lines,
)
from fleet_ledger.fleet.log.log_errors import (
    MalformedBundle,
    MissingCosignatures,
    OriginMismatch,
    SizeMismatch,
)
from fleet_ledger.fleet.log.merkle import verify_consistency
from fleet_ledger.fleet.log.note import Verifier, parse_note

TsaCheck = Callable[[str, str], str]
"""(base64 receipt, checkpoint body) -> a description of what verified; raises on failure."""

__all__ = ["AnchorCheck", "AnchorReport", "verify_anchors"]

_HEX = re.compile(r"[0-9a-f]{64}\Z")

ANCHORS = "anchors"
ANCHOR_CHECKPOINTS = "anchor_checkpoints"
ANCHOR_CONSISTENCY = "anchor_consistency"


@dataclass(frozen=True)
class Receipt:
    """What an anchor returned for the ledger's checkpoint of ``size``; ``data`` is the
    receipt as its kind keeps it (cosignature lines, a base64 TimeStampResp, a JSON
    pointer)."""

    anchor: str
    kind: str
    size: int
    data: str

    def as_json(self) -> dict[str, Any]:
        """The receipt as an entry of a bundle's ``anchors`` list."""
        return {"anchor": self.anchor, "kind": self.kind, "size": self.size,
                "receipt": self.data}

    @classmethod
    def from_json(cls, item: Any) -> Receipt:
        """An entry of a bundle's ``anchors`` list; :class:`MalformedBundle` if it is none."""
        if not (isinstance(item, dict) and isinstance(item.get("anchor"), str)
                and isinstance(item.get("kind"), str) and isinstance(item.get("receipt"), str)
                and isinstance(item.get("size"), int) and not isinstance(item["size"], bool)):
            raise MalformedBundle("an anchors entry needs anchor, kind, size and receipt")
        return cls(item["anchor"], item["kind"], item["size"], item["receipt"])


def anchor_fields(size: int, receipts: Sequence[Receipt],
                  checkpoint_notes: Callable[[list[int]], Mapping[int, str]],
                  consistency_proof: Callable[[int, int], Sequence[bytes]]) -> dict[str, Any]:
    """The optional keys for a bundle on the checkpoint of ``size``.

    ``receipts``: each anchor's receipt of the smallest anchored checkpoint >= ``size``.
    For each later size among them, ``checkpoint_notes(sizes)`` gives the ledger's signed
    notes and ``consistency_proof(size, later)`` the RFC 9162 proof from ``size`` to it.
    Empty when no receipt covers the checkpoint yet.
    """
    if not receipts:
        return {}
    later = sorted({r.size for r in receipts if r.size != size})
    notes = checkpoint_notes(later) if later else {}
    return {
        ANCHORS: [r.as_json() for r in receipts],
        ANCHOR_CHECKPOINTS: {str(s): notes[s] for s in later},
        ANCHOR_CONSISTENCY: {str(s): [h.hex() for h in consistency_proof(size, s)]
                             for s in later},
    }


@dataclass(frozen=True)
class AnchorCheck:
    anchor: str
    kind: str
    size: int
    verified: bool
    detail: str

    def as_json(self) -> dict[str, Any]:
        return {"anchor": self.anchor, "kind": self.kind, "size": self.size,
                "verified": self.verified, "detail": self.detail}


@dataclass(frozen=True)
class AnchorReport:
    checks: tuple[AnchorCheck, ...]
    witnesses: tuple[str, ...]
    """Names of the distinct known witnesses whose cosignatures verified."""


def _receipts(bundle: dict[str, Any]) -> list[Receipt]:
    receipts = bundle.get(ANCHORS, [])
    if not isinstance(receipts, list):
        raise MalformedBundle(f"bundle field {ANCHORS!r} is not a list")
    return [Receipt.from_json(item) for item in receipts]


def _covered_body(bundle: dict[str, Any], checkpoint: Checkpoint, size: int,
                  verifiers: Sequence[Verifier]) -> str:
    """The body of the checkpoint of ``size`` that extends the bundle's ``checkpoint``."""
    if size == checkpoint.size:
        return parse_note(bundle["checkpoint"])[0]
    if size < checkpoint.size:
        raise MalformedBundle(f"a receipt for size {size} does not cover tree size "
                              f"{checkpoint.size}")
    notes, proofs = bundle.get(ANCHOR_CHECKPOINTS), bundle.get(ANCHOR_CONSISTENCY)
    if not isinstance(notes, dict) or not isinstance(notes.get(str(size)), str):
        raise MalformedBundle(f"{ANCHOR_CHECKPOINTS} has no checkpoint of size {size}")
    if not isinstance(proofs, dict) or not isinstance(proofs.get(str(size)), list):
        raise MalformedBundle(f"{ANCHOR_CONSISTENCY} has no proof to size {size}")
    later = open_checkpoint(notes[str(size)], verifiers)
    if later.origin != checkpoint.origin:
        raise OriginMismatch(f"anchored checkpoint origin {later.origin!r} is not "
                             f"{checkpoint.origin!r}")
    if later.size != size:
        raise SizeMismatch(f"anchored checkpoint has size {later.size}, listed as {size}")
    proof = []
    for item in proofs[str(size)]:
        if not isinstance(item, str) or _HEX.match(item) is None:
            raise MalformedBundle(f"{ANCHOR_CONSISTENCY} holds a hash that is not 64 lowercase "
                                  "hex")
        proof.append(bytes.fromhex(item))
    verify_consistency(checkpoint.size, size, proof, checkpoint.root, later.root)
    return parse_note(notes[str(size)])[0]


def verify_anchors(
    bundle: dict[str, Any],
    checkpoint: Checkpoint,
    verifiers: Iterable[Verifier],
    witnesses: Iterable[WitnessKey] = (),
    require_witnesses: int = 0,
    tsa_check: TsaCheck | None = None,
) -> AnchorReport:
    """Check a verified bundle's anchor receipts (see the module docstring)."""
    verifiers, witnesses = list(verifiers), list(witnesses)
    checks: list[AnchorCheck] = []
    cosigners: dict[tuple[str, int], str] = {}
    for found in cosignatures(bundle["checkpoint"], witnesses):
        cosigners[(found.witness.name, found.witness.key_id)] = found.witness.name
    for item in _receipts(bundle):
        name, kind, size, receipt = item.anchor, item.kind, item.size, item.data
        body = _covered_body(bundle, checkpoint, size, verifiers)
        if kind == "witness":
            cosigned = verify_cosignature_lines(body, parse_signature_lines(receipt), witnesses)
            for c in cosigned:
                cosigners[(c.witness.name, c.witness.key_id)] = c.witness.name
            detail = ", ".join(f"cosigned by {c.witness.name} at {c.timestamp}" for c in cosigned)
            checks.append(AnchorCheck(name, kind, size, bool(cosigned),
                                      detail or "cosigned by a witness whose key was not given"))
        elif kind == "tsa":
            if tsa_check is None:
                checks.append(AnchorCheck(name, kind, size, False, "no TSA trust anchor given"))
            else:
                checks.append(AnchorCheck(name, kind, size, True, tsa_check(receipt, body)))
        else:
            checks.append(AnchorCheck(name, kind, size, False,
                                      f"{kind} receipt (a pointer, not checkable offline)"))
    if len(cosigners) < require_witnesses:
        names = ", ".join(sorted(cosigners.values())) or "none"
        raise MissingCosignatures(f"{len(cosigners)} known witnesses cosigned ({names}); "
                                  f"{require_witnesses} required")
    return AnchorReport(tuple(checks), tuple(sorted(cosigners.values())))
