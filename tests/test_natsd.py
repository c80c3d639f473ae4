"""The nats-server runner: a real server and a real 3-node cluster start, stop and recover."""

from __future__ import annotations

import asyncio
import os
import socket
import time

import nats
import pytest
from nats.js import JetStreamContext

from fleet_ledger.fleet.subjects import STREAM
from fleet_ledger.plumbing.natsd import SERVER_ENV, NatsCluster, NatsServer, NatsServerError


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


async def _publish(servers: str | list[str], count: int, replicas: int = 1,
                   create: bool = True) -> list[int]:
    nc = await nats.connect(servers)
    try:
        js = nc.jetstream()
        if create:  # not after a kill: the meta leader may still be re-electing
            await _create_stream(js, replicas)
        batch = os.urandom(4).hex()
        return [await _publish_one(js, b"%d" % i, f"{batch}-{i}") for i in range(count)]
    finally:
        await nc.close()


async def _create_stream(js: JetStreamContext, replicas: int, patience: float = 30.0) -> None:
    """Create the stream, asking again while a just-formed cluster takes longer than the
    request's timeout to place an R3 stream (seen under CI load); creating the same stream
    again is answered with the stream."""
    deadline = asyncio.get_running_loop().time() + patience
    while True:
        try:
            await js.add_stream(name=STREAM, subjects=["fleet.seg.>"], num_replicas=replicas)
            return
        except (nats.js.errors.ServiceUnavailableError, nats.errors.TimeoutError):
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.2)


async def _publish_one(js: JetStreamContext, payload: bytes, msg_id: str,
                       patience: float = 15.0) -> int:
    """Publish, retrying while a just-created (or just re-elected) R3 stream has no leader
    to answer yet: a moment of no-responders is the server's normal behaviour then. The
    message id makes a retry whose first try did land come back as that same message."""
    deadline = asyncio.get_running_loop().time() + patience
    headers = {"Nats-Msg-Id": msg_id}
    while True:
        try:
            return (await js.publish("fleet.seg.h.r", payload, headers=headers)).seq
        except (nats.js.errors.NoStreamResponseError, nats.errors.TimeoutError):
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.2)


async def _stream_messages(servers: str | list[str]) -> int:
    nc = await nats.connect(servers)
    try:
        info = await nc.jetstream().stream_info(STREAM)
        return info.state.messages
    finally:
        await nc.close()


def test_server_starts_with_jetstream_and_stops_by_pid(tmp_path):
    """A started server serves JetStream; once stopped, its pid and its port are gone."""
    server = NatsServer(tmp_path / "store")
    with server:
        pid = server.pid
        assert pid is not None and _port_open(server.port)
        assert asyncio.run(_publish(server.url, 2)) == [1, 2]
    assert server.pid is None
    assert not _port_open(server.port)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_restart_keeps_port_and_stream_data(nats_server):
    """restart() comes back on the same URL with the messages stored before it."""
    url, pid = nats_server.url, nats_server.pid
    asyncio.run(_publish(url, 3))
    nats_server.restart()
    assert nats_server.url == url
    assert nats_server.pid != pid
    assert asyncio.run(_stream_messages(url)) == 3


def test_async_context_manager_starts_and_stops(tmp_path):
    """``async with NatsServer()`` is ready inside the block and stopped after it."""

    async def scenario() -> tuple[int, NatsServer]:
        async with NatsServer(tmp_path / "store") as server:
            seqs = await _publish(server.url, 1)
            return seqs[0], server

    seq, server = asyncio.run(scenario())
    assert seq == 1
    assert not server.running


def test_a_server_that_cannot_start_raises_with_its_log(tmp_path):
    """A server whose config is refused fails start() with a NatsServerError quoting its log."""
    server = NatsServer(tmp_path / "store", extra_config="this is not { valid")
    with pytest.raises(NatsServerError, match="log ends"):
        server.start()
    assert not server.running
    server.close()


def test_binary_override_from_environment(tmp_path, monkeypatch):
    """FLEET_NATS_SERVER names the binary that is run."""
    monkeypatch.setenv(SERVER_ENV, str(tmp_path / "no-such-nats-server"))
    server = NatsServer(tmp_path / "store")
    with pytest.raises(FileNotFoundError):
        server.start()
    server.close()


@pytest.mark.slow
def test_cluster_forms_and_survives_a_killed_stream_leader(nats_cluster: NatsCluster):
    """Three nodes elect a meta leader; killing the R3 stream's leader elects another, and the
    killed node, restarted, rejoins with the stream intact."""
    assert set(nats_cluster.nodes) == {"n1", "n2", "n3"}
    assert nats_cluster.meta_leader() in nats_cluster.nodes
    assert asyncio.run(_publish(nats_cluster.urls, 3, replicas=3)) == [1, 2, 3]

    leader = nats_cluster.stream_leader(STREAM)
    old_pid = nats_cluster.node(leader).pid
    nats_cluster.kill(leader)
    assert not nats_cluster.node(leader).running
    with pytest.raises(ProcessLookupError):
        os.kill(old_pid, 0)  # type: ignore[arg-type]
    new_leader = nats_cluster.stream_leader(STREAM, timeout=30)
    assert new_leader != leader
    survivors = [n.url for n in nats_cluster.nodes.values() if n.running]
    assert asyncio.run(_publish(survivors, 1, replicas=3, create=False)) == [4]

    nats_cluster.start_node(leader)
    assert nats_cluster.node(leader).running
    # The rejoined node catches up from the new leader; give it a bounded moment.
    deadline = time.monotonic() + 20
    while (seen := asyncio.run(_stream_messages(nats_cluster.node(leader).url))) != 4:
        assert time.monotonic() < deadline, f"the rejoined node sees {seen} messages, not 4"
        time.sleep(0.2)
