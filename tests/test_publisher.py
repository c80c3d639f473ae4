"""The publisher against a real nats-server: order, headers, lost acks, forks, restarts."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable

import nats
import nats.errors
import nats.js.errors
import nkeys
import pytest
from nats.js.errors import APIError

from fleet_ledger.agents.outbox import Outbox
from fleet_ledger.agents.publisher import Backoff, Publisher, Stopped
from fleet_ledger.fleet.subjects import STREAM, segment_subject
from fleet_ledger.plumbing.nats_connect import connect
from fleet_ledger.plumbing.natsd import NatsCluster, NatsServer

HOST = "host1"
RUN_A = "b3:" + "A" * 43
RUN_B = "b3:" + "B" * 43
FAST = Backoff(initial=0.02, maximum=0.2)


def _seg(run: str, idx: int) -> tuple[str, str, bytes]:
    """(subject, msg id, payload) of a made-up segment ``idx`` of ``run``."""
    return (
        segment_subject(HOST, run),
        f"b3:{run[3:8]}-seg-{idx}",
        b"segment %d of %s" % (idx, run[3:8].encode()),
    )


def _put(box: Outbox, run: str, idx: int, kind: str = "executed") -> int:
    subject, msg_id, payload = _seg(run, idx)
    return box.put(run, idx, kind, subject, msg_id, payload)  # type: ignore[arg-type]


def _fill(box: Outbox, runs: list[str], per_run: int) -> int:
    """Put ``per_run`` segments of each run, interleaved; return how many."""
    for idx in range(per_run):
        for run in runs:
            _put(box, run, idx)
    return per_run * len(runs)


def _assert_each_once_in_order(box: Outbox, messages: list, runs: list[str], per_run: int) -> None:
    """The stream holds every segment of ``runs`` exactly once, each run in idx order."""
    mine = [m for m in messages if m[1] in {segment_subject(HOST, r) for r in runs}]
    ids = [m[2]["Nats-Msg-Id"] for m in mine]
    assert len(ids) == per_run * len(runs) == len(set(ids))
    for run in runs:
        ordered = [m for m in mine if m[1] == segment_subject(HOST, run)]
        assert [m[3] for m in ordered] == [_seg(run, i)[2] for i in range(per_run)]
        assert box.last_acked_seq(run) == ordered[-1][0]


async def _with_js(
    servers: str | list[str],
    body: Callable[[nats.aio.client.Client, nats.js.JetStreamContext], Awaitable[object]],
    replicas: int = 1,
) -> object:
    nc = await connect([servers] if isinstance(servers, str) else servers,
                       reconnect_time_wait=0.1)
    try:
        js = nc.jetstream()
        # A cluster just started may not yet count every peer online for an R3 placement
        # (error 10005, seen on a loaded machine): ask again for a while.
        deadline = asyncio.get_running_loop().time() + 30
        while True:
            try:
                await js.add_stream(name=STREAM, subjects=["fleet.seg.>"],
                                    num_replicas=replicas)
                break
            except nats.js.errors.BadRequestError as exc:
                if exc.err_code != 10005 or asyncio.get_running_loop().time() > deadline:
                    raise
                await asyncio.sleep(0.5)
        return await body(nc, js)
    finally:
        await nc.close()


async def _messages(js: nats.js.JetStreamContext) -> list[tuple[int, str, dict[str, str], bytes]]:
    """Every message of the stream as (seq, subject, headers, data)."""
    info = await js.stream_info(STREAM)
    out = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        msg = await js.get_msg(STREAM, seq)
        out.append((msg.seq, msg.subject, dict(msg.headers or {}), msg.data or b""))
    return out


async def _publish_raw(
    js: nats.js.JetStreamContext, run: str, idx: int, expected: int, msg_id: str | None = None
):
    subject, own_id, payload = _seg(run, idx)
    headers = {
        "Nats-Msg-Id": msg_id or own_id,
        "Nats-Expected-Last-Subject-Sequence": str(expected),
    }
    for _ in range(100):  # a new R3 stream may not answer at once
        try:
            return await js.publish(subject, payload, headers=headers)
        except nats.js.errors.NoStreamResponseError:
            await asyncio.sleep(0.1)
    raise AssertionError("the stream never answered")


def test_publishes_each_run_in_order_with_its_headers(nats_server: NatsServer, tmp_path):
    """Each segment carries its msg id and the previous stream seq of its run (0 first)."""
    box = Outbox(tmp_path / "o.db")
    for idx in range(3):
        _put(box, RUN_A, idx)
        _put(box, RUN_B, idx)

    async def body(nc, js):
        report = await Publisher(box, js, backoff=FAST).drain(timeout=20)
        return report, await _messages(js)

    report, messages = asyncio.run(_with_js(nats_server.url, body))
    assert (report.acked, report.duplicates, report.stopped, report.remaining) == (6, 0, [], 0)
    assert len(messages) == 6
    for run in (RUN_A, RUN_B):
        mine = [m for m in messages if m[1] == segment_subject(HOST, run)]
        assert [m[2]["Nats-Msg-Id"] for m in mine] == [_seg(run, i)[1] for i in range(3)]
        assert [m[3] for m in mine] == [_seg(run, i)[2] for i in range(3)]
        expected = [m[2]["Nats-Expected-Last-Subject-Sequence"] for m in mine]
        assert expected == ["0", str(mine[0][0]), str(mine[1][0])]
        assert box.last_acked_seq(run) == mine[-1][0]
    assert box.pending() == []


def test_server_reads_expected_seq_zero_as_empty_subject(nats_server: NatsServer):
    """Expected-last-subject-sequence 0 admits the first message of a subject only."""

    async def body(nc, js):
        first = await _publish_raw(js, RUN_A, 0, expected=0)
        with pytest.raises(APIError) as refused:
            await _publish_raw(js, RUN_A, 1, expected=0)
        return first, refused.value

    first, refused = asyncio.run(_with_js(nats_server.url, body))
    assert first.seq == 1
    assert refused.err_code == 10071 and refused.description == "wrong last sequence: 1"


def test_r1_stream_checks_expected_seq_before_dedup(nats_server: NatsServer):
    """On an R1 stream a lost-ack resend is refused as wrong last sequence, not a duplicate."""

    async def body(nc, js):
        first = await _publish_raw(js, RUN_A, 0, expected=0)
        with pytest.raises(APIError) as refused:
            await _publish_raw(js, RUN_A, 0, expected=0)
        return first, refused.value, await _messages(js)

    first, refused, messages = asyncio.run(_with_js(nats_server.url, body))
    assert first.seq == 1
    assert refused.err_code == 10071 and refused.description == "wrong last sequence: 1"
    assert len(messages) == 1


def test_lost_ack_is_recognised_and_acked_once(nats_server: NatsServer, tmp_path):
    """A segment that landed but whose ack was lost is acked at its first seq, stored once."""
    box = Outbox(tmp_path / "o.db")
    row = _put(box, RUN_A, 0)

    async def body(nc, js):
        landed = await _publish_raw(js, RUN_A, 0, expected=0)  # the ack never reached the outbox
        report = await Publisher(box, js, backoff=FAST).drain(timeout=20)
        _put(box, RUN_A, 1)
        follow = await Publisher(box, js, backoff=FAST).drain(timeout=20)
        return landed, report, follow, await _messages(js)

    landed, report, follow, messages = asyncio.run(_with_js(nats_server.url, body))
    assert (report.acked, report.duplicates, report.stopped) == (1, 1, [])
    assert box.get(row).acked_seq == landed.seq  # type: ignore[union-attr]
    assert (follow.acked, follow.duplicates) == (1, 0)
    assert [m[0] for m in messages] == [1, 2]
    assert messages[1][2]["Nats-Expected-Last-Subject-Sequence"] == "1"


def test_a_fork_stops_the_run_and_overwrites_nothing(nats_server: NatsServer, tmp_path):
    """A foreign message on a run's subject stops that run as a fork; other runs go on."""
    box = Outbox(tmp_path / "o.db")
    _put(box, RUN_A, 0)
    seen: list[Stopped] = []

    async def body(nc, js):
        await Publisher(box, js, backoff=FAST).drain(timeout=20)
        await _publish_raw(js, RUN_A, 1, expected=1, msg_id="b3:someone-else")  # seq 2
        _put(box, RUN_A, 1)
        _put(box, RUN_A, 2)
        _put(box, RUN_B, 0)
        report = await Publisher(box, js, backoff=FAST, on_stop=seen.append).drain(timeout=20)
        return report, await _messages(js)

    report, messages = asyncio.run(_with_js(nats_server.url, body))
    assert [s.kind for s in report.stopped] == ["fork"] and seen == report.stopped
    assert seen[0].run == RUN_A and seen[0].idx == 1
    assert "b3:someone-else" in seen[0].reason
    assert box.stopped_runs() == {RUN_A: seen[0].reason}
    assert [(m[0], m[2]["Nats-Msg-Id"]) for m in messages] == [
        (1, _seg(RUN_A, 0)[1]),
        (2, "b3:someone-else"),
        (3, _seg(RUN_B, 0)[1]),
    ]
    assert report.acked == 1 and box.pending() == []
    assert box.stats().stopped_count == 2


def test_retries_until_the_stream_exists_and_reports_remaining_on_timeout(
    nats_server: NatsServer, tmp_path
):
    """With no stream the publisher retries (no responders) and, timed out, keeps the row."""
    box = Outbox(tmp_path / "o.db")
    _put(box, RUN_A, 0)

    async def scenario():
        nc = await connect([nats_server.url])
        try:
            js = nc.jetstream()
            publisher = Publisher(box, js, backoff=FAST)
            early = await publisher.drain(timeout=0.5)
            await js.add_stream(name=STREAM, subjects=["fleet.seg.>"])
            late = await publisher.drain(timeout=20)
            return early, late
        finally:
            await nc.close()

    early, late = asyncio.run(scenario())
    assert (early.acked, early.remaining) == (0, 1) and early.retries > 0
    assert (late.acked, late.remaining) == (1, 0)


def test_server_restart_mid_drain_loses_and_duplicates_nothing(nats_server: NatsServer, tmp_path):
    """A server killed and restarted during a drain: every segment lands once, in run order."""
    box = Outbox(tmp_path / "o.db")
    runs, per_run = [f"b3:{c * 43}" for c in "CDEF"], 150
    total = _fill(box, runs, per_run)

    async def body(nc, js):
        publisher = Publisher(box, js, backoff=FAST, ack_timeout=0.5)
        drain = asyncio.ensure_future(publisher.drain(timeout=60))
        while box.stats().pending_count > total - 100:
            await asyncio.sleep(0.005)
        assert not drain.done()
        await asyncio.to_thread(nats_server.restart, hard=True)
        report = await drain
        assert nc.stats["reconnects"] >= 1
        return report, await _messages(js)

    started = time.monotonic()
    report, messages = asyncio.run(_with_js(nats_server.url, body))
    assert time.monotonic() - started < 60
    assert report.remaining == 0 and report.stopped == []
    assert report.acked == total
    _assert_each_once_in_order(box, messages, runs, per_run)


def test_run_forever_wakes_on_put_and_stops(nats_server: NatsServer, tmp_path):
    """run_forever sends a segment soon after put() (not at its poll) and returns on stop."""
    box = Outbox(tmp_path / "o.db")

    async def body(nc, js):
        stop = asyncio.Event()
        task = asyncio.ensure_future(Publisher(box, js, backoff=FAST).run_forever(stop, poll=60))
        await asyncio.sleep(0.2)
        row = _put(box, RUN_A, 0)
        deadline = time.monotonic() + 5
        while box.get(row).state != "acked":  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the put did not wake the publisher"
            await asyncio.sleep(0.01)
        stop.set()
        return await asyncio.wait_for(task, 5)

    report = asyncio.run(_with_js(nats_server.url, body))
    assert report.acked == 1 and report.remaining == 0


def test_connect_passes_the_nkey_seed_file(tmp_path):
    """connect(nkey=path) authenticates as that nkey user; without it the server refuses."""
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    public = nkeys.from_seed(bytearray(seed)).public_key.decode()
    seed_file = tmp_path / "host1.nk"
    seed_file.write_bytes(seed)
    auth = f"authorization {{ users = [ {{ nkey: {public} }} ] }}"

    async def scenario(url: str) -> int:
        with pytest.raises(nats.errors.Error, match="Authorization Violation"):
            await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0)
        nc = await connect([url], nkey=seed_file)
        try:
            return (await nc.jetstream().account_info()).streams
        finally:
            await nc.close()

    with NatsServer(tmp_path / "store", extra_config=auth) as server:
        assert asyncio.run(scenario(server.url)) == 0


@pytest.mark.slow
def test_r3_stream_answers_a_lost_ack_resend_as_duplicate(nats_cluster: NatsCluster, tmp_path):
    """On an R3 stream the resend is a duplicate with the first seq, and the publisher acks it."""
    box = Outbox(tmp_path / "o.db")
    row = _put(box, RUN_A, 0)

    async def body(nc, js):
        first = await _publish_raw(js, RUN_A, 0, expected=0)
        again = await _publish_raw(js, RUN_A, 0, expected=0)
        report = await Publisher(box, js, backoff=FAST).drain(timeout=20)
        return first, again, report, await _messages(js)

    first, again, report, messages = asyncio.run(_with_js(nats_cluster.urls, body, replicas=3))
    assert (again.seq, again.duplicate) == (first.seq, True)
    assert (report.acked, report.duplicates) == (1, 1)
    assert box.get(row).acked_seq == first.seq  # type: ignore[union-attr]
    assert len(messages) == 1


@pytest.mark.slow
def test_stream_leader_killed_mid_drain_loses_and_duplicates_nothing(
    nats_cluster: NatsCluster, tmp_path
):
    """With the R3 stream's leader killed during a drain, every segment lands once, in order."""
    box = Outbox(tmp_path / "o.db")
    runs, per_run = [f"b3:{c * 43}" for c in "GHIJ"], 60
    total = _fill(box, runs, per_run)

    async def body(nc, js):
        await _publish_raw(js, "b3:" + "Z" * 43, 0, expected=0)  # wait for the stream to answer
        leader = await asyncio.to_thread(nats_cluster.stream_leader, STREAM)
        publisher = Publisher(box, js, backoff=FAST, ack_timeout=1.0)
        drain = asyncio.ensure_future(publisher.drain(timeout=90))
        while box.stats().pending_count > total - 40:
            await asyncio.sleep(0.005)
        assert not drain.done()
        await asyncio.to_thread(nats_cluster.kill, leader)
        report = await drain
        new_leader = await asyncio.to_thread(nats_cluster.stream_leader, STREAM)
        return leader, new_leader, report, await _messages(js)

    leader, new_leader, report, messages = asyncio.run(
        _with_js(nats_cluster.urls, body, replicas=3)
    )
    assert new_leader != leader
    assert report.remaining == 0 and report.stopped == [] and report.acked == total
    _assert_each_once_in_order(box, messages, runs, per_run)


def test_a_duplicate_ack_for_another_message_stops_the_run(nats_server: NatsServer, tmp_path):
    """A message of another sender under this segment's id (an old host's head id, or a
    squatter) makes the broker answer ``duplicate``: the stream holds something else at that
    sequence, so the run stops as ``duplicate`` instead of counting the segment as acked."""
    box = Outbox(tmp_path / "o.db")
    _subject, msg_id, _payload = _seg(RUN_A, 0)

    async def body(nc, js):
        other = segment_subject("host2", RUN_A)
        await js.publish(other, b"host2's own segment", headers={"Nats-Msg-Id": msg_id})
        _put(box, RUN_A, 0)
        return await Publisher(box, js, backoff=FAST).drain(timeout=20)

    report = asyncio.run(_with_js(nats_server.url, body))
    assert report.acked == 0 and [s.kind for s in report.stopped] == ["duplicate"], report
    assert "stream sequence 1" in report.stopped[0].reason
    assert "host2" in report.stopped[0].reason
    assert box.stopped_runs() == {RUN_A: report.stopped[0].reason}
    assert box.last_acked_seq(RUN_A) == 0


def test_a_duplicate_ack_of_this_very_segment_counts_as_its_ack(nats_server: NatsServer,
                                                                tmp_path):
    """The same bytes already in the stream (an ack lost on the way back) are this segment:
    acked at that sequence, counted as a duplicate, nothing stopped."""
    box = Outbox(tmp_path / "o.db")

    async def body(nc, js):
        landed = await _publish_raw(js, RUN_A, 0, expected=0)
        _put(box, RUN_A, 0)
        # Expected sequence 0 and a duplicate id: a replicated stream answers "duplicate";
        # a single one may answer 10071, which the fork check resolves the same way.
        return landed.seq, await Publisher(box, js, backoff=FAST).drain(timeout=20)

    seq, report = asyncio.run(_with_js(nats_server.url, body))
    assert (report.acked, report.duplicates, report.stopped) == (1, 1, [])
    assert box.last_acked_seq(RUN_A) == seq
