"""Anchor helpers for the CLI: checking a bundle's receipts, loading ``--anchors FILE``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fleet_ledger.cli._app import CheckFailed, UserError
from fleet_ledger.fleet.log.anchor_bundle import AnchorReport, verify_anchors
from fleet_ledger.fleet.log.checkpoint import Checkpoint
from fleet_ledger.fleet.log.log_errors import LogError, MalformedKey
from fleet_ledger.fleet.log.note import Verifier


def load_witness_keys(values: tuple[str, ...]) -> list[Any]:
    from fleet_ledger.anchors.witness_client import load_witness_key

    keys = []
    for value in values:
        try:
            keys.append(load_witness_key(value))
        except (OSError, MalformedKey) as exc:
            raise UserError(f"MalformedKey: witness key {value}: {exc}") from exc
    return keys


def check_anchors(bundle: dict[str, Any], checkpoint: Checkpoint, verifiers: list[Verifier],
                  witness_vkeys: tuple[str, ...], require_witnesses: int,
                  tsa_cas: tuple[str, ...]) -> AnchorReport:
    """Verify a bundle's anchor receipts; exit 1 (``Rule: detail``) when one fails."""
    witnesses = load_witness_keys(witness_vkeys)
    if require_witnesses > len(witnesses):
        raise UserError(f"--require-witnesses {require_witnesses} needs at least that many "
                        f"--witness-vkey keys ({len(witnesses)} given)")
    tsa_check = None
    if tsa_cas:
        from fleet_ledger.anchors.tsa import load_trust_anchors, verify_receipt

        try:
            roots = load_trust_anchors(tsa_cas)
        except (OSError, ValueError) as exc:
            raise UserError(f"cannot load --tsa-ca: {exc}") from exc

        def tsa_check(receipt: str, body: str) -> str:
            return f"time-stamped at {verify_receipt(receipt, body, roots)}"

    try:
        return verify_anchors(bundle, checkpoint, verifiers, witnesses, require_witnesses,
                              tsa_check)
    except LogError as exc:
        raise CheckFailed(f"{exc.rule}: {exc}") from exc


def load_anchors_option(path: Path | None) -> list[Any]:
    """``--anchors FILE``: the anchor configs, or a one-line user error."""
    if path is None:
        return []
    from fleet_ledger.anchors.base import load_anchor_config
    from fleet_ledger.anchors.factory import build_anchor

    try:
        configs = load_anchor_config(path)
        for config in configs:  # fail now, not in the ledger's background task
            build_anchor(config)
    except (ValueError, KeyError, OSError, LogError) as exc:
        raise UserError(f"bad anchors file {path}: {exc}") from exc
    return configs
