"""C2SP signed notes (``c2sp.org/signed-note``), Ed25519 only - the ledger's checkpoint envelope.

Format
    A signed note is UTF-8 text without ASCII control characters other than newline: the
    *text* (ending in a newline), one blank line, then one or more signature lines::

        — <key name> <base64(key id[4] || Ed25519 signature[64])>

    (``—`` is U+2014, followed by one space.) The text is everything up to and including
    the newline before the *last* blank line. The signature is over the text bytes.

Keys
    A key name is non-empty with no Unicode space and no ``+``. Its 32-bit key id is::

        key id = SHA-256(name || 0x0A || 0x01 || public key[32])[:4]   (big-endian)

    where 0x01 is the Ed25519 signature type. Keys are text::

        verifier key  <name>+<key id, 8 lowercase hex>+<base64(0x01 || public key[32])>
        signer key    PRIVATE+KEY+<name>+<key id>+<base64(0x01 || Ed25519 seed[32])>

    Parsing recomputes the key id and refuses a key whose id does not match
    (:class:`~fleet.log.log_errors.MalformedKey`).

Verifying (:func:`open_note`)
    Each signature line is looked up by (name, key id) among the verifier keys given.
    Signatures by unknown keys are kept aside unverified (a note may carry cosignatures);
    a signature by a known key that fails is :class:`~fleet.log.log_errors.BadSignature`; a note
    with no signature by a known key is :class:`~fleet.log.log_errors.UnknownKey`; bytes that
    are not a note - or carry more than 100 signature lines - are
    :class:`~fleet.log.log_errors.MalformedNote`. Identical signature lines count once.

Example (the golang.org/x/mod ``sumdb/note`` example key)::

    vkey = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
    note = ("If you think cryptography is the answer to your problem,\\n"
            "then you don't know what your problem is.\\n\\n"
            "— PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2p"
            "ZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\\n")
    open_note(note, [parse_verifier_key(vkey)]).text  # -> the two lines
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from hashlib import sha256

from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

from fleet_ledger.fleet.log.log_errors import (
    AmbiguousKey,
    BadSignature,
    MalformedKey,
    MalformedNote,
    UnknownKey,
)

__all__ = [
    "ALG_ED25519",
    "MAX_SIGNATURES",
    "SIG_PREFIX",
    "Note",
    "Signature",
    "Signer",
    "Verifier",
    "b64decode_strict",
    "generate_signer",
    "key_id",
    "key_text",
    "open_note",
    "parse_key_fields",
    "parse_note",
    "parse_signer_key",
    "parse_signer_text",
    "parse_verifier_key",
    "parse_verifier_text",
    "seed_key_id",
    "sign_note",
    "signer_from_seed",
    "valid_name",
]


ALG_ED25519 = 0x01
MAX_SIGNATURES = 100
SIG_PREFIX = "\u2014 "
_KEY_ID = re.compile(r"[0-9a-f]{8}\Z")
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f]")


def valid_name(name: str) -> bool:
    """A key name: non-empty, no Unicode space, no ``+``."""
    return bool(name) and "+" not in name and not any(ch.isspace() for ch in name)


def key_id(name: str, public_key: bytes, alg: int = ALG_ED25519) -> int:
    """The 32-bit id of a key named ``name`` of signature type ``alg`` (Ed25519's 0x01; a
    witness's cosignature/v1 keys are 0x04: :mod:`fleet.log.cosignature`)."""
    digest = sha256(name.encode() + b"\n" + bytes([alg]) + public_key).digest()
    return int.from_bytes(digest[:4], "big")


def key_text(name: str, kid: int, alg: int, key: bytes) -> str:
    """``name+keyid+base64(alg || key)``: a verifier key's text, or (after ``PRIVATE+KEY+``)
    a signer key's, ``key`` then being its seed."""
    return f"{name}+{kid:08x}+{base64.b64encode(bytes([alg]) + key).decode()}"


def seed_key_id(name: str, seed: bytes, alg: int = ALG_ED25519) -> int:
    """The key id of the Ed25519 signer key ``name`` with ``seed``, or :class:`MalformedKey`
    (an invalid name, a seed that is not 32 bytes)."""
    if not valid_name(name):
        raise MalformedKey(f"invalid key name {name!r}: empty, or has a space or '+'")
    if len(seed) != 32:
        raise MalformedKey("an Ed25519 seed is 32 bytes")
    return key_id(name, bytes(SigningKey(seed).verify_key), alg)


def b64decode_strict(text: str, what: str, error: type[Exception]) -> bytes:
    """Strict base64 (no stray characters or padding), or ``error`` naming ``what``."""
    try:
        return binascii.a2b_base64(text.encode("ascii"), strict_mode=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise error(f"{what} is not base64") from exc


@dataclass(frozen=True)
class Verifier:
    """An Ed25519 verifier key."""

    name: str
    key_id: int
    public_key: bytes

    def verify(self, message: bytes, signature: bytes) -> bool:
        try:
            VerifyKey(self.public_key).verify(message, signature)
        except (BadSignatureError, ValueError):
            return False
        return True

    def text(self) -> str:
        """The ``name+keyid+base64`` verifier key text."""
        return key_text(self.name, self.key_id, ALG_ED25519, self.public_key)


@dataclass(frozen=True)
class Signer:
    """An Ed25519 signer key (holds the 32-byte seed)."""

    name: str
    key_id: int
    seed: bytes = field(repr=False)

    def sign(self, message: bytes) -> bytes:
        return SigningKey(self.seed).sign(message).signature

    def verifier(self) -> Verifier:
        return Verifier(self.name, self.key_id, bytes(SigningKey(self.seed).verify_key))

    def text(self) -> str:
        """The ``PRIVATE+KEY+name+keyid+base64`` signer key text."""
        return "PRIVATE+KEY+" + key_text(self.name, self.key_id, ALG_ED25519, self.seed)


def signer_from_seed(name: str, seed: bytes) -> Signer:
    """A signer for ``name`` from a 32-byte Ed25519 seed."""
    return Signer(name, seed_key_id(name, seed), seed)


def generate_signer(name: str) -> Signer:
    """A new random signer key for ``name``."""
    return signer_from_seed(name, bytes(SigningKey.generate()))


def parse_key_fields(
    name: str, id_text: str, blob_text: str, kind: str, alg: int = ALG_ED25519,
    alg_text: str = "an Ed25519 key (type 0x01 and 32 bytes)",
) -> tuple[int, bytes]:
    """Key id and 32 key bytes of a ``name+keyid+base64(alg || key)`` key text's fields."""
    if not valid_name(name):
        raise MalformedKey(f"{kind} key has an invalid name {name!r}")
    if _KEY_ID.match(id_text) is None:
        raise MalformedKey(f"{kind} key id {id_text!r} is not 8 lowercase hex digits")
    blob = b64decode_strict(blob_text, f"{kind} key", MalformedKey)
    if len(blob) != 33 or blob[0] != alg:
        raise MalformedKey(f"{kind} key is not {alg_text}")
    return int(id_text, 16), blob[1:]


_ED25519_TEXT = "an Ed25519 key (type 0x01 and 32 bytes)"


def parse_verifier_text(text: str, kind: str = "verifier", alg: int = ALG_ED25519,
                        alg_text: str = _ED25519_TEXT) -> tuple[str, int, bytes]:
    """(name, key id, public key) of ``name+keyid+base64(alg || key)`` text whose id is its
    name's and key's, or :class:`MalformedKey` naming the ``kind`` of key."""
    parts = text.strip("\n").split("+", 2)
    if len(parts) != 3:
        raise MalformedKey(f"a {kind} key is name+keyid+base64")
    name, id_text, blob_text = parts
    kid, public_key = parse_key_fields(name, id_text, blob_text, kind, alg, alg_text)
    if key_id(name, public_key, alg) != kid:
        raise MalformedKey(f"{kind} key id {id_text} does not match its name and key")
    return name, kid, public_key


def parse_signer_text(text: str, kind: str = "signer", alg: int = ALG_ED25519,
                      alg_text: str = _ED25519_TEXT) -> tuple[str, int, bytes]:
    """(name, key id, seed) of ``PRIVATE+KEY+name+keyid+base64(alg || seed)`` text whose id
    is its name's and key's, or :class:`MalformedKey` naming the ``kind`` of key."""
    parts = text.strip("\n").split("+", 4)
    if len(parts) != 5 or parts[:2] != ["PRIVATE", "KEY"]:
        raise MalformedKey(f"a {kind} key is PRIVATE+KEY+name+keyid+base64")
    name, id_text, blob_text = parts[2:]
    kid, seed = parse_key_fields(name, id_text, blob_text, kind, alg, alg_text)
    if seed_key_id(name, seed, alg) != kid:
        raise MalformedKey(f"{kind} key id {id_text} does not match its name and key")
    return name, kid, seed


def parse_verifier_key(text: str) -> Verifier:
    """A :class:`Verifier` from ``name+keyid+base64`` text, or :class:`MalformedKey`."""
    return Verifier(*parse_verifier_text(text))


def parse_signer_key(text: str) -> Signer:
    """A :class:`Signer` from ``PRIVATE+KEY+name+keyid+base64`` text, or :class:`MalformedKey`."""
    return Signer(*parse_signer_text(text))


@dataclass(frozen=True)
class Signature:
    """One signature line: key name, key id and the signature bytes after the id."""

    name: str
    key_id: int
    signature: bytes

    def line(self) -> str:
        blob = base64.b64encode(self.key_id.to_bytes(4, "big") + self.signature).decode()
        return f"{SIG_PREFIX}{self.name} {blob}\n"


@dataclass(frozen=True)
class Note:
    """An opened note: its text, the signatures verified, and those by unknown keys."""

    text: str
    verified: tuple[Signature, ...]
    unverified: tuple[Signature, ...]


def _check_text(text: str) -> None:
    if not text.endswith("\n"):
        raise MalformedNote("note text must end in a newline")
    if _CONTROL.search(text):
        raise MalformedNote("note has an ASCII control character other than newline")


def sign_note(text: str, signers: Sequence[Signer]) -> str:
    """The signed note of ``text``, one signature line per signer."""
    _check_text(text)
    message = text.encode()
    lines = [Signature(s.name, s.key_id, s.sign(message)).line() for s in signers]
    if not lines:
        raise MalformedNote("a signed note needs at least one signature")
    return text + "\n" + "".join(lines)


def parse_note(message: str | bytes) -> tuple[str, list[Signature]]:
    """Split a signed note into its text and signature lines (syntax only, no verifying)."""
    if isinstance(message, bytes):
        try:
            message = message.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedNote("note is not valid UTF-8") from exc
    if _CONTROL.search(message):
        raise MalformedNote("note has an ASCII control character other than newline")
    split = message.rfind("\n\n")
    if split < 0:
        raise MalformedNote("note has no blank line before its signatures")
    text, block = message[: split + 1], message[split + 2 :]
    if not block.endswith("\n"):
        raise MalformedNote("note does not end with a newline-terminated signature line")
    lines = block[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise MalformedNote(f"note has more than {MAX_SIGNATURES} signatures")
    signatures = []
    for line in lines:
        if not line.startswith(SIG_PREFIX):
            raise MalformedNote(f"not a signature line: {line[:40]!r}")
        name, _, blob_text = line[len(SIG_PREFIX) :].partition(" ")
        if not valid_name(name) or not blob_text:
            raise MalformedNote(f"malformed signature line: {line[:40]!r}")
        blob = b64decode_strict(blob_text, "signature", MalformedNote)
        if len(blob) < 5:
            raise MalformedNote("signature is shorter than a key id and one byte")
        signatures.append(Signature(name, int.from_bytes(blob[:4], "big"), blob[4:]))
    return text, signatures


def _index(verifiers: Iterable[Verifier]) -> dict[tuple[str, int], Verifier | None]:
    """(name, id) -> verifier; None marks two different keys claiming the same name and id."""
    known: dict[tuple[str, int], Verifier | None] = {}
    for verifier in verifiers:
        slot = (verifier.name, verifier.key_id)
        if slot in known and known[slot] != verifier:
            known[slot] = None
        else:
            known[slot] = verifier
    return known


def open_note(message: str | bytes, verifiers: Iterable[Verifier]) -> Note:
    """Parse and verify a signed note against ``verifiers``; see the module docstring."""
    text, signatures = parse_note(message)
    known = _index(verifiers)
    payload = text.encode()
    verified: list[Signature] = []
    unverified: list[Signature] = []
    for sig in dict.fromkeys(signatures):
        slot = (sig.name, sig.key_id)
        if slot not in known:
            unverified.append(sig)
            continue
        verifier = known[slot]
        if verifier is None:
            raise AmbiguousKey(f"ambiguous key {sig.name}+{sig.key_id:08x}")
        if not verifier.verify(payload, sig.signature):
            raise BadSignature(
                f"invalid signature for key {sig.name}+{sig.key_id:08x}",
                name=sig.name,
                key_id=sig.key_id,
            )
        verified.append(sig)
    if not verified:
        names = ", ".join(f"{s.name}+{s.key_id:08x}" for s in unverified)
        raise UnknownKey(f"note has no signature by a known key (signed by: {names})")
    return Note(text, tuple(verified), tuple(unverified))
