"""The ledger's lean pull: raw deliveries from a real nats-server, acks, naks, the hook."""

from __future__ import annotations

import asyncio

import pytest

from fleet.subjects import STREAM
from ledger.natsd import NatsServer
from ledger.puller import BadDelivery, Puller, ack_all, nak, stream_seq
from ledger.service import connect
from ledger.stream import ensure_consumer, ensure_stream


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
