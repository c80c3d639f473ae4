"""Control events: enroll, revoke and re-key a host, rotate the operator key, as signed
messages in the stream, decided by the fold in stream order (``docs/spec/ledger.md``).

An event's canonical bytes are::

    signed  = "fleet.ctl/1" || kind:u8 || operator[32] || seq:u64 || host_len:u8 || host
              || key[32]
    message = signed || signature[64]       (Ed25519 by ``operator`` over ``signed``)

(the envelope every signed event shares, :mod:`fleet.grants.signed_event`, with the operator as
signer and ``seq || host_len || host || key`` as body).

The fold decides each event against a :class:`ControlState` (the trusted operator keys with
the last sequence number each used, and the host table) and returns a value
(:class:`ControlAccepted` or :class:`fleet.fold.Refused`); :func:`apply` makes the change.
The host table is therefore a pure function of the stream and the operators a ledger starts
with: a host's key is valid for segments after its enroll event, a re-key replaces it for
segments after the re-key (earlier segments were decided under the old key, in stream
order), and a revoke refuses the host's later segments.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from nacl.signing import SigningKey, VerifyKey

from fleet_ledger.fleet.errors import FleetError
from fleet_ledger.fleet.fold import HostEntry, Refused
from fleet_ledger.fleet.fold.control_errors import (
    BadControlSignature,
    ControlConflict,
    MalformedControl,
    ReplayedControl,
    UnknownOperator,
)
from fleet_ledger.fleet.fold.event_overlay import EventOverlay
from fleet_ledger.fleet.grants import signed_event
from fleet_ledger.fleet.subjects import HOST_NAME

__all__ = [
    "CONTROL_DOMAIN",
    "ENROLL",
    "KINDS",
    "OPERATOR",
    "REKEY",
    "REVOKE",
    "BatchControl",
    "ControlAccepted",
    "ControlEvent",
    "ControlState",
    "apply",
    "check_control",
    "decide_bootstrap",
    "decide_control",
    "decode_event",
    "encode_event",
    "event_id",
    "host_after",
    "keys_at",
    "sign_event",
    "signed_bytes",
]

CONTROL_DOMAIN = b"fleet.ctl/1"
ENROLL, REVOKE, REKEY, OPERATOR = 1, 2, 3, 4
KINDS: dict[int, str] = {ENROLL: "enroll", REVOKE: "revoke", REKEY: "rekey",
                         OPERATOR: "operator"}
# The envelope's kind and signer (the operator), then the body's seq and host length.
_HEAD = struct.Struct(">B32sQB")
_BODY = struct.Struct(">QB")
_NO_KEY = bytes(32)
K = TypeVar("K")  # a key as its holder keeps it (its bytes, its text)
_SIGNATURE = signed_event.SIGNATURE


@dataclass(frozen=True, slots=True)
class ControlEvent:
    """One control event: ``key`` is the host's key (enroll, re-key), the next operator's
    key (operator), 32 zero bytes (revoke); ``host`` is empty for an operator rotation."""

    kind: int
    operator: bytes
    seq: int
    host: str
    key: bytes
    signature: bytes = b""

    @property
    def kind_name(self) -> str:
        return signed_event.kind_name(KINDS, self.kind)


def signed_bytes(ev: ControlEvent) -> bytes:
    """The bytes the operator signs (everything but the signature)."""
    host = ev.host.encode("ascii")
    return signed_event.signed_part(CONTROL_DOMAIN, ev.kind, ev.operator,
                                    _BODY.pack(ev.seq, len(host)) + host + ev.key)


def encode_event(ev: ControlEvent) -> bytes:
    return signed_bytes(ev) + ev.signature


def sign_event(key: SigningKey, kind: int, seq: int, host: str, subject_key: bytes | None
               ) -> ControlEvent:
    """A signed event of ``kind`` by operator ``key`` (``subject_key``: None for a revoke)."""
    ev = ControlEvent(kind, bytes(key.verify_key), seq, host,
                      _NO_KEY if subject_key is None else subject_key)
    _check_shape(ev)
    return ControlEvent(ev.kind, ev.operator, ev.seq, ev.host, ev.key,
                        key.sign(signed_bytes(ev)).signature)


def event_id(data: bytes) -> str:
    """The event's id (the broker's ``Nats-Msg-Id``): hex of 16 bytes of BLAKE3 of the
    message."""
    return signed_event.event_id("ctl", data)


def decode_event(data: bytes) -> ControlEvent:
    """The event in ``data``, or :class:`MalformedControl`; re-encoding gives ``data``."""
    n = len(CONTROL_DOMAIN)
    if not data.startswith(CONTROL_DOMAIN) or len(data) < n + _HEAD.size:
        raise MalformedControl("not a fleet.ctl/1 control event")
    kind, operator, seq, host_len = _HEAD.unpack_from(data, n)
    start = n + _HEAD.size
    if len(data) != start + host_len + 32 + _SIGNATURE:
        raise MalformedControl("a control event's length does not match its host name")
    try:
        host = data[start:start + host_len].decode("ascii")
    except UnicodeDecodeError:
        raise MalformedControl("a control event's host name is not ASCII") from None
    key = data[start + host_len:start + host_len + 32]
    ev = ControlEvent(kind, operator, seq, host, key, data[-_SIGNATURE:])
    _check_shape(ev)
    return ev


def _check_shape(ev: ControlEvent) -> None:
    if ev.kind not in KINDS:
        raise MalformedControl(f"unknown control event kind {ev.kind}")
    if not 0 <= ev.seq < 2**64:
        raise MalformedControl("a control event's seq is a u64")
    if ev.kind == OPERATOR:
        if ev.host:
            raise MalformedControl("an operator rotation names no host")
    elif not HOST_NAME.match(ev.host):
        raise MalformedControl(f"not a host name: {ev.host!r}")
    if (ev.kind == REVOKE) != (ev.key == _NO_KEY):
        raise MalformedControl("a revoke carries 32 zero bytes as its key; no other event may")
    if len(ev.operator) != 32 or len(ev.key) != 32:
        raise MalformedControl("keys are 32 bytes")


@dataclass(slots=True)
class ControlState:
    """What control events are decided against: the trusted operator keys (key -> the last
    sequence number folded for it) and the host table."""

    operators: dict[bytes, int]
    hosts: dict[str, HostEntry]
    # Operator keys a rotation retired: never trusted again, even if rotated back to.
    retired: set[bytes] = field(default_factory=set)


class ControlAccepted:
    """An accepted event at stream sequence ``stream_seq`` and the host entry it leaves
    (``None`` for an operator rotation)."""

    __slots__ = ("entry", "event", "stream_seq")

    def __init__(self, event: ControlEvent, stream_seq: int, entry: HostEntry | None) -> None:
        self.event = event
        self.stream_seq = stream_seq
        self.entry = entry


def decide_control(state: ControlState, stream_seq: int, data: bytes
                   ) -> ControlAccepted | Refused:
    """Decide one control event (changes nothing): :func:`check_control`'s acceptance, or
    its first refusal as a value (``MalformedControl`` if the bytes do not decode)."""
    try:
        ev = decode_event(data)
    except FleetError as exc:
        return Refused(exc.rule, str(exc), None, None, None)
    try:
        return check_control(state, stream_seq, ev)
    except FleetError as exc:
        return Refused(exc.rule, str(exc), ev.host or None, None, None)


def check_control(state: ControlState, stream_seq: int, ev: ControlEvent) -> ControlAccepted:
    """Accept one decoded control event or raise the first rule it breaks, in this order:
    its operator is trusted (``UnknownOperator``), the signature verifies
    (``BadControlSignature``), its seq is above the operator's last (``ReplayedControl``),
    the host table can take it (``ControlConflict``)."""
    last = state.operators.get(ev.operator)
    if last is None:
        raise UnknownOperator("the event's operator key is not trusted here")
    if not signed_event.signature_valid(ev.operator, signed_bytes(ev), ev.signature):
        raise BadControlSignature("the signature does not verify under the operator key")
    if ev.seq <= last:
        raise ReplayedControl(f"seq {ev.seq} is not above this operator's last, {last}")
    entry = None if ev.kind == OPERATOR else host_after(state.hosts, ev.kind, ev.host, ev.key,
                                                        stream_seq)
    return ControlAccepted(ev, stream_seq, entry)


def host_after(hosts: Mapping[str, HostEntry], kind: int, host: str, key: bytes,
               position: int) -> HostEntry:
    """The host table's one rule: the entry ``host`` has after an event of ``kind``
    (ENROLL, REVOKE, REKEY) with ``key`` at stream ``position``, or ``ControlConflict``.
    An enrolment is valid for segments after its position; a re-key replaces the key for
    segments decided after it (the enrolment's position stays); a revoke refuses the
    host's later segments. A known host is never enrolled again, a revoked one never
    changes. Both the stream's control events and the offline bootstrap events of a
    ledger's store (:func:`decide_bootstrap`) are decided by it."""
    entry = hosts.get(host)
    if kind == ENROLL:
        if entry is not None:
            raise ControlConflict(f"host {host!r} is already enrolled"
                                  + (" (revoked)" if entry.revoked_after is not None else ""))
        return HostEntry(host, VerifyKey(key), position)
    if entry is None or entry.revoked_after is not None:
        raise ControlConflict(f"host {host!r} is not enrolled"
                              + ("" if entry is None else " (revoked)"))
    if kind == REVOKE:
        return HostEntry(host, entry.verify_key, entry.enrolled_after, position)
    return HostEntry(host, VerifyKey(key), entry.enrolled_after)


def decide_bootstrap(hosts: Mapping[str, HostEntry], host: str, key: bytes | None,
                     position: int) -> HostEntry | Refused:
    """An offline (bootstrap) control event: what ``fleet host enroll/revoke --data``
    writes into a ledger's store, authorised by write access to it instead of an operator's
    signature, at the store's watermark (``position``). ``key``: the host's key (an
    enrolment of an unknown host, a re-key of a known one), ``None`` for a revoke; decided
    by :func:`host_after`, so the host table has one rule."""
    kind = REVOKE if key is None else REKEY if host in hosts else ENROLL
    try:
        _check_shape(ControlEvent(kind, _NO_KEY, 0, host, _NO_KEY if key is None else key))
        return host_after(hosts, kind, host, _NO_KEY if key is None else key, position)
    except FleetError as exc:
        return Refused(exc.rule, str(exc), host, None, None)


def keys_at(current: Mapping[str, K], history: Iterable[tuple[int, int, str, K]],
            position: int) -> dict[str, K]:
    """Each host's key for a segment decided at stream ``position``: the key of the last
    enrolment or re-key before it in ``history`` (the folded control events: stream
    position, kind, host, key, in stream order), else its current key."""
    keys = dict(current)
    for at, kind, host, key in history:
        if at < position and kind in (ENROLL, REKEY):
            keys[host] = key
    return keys


def apply(state: ControlState, d: ControlAccepted) -> None:
    """Make an accepted event's change to ``state``."""
    ev = d.event
    state.operators[ev.operator] = ev.seq
    if ev.kind == OPERATOR:
        # The signing operator hands over: its later events are UnknownOperator.
        del state.operators[ev.operator]
        state.retired.add(ev.operator)
        if ev.key not in state.retired:
            state.operators.setdefault(ev.key, 0)
    else:
        assert d.entry is not None
        state.hosts[ev.host] = d.entry


class BatchControl(EventOverlay[ControlAccepted]):
    """The control state as one batch sees it: copies of the committed operators and
    hosts, changed by the batch's accepted events (:attr:`changed`: any were)."""

    __slots__ = ("accepted", "state")

    ACCEPTED = ControlAccepted

    def __init__(self, operators: Mapping[bytes, int], hosts: Mapping[str, HostEntry],
                 retired: set[bytes] | None = None) -> None:
        self.state = ControlState(dict(operators), dict(hosts), set(retired or ()))
        self.accepted: list[ControlAccepted] = []

    @property
    def hosts(self) -> dict[str, HostEntry]:
        return self.state.hosts

    def make(self, d: ControlAccepted) -> None:
        apply(self.state, d)

    def fold(self, stream_seq: int, data: bytes) -> ControlAccepted | Refused:
        return self.take(decide_control(self.state, stream_seq, data))
