"""The one text codec of the canonical bytes: ``text = len:u16 || utf8``, non-empty,
printable, at most a limit of bytes (``docs/spec/grants.md``, ``docs/spec/record.md``).

Each layout names its own limit and refusal (a grant's ``MalformedGrant``); the checks are
the same everywhere, so a text one decoder accepts the encoder would have written.
"""

from __future__ import annotations

import struct

from fleet_ledger.fleet.errors import FleetError

__all__ = ["check_text", "encode_text", "text_at"]

_U16 = struct.Struct(">H")


def check_text(value: object, what: str, error: type[FleetError], limit: int
               ) -> bytes:
    """The UTF-8 of ``value``, or ``error`` unless it is non-empty printable text of at most
    ``limit`` bytes."""
    if not isinstance(value, str) or not value or not value.isprintable():
        raise error(f"{what} must be non-empty printable text")
    raw = value.encode()
    if len(raw) > limit:
        raise error(f"{what} is at most {limit} bytes")
    return raw


def encode_text(value: object, what: str, error: type[FleetError], limit: int
                ) -> bytes:
    """``len:u16 || utf8`` of ``value``, checked (:func:`check_text`)."""
    raw = check_text(value, what, error, limit)
    return _U16.pack(len(raw)) + raw


def text_at(data: bytes, at: int) -> int:
    """Where the text starting at ``at`` ends (its length read, not checked): for re-parsing
    a layout at fixed offsets without decoding it."""
    return at + 2 + int(_U16.unpack_from(data, at)[0])
