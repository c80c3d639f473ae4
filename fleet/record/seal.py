"""Host seals: an Ed25519 signature binding a segment to its run and position.

The sealed message is ``"fleet.seal/1" || run[32] || index:u64 || head[32]`` (index is the
segment's 1-based position, head the run head after it). Because the head commits to every
earlier segment and the run commits to unit and grant set, a seal cannot be moved to another
run, another index, or another history. A host key's id is the lowercase hex of the first
8 bytes of ``BLAKE3("fleet.hostkey/1" || public_key[32])``.
"""

from __future__ import annotations

import base64
import binascii
import struct

from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

from fleet_ledger.fleet.address import digest
from fleet_ledger.fleet.errors import BadSeal

__all__ = [
    "KEY_ID_DOMAIN",
    "SEAL_DOMAIN",
    "bad_seal",
    "check_seal",
    "decode_key",
    "encode_key",
    "key_id",
    "seal",
    "seal_message",
]


SEAL_DOMAIN = b"fleet.seal/1"
KEY_ID_DOMAIN = b"fleet.hostkey/1"
_INDEX = struct.Struct(">Q")


def seal_message(run: bytes, index: int, head: bytes) -> bytes:
    return SEAL_DOMAIN + run + _INDEX.pack(index) + head


def key_id(public_key: bytes) -> str:
    return digest(KEY_ID_DOMAIN + public_key)[:8].hex()


def seal(key: SigningKey, run: bytes, index: int, head: bytes) -> bytes:
    """The 64-byte seal of segment ``index`` of ``run`` ending at ``head``."""
    return key.sign(seal_message(run, index, head)).signature


def check_seal(
    verify_key: VerifyKey, run: bytes, index: int, head: bytes, signature: bytes
) -> None:
    """Raise :class:`BadSeal` unless ``signature`` seals (run, index, head) under the key."""
    try:
        verify_key.verify(seal_message(run, index, head), signature)
    except (BadSignatureError, ValueError, TypeError) as exc:
        raise bad_seal(index) from exc


def bad_seal(index: int) -> BadSeal:
    """The refusal of a seal that does not verify (also when checked elsewhere, in batch)."""
    return BadSeal("the seal does not verify under the host key for this run, index and head",
                   segment=index)


def encode_key(public_key: bytes) -> str:
    return base64.b64encode(public_key).decode("ascii")


def decode_key(text: str) -> VerifyKey:
    """A host verifier key from its base64 text (32 bytes)."""
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError, TypeError) as exc:
        raise ValueError("a host key is the base64 of 32 Ed25519 public key bytes") from exc
    if len(raw) != 32 or base64.b64encode(raw).decode("ascii") != text:
        raise ValueError("a host key is the canonical base64 of 32 Ed25519 public key bytes")
    return VerifyKey(raw)
