"""The happy path of record verification, without building core objects per segment.

:func:`fast_check` recomputes exactly what :func:`fleet.verify.verify_record` checks, straight
from the decoded wire structs: canonical bytes are assembled from the fields and compared
as bytes (snapshot identity included), so a valid record costs a few hashes and no object
churn. It does not explain failures: on the first check that does not hold it returns
``None`` and the caller re-runs the reference path, which names the segment and the rule.
Tests hold the two paths to the same verdicts on random and mutated records.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from blake3 import blake3
from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

from fleet.address import parse_addresses
from fleet.attestation import DOMAIN as ATTESTATION_DOMAIN
from fleet.errors import RecordError
from fleet.phases import FRESH, TRANSITIONS
from fleet.record import Energy
from fleet.seal import seal_message
from fleet.segment import (
    CLOSED,
    EXECUTED,
    MAX_U64,
    PROVENANCES,
    RESUMED,
    SUSPENDED,
    encode_ids,
    encode_text,
)
from fleet.wait_proof import WaitTracker
from fleet.wire import (
    CallsWire,
    ClosedWire,
    ExecutedWire,
    RecordWire,
    ResumedWire,
    SnapshotWire,
    SuspendedWire,
    seal_bytes,
)

_RECEIPT = struct.Struct(">QB")


class NotFast(Exception):
    """A check the fast path does not vouch for: the reference path decides."""


def segment_addresses(segments: list, ends: list[int] | None = None  # type: ignore[type-arg]
                      ) -> list[str]:
    """Every address text of the segments, in the order :func:`step` consumes them (each
    segment's stated head first); ``ends`` gets the end offset of each segment's texts."""
    out: list[str] = []
    add = out.append
    mark = None if ends is None else ends.append
    for w in segments:
        add(w.head)
        t = type(w)
        if t is ExecutedWire:
            add(w.attestation)
            add(w.attestation_object.journal_root)
        elif t is SuspendedWire or t is ResumedWire:
            snap = w.snapshot
            for text in (snap.fs_root, snap.mem_image, snap.transcript):
                if text is not None:
                    add(text)
            add(w.manifest)
        if mark is not None:
            mark(len(out))
    return out


def _snapshot_bytes(s: SnapshotWire, take: Callable[[], bytes]) -> bytes:
    if s.transcript is not None:
        if s.fs_root is not None or s.mem_image is not None:
            raise NotFast
        return take() + b"\x02"
    if s.fs_root is None:
        raise NotFast
    if s.mem_image is None:
        return take() + b"\x00"
    return take() + b"\x01" + take()


def _u64(value: int) -> int:
    if type(value) is not int or not 0 <= value <= MAX_U64:
        raise NotFast
    return value


def fast_check(
    record: RecordWire, run: bytes, verify_key: VerifyKey | None
) -> tuple[int, bytes, str, Energy, WaitTracker] | None:
    """(segments, head, phase, energy, wait tracker) of a valid record, else ``None``."""
    try:
        return _walk(record, run, verify_key)
    except (NotFast, RecordError, ValueError, KeyError, BadSignatureError, TypeError):
        return None


# What one segment does to a run, worked out before anything is changed (a plain tuple:
# one is built per segment on the verifier's and the fold's hot path):
#   body      its canonical bytes (the head is BLAKE3(previous head || body))
#   phase     the phase after it
#   parked    the park held after it: snapshot canonical bytes || manifest
#   receipt   (provenance, uj) of an executed interval
#   idle      (provenance, uj) of a resume's idle energy
#   executed  whether it is an executed interval
#   calls     an executed interval's call account (None: unaccounted)
Step = tuple[bytes, str, bytes | None, tuple[str, int] | None, tuple[str, int] | None, bool,
             CallsWire | None]


def step(wire: object, take: Callable[[], bytes], phase: str, parked: bytes | None) -> Step:
    """One segment's effect from its wire form, ``take`` yielding its addresses after the
    stated head (in :func:`segment_addresses` order). Raises when the fast path cannot
    vouch for it (the reference path then decides)."""
    kind = type(wire)
    if kind is ExecutedWire:
        claimed = take()
        obj = wire.attestation_object  # type: ignore[attr-defined]
        r = obj.receipt
        att = blake3(
            ATTESTATION_DOMAIN + _RECEIPT.pack(_u64(r.uj), PROVENANCES[r.provenance])
            + encode_text(r.meter, "meter") + take() + encode_text(obj.outcome, "outcome")
        ).digest()
        if att != claimed:
            raise NotFast
        body = b"\x01" + att
        calls = wire.calls  # type: ignore[attr-defined]
        if calls is not None:
            body += (b"\x01" + encode_ids(calls.dispatched, "dispatched")
                     + encode_ids(calls.resolved, "resolved"))
        return (body, TRANSITIONS[(phase, EXECUTED)], parked, (r.provenance, r.uj), None,
                    True, calls)
    if kind is SuspendedWire:
        park = _snapshot_bytes(wire.snapshot, take) + take()  # type: ignore[attr-defined]
        return (b"\x02" + park, TRANSITIONS[(phase, SUSPENDED)], park, None, None, False,
                    None)
    if kind is ResumedWire:
        park = _snapshot_bytes(wire.snapshot, take) + take()  # type: ignore[attr-defined]
        idle_uj, provenance = wire.idle_uj, wire.idle_provenance  # type: ignore[attr-defined]
        if park != parked or _u64(idle_uj) == 0:
            raise NotFast
        body = (b"\x03" + park + _RECEIPT.pack(idle_uj, PROVENANCES[provenance])
                + encode_text(wire.idle_meter, "idle_meter"))  # type: ignore[attr-defined]
        return (body, TRANSITIONS[(phase, RESUMED)], None, None, (provenance, idle_uj),
                    False, None)
    if kind is ClosedWire:
        return (b"\x04", TRANSITIONS[(phase, CLOSED)], parked, None, None, False, None)
    raise NotFast  # pragma: no cover - the tagged union has no other member


def apply_step(st: Step, index: int, energy: Energy, wait: WaitTracker) -> None:
    """Count a step's energy and calls, as :meth:`fleet.record.RunState.apply` does."""
    _body, _phase, _parked, receipt, idle, executed, calls = st
    if receipt is not None:
        energy.receipts[receipt[0]] += receipt[1]
    elif idle is not None:
        energy.idle[idle[0]] += idle[1]
    if executed:
        wait.add(index, calls)  # type: ignore[arg-type]  # the same two sequences


def _walk(
    record: RecordWire, run: bytes, verify_key: VerifyKey | None
) -> tuple[int, bytes, str, Energy, WaitTracker]:
    head = run
    phase = FRESH
    parked: bytes | None = None
    energy = Energy()
    wait = WaitTracker()
    verify = None if verify_key is None else verify_key.verify
    raws = parse_addresses(segment_addresses(record.segments))
    if raws is None:
        raise NotFast
    take = iter(raws).__next__
    index = 0
    for wire in record.segments:
        stated = take()
        index += 1
        if wire.index != index:
            raise NotFast
        st = step(wire, take, phase, parked)
        if verify is not None:
            verify(seal_message(run, index, stated), seal_bytes(wire.seal))
        head = blake3(head + st[0]).digest()
        if head != stated:
            raise NotFast
        apply_step(st, index, energy, wait)
        phase, parked = st[1], st[2]
    return index, head, phase, energy, wait
