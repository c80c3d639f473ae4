"""The fold's happy path (fleet.fold.fast) decides exactly as the reference path.

The same streams (genuine runs of every shape, interleaved with mutants, reseals by a lying
host, replays and garbage) are folded by two ledgers, one deciding the common message by
the fast path and one deciding everything by the reference path; their stores must be
identical row for row: leaves, segments, run states (energy, wait tracker, parked
snapshot), refusals with their rules and details.
"""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import msgspec
import pytest
from test_fuzz_fold import GENUINE, mutate, reseal

import fleet_ledger.fleet.fold.fast as fold_fast
from fleet_ledger.fleet.record.seal import encode_key

from fault_helpers import fold_in_random_batches, host_key, sealed_run, seed_hosts

HOSTS = [("h1", encode_key(bytes(host_key("h1").verify_key)), 0, None),
         ("h2", encode_key(bytes(host_key("h2").verify_key)), 0, None),
         ("gone", encode_key(bytes(host_key("gone").verify_key)), 0, 40)]


def _stream(seed: int, count: int) -> list[tuple[int, str, bytes]]:
    rng = random.Random(seed)
    extra = [m for i, plan in enumerate(["eeeeeeeeec", "epreprepreprec", "eeepr", "epc", "c"])
             for m in sealed_run("h2", f"fast-{seed}-{i}", plan).messages]
    by_run: dict[str, list[tuple[str, bytes]]] = {}
    for subject, data in list(GENUINE) + extra:
        by_run.setdefault(subject, []).append((subject, data))
    runs = list(by_run.values())
    rng.shuffle(runs)
    queue = []  # runs interleaved, each in its own order
    while any(runs):
        for r in runs:
            if r:
                queue.append(r.pop(0))
    msgs: list[tuple[str, bytes]] = []
    while queue or len(msgs) < count:
        roll = rng.random()
        if queue and (roll < 0.6 or len(msgs) >= count):
            msgs.append(queue.pop(0))
        elif msgs and roll < 0.7:
            msgs.append(rng.choice(msgs))  # a replay
        elif roll < 0.85:
            subject, data, _ = reseal(rng, *rng.choice(GENUINE))
            msgs.append((subject, data))
        else:
            msgs.append(mutate(rng, *rng.choice(GENUINE)))
    return [(i, s, d) for i, (s, d) in enumerate(msgs, start=1)]


def _fold(stream: list[tuple[int, str, bytes]], data: Path, fast: bool, seed: int) -> None:
    seed_hosts(data, HOSTS)
    fold_in_random_batches(stream, data, random.Random(seed), 300, fast_path=fast,
                           seal_workers=0)


def _dump(data: Path) -> dict[str, list[tuple[object, ...]]]:
    db = sqlite3.connect(f"file:{data / 'ledger.db'}?mode=ro", uri=True)
    try:
        return {table: [tuple(r) for r in db.execute(f"SELECT {cols} FROM {table} ORDER BY 1, 2")]
                for table, cols in (
                    ("segments", "run, idx, head, kind, leaf_index, stream_seq, payload"),
                    ("runs", "run, host, segments, head, phase, state, first_seq, last_seq"),
                    ("rejections", "stream_seq, subject, host, run, idx, rule, detail, payload"),
                    ("tree_nodes", "id, hashes"),
                    ("meta", "key, value"))}
    finally:
        db.close()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fast_and_reference_paths_build_the_same_store(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        seed: int) -> None:
    stream = _stream(seed, 1500)
    taken: list[bool] = []
    real = fold_fast.fast_decide

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        decision = real(*args, **kwargs)
        taken.append(decision is not None)
        return decision

    monkeypatch.setattr(fold_fast, "fast_decide", counting)
    _fold(stream, tmp_path / "fast", True, seed)
    _fold(stream, tmp_path / "reference", False, seed)
    fast, reference = _dump(tmp_path / "fast"), _dump(tmp_path / "reference")
    assert fast == reference
    accepted = len(fast["segments"])
    # The fast path decided every accepted message, and only those.
    assert sum(taken) == accepted > 60
    assert len(fast["rejections"]) > 300
    kinds = {row[3] for row in fast["segments"]}
    assert kinds == {"executed", "suspended", "resumed", "closed", "claimed", "evicted"}


@pytest.mark.parametrize("seed", [4, 5])
def test_batch_addresses_equal_one_parse_per_message(seed: int) -> None:
    """The batch's single parse gives each message exactly its own addresses, and a
    malformed address anywhere costs only its own message (None), not its neighbours."""
    from fleet_ledger.fleet.address import parse_addresses
    from fleet_ledger.fleet.record.verify_fast import segment_addresses
    from fleet_ledger.fleet.record.wire import envelope_wire

    stream = _stream(seed, 200)
    wires = [envelope_wire(data) for _seq, _subject, data in stream]
    decoded = [n for n, w in enumerate(wires) if w is not None]
    for n in decoded[5::60]:  # a malformed stated head, whatever the mutants hold
        w = wires[n]
        assert w is not None
        wires[n] = msgspec.structs.replace(
            w, segment=msgspec.structs.replace(w.segment, head="b3:" + "!" * 43))
    expected = [None if w is None else parse_addresses(segment_addresses([w.segment]))
                for w in wires]
    assert fold_fast.batch_addresses(wires) == expected
    assert any(e is None for e, w in zip(expected, wires, strict=True) if w is not None)
    assert sum(e is not None for e in expected) > 100
    clean = [w for w, e in zip(wires, expected, strict=True) if e is not None]
    assert fold_fast.batch_addresses(clean) == [e for e in expected if e is not None]


def test_seal_text_is_canonical_exactly_when_it_re_encodes_to_itself() -> None:
    """seal_bytes's spare-bits test accepts exactly the texts that decode (strictly) to 64
    bytes and re-encode to themselves, on random seals with one character changed, cut,
    extended, or a different last character."""
    import binascii

    from fleet_ledger.fleet.errors import FleetError
    from fleet_ledger.fleet.record.wire import seal_bytes

    def by_re_encoding(text: str) -> bytes | str:
        try:
            raw = binascii.a2b_base64(text, strict_mode=True)
        except (binascii.Error, ValueError):
            return "refused"
        ok = len(raw) == 64 and binascii.b2a_base64(raw, newline=False).decode() == text
        return raw if ok else "refused"

    def by_seal_bytes(text: str) -> bytes | str:
        try:
            return seal_bytes(text)
        except FleetError:
            return "refused"

    rng = random.Random(11)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=-_ "
    accepted = 0
    for _ in range(20000):
        text = binascii.b2a_base64(rng.randbytes(64), newline=False).decode()
        roll = rng.random()
        if roll < 0.4:
            at = rng.randrange(len(text))
            text = text[:at] + rng.choice(alphabet) + text[at + 1:]
        elif roll < 0.5:
            text = text[:rng.randrange(len(text))]
        elif roll < 0.6:
            text += rng.choice(alphabet)
        elif roll < 0.8:
            text = text[:85] + rng.choice(alphabet[:64]) + "=="
        expected = by_re_encoding(text)
        assert by_seal_bytes(text) == expected, text
        accepted += expected != "refused"
    assert 5000 < accepted < 15000
