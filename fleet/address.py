"""Content addresses: ``b3:`` followed by the unpadded base64url form of 32 BLAKE3 bytes.

The text form is exactly 46 characters. Parsing is strict: padding, the standard base64
alphabet, whitespace, a different prefix, a different length or non-canonical trailing bits
are all refused with :class:`~fleet.errors.MalformedAddress`.
"""

from __future__ import annotations

import base64
import binascii
import functools

from blake3 import blake3

from fleet_ledger.fleet.errors import MalformedAddress

__all__ = [
    "DIGEST_SIZE",
    "PREFIX",
    "digest",
    "format_address",
    "id_text",
    "message_id",
    "parse_address",
    "parse_addresses",
    "retry_id",
]


PREFIX = "b3:"
DIGEST_SIZE = 32
# 32 bytes fill 43 base64 characters with two bits to spare; canonical text leaves them zero.
_LAST = frozenset("AEIMQUYcgkosw048")
# base64url -> base64 for the C decoder; '+' and '/' become a character it refuses.
_TO_STD = bytes.maketrans(b"-_+/", b"+/!!")


def digest(data: bytes) -> bytes:
    """BLAKE3-256 of ``data``."""
    return blake3(data).digest()


def message_id(kind: str, data: bytes) -> str:
    """A message's ``Nats-Msg-Id``: ``<kind>-`` and the hex of the first 16 bytes of BLAKE3
    of the whole message as sent. Every byte counts, the sender's name and signature too, so
    two senders' messages never share an id (``docs/spec/ledger.md``, "Message ids")."""
    return f"{kind}-{digest(data)[:16].hex()}"


def retry_id(msg_id: str, nonce: bytes) -> str:
    """The id of a deliberate retry of a message the ledger refused: its id, ``.`` and the
    hex of a fresh nonce, so the broker stores the copy and the ledger decides it again."""
    return f"{msg_id}.{nonce.hex()}"


def format_address(raw: bytes) -> str:
    """Text form of a 32-byte digest."""
    if len(raw) != DIGEST_SIZE:
        raise MalformedAddress(f"an address holds {DIGEST_SIZE} bytes, got {len(raw)}")
    return PREFIX + base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


# Run, unit and grant ids repeat in every message of a run: their text forms are memoised.
id_text = functools.lru_cache(maxsize=16384)(format_address)


def parse_address(text: object) -> bytes:
    """The 32 bytes behind a ``b3:`` address, or :class:`MalformedAddress`."""
    if (
        type(text) is not str or len(text) != 46 or not text.startswith(PREFIX)
        or text[45] not in _LAST
    ):
        raise MalformedAddress(f"not a b3: content address: {_show(text)}")
    try:
        body = text[3:].encode("ascii").translate(_TO_STD)
        return binascii.a2b_base64(body + b"=", strict_mode=True)
    except (binascii.Error, ValueError) as exc:
        raise MalformedAddress(f"not a b3: content address: {_show(text)}") from exc


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def parse_addresses(texts: list[str]) -> list[bytes] | None:
    """Parse many addresses with a handful of C calls; ``None`` if any is malformed.

    Every text must be ``b3:`` + 43 base64url characters with zero spare bits, exactly as
    :func:`parse_address` demands (the tests hold the two to the same answers). The trick:
    dropping each ``b3:`` and appending one ``A`` (six zero bits) makes every address 44
    characters, so the concatenation decodes in one call to 33 bytes per address, the 33rd
    of which is zero exactly when the spare bits were.
    """
    n = len(texts)
    if n == 0:
        return []
    try:
        joined = "".join(texts)
        if (
            len(joined) != 46 * n or joined[0::46] != "b" * n or joined[1::46] != "3" * n
            or joined[2::46] != ":" * n
        ):
            return None
        body = (joined[3:] + "b3:").replace("b3:", "A").encode("ascii").translate(_TO_STD)
        raw = binascii.a2b_base64(body, strict_mode=True)
    except (binascii.Error, ValueError):
        return None
    if len(raw) != 33 * n or raw[32::33] != bytes(n):
        return None
    return [raw[i:i + 32] for i in range(0, 33 * n, 33)]
