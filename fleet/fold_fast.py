"""The fold's happy path: one message decided from its wire form, without core objects.

Most messages a ledger folds are the next segment of a run it holds, from an enrolled host,
sealed and valid. :func:`fast_decide` decides exactly those, with the byte-level steps of
:mod:`fleet.verify_fast` (canonical bytes assembled from the wire fields, a few hashes) and
changes the run's state as :meth:`fleet.record.RunState.apply` would. Anything else (a
refusal of any kind, a replay, a gap, an undecodable field) returns ``None`` before any
state is touched, and the message is decided by the reference path,
:func:`fleet.fold.decide_envelope`, which names the rule (:func:`decide_message` is the
two together, the rule a ledger folds each message by). Tests hold the two paths to the
same logs and refusals on genuine and mutated streams.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence

from blake3 import blake3

from fleet.address import parse_address, parse_addresses
from fleet.errors import FleetError
from fleet.fold import Accepted, HostEntry, Refused, RunSlot, decide_envelope, decode
from fleet.leaf import encode_leaf
from fleet.record import RunState, genesis
from fleet.seal import seal_message
from fleet.segment import (
    CLOSED,
    EXECUTED,
    RESUMED,
    SUSPENDED,
)
from fleet.subjects import segment_subject
from fleet.verify_fast import NotFast, apply_step, segment_addresses, step
from fleet.wire import (
    ENVELOPE_VERSION,
    ClosedWire,
    EnvelopeWire,
    ExecutedWire,
    ResumedWire,
    SuspendedWire,
    identity,
    seal_bytes,
    snapshot_from_wire,
)

# What a field the fast path cannot vouch for raises (the reference path then decides).
_CANNOT = (NotFast, FleetError, ValueError, KeyError, TypeError, struct.error, OverflowError)


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
    :func:`fleet.fold.seal_valid` makes for the decoded message; ``None`` for an unknown host
    or a field that does not decode. ``head``: the stated head, if already parsed."""
    entry = hosts.get(wire.host)
    if entry is None:
        return None
    seg = wire.segment
    try:
        return (entry.public_key,
                seal_message(identity(wire.run), seg.index,
                             parse_address(seg.head) if head is None else head),
                seal_bytes(seg.seal))
    except _CANNOT:
        return None


def decide_message(
    subject: str,
    data: bytes,
    wire: EnvelopeWire | None,
    stream_seq: int,
    hosts: Mapping[str, HostEntry],
    get_run: Callable[[bytes], RunSlot | None],
    head_at: Callable[[bytes, int], bytes | None],
    seal_ok: bool | None,
    addresses: list[bytes] | None = None,
    fast: bool = True,
) -> Accepted | Refused:
    """One message decided as :func:`fleet.fold.decide` decides it: by the fast path where
    it vouches for the message (``fast``), otherwise by the reference path, which names
    the rule. ``wire``: the message's :func:`fleet.wire.envelope_wire` (``None``: it did
    not decode); ``seal_ok`` and ``addresses`` as the batch's pre-checks found them."""
    if wire is not None and fast:
        accepted = fast_decide(subject, wire, stream_seq, hosts, get_run, seal_ok, addresses)
        if accepted is not None:
            return accepted
    env = decode(subject, data, wire)
    if isinstance(env, Refused):
        return env
    return decide_envelope(subject, env, stream_seq, hosts, get_run, head_at, seal_ok)


def fast_decide(
    subject: str,
    wire: EnvelopeWire,
    stream_seq: int,
    hosts: Mapping[str, HostEntry],
    get_run: Callable[[bytes], RunSlot | None],
    seal_ok: bool | None,
    addresses: list[bytes] | None = None,
) -> Accepted | None:
    """The message accepted (its run's state advanced), or ``None``: not the happy path,
    nothing changed, decide it by the reference path. ``addresses``: the segment's
    addresses as already parsed (:func:`batch_addresses`); they are parsed here otherwise."""
    if seal_ok is not True or wire.v != ENVELOPE_VERSION:
        return None
    try:
        return _decide(subject, wire, stream_seq, hosts, get_run, addresses)
    except _CANNOT:
        return None


def _decide(
    subject: str,
    wire: EnvelopeWire,
    stream_seq: int,
    hosts: Mapping[str, HostEntry],
    get_run: Callable[[bytes], RunSlot | None],
    addresses: list[bytes] | None,
) -> Accepted | None:
    host = wire.host
    # ``identity`` parses strictly, so the run's text is its canonical form here.
    if subject != segment_subject(host, wire.run):
        return None
    entry = hosts.get(host)
    if entry is None or stream_seq <= entry.enrolled_after or (
            entry.revoked_after is not None and stream_seq > entry.revoked_after):
        return None
    run = identity(wire.run)
    unit, grants = identity(wire.unit_id), identity(wire.grants_id)
    seg = wire.segment
    slot = get_run(run)
    created = slot is None
    if slot is None:
        if seg.index != 1 or genesis(unit, grants) != run:
            return None
        state = RunState.open(unit, grants)
    else:
        state = slot.state
        if slot.host != host or state.unit_id != unit or state.grants_id != grants:
            return None
        if seg.index != state.index + 1:
            return None
    if addresses is None:
        # A handful of addresses: one strict parse each is cheaper than the batched parse.
        addresses = [parse_address(text) for text in segment_addresses([seg])]
    given = iter(addresses)
    stated = next(given)
    take = given.__next__
    held = None if state.parked is None else state.parked.canonical() + state.parked_manifest
    st = step(seg, take, state.phase, held)
    head = blake3(state.head + st[0]).digest()
    if head != stated:
        return None
    # Accepted: change the state as RunState.apply does for this segment (the park's
    # objects built first, so nothing that can raise runs once the state has changed).
    if type(seg) is SuspendedWire:
        # Its addresses are parsed already: the head, the snapshot's, then the manifest.
        snapshot_raws = iter(addresses[1:-1])
        parked = (snapshot_from_wire(seg.snapshot, lambda _text: next(snapshot_raws)),
                  addresses[-1])
    elif type(seg) is ResumedWire:
        parked = None, None
    else:
        parked = state.parked, state.parked_manifest
    if slot is None:
        slot = RunSlot(host, state)
    index = state.index + 1
    apply_step(st, index, state.energy, state.wait)
    state.parked, state.parked_manifest = parked
    state.index = index
    state.head = head
    state.phase = st[1]
    return Accepted(host, run, index, head, _KIND[type(seg)], encode_leaf(run, index, head),
                    slot, created, seg.head)


_KIND = {ExecutedWire: EXECUTED, SuspendedWire: SUSPENDED, ResumedWire: RESUMED,
         ClosedWire: CLOSED}
