"""Control and grant events as one idea: one envelope, one text codec, one decision style,
one overlay, and one host-table rule for stream events and offline (bootstrap) changes."""

from __future__ import annotations

from pathlib import Path

import pytest
from control_helpers import operator_key
from nacl.signing import SigningKey

from fleet_ledger.fleet.errors import ValueOutOfRange
from fleet_ledger.fleet.fold import BatchRuns, HostEntry, Refused
from fleet_ledger.fleet.fold.control import (
    CONTROL_DOMAIN,
    ENROLL,
    REKEY,
    REVOKE,
    BatchControl,
    ControlAccepted,
    ControlState,
    decide_bootstrap,
    decide_control,
    encode_event,
    keys_at,
    sign_event,
)
from fleet_ledger.fleet.fold.event_overlay import EventOverlay
from fleet_ledger.fleet.fold.grant_events import (
    EVENT_DOMAIN,
    GrantBook,
    Trigger,
    decide_event,
    decode_event,
    trigger_event,
)
from fleet_ledger.fleet.fold.grant_fold import BatchGrants
from fleet_ledger.fleet.grants import signed_event
from fleet_ledger.fleet.grants.grant_errors import MalformedGrant
from fleet_ledger.fleet.record import kernel
from fleet_ledger.fleet.record.seal import encode_key
from fleet_ledger.fleet.text import encode_text
from fleet_ledger.ledger.store import LedgerStore, StoreError


def _key(n: int) -> bytes:
    return bytes(SigningKey(bytes([n]) * 32).verify_key)


def test_both_families_share_one_envelope() -> None:
    """A control event and a grant event split by the one envelope into the kind and the
    signer their own decoders read, and each signature checks under its signer."""
    op = operator_key()
    ctl = encode_event(sign_event(op, ENROLL, 1, "h", _key(1)))
    gev = trigger_event(op, "go")
    for data, domain, kind in ((ctl, CONTROL_DOMAIN, ENROLL), (gev, EVENT_DOMAIN, 2)):
        got_kind, signer, _body, signed, signature = signed_event.split(data, domain)
        assert (got_kind, signer) == (kind, bytes(op.verify_key))
        assert signed_event.signature_valid(signer, signed, signature)
        assert not signed_event.signature_valid(signer, signed + b"x", signature)
    assert decode_event(gev).fields == Trigger("go")


def test_one_text_codec_writes_the_kernels_layout_and_refuses_by_layout() -> None:
    """The text codec gives the kernel's ``len:u16 || utf8`` bytes and refuses what the
    kernel refuses, with the refusal each layout names."""
    for text in ("a", "µJ meter", "x" * 128):
        got = encode_text(text, "t", MalformedGrant, kernel.MAX_TEXT)
        assert got == kernel.encode_text(text, "t")
    for bad in ("", "tab\there", "x" * 129, 7):
        with pytest.raises(MalformedGrant):
            encode_text(bad, "t", MalformedGrant, kernel.MAX_TEXT)
        with pytest.raises(ValueOutOfRange):
            kernel.encode_text(bad, "t")


def test_both_decisions_return_refusals_as_values() -> None:
    """A refused control event and a refused grant event are both a ``Refused`` value with
    the rule, never an exception."""
    op = operator_key()
    state = ControlState({}, {})
    d = decide_control(state, 1, encode_event(sign_event(op, ENROLL, 1, "h", _key(1))))
    assert isinstance(d, Refused) and d.rule == "UnknownOperator" and d.host == "h"
    book = GrantBook()
    data = trigger_event(op, "go")
    accepted = decide_event(book, data, 1, 0, (), lambda _r, _i: None)
    assert not isinstance(accepted, Refused)
    book.put_trigger(bytes(op.verify_key), "go", bytes(32))
    again = decide_event(book, data, 2, 0, (), lambda _r, _i: None)
    assert isinstance(again, Refused) and again.rule == "DuplicateTrigger"


def test_bootstrap_and_stream_events_meet_one_host_rule() -> None:
    """An offline change decides as the stream's event of its kind would: enrolling a known
    host is a re-key keeping ``enrolled_after``, a revoked host never changes."""
    op = operator_key()
    hosts = {"h": HostEntry("h", SigningKey(bytes([1]) * 32).verify_key, 4)}
    offline = decide_bootstrap(hosts, "h", _key(2), 9)
    state = ControlState({bytes(op.verify_key): 0}, dict(hosts))
    stream = decide_control(state, 9, encode_event(sign_event(op, REKEY, 1, "h", _key(2))))
    assert isinstance(stream, ControlAccepted)
    assert offline == stream.entry
    assert isinstance(offline, HostEntry) and offline.enrolled_after == 4
    revoked = {"h": HostEntry("h", SigningKey(bytes([1]) * 32).verify_key, 4, 6)}
    for key in (_key(2), None):
        d = decide_bootstrap(revoked, "h", key, 9)
        assert isinstance(d, Refused) and d.rule == "ControlConflict"
    d = decide_bootstrap({}, "nobody", None, 9)
    assert isinstance(d, Refused) and d.rule == "ControlConflict"


def test_offline_reenrolment_cannot_bring_back_a_revoked_host(tmp_path: Path) -> None:
    """Offline, a revoked host re-enrolled under a new key stays revoked (before the one
    rule, the re-enrolment cleared ``revoked_after`` and took the new key)."""
    store = LedgerStore(tmp_path)
    try:
        store.enroll("h", encode_key(_key(1)))
        store.revoke("h")
        before = store.host_rows()
        with pytest.raises(StoreError, match="ControlConflict"):
            store.enroll("h", encode_key(_key(2)))
        with pytest.raises(StoreError, match="ControlConflict"):
            store.revoke("h")
        with pytest.raises(StoreError, match="no enrolled host named 'nobody'"):
            store.revoke("nobody")
        assert store.host_rows() == before
        assert before[0]["revoked_after"] is not None
    finally:
        store.close()


def test_offline_rekey_keeps_the_enrolment_position(tmp_path: Path) -> None:
    """Enrolling a held host again replaces its key, keeps ``enrolled_after`` and is kept
    in the host's key history."""
    store = LedgerStore(tmp_path)
    try:
        store.enroll("h", encode_key(_key(1)))
        store.write_batch([], 5, hosts_version=store.hosts_version())
        store.commit()
        store.enroll("h", encode_key(_key(2)))
        (row,) = store.host_rows()
        assert (row["public_key"], row["enrolled_after"]) == (encode_key(_key(2)), 0)
        history = store.key_history()
        assert history == [(0, ENROLL, "h", encode_key(_key(1))),
                           (5, REKEY, "h", encode_key(_key(2)))]
        # A segment decided before the offline re-key exports under the key it was sealed with.
        assert keys_at({"h": row["public_key"]}, history, 3) == {"h": encode_key(_key(1))}
    finally:
        store.close()


def test_keys_at_reads_the_key_history() -> None:
    """A segment decided at a position exports under the key of the host's last enrolment
    or re-key before it; a revoke or a later re-key does not change it."""
    history = [(1, ENROLL, "h", b"k1"), (5, REKEY, "h", b"k2"), (7, REVOKE, "h", b"\0")]
    now = {"h": b"k2", "g": b"g1"}
    assert keys_at(now, history, 3) == {"h": b"k1", "g": b"g1"}
    assert keys_at(now, history, 6) == {"h": b"k2", "g": b"g1"}
    assert keys_at(now, history, 9) == {"h": b"k2", "g": b"g1"}


def test_runs_control_and_grant_events_share_one_batch_overlay() -> None:
    """A batch's runs, control events and grant events are one overlay: a refusal taken
    changes nothing and is not kept, whatever the family."""
    refused = Refused("Fork", "", None, None, None)
    for overlay in (BatchRuns(lambda _run: None), BatchControl({}, {}),
                    BatchGrants(GrantBook())):
        assert isinstance(overlay, EventOverlay)
        assert overlay.take(refused) is refused
        assert not overlay.changed and overlay.accepted == []


def test_the_kernels_text_codec_is_the_one_codec_with_the_records_limit() -> None:
    """The kernel's ``encode_text`` is :func:`fleet.text.encode_text` with the record's
    limit and refusal, not a copy of it (one cache, one set of checks)."""
    from fleet_ledger.fleet import text

    assert kernel.encode_text.func is text.encode_text
    assert kernel.encode_text.keywords == {"error": ValueOutOfRange, "limit": kernel.MAX_TEXT}
