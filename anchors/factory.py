"""Building anchors from their configuration: the one module that knows every kind.

The interface (:mod:`anchors.base`) knows none of its implementations; this factory imports
each one only when a configuration asks for it, so a ledger anchoring to witnesses alone
never loads the RFC 3161 or NATS client code.
"""

from __future__ import annotations

from fleet_ledger.anchors.base import Anchor, AnchorConfig


def build_anchor(config: AnchorConfig) -> Anchor:
    """The :class:`Anchor` of one config entry."""
    opts = config.options
    if config.kind == "witness":
        from fleet_ledger.anchors.witness_client import WitnessAnchor

        return WitnessAnchor(config.name, opts["url"], opts["vkey"])
    if config.kind == "tsa":
        from fleet_ledger.anchors.tsa import TsaAnchor

        return TsaAnchor(config.name, opts["url"], opts.get("ca"))
    if config.kind == "nats":
        from fleet_ledger.anchors.nats_anchor import NatsAnchor

        return NatsAnchor(config.name, opts["url"], opts["subject"], stream=opts.get("stream"),
                          nkey=opts.get("nkey"), creds=opts.get("creds"))
    raise ValueError(f"unknown anchor kind {config.kind!r}")
