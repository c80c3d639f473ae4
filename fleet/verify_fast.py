"""The happy path of record verification, without building core objects per segment.

:func:`fast_check` recomputes exactly what :func:`fleet.verify.verify_record` checks, straight
from the decoded wire structs: canonical bytes are assembled from the fields and compared
as bytes (snapshot identity included), so a valid record costs a few hashes and no object
churn. It does not explain failures: on the first check that does not hold it returns
``None`` and the caller re-runs the reference path, which names the segment and the rule.
Tests hold the two paths to the same verdicts on random and mutated records.
"""

from __future__ import annotations

import binascii
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
from fleet.seal import SEAL_DOMAIN
from fleet.segment import MAX_U64, PROVENANCES, encode_ids, encode_text
from fleet.wait_proof import WaitTracker
from fleet.wire import (
    ClosedWire,
    ExecutedWire,
    RecordWire,
    ResumedWire,
    SnapshotWire,
    SuspendedWire,
)

_RECEIPT = struct.Struct(">QB")
_INDEX = struct.Struct(">Q")


class _Invalid(Exception):
    pass


def _addresses(segments: list) -> list[str]:  # type: ignore[type-arg]
    """Every address text of the segments, in the order :func:`_walk` consumes them."""
    out: list[str] = []
    add = out.append
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
    return out


def _snapshot_bytes(s: SnapshotWire, take: Callable[[], bytes]) -> bytes:
    if s.transcript is not None:
        if s.fs_root is not None or s.mem_image is not None:
            raise _Invalid
        return take() + b"\x02"
    if s.fs_root is None:
        raise _Invalid
    if s.mem_image is None:
        return take() + b"\x00"
    return take() + b"\x01" + take()


def _u64(value: int) -> int:
    if type(value) is not int or not 0 <= value <= MAX_U64:
        raise _Invalid
    return value


_TEXTS: dict[str, bytes] = {}


def _text(value: str) -> bytes:
    """``text()`` bytes of a meter or outcome; they repeat across segments, so memoised."""
    raw = _TEXTS.get(value)
    if raw is None:
        raw = encode_text(value, "text")
        if len(_TEXTS) < 4096:
            _TEXTS[value] = raw
    return raw


def _seal(text: str) -> bytes:
    raw = binascii.a2b_base64(text, strict_mode=True)
    if len(raw) != 64 or binascii.b2a_base64(raw, newline=False).decode() != text:
        raise _Invalid
    return raw


def fast_check(
    record: RecordWire, run: bytes, verify_key: VerifyKey | None
) -> tuple[int, bytes, str, Energy, WaitTracker] | None:
    """(segments, head, phase, energy, wait tracker) of a valid record, else ``None``."""
    try:
        return _walk(record, run, verify_key)
    except (_Invalid, RecordError, ValueError, KeyError, BadSignatureError, TypeError):
        return None


def _walk(
    record: RecordWire, run: bytes, verify_key: VerifyKey | None
) -> tuple[int, bytes, str, Energy, WaitTracker]:
    head = run
    phase = FRESH
    parked: bytes | None = None
    energy = Energy()
    receipts, idle = energy.receipts, energy.idle
    wait = WaitTracker()
    transitions = TRANSITIONS
    verify = None if verify_key is None else verify_key.verify
    raws = parse_addresses(_addresses(record.segments))
    if raws is None:
        raise _Invalid
    take = iter(raws).__next__
    index = 0
    for wire in record.segments:
        stated = take()
        index += 1
        if wire.index != index:
            raise _Invalid
        kind = type(wire)
        if kind is ExecutedWire:
            claimed = take()
            obj = wire.attestation_object
            r = obj.receipt
            att = blake3(
                ATTESTATION_DOMAIN + _RECEIPT.pack(_u64(r.uj), PROVENANCES[r.provenance])
                + _text(r.meter) + take() + _text(obj.outcome)
            ).digest()
            if att != claimed:
                raise _Invalid
            body = b"\x01" + att
            calls = wire.calls
            if calls is not None:
                body += (b"\x01" + encode_ids(calls.dispatched, "dispatched")
                         + encode_ids(calls.resolved, "resolved"))
                wait.add(index, calls)  # type: ignore[arg-type]  # same two sequences
            else:
                wait.add(index, None)
            receipts[r.provenance] += r.uj
            name = "executed"
        elif kind is SuspendedWire:
            park = _snapshot_bytes(wire.snapshot, take)
            park += take()
            body = b"\x02" + park
            parked = park
            name = "suspended"
        elif kind is ResumedWire:
            park = _snapshot_bytes(wire.snapshot, take)
            park += take()
            if park != parked or _u64(wire.idle_uj) == 0:
                raise _Invalid
            body = (b"\x03" + park + _RECEIPT.pack(wire.idle_uj,
                                                   PROVENANCES[wire.idle_provenance])
                    + _text(wire.idle_meter))
            idle[wire.idle_provenance] += wire.idle_uj
            parked = None
            name = "resumed"
        elif kind is ClosedWire:
            body = b"\x04"
            name = "closed"
        else:  # pragma: no cover - the tagged union has no other member
            raise _Invalid
        phase = transitions[(phase, name)]
        if verify is not None:
            verify(SEAL_DOMAIN + run + _INDEX.pack(index) + stated, _seal(wire.seal))
        head = blake3(head + body).digest()
        if head != stated:
            raise _Invalid
    return index, head, phase, energy, wait
