"""Grant events shown as JSON (the keys are the body's field names, in layout order)."""

from __future__ import annotations

from typing import Any

from fleet_ledger.fleet.address import digest, format_address
from fleet_ledger.fleet.grants.grant import Terms, grant_address, terms_json
from fleet_ledger.fleet.grants.grant_codec import decode_event

__all__ = ["event_json"]


def event_json(data: bytes) -> dict[str, Any]:
    """An event as JSON (decoded and its signature checked)."""
    ev = decode_event(data)
    out: dict[str, Any] = {"kind": ev.kind_name, "signer": ev.signer.hex(),
                           "address": format_address(digest(data))}
    for name in ev.fields.__struct_fields__:
        value = getattr(ev.fields, name)
        if isinstance(value, Terms):
            out[name] = terms_json(value)
        elif name in ("grant", "child") and len(value) != 32:
            out[name] = format_address(grant_address(value))
        elif isinstance(value, bytes):
            out[name] = format_address(value)
        else:
            out[name] = value
    return out
