"""Control events in the stream: the host table as a pure function of the stream and the
operator's verifier key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from control_helpers import fold_stream, lifecycle_stream, operator_key, table
from nacl.signing import SigningKey

from fleet_ledger.fleet.fold.control import (
    ENROLL,
    REVOKE,
    BatchControl,
    ControlAccepted,
    decode_event,
    encode_event,
    sign_event,
)
from fleet_ledger.fleet.fold.control_errors import MalformedControl

from fault_helpers import store_summary


def test_every_control_refusal_is_named_at_its_position(tmp_path: Path) -> None:
    """Each bad event (and each segment a control event makes invalid) is refused by its
    rule, at its stream position, and nothing else is."""
    stream, info = lifecycle_stream()
    fold_stream(stream, tmp_path / "s", seed=1, largest=4, operator=info["operator"])
    refused = dict(store_summary(tmp_path / "s").rejections)
    assert refused == info["rules"]


def test_stores_folded_in_any_batches_agree_byte_for_byte(tmp_path: Path) -> None:
    """Folds of one stream cut into different batches reach the same log, refusals, host
    table and control rows, given nothing but the operator's verifier key."""
    stream, info = lifecycle_stream()
    views = []
    for seed, largest in ((1, 1), (2, 3), (3, 50)):
        data = tmp_path / f"s{seed}"
        fold_stream(stream, data, seed, largest, info["operator"],
                    fast_path=seed != 2, seal_workers=seed % 2)
        s = store_summary(data)
        views.append((s.size, s.root, s.segments, s.rejections, s.runs,
                      table(data, "SELECT name, public_key, enrolled_after, revoked_after"
                                  " FROM hosts ORDER BY name"),
                      table(data, "SELECT stream_seq, kind, operator, seq, host, key"
                                  " FROM control_events ORDER BY stream_seq"),
                      table(data, "SELECT key, last_seq, retired FROM operators ORDER BY key")))
    assert views[0] == views[1] == views[2]
    assert views[0][0] == 6  # a's two old, b's two, a's two under the new key
    assert not (tmp_path / "s1" / "hosts.json").exists() or json.loads(
        (tmp_path / "s1" / "hosts.json").read_text())["hosts"] == []


def test_a_rekey_keeps_the_old_keys_segments_and_history(tmp_path: Path) -> None:
    """After a re-key, the host's earlier segments (under the old key) stay in the log and
    its key history lists both keys, each with the stream position it took effect at."""
    stream, info = lifecycle_stream()
    fold_stream(stream, tmp_path / "s", seed=4, largest=7, operator=info["operator"])
    history = table(tmp_path / "s", "SELECT kind, stream_seq FROM control_events"
                                    " WHERE host = 'a' ORDER BY stream_seq")
    assert [k for k, _ in history] == ["enroll", "rekey"]
    runs = {r[1] for r in store_summary(tmp_path / "s").runs}
    assert runs == {"a", "b"}
    assert len([r for r in store_summary(tmp_path / "s").runs if r[1] == "a"]) == 2


def test_an_event_re_encodes_to_its_bytes_and_refuses_mutations() -> None:
    """Decoding then encoding gives the same bytes; truncated, extended or mis-kinded
    events are MalformedControl."""
    ev = sign_event(operator_key(), ENROLL, 7, "h-1", bytes(32 * [5]))
    raw = encode_event(ev)
    assert encode_event(decode_event(raw)) == raw
    kind_at = len(b"fleet.ctl/1")
    bad = [raw[:-1], raw + b"\0", raw[:kind_at] + b"\x09" + raw[kind_at + 1:],
           raw[:kind_at] + bytes([REVOKE]) + raw[kind_at + 1:]]
    for b in bad:
        with pytest.raises(MalformedControl):
            decode_event(b)


def test_batch_control_changes_only_its_copy() -> None:
    """A batch's accepted events change its copies of the operators and hosts, never the
    committed tables it was given."""
    op = operator_key()
    operators = {bytes(op.verify_key): 0}
    hosts: dict = {}
    batch = BatchControl(operators, hosts)
    d = batch.fold(3, encode_event(sign_event(op, ENROLL, 1, "h",
                                              bytes(SigningKey(bytes(32)).verify_key))))
    assert isinstance(d, ControlAccepted) and batch.changed
    assert operators == {bytes(op.verify_key): 0} and hosts == {}
    assert batch.hosts["h"].enrolled_after == 3


def test_records_of_a_rekeyed_host_export_under_the_key_they_were_sealed_with(
        tmp_path: Path) -> None:
    """A run sealed before its host's re-key exports with the old key, one after it with
    the new key, and both record files verify with every seal checked."""
    from fleet_ledger.fleet.record.verify import verify_record
    from fleet_ledger.fleet.record.wire import decode_record
    from fleet_ledger.ledger import views
    from fleet_ledger.ledger.store import LedgerStore

    stream, info = lifecycle_stream()
    fold_stream(stream, tmp_path / "s", seed=5, largest=5, operator=info["operator"])
    store = LedgerStore(tmp_path / "s")
    try:
        runs = [r["run"] for r in store.list_runs() if r["host"] == "a"]
        keys = set()
        for run in runs:
            record = decode_record(views.export_record(store, run))
            keys.add(record.host_key)
            report = verify_record(record)
            assert report.sealed and report.segments == len(record.segments)
    finally:
        store.close()
    assert len(runs) == 2 and len(keys) == 2
