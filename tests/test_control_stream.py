"""Control events through a real broker: published by ``fleet host enroll|revoke --nats``,
folded by running ledgers, and rebuilt by a new ledger from the stream alone."""

from __future__ import annotations

import json
from pathlib import Path

from http_helpers import publish

from fleet_ledger.fleet.record.seal import encode_key
from fleet_ledger.plumbing.natsd import NatsServer

from fault_helpers import LedgerProc, fleet, host_key, sealed_run, store_summary, wait_until


def _size(data: Path) -> int:
    return store_summary(data).size if (data / "ledger.db").exists() else -1


def test_published_events_decide_and_a_new_ledger_rebuilds_them(
        nats_server: NatsServer, tmp_path: Path) -> None:
    """A host enrolled by a published event is folded, a revoked one refused, and a ledger
    on an empty store given only the operator's verifier key reaches the same log."""
    url = nats_server.url
    ops = tmp_path / "op"
    vkey = fleet("operator", "keygen", "--out", str(ops)).stdout.strip()
    assert (ops / "operator.vkey").read_text().strip() == vkey
    op = ("--nats", url, "--operator-key", str(ops / "operator.key"))
    a = LedgerProc(url, tmp_path / "a", "--name", "a", "--operator-vkey", vkey)
    b = LedgerProc(url, tmp_path / "b", "--name", "b", "--operator-vkey",
                   str(ops / "operator.vkey"))
    with a, b:
        a.start()
        pub = encode_key(bytes(host_key("h").verify_key))
        out = json.loads(fleet("host", "enroll", "h", "--pubkey", pub, *op, "--json").stdout)
        assert out["event"] == "enroll" and out["stream_seq"] == 1
        first = sealed_run("h", "published-1", "eec")
        publish(url, first.messages)
        wait_until(lambda: _size(a.data) == 3, 30, "the enrolled host's segments")
        fleet("host", "revoke", "h", *op)
        publish(url, sealed_run("h", "published-2", "e").messages)
        wait_until(lambda: ("RevokedHost" in {r for _, r in store_summary(a.data).rejections}),
                   30, "the revoked host's segment refused")
        b.start()
        wait_until(lambda: _size(b.data) == 3 and store_summary(b.data).watermark == 6, 30,
                   "the rebuilt ledger")
        sa, sb = store_summary(a.data), store_summary(b.data)
        assert (sa.size, sa.root, sa.segments, sa.rejections) == (
            sb.size, sb.root, sb.segments, sb.rejections)


def test_publishing_needs_the_operator_key_or_data(tmp_path: Path) -> None:
    """``fleet host enroll`` without --data names what it needs, in one line, exit 2."""
    r = fleet("host", "enroll", "h", "--pubkey", "x", "--nats", "nats://127.0.0.1:1",
              check=False)
    assert r.returncode == 2 and "--operator-key" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_rotation_hands_control_to_the_next_operator_key(nats_server: NatsServer,
                                                           tmp_path: Path) -> None:
    """After ``fleet operator rotate``, the old key's events are UnknownOperator and the
    new key's are folded; a ledger configured with the first key only follows."""
    url = nats_server.url
    vkey = fleet("operator", "keygen", "--out", str(tmp_path / "op")).stdout.strip()
    fleet("operator", "keygen", "--out", str(tmp_path / "op2"))
    old = ("--nats", url, "--operator-key", str(tmp_path / "op" / "operator.key"))
    new = ("--nats", url, "--operator-key", str(tmp_path / "op2" / "operator.key"))
    with LedgerProc(url, tmp_path / "a", "--operator-vkey", vkey) as a:
        a.start()
        fleet("operator", "rotate", "--new-vkey", str(tmp_path / "op2" / "operator.vkey"),
              *old)
        done = {name: fleet("host", "enroll", name, "--pubkey",
                            encode_key(bytes(host_key(name).verify_key)), *op, check=False)
                for name, op in (("h-old", old), ("h-new", new))}
        # The ledger's decision is read back: the retired key's event is refused, exit 1.
        assert done["h-old"].returncode == 1 and "UnknownOperator" in done["h-old"].stderr
        assert "the ledger refused it: UnknownOperator" in done["h-old"].stdout
        assert done["h-new"].returncode == 0, done["h-new"]
        assert "the ledger accepted it" in done["h-new"].stdout
        wait_until(lambda: store_summary(a.data).watermark == 3, 30, "three events folded")
        assert store_summary(a.data).rejections == [(2, "UnknownOperator")]
        status = json.loads(fleet("status", "--json", "--nats", url).stdout)
        assert [h["name"] for h in status["hosts"]] == ["h-new"]


def test_a_published_rekey_moves_the_host_to_its_new_key(nats_server: NatsServer,
                                                         tmp_path: Path) -> None:
    """``fleet host rekey --nats``: the host's later segments are folded under the new key,
    one sealed with the old key after the re-key is BadSeal, earlier ones stay."""
    from control_helpers import rekeyed, run_with_key

    url = nats_server.url
    vkey = fleet("operator", "keygen", "--out", str(tmp_path / "op")).stdout.strip()
    op = ("--nats", url, "--operator-key", str(tmp_path / "op" / "operator.key"))
    with LedgerProc(url, tmp_path / "a", "--operator-vkey", vkey) as a:
        a.start()
        fleet("host", "enroll", "h", "--pubkey", encode_key(bytes(host_key("h").verify_key)),
              *op)
        old = run_with_key("h", host_key("h"), "before-rekey", "eee")
        publish(url, old.messages[:2])
        fleet("host", "rekey", "h", "--pubkey",
              encode_key(bytes(rekeyed("h", 1).verify_key)), *op)
        publish(url, old.messages[2:] + run_with_key("h", rekeyed("h", 1), "after", "ee")
                .messages)
        wait_until(lambda: store_summary(a.data).watermark == 7, 30, "all folded")
        s = store_summary(a.data)
        assert s.size == 4 and s.rejections == [(5, "BadSeal")]
