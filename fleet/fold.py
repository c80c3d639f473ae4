"""The ledger's fold of one message, as a pure decision.

``decide`` takes what the ledger received (subject, bytes, stream sequence), the enrolled
hosts and a view of the runs folded so far, and returns either :class:`Accepted` (the run
state has been advanced and the leaf to append is given) or :class:`Refused` with the rule
broken. It does no I/O: the NATS consumer and the SQLite store are its caller, and an
offline verifier with the same inputs reaches the same decisions.

Order of checks (the first failure is the rule reported):

1. decodable envelope within size limits (``MalformedSegment``, ``ValueOutOfRange``, ...)
2. published on its own host's and run's subject (``SubjectMismatch``)
3. host enrolled before, and not revoked before, this stream position
   (``UnknownHost``, ``RevokedHost``)
4. run equals the genesis head of its unit and grants (``RunMismatch``); an existing run
   belongs to the host that started it (``ForeignRun``)
5. position: for an index already folded, the seal (``BadSeal``), then the chain from the
   held previous head (``HeadMismatch``), then ``Replay`` (the same segment again) or
   ``Fork`` (a different, validly sealed segment at that index); beyond the next index is
   ``IndexGap``
6. the seal under the host's key (``BadSeal``), then the record's own rules and the head.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import msgspec
from nacl.signing import VerifyKey

from fleet.address import id_text
from fleet.errors import (
    AttestationMismatch,
    BadSeal,
    FleetError,
    ForeignRun,
    Fork,
    HeadMismatch,
    IndexGap,
    RecordError,
    Replay,
    RevokedHost,
    RunMismatch,
    SubjectMismatch,
    UnknownHost,
)
from fleet.leaf import encode_leaf
from fleet.record import RunState, chain, genesis
from fleet.seal import bad_seal, check_seal
from fleet.subjects import SEGMENTS, segment_subject
from fleet.verify import fold_sealed
from fleet.wire import Envelope, EnvelopeWire, decode_envelope, envelope_from_wire


@dataclass(frozen=True, slots=True)
class HostEntry:
    """An enrolled host key, valid for stream sequences in (enrolled_after, revoked_after]."""

    name: str
    verify_key: VerifyKey
    enrolled_after: int = 0
    revoked_after: int | None = None
    # The key's 32 bytes, taken once: every message's seal check needs them.
    public_key: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "public_key", bytes(self.verify_key))


@dataclass(slots=True)
class RunSlot:
    """A run as the fold sees it: the host that started it and its state."""

    host: str
    state: RunState


# Decisions are made for every message: msgspec structs build in a fifth of the time of
# frozen dataclasses, and are as immutable. ``gc=False``: a decision never refers back to
# itself, so the cycle collector need not scan the thousands a batch holds.
class Accepted(msgspec.Struct, frozen=True, gc=False):
    host: str
    run: bytes
    index: int
    head: bytes
    kind: str
    leaf: bytes
    slot: RunSlot
    created: bool
    head_text: str | None = None  # the head's address text, where the message held it


class Refused(msgspec.Struct, frozen=True, gc=False):
    rule: str
    detail: str
    host: str | None
    run: bytes | None
    index: int | None


def subject_host(subject: str) -> str | None:
    """The host token of a segment subject, if the subject has the segment shape."""
    parts = subject.split(".")
    if len(parts) == 4 and f"{parts[0]}.{parts[1]}" == SEGMENTS:
        return parts[2]
    return None


def decode(subject: str, data: bytes, wire: EnvelopeWire | None = None) -> Envelope | Refused:
    """The message's envelope, or its refusal when it does not decode; ``wire``: its wire
    form where :func:`fleet.wire.envelope_wire` already decoded it (not decoded again)."""
    try:
        return decode_envelope(data) if wire is None else envelope_from_wire(wire)
    except FleetError as exc:
        return Refused(exc.rule, str(exc), subject_host(subject), None, _position(exc))


def seal_valid(env: Envelope, hosts: Mapping[str, HostEntry]) -> bool | None:
    """Whether the seal verifies under the host's enrolled key (``None``: no such host).

    A seal depends on nothing but the message and the key, so a ledger may check a whole
    batch's seals (on another core, say) before the serial fold and hand the verdicts to
    :func:`decide_envelope` (the ledger builds them from the wire form:
    :func:`fleet.fold_fast.wire_seal_item`).
    """
    entry = hosts.get(env.host)
    if entry is None:
        return None
    s = env.sealed
    try:
        check_seal(entry.verify_key, env.run, s.index, s.head, s.seal)
    except BadSeal:
        return False
    return True


def decide(
    subject: str,
    data: bytes,
    stream_seq: int,
    hosts: Mapping[str, HostEntry],
    get_run: Callable[[bytes], RunSlot | None],
    head_at: Callable[[bytes, int], bytes | None],
) -> Accepted | Refused:
    """Fold one message or refuse it; an accepted message has advanced ``get_run``'s slot."""
    env = decode(subject, data)
    if isinstance(env, Refused):
        return env
    return decide_envelope(subject, env, stream_seq, hosts, get_run, head_at)


def decide_envelope(
    subject: str,
    env: Envelope,
    stream_seq: int,
    hosts: Mapping[str, HostEntry],
    get_run: Callable[[bytes], RunSlot | None],
    head_at: Callable[[bytes, int], bytes | None],
    seal_ok: bool | None = None,
) -> Accepted | Refused:
    """:func:`decide` for a decoded message; ``seal_ok`` is :func:`seal_valid`'s answer if
    the caller already has it (the seal is then not checked again)."""
    try:
        return _decide(subject, env, stream_seq, hosts, get_run, head_at, seal_ok)
    except FleetError as exc:
        return Refused(exc.rule, str(exc), subject_host(subject), env.run, _position(exc))


def _position(exc: FleetError) -> int | None:
    """The segment index a refusal concerns; a hostile one (0, -1, 2**70) is no position
    (and no store could hold it)."""
    index = exc.segment if isinstance(exc, RecordError) else None
    return index if index is not None and 1 <= index < 2**63 else None


def _decide(
    subject: str,
    env: Envelope,
    stream_seq: int,
    hosts: Mapping[str, HostEntry],
    get_run: Callable[[bytes], RunSlot | None],
    head_at: Callable[[bytes, int], bytes | None],
    seal_ok: bool | None,
) -> Accepted:
    sealed = env.sealed
    index = sealed.index
    if subject != segment_subject(env.host, id_text(env.run)):
        raise SubjectMismatch(
            f"published on {subject!r}, not on its own host's and run's subject", segment=index
        )
    entry = hosts.get(env.host)
    if entry is None or stream_seq <= entry.enrolled_after:
        raise UnknownHost(f"host {env.host!r} is not enrolled", segment=index)
    if entry.revoked_after is not None and stream_seq > entry.revoked_after:
        raise RevokedHost(f"host {env.host!r} was revoked", segment=index)
    slot = get_run(env.run)
    created = slot is None
    # A known run was checked against its genesis when it began: equal ids need no rehash.
    known = slot is not None and (slot.state.unit_id, slot.state.grants_id) == (
        env.unit_id, env.grants_id)
    if not known and genesis(env.unit_id, env.grants_id) != env.run:
        raise RunMismatch("the run is not the genesis head of its unit and grants",
                          segment=index)
    if slot is None:
        slot = RunSlot(env.host, RunState.open(env.unit_id, env.grants_id))
    elif slot.host != env.host:
        raise ForeignRun(f"the run belongs to host {slot.host!r}", segment=index)
    state = slot.state
    if index <= state.index:
        _refuse_old_index(env, state, entry, head_at, seal_ok)
    if index > state.index + 1:
        raise IndexGap(f"segment {index} where {state.index + 1} was next", segment=index)
    if seal_ok is False:
        raise bad_seal(index)
    fold_sealed(state, sealed, None if seal_ok else entry.verify_key)
    return Accepted(env.host, env.run, index, state.head, sealed.segment.kind,
                    encode_leaf(env.run, index, state.head), slot, created)


def _refuse_old_index(
    env: Envelope,
    state: RunState,
    entry: HostEntry,
    head_at: Callable[[bytes, int], bytes | None],
    seal_ok: bool | None,
) -> None:
    """A message for an index the run already holds: say exactly what it is."""
    sealed = env.sealed
    index = sealed.index
    if seal_ok is None:
        check_seal(entry.verify_key, env.run, index, sealed.head, sealed.seal)
    elif not seal_ok:
        raise bad_seal(index)
    previous = env.run if index == 1 else head_at(env.run, index - 1)
    held = state.head if index == state.index else head_at(env.run, index)
    if previous is None or held is None:  # pragma: no cover - the store holds every index
        raise Fork(f"segment {index} cannot be compared with the run", segment=index)
    att = sealed.attestation
    if att is not None and att.address() != getattr(sealed.segment, "attestation", None):
        raise AttestationMismatch(
            "the attestation object does not hash to the recorded address", segment=index)
    if chain(previous, sealed.segment) != sealed.head:
        raise HeadMismatch("the stated head is not the head recomputed from the run",
                           segment=index)
    if sealed.head == held:
        raise Replay(f"segment {index} of this run is already folded", segment=index)
    raise Fork(f"the run already holds a different segment {index}", segment=index)
