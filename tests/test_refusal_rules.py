"""Every named refusal of the fold, produced on purpose: the exact rule, and no state change.

Each case starts from the same fold state (host ``h1`` has folded the first segments of run
A, parked at its second segment) and offers one hostile or broken message. The fold must name
the case's rule and leave every run, stored head and leaf exactly as it was. A last test
checks that the table covers every rule class in :mod:`fleet.errors`, and one more that the
broker itself refuses an oversized message before the ledger ever sees it.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable

import msgspec
import nats
import pytest
from nats.js.errors import APIError

from fleet_ledger.fleet.address import digest, format_address, parse_address
from fleet_ledger.fleet.fold import Accepted, Refused
from fleet_ledger.fleet.record.attestation import make_attestation
from fleet_ledger.fleet.record.builder import RecordBuilder
from fleet_ledger.fleet.record.kernel import NO_GRANTS, pool_unit
from fleet_ledger.fleet.record.record import RunState
from fleet_ledger.fleet.record.seal import seal
from fleet_ledger.fleet.record.segment import (
    Claimed,
    Evicted,
    Executed,
    ImageSnapshot,
    Resumed,
    executed,
    make_snapshot,
    suspended,
)
from fleet_ledger.fleet.record.wire import MAX_MESSAGE, SealedSegment
from fleet_ledger.fleet.subjects import STREAM, segment_subject
from fleet_ledger.ledger.stream import ensure_stream
from fleet_ledger.plumbing.natsd import NatsServer

from fault_helpers import (
    GRANTS,
    MANIFEST,
    RULES,
    PureFold,
    SealedRun,
    entry,
    forge,
    host_key,
    sealed_run,
)

HOSTS = {
    "h1": entry("h1"),
    "h2": entry("h2"),
    "old": entry("old", revoked_after=0),
    "late": entry("late", enrolled_after=10**9),
}
PLAN = "eprec"  # run A: executed, suspended, resumed, executed, closed
FOLDED = 2  # the fold state every case starts from: A's segments 1..2 (parked)


def _run_a() -> SealedRun:
    return sealed_run("h1", "unit-A", PLAN)


def _base() -> tuple[PureFold, SealedRun]:
    fold = PureFold(dict(HOSTS))
    a = _run_a()
    for subject, data in a.messages[:FOLDED] + _run_d().messages:
        assert isinstance(fold.feed(subject, data), Accepted)
    return fold, a


def _run_d() -> SealedRun:
    """A closed run the base state also holds."""
    return sealed_run("h1", "unit-D", "ec")


def _edit(data: bytes, change: Callable[[dict], object]) -> bytes:
    """Decode an envelope to plain JSON, change it, encode it again."""
    doc = msgspec.json.decode(data)
    change(doc)
    return msgspec.json.encode(doc)


def _set(path: str, value: object) -> Callable[[dict], None]:
    def change(doc: dict) -> None:
        *parents, last = path.split(".")
        node = doc
        for p in parents:
            node = node[p]
        node[last] = value
    return change


def _state_at(a: SealedRun, upto: int) -> RunState:
    """Run A's state after its first ``upto`` segments (replayed from its messages)."""
    fold = PureFold(dict(HOSTS))
    for subject, data in a.messages[:upto]:
        assert isinstance(fold.feed(subject, data), Accepted)
    slot = fold.get_run(a.run)
    assert slot is not None
    return slot.state


def _forged(a: SealedRun, segment: object, attestation: object = None, upto: int = FOLDED,
            **kw: object) -> tuple[str, bytes]:
    sealed = forge(host_key(a.host), _state_at(a, upto), segment, attestation, **kw)  # type: ignore[arg-type]
    return a.subject, a.envelope(sealed)


def _other_run(host: str, unit: str, plan: str = "eprec") -> SealedRun:
    return sealed_run(host, unit, plan)


# Each case: (id, expected rule, make(a) -> (subject, data)) where ``a`` is run A.
Case = tuple[str, str, Callable[[SealedRun], tuple[str, bytes]]]

SEG3 = FOLDED  # list position of A's next segment (index 3, the resume)


def _next(a: SealedRun) -> tuple[str, bytes]:
    return a.messages[SEG3]


def _reseal(a: SealedRun, data: bytes, sig: bytes) -> bytes:
    return _edit(data, _set("segment.seal", base64.b64encode(sig).decode()))


def _seal_of_other_index(a: SealedRun) -> tuple[str, bytes]:
    subject, data = _next(a)
    head = parse_address(msgspec.json.decode(data)["segment"]["head"])
    sig = seal(host_key("h1"), a.run, 2, head)  # sealed for index 2; the segment is 3
    return subject, _reseal(a, data, sig)


def _seal_of_other_run(a: SealedRun) -> tuple[str, bytes]:
    subject, data = _next(a)
    b = _other_run("h1", "unit-B")
    other = msgspec.json.decode(b.messages[SEG3][1])["segment"]["seal"]
    return subject, _edit(data, _set("segment.seal", other))


def _bad_seal(a: SealedRun) -> tuple[str, bytes]:
    subject, data = _next(a)
    raw = bytearray(base64.b64decode(msgspec.json.decode(data)["segment"]["seal"]))
    raw[10] ^= 0x01
    return subject, _reseal(a, data, bytes(raw))


def _fork(a: SealedRun) -> tuple[str, bytes]:
    # A different, validly sealed segment 2 (a transcript park instead of an image park).
    snap = make_snapshot(transcript=digest(b"another transcript"))
    return _forged(a, suspended(snap, MANIFEST), upto=1)


def _phase_violation(a: SealedRun) -> tuple[str, bytes]:
    att = make_attestation(1, "measured", "rapl:package-0", digest(b"j"), "ok")
    return _forged(a, executed(att.address()), att)  # executing while parked


def _resume_with(a: SealedRun, *, snapshot: object = None, manifest: bytes = MANIFEST,
                 idle_uj: int = 10) -> tuple[str, bytes]:
    state = _state_at(a, FOLDED)
    snap = state.parked if snapshot is None else snapshot
    return _forged(a, Resumed(snap, manifest, idle_uj, "estimated", "estimate:storage"))  # type: ignore[arg-type]


def _closed_then(a: SealedRun) -> tuple[str, bytes]:
    att = make_attestation(1, "measured", "rapl:package-0", digest(b"j"), "ok")
    d = _run_d()
    return _forged(d, Executed(att.address()), att, upto=2)


def _head_mismatch(a: SealedRun) -> tuple[str, bytes]:
    state = _state_at(a, FOLDED)
    wrong = digest(b"not the head")
    return _forged(a, Resumed(state.parked, MANIFEST, 10, "estimated", "x"), head=wrong)  # type: ignore[arg-type]


def _foreign_run(a: SealedRun) -> tuple[str, bytes]:
    # h2 seals segment 2 of run A (which h1 holds; a host may take a run over only at a
    # park, by resuming or closing it) and publishes it on its own subject for that run.
    state = _state_at(a, 1)
    sealed = forge(host_key("h2"), state, suspended(state.parked or make_snapshot(
        transcript=digest(b"h2's park")), MANIFEST))
    h2 = SealedRun("h2", a.builder)
    return h2.subject, h2.envelope(sealed)


def _first_of_new(unit: bytes, grants: bytes, make: Callable[[], object]
                  ) -> tuple[str, bytes]:
    """A validly sealed first segment of a new run of h1 that the builder would refuse."""
    r = SealedRun("h1", RecordBuilder(host_key("h1"), unit, grants))
    sealed: SealedSegment = forge(host_key("h1"), r.builder.state, make())  # type: ignore[arg-type]
    return r.subject, r.envelope(sealed)


def _zero_claim(a: SealedRun) -> tuple[str, bytes]:
    return _first_of_new(digest(b"unit-claimed"), GRANTS, lambda: Claimed(
        slot=digest(b"slot"), snapshot=ImageSnapshot(digest(b"fs")), manifest=MANIFEST,
        warm_uj=0, warm_provenance="measured", warm_meter="rapl", idle_uj=5,
        idle_provenance="estimated", idle_meter="estimate:volume@6W/TB"))


def _zero_overhead(a: SealedRun) -> tuple[str, bytes]:
    return _first_of_new(pool_unit("h1", "default"), NO_GRANTS, lambda: Evicted(
        slot=digest(b"slot"), warm_uj=7, warm_provenance="measured", warm_meter="rapl",
        idle_uj=0, idle_provenance="estimated", idle_meter="estimate:volume@6W/TB"))


def _from(host: str) -> Callable[[SealedRun], tuple[str, bytes]]:
    def make(a: SealedRun) -> tuple[str, bytes]:
        return _other_run(host, f"unit-of-{host}").messages[0]
    return make


def _calls(ids: list[str]) -> Callable[[SealedRun], tuple[str, bytes]]:
    def make(a: SealedRun) -> tuple[str, bytes]:
        b = _other_run("h1", "unit-C", "e")
        return b.messages[0][0], _edit(b.messages[0][1], _set("segment.calls.dispatched", ids))
    return make


def _first_of_c(path: str, value: object) -> Callable[[SealedRun], tuple[str, bytes]]:
    def make(a: SealedRun) -> tuple[str, bytes]:
        b = _other_run("h1", "unit-C", "ep")
        return b.messages[0][0], _edit(b.messages[0][1], _set(path, value))
    return make


def _park_of_c(snapshot: dict) -> Callable[[SealedRun], tuple[str, bytes]]:
    def make(a: SealedRun) -> tuple[str, bytes]:
        b = _other_run("h1", "unit-C", "ep")
        return b.messages[1][0], _edit(b.messages[1][1], _set("segment.snapshot", snapshot))
    return make


FS = format_address(digest(b"fs"))
TR = format_address(digest(b"tr"))
MEM = format_address(digest(b"mem"))


def _oversized(a: SealedRun) -> tuple[str, bytes]:
    subject, data = _next(a)
    return subject, data + b" " * (MAX_MESSAGE + 1 - len(data))


CASES: list[Case] = [
    ("undecodable-bytes", "MalformedSegment", lambda a: (a.subject, b"\xff\xfe\x00garbage")),
    ("empty-message", "MalformedSegment", lambda a: (a.subject, b"")),
    ("json-not-an-envelope", "MalformedSegment", lambda a: (a.subject, b'{"v": 1}')),
    ("unknown-kind", "MalformedSegment",
     lambda a: (a.subject, _edit(_next(a)[1], _set("segment.kind", "teleported")))),
    ("field-of-another-kind", "MalformedSegment",
     lambda a: (a.subject, _edit(_next(a)[1], _set("segment.attestation", FS)))),
    ("unknown-envelope-version", "MalformedSegment",
     lambda a: (a.subject, _edit(_next(a)[1], _set("v", 2)))),
    ("malformed-address", "MalformedAddress",
     lambda a: (a.subject, _edit(_next(a)[1], _set("segment.head", "b3:short")))),
    ("unknown-host", "UnknownHost", _from("ghost")),
    ("host-not-yet-enrolled", "UnknownHost", _from("late")),
    ("revoked-host", "RevokedHost", _from("old")),
    ("bad-seal", "BadSeal", _bad_seal),
    ("seal-of-another-run", "BadSeal", _seal_of_other_run),
    ("seal-of-another-index", "BadSeal", _seal_of_other_index),
    ("another-hosts-subject", "SubjectMismatch",
     lambda a: (segment_subject("h2", format_address(a.run)), _next(a)[1])),
    ("another-runs-subject", "SubjectMismatch",
     lambda a: (_other_run("h1", "unit-B").subject, _next(a)[1])),
    ("not-a-segment-subject", "SubjectMismatch", lambda a: ("fleet.seg.h1", _next(a)[1])),
    ("run-not-genesis-of-unit", "RunMismatch",
     lambda a: (a.subject, _edit(_next(a)[1], _set("unit_id", FS)))),
    ("run-of-another-host", "ForeignRun", _foreign_run),
    ("index-gap", "IndexGap", lambda a: a.messages[SEG3 + 1]),
    ("fork", "Fork", _fork),
    ("replay", "Replay", lambda a: a.messages[0]),
    ("phase-violation", "PhaseViolation", _phase_violation),
    ("snapshot-mismatch", "SnapshotMismatch",
     lambda a: _resume_with(a, snapshot=make_snapshot(transcript=digest(b"other")))),
    ("manifest-mismatch", "ManifestMismatch",
     lambda a: _resume_with(a, manifest=digest(b"another environment"))),
    ("zero-idle-energy", "ZeroIdleEnergy", lambda a: _resume_with(a, idle_uj=0)),
    ("zero-claim-energy", "ZeroClaimEnergy", _zero_claim),
    ("zero-overhead-energy", "ZeroOverheadEnergy", _zero_overhead),
    ("head-mismatch", "HeadMismatch", _head_mismatch),
    ("attestation-mismatch", "AttestationMismatch",
     _first_of_c("segment.attestation_object.receipt.uj", 7)),
    ("attestation-mismatch-on-replay", "AttestationMismatch",
     lambda a: (a.subject, _edit(a.messages[0][1],
                                 _set("segment.attestation_object.receipt.uj", 7)))),
    ("after-close", "RecordClosed", _closed_then),
    ("snapshot-image-and-transcript", "MalformedSnapshot",
     _park_of_c({"fs_root": FS, "transcript": TR})),
    ("snapshot-transcript-and-memory", "MalformedSnapshot",
     _park_of_c({"transcript": TR, "mem_image": MEM})),
    ("snapshot-neither-form", "MalformedSnapshot", _park_of_c({})),
    ("call-id-empty", "MalformedCallAccount", _calls([""])),
    ("call-id-control-char", "MalformedCallAccount", _calls(["a\nb"])),
    ("call-id-oversized", "MalformedCallAccount", _calls(["x" * 257])),
    ("too-many-calls", "MalformedCallAccount", _calls([f"c{i}" for i in range(4097)])),
    ("oversized-message", "ValueOutOfRange", _oversized),
    ("oversized-meter-field", "ValueOutOfRange",
     _first_of_c("segment.attestation_object.receipt.meter", "m" * 129)),
    ("oversized-outcome-field", "ValueOutOfRange",
     _first_of_c("segment.attestation_object.outcome", "o" * 129)),
    ("negative-energy", "ValueOutOfRange",
     _first_of_c("segment.attestation_object.receipt.uj", -1)),
    ("energy-beyond-u64", "ValueOutOfRange",
     _first_of_c("segment.attestation_object.receipt.uj", 2**64)),
    ("index-zero", "ValueOutOfRange", _first_of_c("segment.index", 0)),
    ("index-beyond-u63", "ValueOutOfRange", _first_of_c("segment.index", 2**63)),
    ("unknown-provenance", "ValueOutOfRange",
     _first_of_c("segment.attestation_object.receipt.provenance", "guessed")),
]


@pytest.mark.parametrize(("rule", "make"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_refusal_names_its_rule_and_changes_nothing(rule: str, make) -> None:
    """The fold refuses the hostile message with exactly this rule and its state is unchanged."""
    fold, a = _base()
    before = fold.snapshot()
    subject, data = make(a)
    decision = fold.feed(subject, data)
    assert isinstance(decision, Refused), f"accepted: {decision}"
    assert decision.rule == rule, decision.detail
    assert decision.detail
    assert fold.snapshot() == before
    # ... and the run goes on: its genuine next segment still folds.
    assert isinstance(fold.feed(*a.messages[SEG3]), Accepted)


def test_the_table_covers_every_named_rule() -> None:
    """Every refusal class in fleet.errors is produced by at least one case of the table."""
    assert {c[1] for c in CASES} == RULES


def test_genuine_run_folds_whole() -> None:
    """The unbroken run A the cases start from folds segment by segment (the control)."""
    fold = PureFold(dict(HOSTS))
    a = _run_a()
    assert all(isinstance(fold.feed(s, d), Accepted) for s, d in a.messages)
    assert len(fold.leaves) == len(PLAN)


def test_broker_refuses_an_oversized_message(nats_server: NatsServer) -> None:
    """The FLEET stream's max_msg_size refuses a message over 256 KiB; nothing is stored."""

    async def body() -> tuple[APIError, int]:
        nc = await nats.connect(nats_server.url)
        try:
            js = nc.jetstream(timeout=5.0)
            await ensure_stream(js)
            subject, data = _oversized(_run_a())
            with pytest.raises(APIError) as refused:
                await js.publish(subject, data + b" ")
            ok = await js.publish(*_run_a().messages[0])  # a normal one still lands
            assert ok.seq == 1
            return refused.value, (await js.stream_info(STREAM)).state.messages
        finally:
            await nc.close()

    refused, stored = asyncio.run(body())
    assert refused.err_code == 10054, refused  # "message size exceeds maximum allowed"
    assert stored == 1



@pytest.mark.parametrize("index", [0, -1, 2**63, 2**70])
def test_a_hostile_index_is_stored_as_no_position(tmp_path, index: int) -> None:
    """A refusal whose wire index no store can hold (2**70) or no segment has (0) names no
    position, and the ledger's store commits it (it once failed every batch holding one)."""
    from fleet_ledger.ledger.service import Ledger, LedgerConfig

    a = _run_a()
    data = _edit(a.messages[0][1], _set("segment.index", index))
    ledger = Ledger(LedgerConfig(data_dir=tmp_path, servers=[]))
    try:
        batch, top = ledger.fold_messages([(1, a.subject, data)])
        assert top == 1
        (item,) = batch
        assert isinstance(item.decision, Refused) and item.decision.index is None
        assert ledger.store.rejections()[0]["index"] is None
    finally:
        ledger.store.close()


def test_an_envelope_whose_segment_names_a_host_is_malformed_on_both_paths() -> None:
    """A segment on the wire names no host (its envelope does): one naming a host is
    MalformedSegment, the wire decoder yields nothing to the fast path, and no state moves."""
    from fleet_ledger.fleet.fold import Message
    from fleet_ledger.fleet.fold.fast import decide_message
    from fleet_ledger.fleet.record.wire import envelope_wire

    fold = PureFold(HOSTS)
    run = sealed_run("h1", "envelope-host", "e")
    subject, data = run.messages[0]
    doc = msgspec.json.decode(data)
    doc["segment"]["host"] = "h1"
    forged = msgspec.json.encode(doc)
    assert envelope_wire(forged) is None
    before = fold.snapshot()
    d = decide_message(fold.ctx, Message(subject, forged, 1))
    assert isinstance(d, Refused) and d.rule == "MalformedSegment" and d.index == 1
    assert fold.snapshot() == before
    assert isinstance(fold.feed(subject, data), Accepted)
