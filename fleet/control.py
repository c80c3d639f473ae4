"""Control events: enroll, revoke and re-key a host, rotate the operator key, as signed
messages in the stream, decided by the fold in stream order (``docs/spec/ledger.md``).

An event's canonical bytes are::

    signed  = "fleet.ctl/1" || kind:u8 || operator[32] || seq:u64 || host_len:u8 || host
              || key[32]
    message = signed || signature[64]       (Ed25519 by ``operator`` over ``signed``)

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
from collections.abc import Mapping
from dataclasses import dataclass, field

from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

from fleet.address import message_id
from fleet.control_errors import (
    BadControlSignature,
    ControlConflict,
    MalformedControl,
    ReplayedControl,
    UnknownOperator,
)
from fleet.errors import FleetError
from fleet.fold import HostEntry, Refused
from fleet.subjects import HOST_NAME

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
    "decide_control",
    "decode_event",
    "encode_event",
    "event_id",
    "sign_event",
    "signed_bytes",
]

CONTROL_DOMAIN = b"fleet.ctl/1"
ENROLL, REVOKE, REKEY, OPERATOR = 1, 2, 3, 4
KINDS: dict[int, str] = {ENROLL: "enroll", REVOKE: "revoke", REKEY: "rekey",
                         OPERATOR: "operator"}
_HEAD = struct.Struct(">B32sQB")
_NO_KEY = bytes(32)
_SIGNATURE = 64


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
        return KINDS[self.kind]


def signed_bytes(ev: ControlEvent) -> bytes:
    """The bytes the operator signs (everything but the signature)."""
    host = ev.host.encode("ascii")
    return CONTROL_DOMAIN + _HEAD.pack(ev.kind, ev.operator, ev.seq, len(host)) + host + ev.key


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
    return message_id("ctl", data)


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
    """Decide one control event (changes nothing). Order: it decodes
    (``MalformedControl``), its operator is trusted (``UnknownOperator``), the signature
    verifies (``BadControlSignature``), its seq is above the operator's last
    (``ReplayedControl``), the host table can take it (``ControlConflict``)."""
    host: str | None = None
    try:
        ev = decode_event(data)
        host = ev.host or None
        last = state.operators.get(ev.operator)
        if last is None:
            raise UnknownOperator("the event's operator key is not trusted here")
        try:
            VerifyKey(ev.operator).verify(signed_bytes(ev), ev.signature)
        except (BadSignatureError, ValueError, TypeError):
            raise BadControlSignature("the signature does not verify under the operator key"
                                      ) from None
        if ev.seq <= last:
            raise ReplayedControl(f"seq {ev.seq} is not above this operator's last, {last}")
        return ControlAccepted(ev, stream_seq, _host_after(state.hosts, ev, stream_seq))
    except FleetError as exc:
        return Refused(exc.rule, str(exc), host, None, None)


def _host_after(hosts: Mapping[str, HostEntry], ev: ControlEvent, stream_seq: int
                ) -> HostEntry | None:
    if ev.kind == OPERATOR:
        return None
    entry = hosts.get(ev.host)
    if ev.kind == ENROLL:
        if entry is not None:
            raise ControlConflict(f"host {ev.host!r} is already enrolled"
                                  + (" (revoked)" if entry.revoked_after is not None else ""))
        return HostEntry(ev.host, VerifyKey(ev.key), stream_seq)
    if entry is None or entry.revoked_after is not None:
        raise ControlConflict(f"host {ev.host!r} is not enrolled"
                              + ("" if entry is None else " (revoked)"))
    if ev.kind == REVOKE:
        return HostEntry(ev.host, entry.verify_key, entry.enrolled_after, stream_seq)
    return HostEntry(ev.host, VerifyKey(ev.key), entry.enrolled_after)


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


class BatchControl:
    """The control state as one batch sees it: copies of the committed operators and
    hosts, changed by the batch's accepted events (:attr:`changed`: any were)."""

    __slots__ = ("accepted", "state")

    def __init__(self, operators: Mapping[bytes, int], hosts: Mapping[str, HostEntry],
                 retired: set[bytes] | None = None) -> None:
        self.state = ControlState(dict(operators), dict(hosts), set(retired or ()))
        self.accepted: list[ControlAccepted] = []

    @property
    def hosts(self) -> dict[str, HostEntry]:
        return self.state.hosts

    @property
    def changed(self) -> bool:
        return bool(self.accepted)

    def fold(self, stream_seq: int, data: bytes) -> ControlAccepted | Refused:
        d = decide_control(self.state, stream_seq, data)
        if isinstance(d, ControlAccepted):
            apply(self.state, d)
            self.accepted.append(d)
        return d
