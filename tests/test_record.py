"""The run record's rules, pinned against hand-written bytes and named refusals."""

from __future__ import annotations

import pytest
from blake3 import blake3

from fleet_ledger.fleet.address import digest, format_address, parse_address
from fleet_ledger.fleet.errors import (
    AttestationMismatch,
    MalformedAddress,
    MalformedCallAccount,
    MalformedSnapshot,
    ManifestMismatch,
    PhaseViolation,
    RecordClosed,
    SnapshotMismatch,
    ValueOutOfRange,
    ZeroIdleEnergy,
)
from fleet_ledger.fleet.record.attestation import make_attestation
from fleet_ledger.fleet.record.phases import TRANSITIONS
from fleet_ledger.fleet.record.record import RunState, genesis
from fleet_ledger.fleet.record.segment import (
    CallAccount,
    Closed,
    ImageSnapshot,
    TranscriptSnapshot,
    executed,
    make_snapshot,
    resumed,
    suspended,
)

UNIT = digest(b"unit")
GRANTS = digest(b"grants")
FS = bytes(range(32))
MEM = bytes(range(32, 64))
MAN = bytes([7]) * 32


def att():
    return make_attestation(100, "measured", "rapl:package-0", digest(b"journal"), "ok")


def ran_state() -> RunState:
    state = RunState.open(UNIT, GRANTS)
    a = att()
    state.advance(executed(a.address()), a)
    return state


def snapshot_state(state: RunState) -> tuple:
    return (state.index, state.head, state.phase, state.parked, state.parked_manifest,
            dict(state.energy.receipts), dict(state.energy.idle))


def test_address_round_trip_and_strict_parsing():
    """An address is b3: + 43 base64url chars; anything else is MalformedAddress."""
    raw = digest(b"x")
    text = format_address(raw)
    assert len(text) == 46 and parse_address(text) == raw
    bad = [text[3:], "b3:" + text[3:] + "=", "B3:" + text[3:], text[:-1], text + "A",
           text.replace(text[5], "+"), "b3:" + "A" * 42 + "B", None, 5, ""]
    for value in bad:
        with pytest.raises(MalformedAddress):
            parse_address(value)


def test_genesis_binds_unit_and_grants_as_written_by_hand():
    """head0 is BLAKE3 of the domain tag, the unit id and the grants id, nothing else."""
    expected = blake3(b"sandbox.runrecord/1" + UNIT + GRANTS).digest()
    assert genesis(UNIT, GRANTS) == expected
    assert genesis(GRANTS, UNIT) != expected
    assert genesis(UNIT, digest(b"other grants")) != expected


def test_image_snapshot_canonical_bytes_pinned():
    """The image form's bytes: fs_root, then 0x00, or 0x01 and the memory image."""
    assert make_snapshot(fs_root=FS).canonical() == FS + b"\x00"
    assert make_snapshot(fs_root=FS, mem_image=MEM).canonical() == FS + b"\x01" + MEM
    assert make_snapshot(transcript=FS).canonical() == FS + b"\x02"


def test_suspended_and_resumed_canonical_bytes_pinned():
    """Suspended and resumed segments lay out tag, snapshot, manifest and idle energy."""
    snap = make_snapshot(fs_root=FS, mem_image=MEM)
    assert suspended(snap, MAN).canonical() == b"\x02" + FS + b"\x01" + MEM + MAN
    r = resumed(snap, MAN, 258, "estimated", "m")
    assert r.canonical() == (b"\x03" + FS + b"\x01" + MEM + MAN
                             + bytes([0, 0, 0, 0, 0, 0, 1, 2]) + b"\x02" + b"\x00\x01m")
    assert Closed().canonical() == b"\x04"


def test_executed_without_account_hashes_as_if_accounts_did_not_exist():
    """No account: tag 0x01 and the attestation address, exactly."""
    address = bytes([9]) * 32
    seg = executed(address)
    assert seg.canonical() == b"\x01" + address
    head0 = genesis(UNIT, GRANTS)
    state = RunState.open(UNIT, GRANTS)
    a = att()
    head1 = state.advance(executed(a.address()), a)
    assert head1 == blake3(head0 + b"\x01" + a.address()).digest()


def test_call_account_bytes_are_length_prefixed_and_absent_differs_from_empty():
    """An empty account adds a marker and two zero counts; ids carry u32 lengths."""
    address = bytes([9]) * 32
    empty = executed(address, CallAccount())
    assert empty.canonical() == b"\x01" + address + b"\x01" + bytes(4) + bytes(4)
    acc = executed(address, CallAccount(("ab", "c"), ("d",)))
    assert acc.canonical() == (b"\x01" + address + b"\x01"
                               + b"\x00\x00\x00\x02" + b"\x00\x00\x00\x02ab" + b"\x00\x00\x00\x01c"
                               + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x01d")
    assert executed(address).canonical() != empty.canonical()
    # No id boundary is ambiguous: ("ab","c") and ("a","bc") differ.
    other = executed(address, CallAccount(("a", "bc"), ("d",)))
    assert other.canonical() != acc.canonical()


@pytest.mark.parametrize("kwargs", [
    {}, {"fs_root": FS, "transcript": MEM}, {"transcript": FS, "mem_image": MEM},
    {"mem_image": MEM}, {"fs_root": FS, "mem_image": MEM, "transcript": MEM},
])
def test_malformed_snapshot_refused_before_hashing(kwargs):
    """Neither form, both, or a transcript beside a memory image is MalformedSnapshot."""
    with pytest.raises(MalformedSnapshot):
        make_snapshot(**kwargs)


def test_image_and_transcript_over_same_address_are_different_parks():
    """Resuming a transcript park with an image of the same address is SnapshotMismatch."""
    state = ran_state()
    state.advance(suspended(TranscriptSnapshot(FS), MAN))
    before = snapshot_state(state)
    with pytest.raises(SnapshotMismatch) as info:
        state.advance(resumed(ImageSnapshot(FS), MAN, 5, "estimated", "m"))
    assert info.value.segment == 3
    assert snapshot_state(state) == before
    state.advance(resumed(TranscriptSnapshot(FS), MAN, 5, "estimated", "m"))
    assert state.phase == "resumed"


def test_resume_needs_matching_manifest_and_nonzero_idle_energy():
    """A different manifest is ManifestMismatch; zero idle energy is ZeroIdleEnergy."""
    state = ran_state()
    snap = make_snapshot(fs_root=FS)
    state.advance(suspended(snap, MAN))
    before = snapshot_state(state)
    with pytest.raises(ManifestMismatch):
        state.advance(resumed(snap, bytes(32), 5, "measured", "m"))
    with pytest.raises(ZeroIdleEnergy):
        state.advance(resumed(snap, MAN, 0, "measured", "m"))
    assert snapshot_state(state) == before


def test_phase_table_is_strict_alternation():
    """Every (phase, kind) pair outside the table is a PhaseViolation; closed ends all."""
    a = att()
    snap = make_snapshot(transcript=FS)
    segs = {
        "executed": (executed(a.address()), a),
        "suspended": (suspended(snap, MAN), None),
        "resumed": (resumed(snap, MAN, 1, "estimated", "m"), None),
        "closed": (Closed(), None),
    }
    paths = {"fresh": [], "ran": ["executed"], "parked": ["executed", "suspended"],
             "resumed": ["executed", "suspended", "resumed"],
             "closed": ["closed"]}
    for phase, path in paths.items():
        for kind, (seg, obj) in segs.items():
            state = RunState.open(UNIT, GRANTS)
            for k in path:
                state.advance(*segs[k])
            assert state.phase == phase
            before = snapshot_state(state)
            if phase == "closed":
                with pytest.raises(RecordClosed):
                    state.advance(seg, obj)
            elif (phase, kind) in TRANSITIONS:
                state.advance(seg, obj)
                assert state.phase == TRANSITIONS[(phase, kind)]
                continue
            else:
                with pytest.raises(PhaseViolation):
                    state.advance(seg, obj)
            assert snapshot_state(state) == before


def test_attestation_object_must_hash_to_the_recorded_address():
    """An executed segment whose attestation object differs is AttestationMismatch."""
    state = RunState.open(UNIT, GRANTS)
    a = att()
    other = make_attestation(101, "measured", "rapl:package-0", digest(b"journal"), "ok")
    with pytest.raises(AttestationMismatch):
        state.advance(executed(a.address()), other)
    with pytest.raises(AttestationMismatch):
        state.advance(executed(a.address()), None)
    assert state.index == 0


def test_energy_total_is_receipts_plus_idle_split_by_provenance():
    """Total cost sums receipts and idle energy, each under its provenance."""
    state = RunState.open(UNIT, GRANTS)
    a1 = make_attestation(100, "measured", "rapl", digest(b"j1"), "ok")
    a2 = make_attestation(30, "estimated", "cpu", digest(b"j2"), "ok")
    snap = make_snapshot(transcript=FS)
    state.advance(executed(a1.address()), a1)
    state.advance(suspended(snap, MAN))
    state.advance(resumed(snap, MAN, 7, "estimated", "storage"))
    state.advance(executed(a2.address()), a2)
    e = state.energy
    assert e.total_uj == 137
    assert e.by_provenance() == {"measured": 100, "estimated": 37}
    assert e.receipts == {"measured": 100, "estimated": 30}
    assert e.idle == {"measured": 0, "estimated": 7}


@pytest.mark.parametrize("bad", [
    lambda: make_attestation(-1, "measured", "m", FS, "ok"),
    lambda: make_attestation(2**64, "measured", "m", FS, "ok"),
    lambda: make_attestation(1, "guessed", "m", FS, "ok"),
    lambda: make_attestation(1, "measured", "", FS, "ok"),
    lambda: make_attestation(1, "measured", "x" * 129, FS, "ok"),
    lambda: make_attestation(1, "measured", "m", FS[:31], "ok"),
    lambda: resumed(make_snapshot(fs_root=FS), MAN, 1.5, "measured", "m"),
    lambda: resumed(make_snapshot(fs_root=FS), MAN, True, "measured", "m"),
])
def test_values_out_of_range_are_named(bad):
    """Numbers and texts the canonical bytes cannot carry are ValueOutOfRange."""
    with pytest.raises(ValueOutOfRange):
        bad()


@pytest.mark.parametrize("ids", [("",), ("a\n",), ("x" * 257,), tuple(str(i) for i in range(4097))])
def test_malformed_call_ids_are_refused(ids):
    """Empty, control-character, over-long or too many call ids are MalformedCallAccount."""
    with pytest.raises(MalformedCallAccount):
        executed(FS, CallAccount(ids, ()))


def test_batch_address_parse_agrees_with_single_parse():
    """parse_addresses accepts exactly what parse_address accepts, to the same bytes."""
    import random

    from fleet_ledger.fleet.address import parse_addresses

    rng = random.Random(1)
    good = [format_address(rng.randbytes(32)) for _ in range(20)]
    assert parse_addresses(good) == [parse_address(t) for t in good]
    assert parse_addresses([]) == []
    refused = 0
    for _ in range(5000):
        texts = list(good[:4])
        i = rng.randrange(4)
        t = texts[i]
        p = rng.randrange(len(t))
        c = chr(rng.choice([rng.randrange(32, 127), rng.randrange(128, 400)]))
        edit = rng.random()
        texts[i] = (t[:p] + c + t[p + 1:] if edit < 0.6 else t[:p] + t[p + 1:] if edit < 0.8
                    else t[:p] + c + t[p:])
        try:
            expected = [parse_address(x) for x in texts]
        except MalformedAddress:
            expected = None
            refused += 1
        assert parse_addresses(texts) == expected, texts[i]
    assert refused > 1000
