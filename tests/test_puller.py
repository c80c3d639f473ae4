"""The ledger's lean pull: raw deliveries from a real nats-server, acks, naks, the hook."""

from __future__ import annotations

import asyncio
import random

import pytest
from nats.protocol.parser import Parser

from fleet.subjects import STREAM
from ledger.puller import BadDelivery, Puller, _parse_fast, ack_all, nak, stream_seq
from ledger.stream import ensure_consumer, ensure_stream
from plumbing.nats_connect import connect
from plumbing.natsd import NatsServer


def test_stream_seq_reads_both_ack_subject_layouts():
    assert stream_seq(b"$JS.ACK.FLEET.ledger.1.42.40.1700000000000000000.7") == 42
    assert stream_seq(b"$JS.ACK.hub.ACCHASH.FLEET.ledger.1.43.41.1700000000000000000.6.tok") == 43
    assert stream_seq(b"$JS.ACK.hub.ACCHASH.FLEET.ledger.2.44.42.1700000000000000000.5") == 44


@pytest.mark.parametrize("reply", [b"_INBOX.abc", b"$JS.ACK.FLEET.ledger.1", b"", b"$JS.NAK.a.b"])
def test_stream_seq_refuses_what_is_not_an_ack_subject(reply: bytes):
    with pytest.raises(BadDelivery):
        stream_seq(reply)


async def _scenario(url: str) -> dict[str, object]:
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
    puller = await Puller(nc, STREAM, durable).start()
    first = await puller.fetch(3, timeout=0.5)
    await nc.publish("side.channel", b"x", headers={"K": "v"})
    rest = await puller.fetch(10, timeout=0.5)  # two left: the no_wait request ends with 404
    empty = await puller.fetch(10, timeout=0.2)
    await nak(nc, rest[-1], 0.0)
    again = await puller.fetch(10, timeout=2.0)
    await ack_all(nc, again[-1])
    await nc.flush()
    info = await js.consumer_info(STREAM, durable)
    await puller.stop()
    hook_removed = nc._process_msg == nc.__class__._process_msg.__get__(nc)
    await nc.publish("side.channel", b"y")
    await nc.flush()
    await asyncio.sleep(0.1)
    await nc.drain()
    return {"first": first, "rest": rest, "empty": empty, "again": again,
            "ack_floor": info.ack_floor.stream_seq, "elsewhere": seen_elsewhere,
            "hook_removed": hook_removed}


def test_puller_delivers_subject_data_and_stream_sequence(nats_server: NatsServer):
    got = asyncio.run(_scenario(nats_server.url))
    first, rest = got["first"], got["rest"]
    assert [(d.seq, d.subject, d.data) for d in first] == [
        (1, "fleet.seg.h0.r0", b"m0"), (2, "fleet.seg.h1.r1", b"m1"), (3, "fleet.seg.h0.r2", b"m2")]
    assert [d.seq for d in rest] == [4, 5]
    assert all(d.reply.startswith("$JS.ACK.") for d in first + rest)
    assert got["empty"] == []
    # The nak'd message comes back; the ack of it (AckAll) acks everything before it.
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
