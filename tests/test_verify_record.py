"""Whole-record verification from the wire form: valid records pass, edits are caught."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nacl.signing import SigningKey

from fleet_ledger.fleet.errors import FleetError, RecordError
from fleet_ledger.fleet.record.seal import encode_key
from fleet_ledger.fleet.record.verify import verify_record
from fleet_ledger.fleet.record.verify_fast import fast_check
from fleet_ledger.fleet.record.wire import decode_record, encode_record

from recgen import records


def record_bytes(builder) -> bytes:
    return encode_record(builder.to_record())


@settings(max_examples=150, deadline=None)
@given(records())
def test_random_valid_records_verify(builder):
    """Any record built through the rules verifies offline to the builder's own state."""
    decoded = decode_record(record_bytes(builder))
    assert fast_check(decoded, builder.run, builder._key.verify_key) is not None
    report = verify_record(decoded)
    st_ = builder.state
    assert report.segments == st_.index and report.phase == st_.phase
    assert report.energy.total_uj == st_.energy.total_uj
    assert report.wait_proof == st_.wait_proof() and report.sealed


def segment_spans(data: bytes) -> list[tuple[int, int]]:
    """Byte spans of each segment object in an indent-2 record file."""
    starts = []
    pos = data.index(b'"segments": [')
    while True:
        pos = data.find(b"\n    {\n", pos + 1)
        if pos < 0:
            break
        starts.append(pos + 1)
    ends = [*starts[1:], data.index(b"\n  ]", starts[-1])]  # fields after the list follow
    return list(zip(starts, ends, strict=True))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records(max_segments=6), st.data())
def test_any_single_byte_change_is_caught(builder, data):
    """Each one-byte edit either fails verification (naming the edited segment) or leaves
    the decoded record identical (e.g. whitespace)."""
    original = record_bytes(builder)
    pos = data.draw(st.integers(0, len(original) - 1))
    new = data.draw(st.integers(0, 255).filter(lambda b: b != original[pos]))
    mutated = original[:pos] + bytes([new]) + original[pos + 1:]
    try:
        decoded = decode_record(mutated)
        verify_record(decoded)
    except FleetError as exc:
        for k, (start, end) in enumerate(segment_spans(original), start=1):
            if start <= pos < end and isinstance(exc, RecordError) and exc.segment is not None:
                assert exc.segment == k
        return
    assert decoded == decode_record(original), f"edit at byte {pos} went unnoticed"


def test_modified_recorded_snapshot_fails_and_names_its_segment():
    """Editing the snapshot of a suspended segment fails at that segment (C6)."""
    from fleet_ledger.fleet.address import digest
    from fleet_ledger.fleet.record.builder import RecordBuilder
    from fleet_ledger.fleet.record.segment import make_snapshot

    b = RecordBuilder(SigningKey(bytes(32)), digest(b"u"), digest(b"g"))
    b.execute(uj=1, provenance="measured", meter="m", journal_root=digest(b"j"))
    snap = make_snapshot(transcript=digest(b"t"))
    b.suspend(snap, digest(b"m"))
    b.resume(snap, digest(b"m"), 3, "estimated", "s")
    doc = json.loads(record_bytes(b))
    doc["segments"][1]["snapshot"]["transcript"] = "b3:" + "A" * 43
    with pytest.raises(RecordError) as info:
        verify_record(decode_record(json.dumps(doc).encode()))
    assert info.value.segment == 2 and info.value.rule == "HeadMismatch"


def test_pinned_host_key_must_match_the_seals():
    """A record verified against another pinned key is refused; its own key passes."""
    from fleet_ledger.fleet.address import digest
    from fleet_ledger.fleet.record.builder import RecordBuilder

    b = RecordBuilder(SigningKey(bytes(32)), digest(b"u"), digest(b"g"))
    b.execute(uj=1, provenance="measured", meter="m", journal_root=digest(b"j"))
    rec = b.to_record()
    verify_record(rec, host_key=b.host_key)
    other = encode_key(bytes(SigningKey(bytes([5]) * 32).verify_key))
    with pytest.raises(RecordError):
        verify_record(rec, host_key=other)
    rec.host_key = None
    with pytest.raises(RecordError) as info:
        verify_record(rec, host_key=other)
    assert info.value.rule == "BadSeal" and info.value.segment == 1


def test_seal_moved_to_another_index_or_run_fails():
    """A seal valid for segment 1 does not verify as segment 2's seal, nor in another run."""
    from fleet_ledger.fleet.address import digest
    from fleet_ledger.fleet.record.builder import RecordBuilder

    key = SigningKey(bytes(32))
    b = RecordBuilder(key, digest(b"u"), digest(b"g"))
    b.execute(uj=1, provenance="measured", meter="m", journal_root=digest(b"j"))
    b.execute(uj=2, provenance="measured", meter="m", journal_root=digest(b"k"))
    doc = json.loads(record_bytes(b))
    doc["segments"][1]["seal"] = doc["segments"][0]["seal"]
    with pytest.raises(RecordError) as info:
        verify_record(decode_record(json.dumps(doc).encode()))
    assert (info.value.rule, info.value.segment) == ("BadSeal", 2)
    assert base64.b64decode(doc["segments"][0]["seal"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records(max_segments=6), st.data())
def test_fast_path_agrees_with_reference_path(builder, data):
    """The fast verifier accepts exactly the records the reference path accepts, with the
    same report, on valid and on one-byte-mutated records."""
    original = record_bytes(builder)
    candidates = [original]
    pos = data.draw(st.integers(0, len(original) - 1))
    new = data.draw(st.integers(0, 255).filter(lambda b: b != original[pos]))
    candidates.append(original[:pos] + bytes([new]) + original[pos + 1:])
    for blob in candidates:
        try:
            rec = decode_record(blob)
        except FleetError:
            continue
        outcomes = []
        for fast in (True, False):
            try:
                outcomes.append(verify_record(rec, fast=fast))
            except FleetError as exc:
                outcomes.append((exc.rule, getattr(exc, "segment", None)))
        assert outcomes[0] == outcomes[1]
