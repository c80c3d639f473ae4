"""The grant events' codec: the envelope's body per kind as typed values, the encoders,
the decoder (its signature checked), the event's id and the signature triples a ledger may
check beside the fold, read at fixed offsets (``docs/spec/grants.md``; the envelope is
:mod:`fleet.grants.signed_event`'s, the text codec :mod:`fleet.text`'s).
"""

from __future__ import annotations

import struct
from typing import Final, TypeAlias

import msgspec
from nacl.signing import SigningKey

from fleet_ledger.fleet.grants import signed_event
from fleet_ledger.fleet.grants.grant import GRANT_DOMAIN, Reader, Terms, decode_terms, terms_bytes
from fleet_ledger.fleet.grants.grant_errors import BadGrantSignature, MalformedGrant
from fleet_ledger.fleet.text import check_text, encode_text, text_at

__all__ = ["AMEND", "CHECKPOINT", "EVENT_DOMAIN", "ISSUE", "KINDS", "MAX_NAME", "MINT",
           "NO_AMENDMENT", "TRIGGER", "Amend", "Body", "Checkpoint", "GrantEvent", "Issue",
           "Mint", "Trigger", "amend_event", "checkpoint_event", "decode_event", "event_id",
           "issue_event", "mint_event", "signature_items", "trigger_event"]

EVENT_DOMAIN: Final = b"fleet.gev/1"
ISSUE, TRIGGER, MINT, AMEND, CHECKPOINT = 1, 2, 3, 4, 5
KINDS: Final = {ISSUE: "issue", TRIGGER: "trigger", MINT: "mint", AMEND: "amend",
                CHECKPOINT: "checkpoint"}
NO_AMENDMENT: Final = bytes(32)
MAX_NAME: Final = 128
_SIGNATURE = signed_event.SIGNATURE
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")


class Issue(msgspec.Struct, frozen=True):
    """ISSUE's body: the grant's bytes."""

    grant: bytes


class Trigger(msgspec.Struct, frozen=True):
    """TRIGGER's body: the trigger's name (raised under the signer's key)."""

    name: str


class Mint(msgspec.Struct, frozen=True):
    """MINT's body: the standing grant's address, the trigger used, the child's bytes."""

    standing: bytes
    trigger: str
    child: bytes


class Amend(msgspec.Struct, frozen=True):
    """AMEND's body: the grant's address, the amendment's seq, the previous amendment's
    address (``NO_AMENDMENT`` for the first), the new terms."""

    grant: bytes
    seq: int
    previous: bytes
    terms: Terms


class Checkpoint(msgspec.Struct, frozen=True):
    """CHECKPOINT's body: the run, an index, the run's head and state there, a note."""

    run: bytes
    index: int
    head: bytes
    state: bytes
    note: str


Body: TypeAlias = Issue | Trigger | Mint | Amend | Checkpoint


class GrantEvent(msgspec.Struct, frozen=True):
    """A decoded event: ``fields`` is its typed body (see the module text)."""

    kind: int
    signer: bytes
    fields: Body
    signed: bytes
    signature: bytes

    @property
    def kind_name(self) -> str:
        return signed_event.kind_name(KINDS, self.kind)


# -- encoding -----------------------------------------------------------------------------------


def _text(value: str, what: str) -> bytes:
    return encode_text(value, what, MalformedGrant, MAX_NAME)


def _sign(key: SigningKey, kind: int, body: bytes) -> bytes:
    return signed_event.sign(key, EVENT_DOMAIN, kind, body)


def issue_event(issuer: SigningKey, grant: bytes) -> bytes:
    return _sign(issuer, ISSUE, _U32.pack(len(grant)) + grant)


def trigger_event(key: SigningKey, name: str) -> bytes:
    return _sign(key, TRIGGER, _text(name, "a trigger name"))


def mint_event(holder: SigningKey, standing: bytes, trigger: str, child: bytes) -> bytes:
    return _sign(holder, MINT, standing + _text(trigger, "a trigger name")
                 + _U32.pack(len(child)) + child)


def amend_event(issuer: SigningKey, grant: bytes, seq: int, previous: bytes, terms: Terms
                ) -> bytes:
    return _sign(issuer, AMEND, grant + _U64.pack(seq) + previous + terms_bytes(terms))


def checkpoint_event(subject: SigningKey, run: bytes, index: int, head: bytes, state: bytes,
                     note: str) -> bytes:
    return _sign(subject, CHECKPOINT, run + _U64.pack(index) + head + state
                 + _text(note, "a checkpoint note"))


def event_id(data: bytes) -> str:
    """The event's ``Nats-Msg-Id``: ``gev-`` and hex of 16 bytes of BLAKE3 of it."""
    return signed_event.event_id("gev", data)


def decode_event(data: bytes, verify: bool = True) -> GrantEvent:
    """The event in ``data`` with its signature checked (``verify=False``: by the caller,
    :func:`signature_items`), or the named refusal."""
    if type(data) is not bytes or not data.startswith(EVENT_DOMAIN):
        raise MalformedGrant("not a fleet.gev/1 grant event")
    if len(data) < len(EVENT_DOMAIN) + 33 + _SIGNATURE:
        raise MalformedGrant("a grant event is too short")
    kind, signer, _body, signed, signature = signed_event.split(data, EVENT_DOMAIN)
    if kind not in KINDS:
        raise MalformedGrant(f"unknown grant event kind {kind}")
    r = Reader(signed, len(EVENT_DOMAIN) + 1 + signed_event.KEY)
    fields: Body
    if kind == ISSUE:
        fields = Issue(r.take(int(_U32.unpack(r.take(4))[0])))
    elif kind == TRIGGER:
        fields = Trigger(_name(r, "a trigger name"))
    elif kind == MINT:
        standing, trigger = r.take(32), _name(r, "a trigger name")
        fields = Mint(standing, trigger, r.take(int(_U32.unpack(r.take(4))[0])))
    elif kind == AMEND:
        fields = Amend(r.take(32), r.u64(), r.take(32), decode_terms(r))
    else:
        fields = Checkpoint(r.take(32), r.u64(), r.take(32), r.take(32),
                            _name(r, "a checkpoint note"))
    r.end()
    if verify and not signed_event.signature_valid(signer, signed, signature):
        raise BadGrantSignature("the event's signature does not verify under its signer")
    return GrantEvent(kind, signer, fields, signed, signature)


def signature_items(data: bytes) -> list[tuple[bytes, bytes, bytes]] | None:
    """The (public key, signed bytes, signature) triples :func:`decide_event` checks for
    ``data``: the event's, and an issued or minted grant's. A ledger may check them beside
    the fold (as it checks seals) and pass the verdict as ``signatures_ok``.

    Read at the layout's fixed offsets without decoding the rest (the decision decodes it
    all, and where it decodes, these are exactly the triples it would verify); ``None``:
    the bytes are too short for the layout, and the decision names why."""
    head = len(EVENT_DOMAIN)
    if len(data) < head + 33 + _SIGNATURE or not data.startswith(EVENT_DOMAIN):
        return None
    items = [(data[head + 1:head + 33], data[:-_SIGNATURE], data[-_SIGNATURE:])]
    kind = data[head]
    if kind not in (ISSUE, MINT):
        return items
    at = head + 33
    if kind == MINT:
        at += 32
        if len(data) < at + 2:
            return None
        at = text_at(data, at)
    if len(data) < at + 4:
        return None
    size = int(_U32.unpack_from(data, at)[0])
    grant = data[at + 4:at + 4 + size]
    start = len(GRANT_DOMAIN)
    if len(grant) != size or size < start + 32 + _SIGNATURE:
        return None
    items.append((grant[start:start + 32], grant[:-_SIGNATURE], grant[-_SIGNATURE:]))
    return items


def _name(r: Reader, what: str) -> str:
    value = r.text(what)
    check_text(value, what, MalformedGrant, MAX_NAME)  # what the encoder would have written
    return value


