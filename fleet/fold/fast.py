"""The fold's wire decoder: one message decided from its wire form, without core objects.

Most messages a ledger folds are the next segment of a run it holds, from an enrolled host,
sealed and valid. :func:`fast_decide` decides exactly those from the wire structs: the same
admission (:func:`fleet.fold.reference.admit`, :func:`fleet.fold.reference.position`) and
the same kernel functions (through :func:`fleet.record.verify_fast.step`) as the reference path, fed
plain values straight from the decoded fields. Anything else (a refusal of any kind, a replay, an
undecodable field) returns ``None`` and the message is decided by the reference path,
:func:`fleet.fold.reference.decide`, which names the rule in the order the spec gives
(:func:`decide_message` is the two together; :func:`fold_message` adds the batch's take).
Nothing is changed by a decision either way. Tests hold the two paths to the same logs and
refusals on genuine and mutated streams.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fleet_ledger.fleet.address import parse_address, parse_addresses
from fleet_ledger.fleet.errors import FleetError
from fleet_ledger.fleet.fold.reference import (
    Accepted,
    Admission,
    HostEntry,
    Message,
    Refused,
    admit,
    decide,
    grant_gate,
    position,
)
from fleet_ledger.fleet.log.leaf import encode_leaf
from fleet_ledger.fleet.record.kernel import check_head
from fleet_ledger.fleet.record.kinds import CLOSED, index_in_range
from fleet_ledger.fleet.record.seal import seal_message
from fleet_ledger.fleet.record.verify_fast import NotFast, segment_addresses, step
from fleet_ledger.fleet.record.wire import (
    ENVELOPE_VERSION,
    WIRE_KIND,
    EnvelopeWire,
    identity,
    seal_bytes,
)

__all__ = ["batch_addresses", "decide_message", "fast_decide", "fold_message",
           "wire_seal_item"]


def batch_addresses(wires: Sequence[EnvelopeWire | None]) -> list[list[bytes] | None]:
    """Each message's addresses parsed (:func:`segment_addresses` order, the stated head
    first), ``None`` for a message that did not decode or holds one that does not parse.

    One strict parse for the whole batch (:func:`fleet.address.parse_addresses`, a few C
    calls) instead of one per address; only a batch holding a malformed address is parsed
    again message by message, to find which."""
    present = [w for w in wires if w is not None]
    ends: list[int] = []
    texts = segment_addresses([w.segment for w in present], ends)
    raws = parse_addresses(texts)
    parsed: list[list[bytes] | None] = []
    start = 0
    for end in ends:
        parsed.append(raws[start:end] if raws is not None else parse_addresses(texts[start:end]))
        start = end
    found = iter(parsed)
    return [None if w is None else next(found) for w in wires]


def wire_seal_item(
    wire: EnvelopeWire, hosts: Mapping[str, HostEntry], head: bytes | None = None
) -> tuple[bytes, bytes, bytes] | None:
    """(host public key, sealed message, seal) from the wire form, the check
    :func:`fleet.fold.reference.seal_valid` makes for the decoded message; ``None`` for an
    unknown host or a field that does not decode. ``head``: the stated head, if already parsed."""
    entry = hosts.get(wire.host)
    if entry is None:
        return None
    seg = wire.segment
    index = seg.index
    if not index_in_range(index):
        return None
    try:
        return (entry.public_key,
                seal_message(identity(wire.run), index,
                             parse_address(seg.head) if head is None else head),
                seal_bytes(seg.seal))
    except FleetError:
        return None


def fold_message(ctx: Admission, msg: Message, fast: bool = True) -> Accepted | Refused:
    """Decide ``msg`` (:func:`decide_message`; ``fast=False``: by the reference path only)
    and take an accepted step into the batch's runs (``ctx.runs``). A segment that opens a
    run passes the item gate last (its refusal is the segment's), and once a job is folded
    so does a segment that closes one (:class:`fleet.fold.reference.ItemGate`)."""
    d = decide_message(ctx, msg) if fast else decide(ctx, msg)
    if type(d) is Accepted:
        jobs = ctx.jobs
        # Only an open or a close changes an item; a close, only once a job was folded. An
        # open is always asked: an item run before its job's open event is UnknownJob.
        if jobs is None or (d.opened is None and (d.kind != CLOSED or not jobs.live)):
            ctx.runs.take(d)
            return d
        gated = jobs.gate(d, None if d.opened is not None else ctx.runs.get(d.run))
        if type(gated) is not Accepted:
            return gated
        ctx.runs.take(d)
        jobs.took(d, msg.stream_seq, ctx.runs.get)
    return d


def decide_message(ctx: Admission, msg: Message) -> Accepted | Refused:
    """One message decided as :func:`fleet.fold.reference.decide` decides it: by the fast path where
    it vouches for the message, otherwise by the reference path, which names the rule."""
    if msg.wire is not None:
        accepted = fast_decide(ctx, msg)
        if accepted is not None:
            return grant_gate(ctx, msg, accepted)
    return decide(ctx, msg)


def fast_decide(ctx: Admission, msg: Message) -> Accepted | None:
    """The message accepted, or ``None``: not the happy path (nothing is changed either
    way), decide it by the reference path."""
    wire = msg.wire
    if msg.seal_ok is not True or wire is None or wire.v != ENVELOPE_VERSION:
        return None
    try:
        return _decide(ctx, msg, wire)
    except (NotFast, FleetError):
        return None


def _decide(ctx: Admission, msg: Message, wire: EnvelopeWire) -> Accepted | None:
    host = wire.host
    # ``identity`` parses strictly, so the run's text is its canonical form here.
    run = identity(wire.run)
    unit, grants = identity(wire.unit_id), identity(wire.grants_id)
    seg = wire.segment
    index = seg.index
    _entry, slot, state = admit(ctx, msg.subject, host, run, wire.run, unit, grants, index,
                                WIRE_KIND[type(seg)], msg.stream_seq)
    if position(state, index):
        return None  # a replay or fork: the reference path compares it with the run
    addresses = msg.addresses
    if addresses is None:
        # A handful of addresses: one strict parse each is cheaper than the batched parse.
        addresses = [parse_address(text) for text in segment_addresses([seg])]
    given = iter(addresses)
    stated = next(given)
    st = step(seg, given.__next__, state, index)
    head = check_head(state.head, st[0], stated, index)
    return Accepted(host, run, index, head, WIRE_KIND[type(seg)],
                    encode_leaf(run, index, head), st, (unit, grants) if slot is None else None,
                    seg.head)
