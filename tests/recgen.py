"""Hypothesis strategies for valid sealed run records (shared by several test modules)."""

from __future__ import annotations

from hypothesis import strategies as st
from nacl.signing import SigningKey

from fleet_ledger.fleet.address import digest
from fleet_ledger.fleet.record.builder import RecordBuilder
from fleet_ledger.fleet.record.segment import CallAccount, make_snapshot

KEY = SigningKey(bytes([1]) * 32)
MANIFEST = digest(b"manifest")

call_ids = st.lists(st.text("abcdef0123", min_size=1, max_size=6), max_size=3, unique=True)


@st.composite
def records(draw: st.DrawFn, max_segments: int = 12) -> RecordBuilder:
    """A valid record: random executes (some accounted), parks of both forms, maybe close."""
    unit = digest(draw(st.binary(min_size=1, max_size=8)))
    b = RecordBuilder(KEY, unit, digest(b"grants"))
    n = draw(st.integers(1, max_segments))
    park = None
    for i in range(n):
        phase = b.state.phase
        if phase == "parked":
            assert park is not None
            b.resume(park, MANIFEST, draw(st.integers(1, 10**9)),
                     draw(st.sampled_from(["measured", "estimated"])), "estimate:storage")
            continue
        if phase == "ran" and draw(st.booleans()):
            if draw(st.booleans()):
                park = make_snapshot(transcript=digest(b"t%d" % i))
            else:
                park = make_snapshot(fs_root=digest(b"fs%d" % i),
                                     mem_image=draw(st.sampled_from([None, digest(b"mem")])))
            b.suspend(park, MANIFEST)
            continue
        calls = None
        if draw(st.booleans()):
            calls = CallAccount(tuple(draw(call_ids)), tuple(draw(call_ids)))
        b.execute(uj=draw(st.integers(0, 10**12)),
                  provenance=draw(st.sampled_from(["measured", "estimated"])),
                  meter="rapl:package-0", journal_root=digest(b"j%d" % i),
                  outcome=draw(st.sampled_from(["ok", "error", "timeout"])), calls=calls)
    if draw(st.booleans()):
        b.close()
    return b
