"""The envelope every signed event of the stream shares: control events
(:mod:`fleet.fold.control`, ``docs/spec/ledger.md``) and grant events
(:mod:`fleet.fold.grant_events`,
``docs/spec/grants.md``)::

    event = domain || kind:u8 || signer[32] || body || signature[64]

signed by ``signer`` (Ed25519) over everything before the signature. Each family names its
domain, its kinds and its body; the envelope, the signature check, the kind's name and the
event's id (the broker's ``Nats-Msg-Id``) are here once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

from fleet_ledger.fleet.address import message_id

__all__ = ["KEY", "SIGNATURE", "event_id", "kind_name", "sign", "signature_valid", "signed_part",
           "split"]

KEY: Final = 32
SIGNATURE: Final = 64


def signed_part(domain: bytes, kind: int, signer: bytes, body: bytes) -> bytes:
    """The bytes the signer signs: everything of the event but its signature."""
    return domain + bytes((kind,)) + signer + body


def sign(key: SigningKey, domain: bytes, kind: int, body: bytes) -> bytes:
    """The event of ``kind`` with ``body``, signed by ``key``."""
    signed = signed_part(domain, kind, bytes(key.verify_key), body)
    return signed + key.sign(signed).signature


def split(data: bytes, domain: bytes) -> tuple[int, bytes, bytes, bytes, bytes]:
    """(kind, signer, body, signed, signature) of an event whose length the caller checked
    to hold at least the envelope (``len(domain) + 1 + KEY + SIGNATURE``)."""
    head = len(domain)
    signed, signature = data[:-SIGNATURE], data[-SIGNATURE:]
    return data[head], data[head + 1:head + 1 + KEY], signed[head + 1 + KEY:], signed, signature


def signature_valid(signer: bytes, signed: bytes, signature: bytes) -> bool:
    """Whether ``signature`` is ``signer``'s over ``signed`` (a malformed key: no)."""
    try:
        VerifyKey(signer).verify(signed, signature)
    except (BadSignatureError, ValueError, TypeError):
        return False
    return True


def event_id(prefix: str, data: bytes) -> str:
    """An event's id (the broker's ``Nats-Msg-Id``): :func:`fleet.address.message_id` of
    its whole bytes, signer and signature included."""
    return message_id(prefix, data)


def kind_name(kinds: Mapping[int, str], kind: int) -> str:
    return kinds[kind]
