"""The ledger's fold of one message, as a pure decision that is a value.

:func:`decide` takes one :class:`Message` (subject, bytes, stream sequence, and what the
batch's pre-checks found) and an :class:`Admission` context (the enrolled hosts, the runs as
the batch sees them, the heads already held), and returns either :class:`Accepted` (the
leaf to append and the kernel's step, :mod:`fleet.record.kernel`) or :class:`Refused` with the rule
broken. It changes nothing: the caller takes the decision into its :class:`BatchRuns`,
which holds copies of the runs a batch changed, and installs them as committed state only
once the batch is durable. It does no I/O: the NATS consumer and the SQLite store are its
caller, and an offline verifier with the same inputs reaches the same decisions.
:func:`fleet.fold.fast.fold_message` is the rule a ledger folds each message by: the fast
path where it vouches for the message, else this reference path, then the batch's take.

Order of checks (the first failure is the rule reported):

1. decodable envelope within size limits (``MalformedSegment``, ``ValueOutOfRange``, ...)
2. published on its own host's and run's subject (``SubjectMismatch``)
3. host enrolled before, and not revoked before, this stream position
   (``UnknownHost``, ``RevokedHost``)
4. run equals the genesis head of its unit and grants (``RunMismatch``); an existing run
   is sealed by the host that holds it: the one that opened it until it parks, then the
   one that resumes (or closes) it (``ForeignRun``; :func:`fleet.record.kernel.check_holder`)
5. position: for an index already folded, the seal (``BadSeal``), then the chain from the
   held previous head (``HeadMismatch``), then ``Replay`` (the same segment again) or
   ``Fork`` (a different, validly sealed segment at that index); beyond the next index is
   ``IndexGap``
6. the seal under the host's key (``BadSeal``), then the record's own rules and the head.

Steps 2-4 and the position are :func:`admit` and :func:`position`, used by this reference
path and by the wire fast path (:mod:`fleet.fold.fast`) alike.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import msgspec
from nacl.signing import VerifyKey

from fleet_ledger.fleet.address import id_text
from fleet_ledger.fleet.errors import (
    AttestationMismatch,
    BadSeal,
    FleetError,
    Fork,
    RecordError,
    Replay,
    RevokedHost,
    RunMismatch,
    SubjectMismatch,
    UnknownHost,
)
from fleet_ledger.fleet.fold.event_overlay import EventOverlay
from fleet_ledger.fleet.grants.grant_book import GrantView
from fleet_ledger.fleet.grants.grant_gate import check_step
from fleet_ledger.fleet.log.leaf import encode_leaf
from fleet_ledger.fleet.record import kernel
from fleet_ledger.fleet.record.kernel import Step, genesis, index_in_range
from fleet_ledger.fleet.record.record import RunState
from fleet_ledger.fleet.record.seal import bad_seal, check_seal
from fleet_ledger.fleet.record.verify import check_next
from fleet_ledger.fleet.record.wire import (
    Envelope,
    EnvelopeWire,
    decode_envelope,
    envelope_from_wire,
)
from fleet_ledger.fleet.subjects import DEFAULT_FLEET, FleetNames, parse_segment_subject

__all__ = [
    "Accepted",
    "Admission",
    "BatchRuns",
    "HostEntry",
    "ItemGate",
    "Message",
    "Refused",
    "RunSlot",
    "admit",
    "decide",
    "decide_envelope",
    "decode",
    "grant_gate",
    "position",
    "seal_valid",
    "subject_host",
]


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
    """A run as the fold sees it: the host that holds it and its state."""

    host: str
    state: RunState

    def copy(self) -> RunSlot:
        return RunSlot(self.host, self.state.copy())


# Decisions are made for every message: msgspec structs build in a fifth of the time of
# frozen dataclasses, and are as immutable. ``gc=False``: a decision never refers back to
# itself, so the cycle collector need not scan the thousands a batch holds.
class Accepted(msgspec.Struct, frozen=True, gc=False):
    """A message the fold accepts: the leaf to append and the step it makes to its run."""

    host: str
    run: bytes
    index: int
    head: bytes
    kind: str
    leaf: bytes
    step: Step
    # (unit_id, grants_id) of a run this message opens; None for a run already held.
    opened: tuple[bytes, bytes] | None = None
    head_text: str | None = None  # the head's address text, where the message held it

    @property
    def created(self) -> bool:
        return self.opened is not None


class Refused(msgspec.Struct, frozen=True, gc=False):
    rule: str
    detail: str
    host: str | None
    run: bytes | None
    index: int | None


class Message(msgspec.Struct, frozen=True, gc=False):
    """One message to decide, with what a batch's pre-checks found of it: ``wire`` its
    :func:`fleet.record.wire.envelope_wire` form (``None``: it did not decode), ``seal_ok`` the
    seal's verdict (:func:`seal_valid`; ``None``: not checked), ``addresses`` its segment's
    addresses as parsed (:func:`fleet.fold.fast.batch_addresses`)."""

    subject: str
    data: bytes
    stream_seq: int
    wire: EnvelopeWire | None = None
    seal_ok: bool | None = None
    addresses: list[bytes] | None = None
    # Ledger time: the stream's timestamp of the message, in ms since the epoch (a grant's
    # window is judged by it, so every replica judges alike).
    at_ms: int = 0


class BatchRuns(EventOverlay[Accepted]):
    """The runs as one batch of decisions sees them: the committed runs (``committed``,
    read only), under the steps the batch has accepted so far, applied to copies (the
    fold's overlay, :mod:`fleet.fold.event_overlay`, as for control and grant events).

    A run the batch changes is copied on its first accepted step and changed only in the
    copy, so the committed state (a ledger's cache) is never touched before the batch is
    durable; :attr:`changed` (the copies, by run) is what the batch's commit stores and,
    once committed, what the caller installs."""

    __slots__ = ("_committed", "_copies", "accepted")

    ACCEPTED = Accepted

    def __init__(self, committed: Callable[[bytes], RunSlot | None]) -> None:
        self._committed = committed
        self._copies: dict[bytes, RunSlot] = {}
        self.accepted: list[Accepted] = []

    @property
    def changed(self) -> dict[bytes, RunSlot]:
        return self._copies

    def get(self, run: bytes) -> RunSlot | None:
        slot = self._copies.get(run)
        return slot if slot is not None else self._committed(run)

    def make(self, d: Accepted) -> None:
        """Apply an accepted step (decided against :meth:`get`) to the batch's copy: the
        kernel's holder change (:func:`fleet.record.kernel.next_holder`), then its state
        change (:func:`fleet.record.kernel.apply`)."""
        slot = self._copies.get(d.run)
        holder: str | None
        if slot is None:
            if d.opened is not None:
                slot, holder = RunSlot(d.host, RunState.open(*d.opened)), None
            else:
                held = self._committed(d.run)
                assert held is not None, "a step for a run the batch cannot see"
                slot = held.copy()
                holder = slot.host
            self._copies[d.run] = slot
        else:
            holder = slot.host
        state = slot.state
        slot.host = kernel.next_holder(holder, d.host, state.phase, d.kind, d.index,
                                       state.index + 1)
        kernel.apply(state, d.index, d.head, d.step)


class ItemGate(Protocol):
    """Jobs as the fold asks about them (:class:`fleet.fold.job_fold.BatchJobs`): ``live``,
    whether any job was folded; ``gate``, before a step that opens a run or closes one
    (``slot``: the run's, ``None`` for an opening; nothing else changes an item), its refusal
    if the run may not be the job item its unit names or close as one; ``took``, the item's
    change once that step is taken."""

    @property
    def live(self) -> bool: ...

    def gate(self, d: Accepted, slot: RunSlot | None) -> Accepted | Refused: ...

    def took(self, d: Accepted, stream_seq: int,
             runs: Callable[[bytes], RunSlot | None]) -> None: ...


@dataclass(frozen=True, slots=True)
class Admission:
    """What the fold decides messages against: the enrolled hosts, the runs as the batch
    sees them, the heads the ledger holds (``head_at(run, index)``, for replays) and the
    grants (``None``: runs are not held to grants; ``require_grants``: a run whose grant
    was not presented is ``UnknownGrant``, else it is folded under no grant) and the jobs
    (``None``: no item is held to a job)."""

    hosts: Mapping[str, HostEntry]
    runs: BatchRuns
    head_at: Callable[[bytes, int], bytes | None]
    names: FleetNames = DEFAULT_FLEET  # the fleet's names (fleet.subjects)
    grants: GrantView | None = None
    require_grants: bool = False
    jobs: ItemGate | None = None


def subject_host(subject: str) -> str | None:
    """The host token of a segment subject, if the subject has the segment shape."""
    parsed = parse_segment_subject(subject)
    return None if parsed is None else parsed[0]


def decode(subject: str, data: bytes, wire: EnvelopeWire | None = None) -> Envelope | Refused:
    """The message's envelope, or its refusal when it does not decode; ``wire``: its wire
    form where :func:`fleet.record.wire.envelope_wire` already decoded it (not decoded again)."""
    try:
        return decode_envelope(data) if wire is None else envelope_from_wire(wire)
    except FleetError as exc:
        return Refused(exc.rule, str(exc), subject_host(subject), None, _position(exc))


def seal_valid(env: Envelope, hosts: Mapping[str, HostEntry]) -> bool | None:
    """Whether the seal verifies under the host's enrolled key (``None``: no such host).

    A seal depends on nothing but the message and the key, so a ledger may check a whole
    batch's seals (on another core, say) before the serial fold and hand the verdicts to
    :func:`decide` in :attr:`Message.seal_ok` (the ledger builds them from the wire form:
    :func:`fleet.fold.fast.wire_seal_item`).
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


def admit(ctx: Admission, subject: str, host: str, run: bytes, run_text: str, unit_id: bytes,
          grants_id: bytes, index: int, kind: str, stream_seq: int
          ) -> tuple[HostEntry, RunSlot | None, RunState]:
    """Checks 2-4: (the host's entry, the run's slot or ``None`` for a new run, the run's
    state), or the named refusal. ``run_text``: the run's canonical address text; ``kind``:
    the segment's kind (who may seal it depends on it: :func:`fleet.record.kernel.check_holder`)."""
    if subject != ctx.names.segment_subject(host, run_text):
        raise SubjectMismatch(
            f"published on {subject!r}, not on its own host's and run's subject", segment=index)
    entry = ctx.hosts.get(host)
    if entry is None or stream_seq <= entry.enrolled_after:
        raise UnknownHost(f"host {host!r} is not enrolled", segment=index)
    if entry.revoked_after is not None and stream_seq > entry.revoked_after:
        raise RevokedHost(f"host {host!r} was revoked", segment=index)
    slot = ctx.runs.get(run)
    if slot is None:
        if genesis(unit_id, grants_id) != run:
            raise RunMismatch("the run is not the genesis head of its unit and grants",
                              segment=index)
        return entry, None, RunState.open(unit_id, grants_id)
    state = slot.state
    # A known run was checked against its genesis when it began: equal ids need no rehash.
    if (state.unit_id != unit_id or state.grants_id != grants_id) and genesis(
            unit_id, grants_id) != run:
        raise RunMismatch("the run is not the genesis head of its unit and grants",
                          segment=index)
    if slot.host != host:
        kernel.check_holder(slot.host, host, state.phase, kind, index, state.index + 1)
    return entry, slot, state


def position(state: RunState, index: int) -> bool:
    """Whether ``index`` is one the run already holds (``False``: it is the next one); a gap
    is ``IndexGap``."""
    if index <= state.index:
        return True
    check_next(state, index)
    return False


def decide(ctx: Admission, msg: Message) -> Accepted | Refused:
    """Decide one message by the reference path (which names every refusal); changes
    nothing."""
    env = decode(msg.subject, msg.data, msg.wire)
    if isinstance(env, Refused):
        return env
    return decide_envelope(ctx, msg, env)


def decide_envelope(ctx: Admission, msg: Message, env: Envelope) -> Accepted | Refused:
    """:func:`decide` for a message already decoded to ``env``."""
    try:
        d = _decide(ctx, msg, env)
    except FleetError as exc:
        return Refused(exc.rule, str(exc), subject_host(msg.subject), env.run, _position(exc))
    return grant_gate(ctx, msg, d)


def grant_gate(ctx: Admission, msg: Message, d: Accepted) -> Accepted | Refused:
    """``d`` if its run's grant allows it (:func:`fleet.fold.grant_events.check_step`), else
    the refusal; both fold paths end here."""
    grants = ctx.grants
    if grants is None or d.kind == kernel.CLOSED:
        return d
    slot = ctx.runs.get(d.run)
    try:
        if slot is None:
            assert d.opened is not None
            check_step(grants, d.opened[1], d.host, None, d.kind, d.step, 0, msg.at_ms,
                       d.index, ctx.require_grants)
        else:
            state = slot.state
            check_step(grants, state.grants_id, d.host, state.park, d.kind, d.step,
                       state.energy.total_uj, msg.at_ms, d.index, ctx.require_grants)
    except FleetError as exc:
        return Refused(exc.rule, str(exc), d.host, d.run, d.index)
    return d


def _position(exc: FleetError) -> int | None:
    """The segment index a refusal concerns; a hostile one (0, -1, 2**70) is no position
    (and no store could hold it)."""
    index = exc.segment if isinstance(exc, RecordError) else None
    return index if index_in_range(index) else None


def _decide(ctx: Admission, msg: Message, env: Envelope) -> Accepted:
    sealed = env.sealed
    index = sealed.index
    entry, slot, state = admit(ctx, msg.subject, env.host, env.run, id_text(env.run),
                               env.unit_id, env.grants_id, index, sealed.segment.kind,
                               msg.stream_seq)
    seal_ok = msg.seal_ok
    if position(state, index):
        _refuse_old_index(ctx, env, state, entry, seal_ok)
    if seal_ok is False:
        raise bad_seal(index)
    if seal_ok is None:
        check_seal(entry.verify_key, env.run, index, sealed.head, sealed.seal)
    st = state.step(sealed.segment, sealed.attestation)
    head = kernel.check_head(state.head, st[0], sealed.head, index)
    return Accepted(env.host, env.run, index, head, sealed.segment.kind,
                    encode_leaf(env.run, index, head), st,
                    (env.unit_id, env.grants_id) if slot is None else None)


def _refuse_old_index(ctx: Admission, env: Envelope, state: RunState, entry: HostEntry,
                      seal_ok: bool | None) -> None:
    """A message for an index the run already holds: say exactly what it is."""
    sealed = env.sealed
    index = sealed.index
    if seal_ok is None:
        check_seal(entry.verify_key, env.run, index, sealed.head, sealed.seal)
    elif not seal_ok:
        raise bad_seal(index)
    previous = env.run if index == 1 else ctx.head_at(env.run, index - 1)
    held = state.head if index == state.index else ctx.head_at(env.run, index)
    if previous is None or held is None:  # pragma: no cover - the store holds every index
        raise Fork(f"segment {index} cannot be compared with the run", segment=index)
    att = sealed.attestation
    if att is not None and att.address() != getattr(sealed.segment, "attestation", None):
        raise AttestationMismatch(
            "the attestation object does not hash to the recorded address", segment=index)
    kernel.check_head(previous, sealed.segment.canonical(), sealed.head, index)
    if sealed.head == held:
        raise Replay(f"segment {index} of this run is already folded", segment=index)
    raise Fork(f"the run already holds a different segment {index}", segment=index)
