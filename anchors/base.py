"""The anchor interface: a signed checkpoint in, a receipt out; receipts verify offline.

Only roots leave. An anchor is handed the ledger's signed checkpoint note (origin, size,
root, signatures) and, for witnesses, consistency proofs between checkpoint sizes - never
run data. Each kind keeps a receipt that a verifier checks later without the ledger:

==========  =====================================  =========================================
kind        receipt ``data``                       offline check
==========  =====================================  =========================================
witness     the witness's cosignature line(s)      cosignature/v1 under the witness's key
tsa         base64 DER RFC 3161 TimeStampResp      token signature, chain to the TSA trust
                                                   anchor, imprint = SHA-256(checkpoint body)
nats        JSON {"url","subject","stream","seq"}  none (a pointer to the auditors' copy)
==========  =====================================  =========================================

Anchors are configured in a TOML file (``fleet ledger serve --anchors FILE``)::

    [[witness]]
    name = "w1"                       # unique anchor name (status, receipts)
    url = "http://127.0.0.1:7380"     # the witness's submission prefix
    vkey = "witness.example/w1+..."   # its cosignature/v1 verifier key (or a file)

    [[tsa]]
    name = "tsa"
    url = "http://tsa.example/"       # RFC 3161 over HTTP (application/timestamp-query)
    ca = "/etc/fleet/tsa-ca.pem"      # trust anchor(s), checked on every receipt

    [[nats]]
    name = "auditors"
    url = "nats://auditors.example:4222"
    subject = "audit.fleet.checkpoint"
    stream = "AUDIT"                  # optional: JetStream publish, receipt = stream seq
    creds = "/etc/fleet/auditor.creds"   # or nkey = "...seed file"
"""

from __future__ import annotations

import abc
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from fleet_ledger.fleet.log.anchor_bundle import Receipt

__all__ = ["KINDS", "Anchor", "AnchorConfig", "AnchorError", "ProofSource", "Receipt",
           "load_anchor_config"]

KINDS = ("witness", "tsa", "nats")


class AnchorError(Exception):
    """An anchor could not anchor a checkpoint now (unreachable, refused); retried later."""


class ProofSource(Protocol):
    def consistency_proof(self, old_size: int, new_size: int | None = None) -> list[bytes]: ...


class Anchor(abc.ABC):
    """One configured anchor. ``anchor`` may block on the network only by awaiting."""

    kind: str

    def __init__(self, name: str) -> None:
        self.name = name

    @abc.abstractmethod
    async def anchor(self, note: str, size: int, proofs: ProofSource) -> Receipt:
        """Anchor the checkpoint ``note`` (tree ``size``), or raise :class:`AnchorError`."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""


@dataclass(frozen=True)
class AnchorConfig:
    kind: str
    name: str
    options: dict[str, Any] = field(default_factory=dict)


def load_anchor_config(path: Path) -> list[AnchorConfig]:
    """The anchors of a TOML file (see the module docstring); ``ValueError`` when malformed."""
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"cannot read anchors file {path}: {exc}") from exc
    configs: list[AnchorConfig] = []
    unknown = set(doc) - set(KINDS)
    if unknown:
        raise ValueError(f"{path}: unknown anchor kinds {sorted(unknown)}; known: {KINDS}")
    for kind in KINDS:
        for entry in doc.get(kind, []):
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                raise ValueError(f"{path}: every [[{kind}]] needs a name")
            if not isinstance(entry.get("url"), str):
                raise ValueError(f"{path}: [[{kind}]] {entry['name']} needs a url")
            options = {k: v for k, v in entry.items() if k != "name"}
            for key in ("ca", "nkey", "creds", "vkey"):
                value = options.get(key)
                if isinstance(value, str) and (path.parent / value).is_file():
                    options[key] = str(path.parent / value)
            configs.append(AnchorConfig(kind, entry["name"], options))
    names = [c.name for c in configs]
    if len(names) != len(set(names)):
        raise ValueError(f"{path}: anchor names must be unique, got {names}")
    return configs
