"""The wire decoder into :mod:`fleet.record.kernel`: record verification without core objects.

:func:`fast_check` verifies a record straight from its decoded wire structs: each segment's
plain values (addresses parsed in one batch, numbers and texts as decoded) go to the same
kernel functions the object API calls, so a valid record costs a few hashes and no object
churn, and every rule binds it exactly as it binds the reference path. It does not explain
failures: on the first refusal it returns ``None`` and the caller re-runs the reference
path (:func:`fleet.record.verify.verify_record` with ``fast=False``), which names the segment and
the rule in the order the spec gives. Tests hold the two to the same verdicts on every
vector and on random and mutated records.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from blake3 import blake3
from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

from fleet_ledger.fleet.address import parse_address, parse_addresses
from fleet_ledger.fleet.errors import FleetError
from fleet_ledger.fleet.record import kernel
from fleet_ledger.fleet.record.kernel import Step
from fleet_ledger.fleet.record.record import RunState
from fleet_ledger.fleet.record.record_file import SINGLE, Sealers
from fleet_ledger.fleet.record.seal import seal_message
from fleet_ledger.fleet.record.wire import (
    WIRE_KIND,
    ClaimedWire,
    ClosedWire,
    EvictedWire,
    ExecutedWire,
    RecordWire,
    ResumedWire,
    SegmentWire,
    SnapshotWire,
    SuspendedWire,
    seal_bytes,
)

__all__ = ["NotFast", "fast_check", "segment_addresses", "step"]


class NotFast(Exception):
    """The fast path does not vouch for this input: the reference path decides."""


def segment_addresses(segments: Sequence[SegmentWire], ends: list[int] | None = None
                      ) -> list[str]:
    """Every address text of the segments, in the order :func:`step` consumes them (each
    segment's stated head first); ``ends`` gets the end offset of each segment's texts."""
    out: list[str] = []
    add = out.append
    mark = None if ends is None else ends.append
    w: Any  # each kind's own fields: the structs are made from the table (wire.py)
    for w in segments:
        add(w.head)
        if type(w) is ExecutedWire:
            add(w.attestation)
            add(w.attestation_object.journal_root)
        elif type(w) is SuspendedWire or type(w) is ResumedWire or type(w) is ClaimedWire:
            if type(w) is ClaimedWire:
                add(w.slot)
            snap = w.snapshot
            for text in (snap.fs_root, snap.mem_image, snap.transcript):
                if text is not None:
                    add(text)
            add(w.manifest)
        elif type(w) is EvictedWire:
            add(w.slot)
        if mark is not None:
            mark(len(out))
    return out


def _snapshot(s: SnapshotWire, take: Callable[[], bytes]) -> bytes:
    fs = None if s.fs_root is None else take()
    mem = None if s.mem_image is None else take()
    transcript = None if s.transcript is None else take()
    return kernel.snapshot_bytes(fs, mem, transcript)


def step(wire: Any, take: Callable[[], bytes], run: kernel.Position, index: int
         ) -> Step:
    """The kernel's step for one wire segment at ``index``, ``take`` yielding its addresses
    after the stated head (in :func:`segment_addresses` order). Raises the kernel's named
    refusal (the reference path then says which rule comes first)."""
    if type(wire) is ExecutedWire:
        claimed = take()
        obj = wire.attestation_object
        r = obj.receipt
        attested = blake3(kernel.attestation_bytes(r.uj, r.provenance, r.meter, take(),
                                                   obj.outcome)).digest()
        calls = wire.calls
        return kernel.executed_step(run, index, kernel.executed_bytes(claimed, calls),
                                    claimed, attested, r.uj, r.provenance, calls)
    if type(wire) is SuspendedWire:
        snapshot = _snapshot(wire.snapshot, take)
        manifest = take()
        return kernel.suspended_step(run, index, kernel.suspended_bytes(snapshot, manifest),
                                     snapshot, manifest)
    if type(wire) is ResumedWire:
        snapshot = _snapshot(wire.snapshot, take)
        manifest = take()
        idle_uj, provenance = wire.idle_uj, wire.idle_provenance
        body = kernel.resumed_bytes(snapshot, manifest, idle_uj, provenance, wire.idle_meter)
        return kernel.resumed_step(run, index, body, snapshot, manifest, idle_uj, provenance)
    if type(wire) is ClosedWire:
        body = kernel.closed_bytes(wire.idle_uj, wire.idle_provenance, wire.idle_meter)
        return kernel.closed_step(run, index, body, wire.idle_uj, wire.idle_provenance)
    if type(wire) is ClaimedWire or type(wire) is EvictedWire:
        slot = take()
        warm, warm_p = wire.warm_uj, wire.warm_provenance
        idle, idle_p = wire.idle_uj, wire.idle_provenance
        if type(wire) is EvictedWire:
            body = kernel.evicted_bytes(slot, warm, warm_p, wire.warm_meter, idle, idle_p,
                                        wire.idle_meter)
            return kernel.evicted_step(run, index, body, warm, warm_p, idle, idle_p)
        snapshot = _snapshot(wire.snapshot, take)
        manifest = take()
        body = kernel.claimed_bytes(slot, warm, warm_p, wire.warm_meter, idle, idle_p,
                                    wire.idle_meter, snapshot, manifest)
        return kernel.claimed_step(run, index, body, manifest, warm, warm_p, idle, idle_p)
    raise NotFast  # pragma: no cover - the tagged union has no other member


def fast_check(record: RecordWire, run: bytes, verify_key: VerifyKey | None,
               unit_id: bytes | None = None, grants_id: bytes | None = None,
               plan: Sealers | None = None) -> RunState | None:
    """The state after a valid record, else ``None`` (the reference path names why);
    ``unit_id`` and ``grants_id`` as parsed already (parsed from the record otherwise);
    ``plan``: who sealed each segment with which key (:func:`fleet.record.record_file.sealers`;
    default: every segment under ``verify_key``)."""
    try:
        if unit_id is None or grants_id is None:
            unit_id, grants_id = parse_address(record.unit_id), parse_address(record.grants_id)
        if plan is None:
            plan = [SINGLE] * len(record.segments), {SINGLE: verify_key}
        return _walk(record, run, plan, unit_id, grants_id)
    except (NotFast, FleetError, BadSignatureError):
        return None


def _walk(record: RecordWire, run: bytes, plan: Sealers, unit_id: bytes,
          grants_id: bytes) -> RunState:
    state = RunState(unit_id, grants_id, run, run)
    names, keys = plan
    verifiers = {name: None if key is None else key.verify for name, key in keys.items()}
    moves = len(keys) > 1  # with one host, the holder never changes
    holder = names[0] if names else SINGLE
    head = run
    raws = parse_addresses(segment_addresses(record.segments))
    if raws is None:
        raise NotFast
    take = iter(raws).__next__
    apply, check_head, next_holder = kernel.apply, kernel.check_head, kernel.next_holder
    for index, wire in enumerate(record.segments, start=1):
        stated = take()
        if wire.index != index:
            raise NotFast
        host = names[index - 1]
        if moves:
            holder = next_holder(holder, host, state.phase, WIRE_KIND[type(wire)], index, index)
        st = step(wire, take, state, index)
        verify = verifiers[host]
        if verify is not None:
            verify(seal_message(run, index, stated), seal_bytes(wire.seal))
        head = check_head(head, st[0], stated, index)
        apply(state, index, head, st)
    return state
