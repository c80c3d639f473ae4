"""C2SP tlog-cosignature, Ed25519 ``cosignature/v1``: a witness's timestamped cosignature.

A cosignature is a signed-note signature line (:mod:`fleet.log.note`) added to a checkpoint::

    — <witness name> base64(key id[4] || timestamp[8, u64 big-endian] || Ed25519 signature[64])

Key id (signature type 0x04, not the checkpoint's 0x01)::

    key id = SHA-256(name || 0x0A || 0x04 || public key[32])[:4]

Signed message: two newline-terminated lines, then the whole checkpoint body (the note
text, extension lines included, signatures excluded)::

    cosignature/v1
    time <timestamp, ASCII decimal, no leading zero>
    <origin>
    <size>
    <base64 root>

A v1 cosignature states: as of ``time``, the largest consistent tree the witness has seen
for this origin has this root. The timestamp must not exceed 2^63 - 1.

Keys are text like note keys, with type byte 0x04::

    verifier key  <name>+<key id, 8 hex>+base64(0x04 || public key[32])
    signer key    PRIVATE+KEY+<name>+<key id>+base64(0x04 || Ed25519 seed[32])

Verifying (:func:`cosignatures`): lines whose (name, key id) match no witness key are
ignored; a matching line that does not verify is :class:`~fleet.log.log_errors.BadSignature`.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

from fleet_ledger.fleet.log.log_errors import BadSignature, MalformedNote
from fleet_ledger.fleet.log.note import (
    Signature,
    key_id,
    key_text,
    parse_note,
    parse_signer_text,
    parse_verifier_text,
    seed_key_id,
)

__all__ = [
    "ALG_COSIGNATURE_V1",
    "MAX_TIMESTAMP",
    "Cosigned",
    "WitnessKey",
    "WitnessSigner",
    "add_signatures",
    "cosignature_message",
    "cosignatures",
    "cosigner_key_id",
    "generate_witness_signer",
    "parse_signature_lines",
    "parse_witness_key",
    "parse_witness_signer",
    "verify_cosignature_lines",
    "witness_signer_from_seed",
]


ALG_COSIGNATURE_V1 = 0x04
MAX_TIMESTAMP = (1 << 63) - 1


def cosigner_key_id(name: str, public_key: bytes) -> int:
    """The 32-bit id of an Ed25519 cosignature/v1 key named ``name``."""
    return key_id(name, public_key, ALG_COSIGNATURE_V1)


def cosignature_message(body: str, timestamp: int) -> bytes:
    """The exact bytes a witness signs for checkpoint ``body`` at ``timestamp``."""
    if not 0 <= timestamp <= MAX_TIMESTAMP:
        raise ValueError(f"cosignature timestamp {timestamp} is outside 0..2^63-1")
    return f"cosignature/v1\ntime {timestamp}\n".encode() + body.encode()


@dataclass(frozen=True)
class WitnessKey:
    """A witness's cosignature/v1 verifier key."""

    name: str
    key_id: int
    public_key: bytes

    def text(self) -> str:
        return key_text(self.name, self.key_id, ALG_COSIGNATURE_V1, self.public_key)

    def timestamp(self, body: str, signature: bytes) -> int | None:
        """The cosignature's time if ``signature`` (timestamp || sig) verifies over ``body``."""
        if len(signature) != 72:
            return None
        when = int.from_bytes(signature[:8], "big")
        if when > MAX_TIMESTAMP:
            return None
        try:
            VerifyKey(self.public_key).verify(cosignature_message(body, when), signature[8:])
        except (BadSignatureError, ValueError):
            return None
        return when


@dataclass(frozen=True)
class WitnessSigner:
    """A witness's cosignature/v1 signing key (holds the 32-byte seed)."""

    name: str
    key_id: int
    seed: bytes = field(repr=False)

    def key(self) -> WitnessKey:
        return WitnessKey(self.name, self.key_id, bytes(SigningKey(self.seed).verify_key))

    def text(self) -> str:
        return "PRIVATE+KEY+" + key_text(self.name, self.key_id, ALG_COSIGNATURE_V1, self.seed)

    def cosign(self, body: str, timestamp: int) -> Signature:
        """The cosignature of checkpoint ``body`` at ``timestamp`` (a note signature)."""
        sig = SigningKey(self.seed).sign(cosignature_message(body, timestamp)).signature
        return Signature(self.name, self.key_id, timestamp.to_bytes(8, "big") + sig)


def witness_signer_from_seed(name: str, seed: bytes) -> WitnessSigner:
    return WitnessSigner(name, seed_key_id(name, seed, ALG_COSIGNATURE_V1), seed)


def generate_witness_signer(name: str) -> WitnessSigner:
    """A new random witness key for ``name``."""
    return witness_signer_from_seed(name, bytes(SigningKey.generate()))


_ALG_TEXT = "a cosignature/v1 key (type 0x04, 32 bytes)"


def parse_witness_key(text: str) -> WitnessKey:
    """A :class:`WitnessKey` from ``name+keyid+base64(0x04||key)``, or :class:`MalformedKey`."""
    return WitnessKey(*parse_verifier_text(text.strip(), "witness verifier",
                                           ALG_COSIGNATURE_V1, _ALG_TEXT))


def parse_witness_signer(text: str) -> WitnessSigner:
    """A :class:`WitnessSigner` from ``PRIVATE+KEY+name+keyid+base64(0x04||seed)``."""
    return WitnessSigner(*parse_signer_text(text.strip(), "witness signer", ALG_COSIGNATURE_V1,
                                            _ALG_TEXT))


@dataclass(frozen=True)
class Cosigned:
    """One verified cosignature: which witness, and the time it states."""

    witness: WitnessKey
    timestamp: int
    signature: Signature


def verify_cosignature_lines(
    body: str, signatures: Iterable[Signature], witnesses: Iterable[WitnessKey]
) -> list[Cosigned]:
    """The cosignatures among ``signatures`` by known ``witnesses`` (one per witness).

    Unknown keys are ignored; a known key whose cosignature does not verify over ``body``
    raises :class:`BadSignature`.
    """
    known = {(w.name, w.key_id): w for w in witnesses}
    found: dict[tuple[str, int], Cosigned] = {}
    for sig in dict.fromkeys(signatures):
        witness = known.get((sig.name, sig.key_id))
        if witness is None:
            continue
        when = witness.timestamp(body, sig.signature)
        if when is None:
            raise BadSignature(f"invalid cosignature by witness {sig.name}+{sig.key_id:08x}",
                               name=sig.name, key_id=sig.key_id)
        slot = (sig.name, sig.key_id)
        if slot not in found or found[slot].timestamp < when:
            found[slot] = Cosigned(witness, when, sig)
    return list(found.values())


def cosignatures(note: str, witnesses: Iterable[WitnessKey]) -> list[Cosigned]:
    """Verified cosignatures carried by a signed checkpoint ``note`` (see the docstring)."""
    text, signatures = parse_note(note)
    return verify_cosignature_lines(text, signatures, witnesses)


def parse_signature_lines(block: str) -> list[Signature]:
    """Signature lines (a witness's response body) as signatures; :class:`MalformedNote`."""
    if not block.endswith("\n"):
        raise MalformedNote("signature lines end with a newline")
    # Reuse the note parser: a dummy one-line text, a blank line, then the lines.
    _, signatures = parse_note("x\n\n" + block)
    return signatures


def add_signatures(note: str, extra: Iterable[Signature]) -> str:
    """``note`` with the ``extra`` signature lines appended (identical lines once)."""
    text, signatures = parse_note(note)
    merged = list(dict.fromkeys([*signatures, *extra]))
    return text + "\n" + "".join(sig.line() for sig in merged)


def cosigned_note(note: str, signature_blocks: Iterable[str]) -> str:
    """``note`` with the signature lines of each block (witness responses, as stored with
    their receipts) appended; ``note`` itself when there are none."""
    lines = [sig for block in signature_blocks for sig in parse_signature_lines(block)]
    return add_signatures(note, lines) if lines else note
