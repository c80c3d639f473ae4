"""The record's rules live in one kernel (fleet.record.kernel): both decoders (the object API and
the wire fast path) and every consumer of them (fleet verify, the ledger's fold) decide by it."""

from __future__ import annotations

import json

import msgspec
import pytest
from blake3 import blake3
from nacl.signing import SigningKey

import fleet_ledger.fleet.record.kernel
from fleet_ledger.fleet.address import digest, format_address, parse_address
from fleet_ledger.fleet.errors import FleetError, MalformedSnapshot, RecordError, RuleError
from fleet_ledger.fleet.fold import (
    Accepted,
    Admission,
    BatchRuns,
    HostEntry,
    Message,
    Refused,
    decide,
)
from fleet_ledger.fleet.fold.fast import decide_message, fast_decide
from fleet_ledger.fleet.record import kernel
from fleet_ledger.fleet.record.builder import RecordBuilder
from fleet_ledger.fleet.record.record import RunState
from fleet_ledger.fleet.record.segment import CallAccount, ImageSnapshot, make_snapshot
from fleet_ledger.fleet.record.verify import verify_record
from fleet_ledger.fleet.record.verify_fast import fast_check, segment_addresses, step
from fleet_ledger.fleet.record.wire import (
    SegmentWire,
    decode_record,
    encode_envelope,
    encode_record,
    envelope_wire,
)
from fleet_ledger.fleet.subjects import segment_subject

import durable_vectors as dv

VECTORS = json.loads(dv.PATH.read_text())
KEY = SigningKey(bytes([9]) * 32)
MANIFEST = digest(b"manifest")
PARK = make_snapshot(transcript=digest(b"transcript"))
BIG_IDLE = 3_000_000_000


class IdleOverCap(RuleError):
    """A made-up rule for this test: a park may not draw more than 10^9 µJ."""


@pytest.fixture
def idle_cap(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A switch that adds the made-up rule to the kernel's resume rule, as a new rule
    would be added (records are built before it is switched on, so they are sealed)."""
    real = fleet_ledger.fleet.record.kernel.resumed_step

    def capped(run, index, body, snapshot, manifest, idle_uj, provenance):  # type: ignore[no-untyped-def]
        step_ = real(run, index, body, snapshot, manifest, idle_uj, provenance)
        if idle_uj > 1_000_000_000:
            raise IdleOverCap("a park drew more than the cap", segment=index)
        return step_

    return lambda: monkeypatch.setattr(fleet_ledger.fleet.record.kernel, "resumed_step", capped)


def _record_with_big_park() -> RecordBuilder:
    b = RecordBuilder(KEY, digest(b"unit"), digest(b"grants"))
    b.execute(uj=10, provenance="measured", meter="m", journal_root=digest(b"j1"))
    b.suspend(PARK, MANIFEST)
    b.resume(PARK, MANIFEST, BIG_IDLE, "estimated", "estimate:x")
    b.execute(uj=20, provenance="measured", meter="m", journal_root=digest(b"j2"))
    return b


def _messages(b: RecordBuilder) -> list[Message]:
    return [Message(segment_subject("h1", format_address(b.run)),
                    data := encode_envelope("h1", b.run, b.state.unit_id, b.state.grants_id, s),
                    s.index, envelope_wire(data), True)
            for s in b.sealed]


def _fold(messages: list[Message], fast: bool) -> list[Accepted | Refused]:
    runs = BatchRuns(lambda _run: None)
    ctx = Admission({"h1": HostEntry("h1", KEY.verify_key)}, runs, lambda _r, _i: None)
    out = []
    for msg in messages:
        d = decide_message(ctx, msg) if fast else decide(ctx, msg)
        if isinstance(d, Accepted):
            runs.take(d)
        out.append(d)
    return out


def test_both_decoders_accept_the_record_without_the_made_up_rule():
    """Control: the record and its messages are valid as built, on both paths."""
    b = _record_with_big_park()
    rec = decode_record(encode_record(b.to_record()))
    assert fast_check(rec, b.run, KEY.verify_key) is not None
    assert verify_record(rec, fast=False).segments == 4
    for fast in (True, False):
        assert all(isinstance(d, Accepted) for d in _fold(_messages(b), fast))


def test_a_rule_added_to_the_kernel_binds_both_decoders(idle_cap):
    """One rule added in one kernel function refuses on the object path, the wire fast
    path, fleet verify (both modes) and the ledger's fold (both paths), by its name."""
    b = _record_with_big_park()  # built before the rule: validly sealed
    messages = _messages(b)
    idle_cap()
    # The object path.
    state = RunState.open(b.state.unit_id, b.state.grants_id)
    for s in b.sealed[:2]:
        state.advance(s.segment, s.attestation)
    with pytest.raises(IdleOverCap):
        state.advance(b.sealed[2].segment)
    assert state.index == 2  # refused: unchanged
    # The wire path never vouches for it; verify names the rule in both modes.
    rec = decode_record(encode_record(b.to_record()))
    assert fast_check(rec, b.run, KEY.verify_key) is None
    for fast in (True, False):
        with pytest.raises(IdleOverCap) as info:
            verify_record(rec, fast=fast)
        assert info.value.segment == 3
    # The fold: the fast path declines, the reference path refuses by name.
    runs = BatchRuns(lambda _run: None)
    ctx = Admission({"h1": HostEntry("h1", KEY.verify_key)}, runs, lambda _r, _i: None)
    for msg in messages[:2]:
        runs.take(decide_message(ctx, msg))  # type: ignore[arg-type]
    assert fast_decide(ctx, messages[2]) is None
    for fast in (True, False):
        decisions = _fold(messages, fast)
        assert [getattr(d, "rule", "ok") for d in decisions] == \
            ["ok", "ok", "IdleOverCap", "IndexGap"]


def test_decisions_change_nothing_until_taken():
    """A decision is a value: deciding the same message twice gives the same answer, and
    the runs change only when the batch takes the decision."""
    b = _record_with_big_park()
    messages = _messages(b)
    runs = BatchRuns(lambda _run: None)
    ctx = Admission({"h1": HostEntry("h1", KEY.verify_key)}, runs, lambda _r, _i: None)
    first = decide_message(ctx, messages[0])
    assert decide_message(ctx, messages[0]) == first and runs.changed == {}
    runs.take(first)  # type: ignore[arg-type]
    held = runs.changed[b.run].state
    before = (held.index, held.head, held.phase, held.energy.as_json())
    for fast in (True, False):
        d = decide_message(ctx, messages[1]) if fast else decide(ctx, messages[1])
        assert isinstance(d, Accepted)
    assert (held.index, held.head, held.phase, held.energy.as_json()) == before


def test_committed_state_is_never_changed_by_a_batch():
    """BatchRuns works on copies: the committed slot it read stays as it was."""
    b = _record_with_big_park()
    messages = _messages(b)
    first = BatchRuns(lambda _run: None)
    ctx = Admission({"h1": HostEntry("h1", KEY.verify_key)}, first, lambda _r, _i: None)
    first.take(decide_message(ctx, messages[0]))  # type: ignore[arg-type]
    committed = first.changed[b.run]
    second = BatchRuns(lambda run: committed if run == b.run else None)
    ctx2 = Admission(ctx.hosts, second, lambda _r, _i: None)
    for msg in messages[1:]:
        second.take(decide_message(ctx2, msg))  # type: ignore[arg-type]
    assert committed.state.index == 1 and second.changed[b.run].state.index == 4


# -- the vectors through the wire decoder --------------------------------------------------

_NO_HEAD = format_address(bytes(32))
_NO_SEAL = "A" * 86 + "=="


def _wire_replay(unit: str, grants: str, steps: list[dict]) -> dict:
    """Replay vector steps through the wire decoder (fleet.record.verify_fast.step) and the
    kernel's state change, producing what dv.run_steps produces through objects."""
    state = RunState.open(parse_address(unit), parse_address(grants))
    results: list[dict] = []
    for raw in steps:
        index = state.index + 1
        doc = {"index": index, "head": _NO_HEAD, "seal": _NO_SEAL, **raw}
        if doc["kind"] == "executed" and "attestation" not in doc:
            o = doc["attestation_object"]
            r = o["receipt"]
            doc["attestation"] = format_address(blake3(kernel.attestation_bytes(
                r["uj"], r["provenance"], r["meter"], parse_address(o["journal_root"]),
                o["outcome"])).digest())
        wire = msgspec.convert(doc, SegmentWire)
        take = iter([parse_address(t) for t in segment_addresses([wire])[1:]]).__next__
        try:
            st = step(wire, take, state, index)
        except RecordError as exc:
            results.append({"refused": exc.rule})
            continue
        head = blake3(state.head + st[0]).digest()
        kernel.apply(state, index, head, st)
        results.append({"head": format_address(head)})
    return {"results": results, "final_head": format_address(state.head),
            "phase": state.phase, "energy": state.energy.as_json(),
            "wait_proof": state.wait_proof()}


@pytest.mark.parametrize("case", VECTORS["cases"], ids=[c["name"] for c in VECTORS["cases"]])
def test_every_vector_decides_alike_through_the_wire_decoder(case):
    """Each durable.json case, fed through the wire decoder, refuses the same steps by the
    same rules and reaches the same heads, energy and wait proof as the object path."""
    got = _wire_replay(case["unit_id"], case["grants_id"], case["steps"])
    expect = case["expect"]
    assert [r.get("refused", r.get("head")) for r in got["results"]] == \
        [r.get("refused", r.get("head")) for r in expect["results"]]
    assert got["final_head"] == expect["final_head"]
    assert got["phase"] == expect["phase"] and got["energy"] == expect["energy"]
    assert got["wait_proof"].name == expect["wait_proof"]["verdict"]


def test_a_hand_built_snapshot_is_checked_on_every_path():
    """An image park with an empty filesystem root is MalformedSnapshot however it was
    built: it can never hash like a transcript park."""
    bad = ImageSnapshot(b"", digest(b"mem"))
    with pytest.raises(MalformedSnapshot):
        bad.canonical()
    b = RecordBuilder(KEY, digest(b"unit"), digest(b"grants"))
    b.execute(uj=10, provenance="measured", meter="m", journal_root=digest(b"j1"))
    with pytest.raises(MalformedSnapshot):
        b.suspend(bad, MANIFEST)
    assert b.state.index == 1 and len(b.sealed) == 1


def test_kernel_refusals_are_named_errors_not_python_errors():
    """Out-of-range values reach the kernel as named refusals (never KeyError, TypeError
    or struct.error), so no path mistakes a bug for a refusal or a refusal for a bug."""
    for call in (
        lambda: kernel.attestation_bytes(1, "guessed", "m", bytes(32), "ok"),
        lambda: kernel.attestation_bytes(2**64, "measured", "m", bytes(32), "ok"),
        lambda: kernel.attestation_bytes(-1, "measured", "m", bytes(32), "ok"),
        lambda: kernel.resumed_bytes(bytes(33), bytes(31), 1, "measured", "m"),
        lambda: kernel.resumed_bytes(bytes(33), bytes(32), 1, "measured", ""),
        lambda: kernel.executed_bytes(b"short", None),
        lambda: kernel.snapshot_bytes(None, None, None),
        lambda: kernel.next_phase("parked", "executed", 3),
        lambda: kernel.closed_bytes(5, None, None),
        lambda: kernel.closed_bytes(2**64, "measured", "m"),
        lambda: kernel.closed_bytes(5, "guessed", "m"),
    ):
        with pytest.raises(FleetError):
            call()


def test_snapshot_parts_inverts_snapshot_bytes_and_refuses_other_bytes():
    """The kernel decodes the park forms it encodes (fleet.record.segment builds its objects from
    that); any other length or form byte is a MalformedSnapshot."""
    a, b = digest(b"a"), digest(b"b")
    for parts in ((a, None, None), (a, b, None), (None, None, b)):
        raw = kernel.snapshot_bytes(*parts)
        assert kernel.snapshot_parts(raw) == parts
    for raw in (a, a + b"\x01", a + b"\x00" + b, a + b"\x03", a + b"\x02" + b, b""):
        with pytest.raises(MalformedSnapshot):
            kernel.snapshot_parts(raw)


def test_a_look_ahead_at_a_step_is_the_applied_step_and_changes_nothing():
    """``RunState.after`` (the state a step leads to, sharing what the step cannot change)
    equals a copy with the step applied, for every kind of step of a record (executes with
    call accounts, a park, a resume with idle energy, a close with idle energy), and the
    state looked from is left as it was, its call accounts included."""
    b = RecordBuilder(KEY, digest(b"unit"), digest(b"grants"))
    b.execute(uj=10, provenance="measured", meter="m", journal_root=digest(b"j1"),
              calls=CallAccount(("c1",), ()))
    b.suspend(PARK, MANIFEST)
    b.resume(PARK, MANIFEST, 7, "estimated", "estimate:x")
    b.execute(uj=20, provenance="estimated", meter="m", journal_root=digest(b"j2"),
              calls=CallAccount(("c2",), ("c1",)))
    b.suspend(PARK, MANIFEST)
    b.close(idle_uj=5, provenance="measured", meter="m")
    accepted = [d for d in _fold(_messages(b), fast=True) if isinstance(d, Accepted)]
    assert len(accepted) == len(b.sealed) == 6
    state = RunState.open(digest(b"unit"), digest(b"grants"))
    for d in accepted:
        before = state.copy()
        ahead = state.after(d.index, d.head, d.step)
        assert state == before, d.kind
        state.apply(d.step, d.head)
        assert ahead == state and ahead.energy is not state.energy, d.kind
    assert state.phase == "closed" and state.energy.idle["measured"] == 5
