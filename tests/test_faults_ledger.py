"""Faults on the ledger side, with real processes and a real nats-server.

- the ledger SIGKILLed at random points while hosts stream (``FLEET_FAULT_KILLS``, default 12);
- the ledger's disk failing mid-batch (its file writes refused by the kernel, RLIMIT_FSIZE);
- a segment replayed after the broker's dedup window;
- the whole (single) nats-server restarted, gracefully and hard.

After each, the ledger's log must equal a fault-free fold of the same stream, byte for byte,
and hold every segment the hosts wrote exactly once.
"""

from __future__ import annotations

import asyncio
import os
import random
import resource
import time
from pathlib import Path

import nats
import pytest
from nats.js.api import Header

from fleet_ledger.fleet.record.seal import encode_key
from fleet_ledger.fleet.subjects import STREAM
from fleet_ledger.ledger.store import LedgerStore
from fleet_ledger.ledger.stream import consumer_name
from fleet_ledger.plumbing.natsd import NatsServer

from fault_helpers import (
    HostTraffic,
    LedgerProc,
    Summary,
    host_key,
    host_rows,
    reference_fold,
    sealed_run,
    store_summary,
    stream_messages,
    stream_state,
    wait_until,
)

pytestmark = pytest.mark.timeout(300)

KILLS = int(os.environ.get("FLEET_FAULT_KILLS", "12"))
SEED = int(os.environ.get("FLEET_FAULT_SEED", str(int(time.time()) % 100_000)))


def _last_seq(url: str) -> int:
    return asyncio.run(stream_state(url))[1]


def _folded_everything(url: str, data: Path, timeout: float = 90.0) -> Summary:
    """Wait until the ledger has decided every message of the stream; its store summary."""
    def done() -> Summary | None:
        last = _last_seq(url)
        s = store_summary(data)
        return s if last and s.watermark >= last else None
    return wait_until(done, timeout, "the ledger to fold the whole stream", 0.2)


def assert_equals_fault_free_fold(url: str, data: Path, tmp: Path,
                                  traffic: HostTraffic | None = None) -> Summary:
    """The ledger's store equals a fault-free fold of the stream, byte for byte; every
    segment the hosts wrote is in it exactly once; nothing was refused."""
    mine = store_summary(data)
    messages = stream_messages(url)
    reference = reference_fold(messages, host_rows(data), tmp / "fault-free")
    assert (mine.size, mine.root) == (reference.size, reference.root)
    assert mine.segments == reference.segments
    assert mine.rejections == reference.rejections == []
    assert mine.watermark == messages[-1][0]
    mine.check_leaves()
    assert mine.size == len(messages)  # every stream message is a leaf, once
    if traffic is not None:
        written = traffic.outbox_segments()
        folded = {(run, idx, head) for run, idx, head, _, _ in mine.segments}
        assert folded == written, (len(folded), len(written))
    return mine


@pytest.mark.slow
def test_ledger_sigkilled_at_random_points_while_hosts_stream(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """KILLS SIGKILLs of the ledger at random points (starting, fetching, committing) while
    two hosts stream: afterwards its log equals a fault-free fold of the same stream byte for
    byte, and every segment the hosts wrote is a leaf exactly once."""
    rng = random.Random(SEED)
    print(f"\nseed {SEED}, {KILLS} kills")
    data = tmp_path / "ledger"
    kills = 0
    with LedgerProc(nats_server.url, data) as ledger:
        ledger.start()
        with HostTraffic(nats_server.url, tmp_path / "hosts", data) as traffic:
            wait_until(lambda: store_summary(data).size > 0, 30, "a first fold")
            for _ in range(KILLS):
                time.sleep(rng.uniform(0.1, 1.6))
                ledger.kill()
                kills += 1
                time.sleep(rng.uniform(0.0, 0.3))
                ledger.start(wait=False)
            time.sleep(0.5)
        assert traffic.failures() == []
        assert traffic.rounds >= 2
        ledger.wait_ready()
        _folded_everything(nats_server.url, data)
        assert ledger.stop() == 0
    assert kills == KILLS >= 10
    mine = assert_equals_fault_free_fold(nats_server.url, data, tmp_path, traffic)
    replays = ledger.log_text().count("replaying from the store's position")
    print(f"{mine.size} leaves; {replays} restarts found the consumer past the store")


def test_ledger_disk_fails_mid_batch_then_recovers(nats_server: NatsServer,
                                                    tmp_path: Path) -> None:
    """With every file write of the ledger refused (RLIMIT_FSIZE 0: the kernel fails the
    write, as on a full disk) while hosts stream, the ledger stops acking, reports unhealthy,
    keeps serving status, and once writes work again folds everything, losing nothing."""
    data = tmp_path / "ledger"
    with LedgerProc(nats_server.url, data) as ledger:
        ledger.start()
        with HostTraffic(nats_server.url, tmp_path / "hosts", data, hosts=1,
                         step=15) as traffic:
            wait_until(lambda: store_summary(data).size > 20, 30, "a first fold")
            resource.prlimit(ledger.pid, resource.RLIMIT_FSIZE,
                             (0, resource.RLIM_INFINITY))
            try:
                status = wait_until(lambda: (s := ledger.status())["healthy"] is False and s,
                                    30, "the ledger to report unhealthy")
                assert "healthy" in status and status["health"] != "ok"
                frozen = store_summary(data)
                floor_before = asyncio.run(_ack_floor(nats_server.url))
                before = _last_seq(nats_server.url)
                wait_until(lambda: _last_seq(nats_server.url) > before + 20, 30,
                           "hosts to publish more while the disk is failing")
                time.sleep(1.0)
                # Nothing was committed and nothing acked while the disk failed.
                assert store_summary(data).watermark == frozen.watermark
                assert asyncio.run(_ack_floor(nats_server.url)) == floor_before
                assert floor_before <= frozen.watermark
                assert ledger.status()["healthy"] is False
            finally:
                resource.prlimit(ledger.pid, resource.RLIMIT_FSIZE,
                                 (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
            wait_until(lambda: ledger.status()["healthy"] is True, 30,
                       "the ledger to report healthy again")
        assert traffic.failures() == []
        _folded_everything(nats_server.url, data)
        assert ledger.alive() and ledger.starts == 1
        assert ledger.stop() == 0
    assert "fold loop:" in ledger.log_text()  # the failure was seen and logged
    assert_equals_fault_free_fold(nats_server.url, data, tmp_path, traffic)


async def _ack_floor(url: str) -> int:
    """The ledger consumer's ack floor. A ledger whose fold fails puts its consumer back at
    the store's watermark (deleted, then made again): asked in between, the server says
    "consumer not found", so the question is asked again for a few seconds."""
    from nats.js.errors import NotFoundError

    nc = await nats.connect(url)
    try:
        for _attempt in range(100):
            try:
                info = await nc.jetstream().consumer_info(STREAM, consumer_name("ledger"))
            except NotFoundError:
                await asyncio.sleep(0.05)
                continue
            return info.ack_floor.stream_seq if info.ack_floor else 0
        raise AssertionError("the ledger's consumer stayed missing for 5 s")
    finally:
        await nc.close()


def test_replay_after_the_dedup_window_is_refused_not_folded(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """A segment resent with its msg id within the window is a broker duplicate; resent after
    the window (1 s) the broker stores it again and the fold refuses it as Replay, so the
    tree does not grow."""
    data = tmp_path / "ledger"
    store = LedgerStore(data)
    store.enroll("h1", encode_key(bytes(host_key("h1").verify_key)))
    store.close()
    run = sealed_run("h1", "unit-replayed", "ec")
    (s1, d1), (s2, d2) = run.messages
    ids = [f"seg-{i}" for i in (1, 2)]

    async def body() -> tuple[list, list]:
        nc = await nats.connect(nats_server.url)
        try:
            js = nc.jetstream(timeout=5.0)
            acks = [await js.publish(s1, d1, headers={Header.MSG_ID: ids[0]})]
            acks.append(await js.publish(s1, d1, headers={Header.MSG_ID: ids[0]}))
            await asyncio.sleep(1.6)  # past the 1 s window
            acks.append(await js.publish(s1, d1, headers={Header.MSG_ID: ids[0]}))
            acks.append(await js.publish(s2, d2, headers={Header.MSG_ID: ids[1]}))
            return acks, []
        finally:
            await nc.close()

    with LedgerProc(nats_server.url, data, "--dedup-window", "1") as ledger:
        ledger.start()
        acks, _ = asyncio.run(body())
        status = wait_until(lambda: (s := ledger.status())["stream_seq"] >= acks[-1].seq
                            and s, 30, "the ledger to fold")
        assert ledger.stop() == 0
    first, within, after, _second = acks
    assert (within.duplicate, within.seq) == (True, first.seq)  # the broker's dedup
    assert after.duplicate is not True and after.seq == first.seq + 1  # stored again
    assert status["tree_size"] == 2 and status["segments_folded"] == 2
    assert status["rejected"] == {"Replay": 1}
    assert store_summary(data).rejections == [(after.seq, "Replay")]


def test_whole_server_restarted_hosts_and_ledger_go_on(nats_server: NatsServer,
                                                        tmp_path: Path) -> None:
    """The single nats-server (file storage) restarted gracefully, then SIGKILLed and
    restarted, while hosts stream: the same ledger process and the hosts reconnect and go
    on, and nothing is lost or doubled."""
    data = tmp_path / "ledger"
    with LedgerProc(nats_server.url, data) as ledger:
        ledger.start()
        with HostTraffic(nats_server.url, tmp_path / "hosts", data, step=20) as traffic:
            for hard in (False, True):
                wait_until(lambda: store_summary(data).size > 0, 30, "folding")
                before = _last_seq(nats_server.url)
                time.sleep(0.7)
                nats_server.restart(hard=hard)
                wait_until(lambda b=before: _last_seq(nats_server.url) > b + 30, 60,
                           "publishing to resume after the restart")
                wait_until(lambda b=before: store_summary(data).watermark > b, 60,
                           "the ledger to fold again after the restart")
        # A round that *started* while the server was down could not connect and ended
        # before recording anything; every round that was running went on.
        assert traffic.failures(refused_start_ok=True) == []
        _folded_everything(nats_server.url, data)
        assert ledger.status()["healthy"] is True
        assert ledger.alive() and ledger.starts == 1
        assert ledger.stop() == 0
    assert_equals_fault_free_fold(nats_server.url, data, tmp_path, traffic)


def test_consumer_that_delivered_past_the_store_restarts_at_the_watermark(
    nats_server: NatsServer,
) -> None:
    """A ledger killed after fetching a batch but before committing it: on restart its
    consumer redelivers from watermark + 1 (not the next undelivered message, which would
    fold past the lost batch and ack it unseen)."""
    from nats.js.api import AckPolicy, DeliverPolicy

    from fleet_ledger.ledger.stream import ensure_consumer, ensure_stream

    async def body() -> tuple[list[int], list[int]]:
        nc = await nats.connect(nats_server.url)
        try:
            js = nc.jetstream(timeout=5.0)
            await ensure_stream(js)
            for i in range(20):
                await js.publish("fleet.seg.h1.r", b"m%d" % i)
            durable = await ensure_consumer(js, "crashy", watermark=0)
            sub = await js.pull_subscribe_bind(durable, STREAM)
            lost = [m.metadata.sequence.stream for m in await sub.fetch(5, timeout=2)]
        finally:
            await nc.close()  # the crash: nothing acked, nothing committed
        nc = await nats.connect(nats_server.url)
        try:
            js = nc.jetstream(timeout=5.0)
            durable = await ensure_consumer(js, "crashy", watermark=0)
            info = await js.consumer_info(STREAM, durable)
            assert info.config.deliver_policy == DeliverPolicy.BY_START_SEQUENCE
            assert info.config.ack_policy == AckPolicy.ALL
            sub = await js.pull_subscribe_bind(durable, STREAM)
            again = [m.metadata.sequence.stream for m in await sub.fetch(5, timeout=2)]
            return lost, again
        finally:
            await nc.close()

    lost, again = asyncio.run(body())
    assert lost == [1, 2, 3, 4, 5]
    assert again == [1, 2, 3, 4, 5]

