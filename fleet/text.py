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
        raise error(f"{what} must be non-empty printable text, got {value!r:.80}")
    raw = value.encode()
    if len(raw) > limit:
        raise error(f"{what} is {len(raw)} bytes, the limit is {limit}")
    return raw


# Meters, outcomes and names repeat across segments and events: checked encodings are
# memoised (bounded; a refused text raises and is never stored). One held for a text is
# valid under any limit it fits: the other checks do not depend on the limit.
_TEXTS: dict[str, bytes] = {}


def encode_text(value: object, what: str, error: type[FleetError], limit: int
                ) -> bytes:
    """``len:u16 || utf8`` of ``value``, checked (:func:`check_text`)."""
    held = _TEXTS.get(value) if isinstance(value, str) else None
    if held is not None and len(held) - 2 <= limit:
        return held
    raw = check_text(value, what, error, limit)
    held = _U16.pack(len(raw)) + raw
    if len(_TEXTS) < 4096:
        _TEXTS[value] = held  # type: ignore[index]  # check_text refused all but a str
    return held


def text_at(data: bytes, at: int) -> int:
    """Where the text starting at ``at`` ends (its length read, not checked): for re-parsing
    a layout at fixed offsets without decoding it."""
    return at + 2 + int(_U16.unpack_from(data, at)[0])
