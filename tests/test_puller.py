"""The ledger's pullers: raw deliveries from a real nats-server, acks, naks, the lean
puller's hook, and the choice between it and the fallback on nats-py's public fetch."""

from __future__ import annotations

import asyncio
import logging
import random
import subprocess
import sys
import time

import pytest
from nats.aio.client import Client
from nats.protocol import parser as nats_parser
from nats.protocol.parser import Parser

from fleet_ledger.fleet.subjects import STREAM
from fleet_ledger.ledger import pull
from fleet_ledger.ledger.pull import (
    BadDelivery,
    FetchPuller,
    PullerState,
    PullerUnavailable,
    ack_all,
    nak,
    open_puller,
    stream_seq,
)
from fleet_ledger.ledger.puller import Puller, _parse_fast
from fleet_ledger.ledger.service import Ledger, LedgerConfig
from fleet_ledger.ledger.stream import ensure_consumer, ensure_stream
from fleet_ledger.plumbing.nats_connect import connect
from fleet_ledger.plumbing.natsd import NatsServer


def test_stream_seq_reads_both_ack_subject_layouts():
    assert stream_seq(b"$JS.ACK.FLEET.ledger.1.42.40.1700000000000000000.7") == 42
    assert stream_seq(b"$JS.ACK.hub.ACCHASH.FLEET.ledger.1.43.41.1700000000000000000.6.tok") == 43
    assert stream_seq(b"$JS.ACK.hub.ACCHASH.FLEET.ledger.2.44.42.1700000000000000000.5") == 44


def test_ack_fields_and_publish_time_read_one_layout():
    from fleet_ledger.ledger.metrics import publish_time_ns
    from fleet_ledger.ledger.pull import ack_fields

    common = "$JS.ACK.FLEET.ledger.1.42.40.1700000000000000001.7"
    domain = "$JS.ACK.hub.ACCHASH.FLEET.ledger.1.43.41.1700000000000000002.6.tok"
    assert ack_fields(common.encode()) == (42, 1700000000000000001)
    assert ack_fields(domain.encode()) == (43, 1700000000000000002)
    assert publish_time_ns(common) == 1700000000000000001
    assert publish_time_ns(domain) == 1700000000000000002
    assert publish_time_ns("_INBOX.abc") is None
    assert publish_time_ns("$JS.ACK.FLEET.ledger.1.42.40.soon.7") is None


@pytest.mark.parametrize("reply", [b"_INBOX.abc", b"$JS.ACK.FLEET.ledger.1", b"", b"$JS.NAK.a.b"])
def test_stream_seq_refuses_what_is_not_an_ack_subject(reply: bytes):
    with pytest.raises(BadDelivery):
        stream_seq(reply)


async def _scenario(url: str, kind: str) -> dict[str, object]:
    nc = await connect([url], name="puller-test")
    js = nc.jetstream(timeout=10.0)
    await ensure_stream(js)
    for i in range(5):
        await js.publish(f"fleet.seg.h{i % 2}.r{i}", b"m%d" % i,
                         headers={"Nats-Msg-Id": f"id{i}"})
    # Another subscription on the same connection keeps nats-py's full message handling.
    seen_elsewhere: list[tuple[str, dict[str, str] | None]] = []

    async def elsewhere(msg):  # type: ignore[no-untyped-def]
        seen_elsewhere.append((msg.subject, msg.headers))

    await nc.subscribe("side.channel", cb=elsewhere)
    durable = await ensure_consumer(js, "pulltest", 0)
    puller = await open_puller(nc, js, STREAM, durable, PullerState(kind, "the test"))
    first = await puller.fetch(3, timeout=0.5)
    await nc.publish("side.channel", b"x", headers={"K": "v"})
    rest = await puller.fetch(10, timeout=0.5)  # two left: the no_wait request ends with 404
    empty = await puller.fetch(10, timeout=0.2)
    started = time.monotonic()
    at_once = await puller.fetch(10, timeout=5.0, linger=False)  # nothing there: no waiting
    at_once_s = time.monotonic() - started
    # A lingering fetch returns the first message to arrive, not at its timeout.
    publish = asyncio.create_task(_publish_later(js, 0.2, "fleet.seg.h1.late", b"late"))
    started = time.monotonic()
    late = await puller.fetch(10, timeout=5.0)
    late_s = time.monotonic() - started
    await publish
    await nak(nc, rest[-1], 0.0)
    again = await puller.fetch(10, timeout=2.0)
    await ack_all(nc, again[-1])
    await nc.flush()
    # The server applies an ack after it has read it: on a loaded machine a consumer-info
    # request right behind it can still see the floor before it.
    deadline = asyncio.get_running_loop().time() + 5.0
    info = await js.consumer_info(STREAM, durable)
    while info.ack_floor.stream_seq < 5 and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
        info = await js.consumer_info(STREAM, durable)
    await puller.stop()
    hook_removed = nc._process_msg == nc.__class__._process_msg.__get__(nc)
    await nc.publish("side.channel", b"y")
    await nc.flush()
    await asyncio.sleep(0.1)
    await nc.drain()
    return {"first": first, "rest": rest, "empty": empty, "again": again,
            "ack_floor": info.ack_floor.stream_seq, "elsewhere": seen_elsewhere,
            "hook_removed": hook_removed, "kind": puller.kind, "at_once": at_once,
            "at_once_s": at_once_s, "late": late, "late_s": late_s}


async def _publish_later(js, delay: float, subject: str, data: bytes) -> None:  # type: ignore[no-untyped-def]
    await asyncio.sleep(delay)
    await js.publish(subject, data)


@pytest.mark.parametrize("kind", ["lean", "fetch"])
def test_puller_delivers_subject_data_and_stream_sequence(nats_server: NatsServer, kind: str):
    """Both pullers (the lean hook, and the fallback on nats-py's fetch) give the same
    deliveries, acks and naks, and leave the connection's other subscriptions alone."""
    got = asyncio.run(_scenario(nats_server.url, kind))
    assert got["kind"] == kind
    first, rest = got["first"], got["rest"]
    assert [(d.seq, d.subject, d.data) for d in first] == [
        (1, "fleet.seg.h0.r0", b"m0"), (2, "fleet.seg.h1.r1", b"m1"), (3, "fleet.seg.h0.r2", b"m2")]
    assert [d.seq for d in rest] == [4, 5]
    assert all(d.reply.startswith("$JS.ACK.") for d in first + rest)
    assert got["empty"] == []
    assert got["at_once"] == [] and got["at_once_s"] < 2.0
    # The nak'd message comes back; the ack of it (AckAll) acks everything before it.
    assert [(d.seq, d.subject, d.data) for d in got["late"]] == [(6, "fleet.seg.h1.late", b"late")]
    assert got["late_s"] < 2.5
    assert [(d.seq, d.data) for d in got["again"]] == [(5, b"m4")]
    assert got["ack_floor"] == 5
    # The other subscription got its messages with parsed headers, during and after.
    assert got["elsewhere"] == [("side.channel", {"K": "v"}), ("side.channel", None)]
    assert got["hook_removed"]


class _Connection:
    """What nats-py's parser calls on its client, recorded (the frames not the puller's)."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, ...]] = []
        self.puller: Puller | None = None

    async def _process_msg(self, sid, subject, reply, data, headers):  # type: ignore[no-untyped-def]
        if self.puller is not None and sid == self.puller._sid:  # as the hook routes it
            self.puller._take(subject, reply, data, headers)
            return
        self.calls.append(("msg", sid, subject, reply, data, headers))

    async def _process_ping(self) -> None:
        self.calls.append(("ping",))

    async def _process_pong(self) -> None:
        self.calls.append(("pong",))

    async def _process_info(self, info) -> None:  # type: ignore[no-untyped-def]
        self.calls.append(("info",))

    async def _process_err(self, err) -> None:  # type: ignore[no-untyped-def]
        self.calls.append(("err", err))


def _hmsg(sid: int, subject: bytes, reply: bytes, headers: bytes, data: bytes) -> bytes:
    return b"HMSG %s %d %s %d %d\r\n%s%s\r\n" % (subject, sid, reply, len(headers),
                                                  len(headers) + len(data), headers, data)


@pytest.mark.parametrize("seed", range(6))
def test_frames_cut_in_any_chunks_reach_the_right_handler(seed: int) -> None:
    """The puller's parser hook, fed one byte stream in random chunks: its own deliveries
    in order with their sequences, a status ending the request, and every other frame
    (another subscription's HMSG, a MSG, PING) handed to nats-py's parser intact. (After a
    plain MSG, nats-py's parser reads on; the puller's frames then reach it through the
    client's hooked ``_process_msg``, as this stand-in for the client routes them.)"""
    rng = random.Random(seed)
    frames, mine = [], []
    for seq in range(1, 41):
        reply = b"$JS.ACK.FLEET.led.1.%d.%d.1732900000000000000.%d" % (seq, seq, 40 - seq)
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
        frames.append(_hmsg(7, b"fleet.seg.h.r%d" % seq, reply, b"NATS/1.0\r\nK: v\r\n\r\n",
                            data))
        mine.append((seq, f"fleet.seg.h.r{seq}", data, reply.decode()))
        if seq % 9 == 0:
            frames.append(_hmsg(3, b"side", b"", b"NATS/1.0\r\nA: b\r\n\r\n", b"side%d" % seq))
        if seq % 13 == 0:
            frames.append(b"MSG plain 4 5\r\nhello\r\nPING\r\n")
    frames.append(_hmsg(7, b"inbox", b"", b"NATS/1.0 404 No Messages\r\n\r\n", b""))
    stream = b"".join(frames)

    async def run() -> tuple[Puller, _Connection]:
        nc = _Connection()
        parser = Parser(nc)  # type: ignore[arg-type]
        puller = Puller.__new__(Puller)
        puller._sid, puller._buf, puller._want = 7, [], 10**6
        puller._ended, puller._error, puller._wake = False, None, asyncio.Event()
        nc.puller = puller
        pos = 0
        while pos < len(stream):
            step = rng.choice([1, 7, 64, 500, 4096])
            await _parse_fast(parser, puller, stream[pos:pos + step])
            pos += step
        assert not parser.buf
        return puller, nc

    puller, nc = asyncio.run(run())
    assert [(d.seq, d.subject, d.data, d.reply) for d in puller._buf] == mine
    assert puller._ended and puller._error is None
    assert [c for c in nc.calls if c[0] == "msg" and c[1] == 3] == [
        ("msg", 3, b"side", b"", b"side%d" % s, b"NATS/1.0\r\nA: b\r\n\r\n")
        for s in (9, 18, 27, 36)]
    assert [c[:5] for c in nc.calls if c[0] == "msg" and c[1] == 4] == [
        ("msg", 4, b"plain", b"", b"hello")] * 3
    assert [c for c in nc.calls if c[0] == "ping"] == [("ping",)] * 3


# -- the fallback puller, and the choice between the two ---------------------------------


async def _same_stream(url: str) -> dict[str, list[tuple[int, str, bytes, str]]]:
    """One stream of 40 messages read to its end by each puller through a consumer of its
    own, in batches of 7, 3 and 16 (the fetch puller keeps what exceeds a batch)."""
    rng = random.Random(5)
    nc = await connect([url], name="puller-test")
    js = nc.jetstream(timeout=10.0)
    await ensure_stream(js)
    for i in range(40):
        await js.publish(f"fleet.seg.h{i % 3}.r{i}", rng.randbytes(rng.randrange(1, 3000)),
                         headers={"Nats-Msg-Id": f"same{i}"})
    got = {}
    for kind in ("lean", "fetch"):
        durable = await ensure_consumer(js, f"same-{kind}", 0)
        puller = await open_puller(nc, js, STREAM, durable, PullerState(kind, "the test"))
        out: list[tuple[int, str, bytes, str]] = []
        for size in [7, 3, 16] * 20:
            batch = await puller.fetch(size, timeout=0.5)
            assert len(batch) <= size
            if not batch:
                break
            out.extend((d.seq, d.subject, d.data, d.reply) for d in batch)
        await puller.stop()
        got[kind] = out
    await nc.drain()
    return got


def test_the_fetch_puller_delivers_what_the_lean_one_does(nats_server: NatsServer):
    got = asyncio.run(_same_stream(nats_server.url))
    lean, fetch = ([(seq, subject, data) for seq, subject, data, _ in got[k]]
                   for k in ("lean", "fetch"))
    assert lean == fetch
    assert [seq for seq, _, _ in lean] == list(range(1, 41))
    for kind in ("lean", "fetch"):
        assert all(r.startswith(f"$JS.ACK.{STREAM}.ledger-same-{kind}.") for *_, r in got[kind])


@pytest.mark.parametrize("version", ["2.17.0", "2.15.4", "3.0.0", "2.x", None])
def test_a_nats_py_version_outside_the_tested_set_is_refused(
        monkeypatch: pytest.MonkeyPatch, version: str | None):
    monkeypatch.setattr(pull, "nats_py_version", lambda: version)
    reason = pull.lean_check()
    assert reason is not None
    if version is None:
        assert "version is unknown" in reason
    else:
        assert f"nats-py {version} is not a version the lean puller is tested against" in reason
        assert "2.16.x" in reason


def test_a_tested_nats_py_version_with_its_private_parts_passes(monkeypatch):
    assert pull.lean_check() is None  # the installed one: the pin and the set agree
    monkeypatch.setattr(pull, "nats_py_version", lambda: "2.16.9")
    assert pull.lean_check() is None


async def _process_msg_of_another_shape(self, sid, subject, reply, data):  # type: ignore[no-untyped-def]
    """A ``_process_msg`` of another shape (one argument fewer)."""


@pytest.mark.parametrize("missing, named", [
    (lambda mp: mp.delattr(nats_parser, "AWAITING_CONTROL_LINE"),
     "nats.protocol.parser.AWAITING_CONTROL_LINE"),
    (lambda mp: mp.delattr(nats_parser, "MAX_CONTROL_LINE_SIZE"),
     "nats.protocol.parser.MAX_CONTROL_LINE_SIZE"),
    (lambda mp: mp.delattr(Parser, "parse"), "nats.protocol.parser.Parser.parse"),
    (lambda mp: mp.delattr(Client, "_process_msg"), "Client._process_msg"),
    (lambda mp: mp.setattr(Client, "_process_msg", _process_msg_of_another_shape),
     "Client._process_msg"),
], ids=["AWAITING_CONTROL_LINE", "MAX_CONTROL_LINE_SIZE", "parse", "no _process_msg",
        "_process_msg of another shape"])
def test_a_missing_private_part_is_named(monkeypatch: pytest.MonkeyPatch, missing, named: str):
    """Checked on nats-py's modules with no connection open (none would run without them)."""
    missing(monkeypatch)
    reason = pull.lean_check()
    assert reason is not None and f"nats-py {pull.nats_py_version()} lacks" in reason
    assert named in reason


async def _choices(url: str) -> tuple[list[tuple[str, str | None, list[tuple[int, bytes]]]],
                                      int]:
    """open_puller in ``auto`` run twice on a connection (the fold loop starts its puller
    again after a failure): (kind, reason, deliveries) each time, and the fallbacks
    counted."""
    nc = await connect([url], name="puller-test")
    js = nc.jetstream(timeout=10.0)
    await ensure_stream(js)
    for i in range(3):
        await js.publish(f"fleet.seg.h.r{i}", b"c%d" % i)
    durable = await ensure_consumer(js, "choice", 0)
    state = PullerState()
    out = []
    for _ in range(2):
        puller = await open_puller(nc, js, STREAM, durable, state)
        assert puller.kind == state.kind
        got = await puller.fetch(10, timeout=1.0)
        out.append((state.kind, state.reason, [(d.seq, d.data) for d in got]))
        await puller.stop()
    await nc.drain()
    return out, state.fallbacks


def _changed_process_msg(mp: pytest.MonkeyPatch) -> None:
    """A nats-py whose ``_process_msg`` grew a parameter (it still works, for the
    connection's own sake, but the lean hook would call it with the old arguments)."""
    original = Client._process_msg

    async def changed(self, sid, subject, reply, data, headers, trace=None):  # type: ignore[no-untyped-def]
        await original(self, sid, subject, reply, data, headers)

    mp.setattr(Client, "_process_msg", changed)


@pytest.mark.parametrize("change, named", [
    (lambda mp: mp.setattr(pull, "nats_py_version", lambda: "2.99.0"),
     "nats-py 2.99.0 is not a version the lean puller is tested against"),
    (_changed_process_msg, "lacks nats.aio.client.Client._process_msg(sid, subject, reply"),
    (lambda mp: mp.setitem(sys.modules, "fleet_ledger.ledger.puller", None),
     "the lean puller does not import"),
], ids=["version", "_process_msg", "lean module"])
def test_auto_falls_back_to_fetch_and_warns_once(
        nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture, change, named: str):
    """Through a real server: the fetch puller runs and delivers, twice, counted twice; the
    warning naming the version and the reason is logged once."""
    monkeypatch.setattr(pull, "_logged", set())
    change(monkeypatch)
    with caplog.at_level(logging.INFO, logger=pull.__name__):
        got = asyncio.run(_choices(nats_server.url))
    delivered = [(1, b"c0"), (2, b"c1"), (3, b"c2")]
    [(kind1, reason1, first), (kind2, reason2, second)], fallbacks = got
    assert kind1 == kind2 == "fetch" and fallbacks == 2
    assert reason1 == reason2 and reason1 is not None and named in reason1
    # Not acked by the first puller, the three come back only after the ack wait.
    assert first == delivered and second == []
    warnings = [r for r in caplog.records if r.name == pull.__name__]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    assert reason1 in warnings[0].getMessage()
    assert f"nats-py {pull.nats_py_version()}" in warnings[0].getMessage()


def test_auto_runs_the_lean_puller_on_the_tested_version(nats_server: NatsServer,
                                                        caplog: pytest.LogCaptureFixture):
    with caplog.at_level(logging.INFO, logger=pull.__name__):
        got = asyncio.run(_choices(nats_server.url))
    choices, fallbacks = got
    assert [(k, r) for k, r, _ in choices] == [("lean", None), ("lean", None)]
    assert fallbacks == 0
    assert not [r for r in caplog.records if r.name == pull.__name__]


def test_forcing_a_puller_by_config_or_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(pull.PULLER_ENV, raising=False)
    assert pull.puller_mode() == ("auto", None)
    monkeypatch.setenv(pull.PULLER_ENV, "fetch")
    assert pull.puller_mode() == ("fetch", "FLEET_PULLER=fetch")
    assert pull.puller_mode("lean") == ("lean", "puller = lean in the ledger's config")
    monkeypatch.setenv(pull.PULLER_ENV, "auto")
    assert pull.puller_mode() == ("auto", None)
    monkeypatch.setenv(pull.PULLER_ENV, "fast")
    with pytest.raises(ValueError, match="FLEET_PULLER must be one of auto, lean, fetch"):
        pull.puller_mode()
    with pytest.raises(ValueError, match=r"LedgerConfig\.puller must be one of"):
        pull.puller_mode("quick")


def test_a_ledger_with_a_bad_puller_setting_does_not_start(tmp_path, monkeypatch):
    monkeypatch.setenv(pull.PULLER_ENV, "fecth")
    with pytest.raises(ValueError, match="FLEET_PULLER"):
        Ledger(LedgerConfig(data_dir=tmp_path / "led", servers=["nats://127.0.0.1:1"]))
    assert not (tmp_path / "led").exists()  # refused before the store was opened


async def _forced(url: str) -> list[object]:
    nc = await connect([url], name="puller-test")
    js = nc.jetstream(timeout=10.0)
    await ensure_stream(js)
    durable = await ensure_consumer(js, "forced", 0)
    out: list[object] = []
    try:
        fetch = PullerState(*pull.puller_mode())  # FLEET_PULLER=fetch, on a tested version
        puller = await open_puller(nc, js, STREAM, durable, fetch)
        out += [type(puller), fetch.as_json()]
        await puller.stop()
        lean = PullerState("lean", "the test")
        puller = await open_puller(nc, js, STREAM, durable, lean)  # no version check
        out.append(type(puller))
        await puller.stop()
    finally:
        await nc.drain()
    return out


def test_forced_pullers(nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch,
                        caplog: pytest.LogCaptureFixture):
    """``fetch`` forced runs the fetch puller on a version the lean one would run on (logged
    at INFO, not as a warning); ``lean`` forced runs the lean one on an untested version,
    and refuses to start without the private parts it needs."""
    monkeypatch.setattr(pull, "_logged", set())
    monkeypatch.setenv(pull.PULLER_ENV, "fetch")
    version = pull.nats_py_version()
    with caplog.at_level(logging.INFO, logger=pull.__name__):
        first = asyncio.run(_forced(nats_server.url))[:2]
    assert first == [FetchPuller, {"kind": "fetch", "mode": "fetch", "fallbacks": 1,
                                   "reason": "forced by FLEET_PULLER=fetch",
                                   "nats_py": version}]
    assert [r.levelno for r in caplog.records if r.name == pull.__name__] == [logging.INFO]
    monkeypatch.setattr(pull, "nats_py_version", lambda: "9.9.9")
    assert asyncio.run(_forced(nats_server.url))[2] is Puller
    _changed_process_msg(monkeypatch)
    with pytest.raises(PullerUnavailable, match=r"Client\._process_msg"):
        asyncio.run(_forced(nats_server.url))


def test_the_ledger_imports_and_chooses_without_the_lean_pullers_names():
    """A nats-py without the parser constants the lean puller imports: the ledger's service
    still imports (it never imports the lean module), and the check names what is gone."""
    code = (
        "import sys\n"
        "import nats.protocol.parser as p\n"
        "del p.AWAITING_CONTROL_LINE, p.MAX_CONTROL_LINE_SIZE\n"
        "import fleet_ledger.ledger.service, fleet_ledger.ledger.pull\n"
        "assert 'fleet_ledger.ledger.puller' not in sys.modules,"
        " 'the service imported the lean puller'\n"
        "print(fleet_ledger.ledger.pull.lean_check())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout.strip()
    assert out.endswith("lacks nats.protocol.parser.AWAITING_CONTROL_LINE"), out
