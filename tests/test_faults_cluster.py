"""A 3-node JetStream cluster with the FLEET stream at 3 replicas, under load: the stream
leader SIGKILLed, then a follower (quorum lost), then one node restarted. Publishing resumes
after each election, no segment is lost or doubled, the ledger keeps folding and the proofs
it serves verify offline."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from fleet.subjects import STREAM
from plumbing.natsd import NatsCluster

from fault_helpers import (
    HostTraffic,
    LedgerProc,
    fleet,
    host_rows,
    reference_fold,
    store_summary,
    stream_messages,
    stream_state,
    wait_until,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


def _last_seq(cluster: NatsCluster) -> int:
    urls = [n.url for n in cluster.nodes.values() if n.running]
    try:
        return asyncio.run(asyncio.wait_for(stream_state(urls), 5))[1]
    except Exception:  # no quorum or no leader yet: not progressing
        return -1


def _progress(cluster: NatsCluster, by: int, timeout: float, what: str) -> int:
    start = max(_last_seq(cluster), 0)
    wait_until(lambda: _last_seq(cluster) > start + by, timeout, what, 0.3)
    return _last_seq(cluster)


def test_r3_stream_survives_leader_and_follower_kills(nats_cluster: NatsCluster,
                                                      tmp_path: Path) -> None:
    """Leader SIGKILLed, then a follower, then a node restarted, while two hosts publish and
    the ledger folds: publishing resumes after election, the log equals a fault-free fold
    of the stream with every host segment once, and proofs verify offline."""
    url = nats_cluster.url
    data = tmp_path / "ledger"
    timeline: list[tuple[str, float]] = []
    t0 = time.monotonic()
    with LedgerProc(url, data, "--replicas", "3") as ledger:
        ledger.start()
        with HostTraffic(url, tmp_path / "hosts", data, hosts=2, step=10) as traffic:
            wait_until(lambda: store_summary(data).size > 20, 60, "a first fold")
            leader = nats_cluster.stream_leader(STREAM)
            nats_cluster.kill(leader)
            timeline.append((f"killed leader {leader}", time.monotonic() - t0))
            new_leader = nats_cluster.stream_leader(STREAM, timeout=30)
            assert new_leader != leader
            _progress(nats_cluster, 30, 60, "publishing after the leader election")
            timeline.append((f"publishing under new leader {new_leader}",
                             time.monotonic() - t0))
            follower = next(n for n, node in nats_cluster.nodes.items()
                            if node.running and n != new_leader)
            nats_cluster.kill(follower)
            timeline.append((f"killed follower {follower} (no quorum)", time.monotonic() - t0))
            time.sleep(2.0)
            nats_cluster.start_node(leader)
            timeline.append((f"restarted {leader}", time.monotonic() - t0))
            _progress(nats_cluster, 30, 90, "publishing after quorum came back")
            timeline.append(("publishing again", time.monotonic() - t0))
            folded = store_summary(data).watermark
            wait_until(lambda: store_summary(data).watermark > folded, 60,
                       "the ledger to keep folding")
        assert traffic.failures() == [], traffic.failures()
        last = _last_seq(nats_cluster)
        wait_until(lambda: store_summary(data).watermark >= last, 90, "the ledger to catch up")
        assert ledger.status()["healthy"] is True
        # Proofs of the ledger's runs verify offline against its verifier key.
        runs = store_summary(data).runs
        for run in (runs[0][0], runs[len(runs) // 2][0], runs[-1][0]):
            bundle = tmp_path / f"{run[3:11]}.json"
            fleet("prove", run, "--nats", url, "--out", str(bundle))
            out = fleet("verify-proof", str(bundle), "--vkey", str(data / "ledger.vkey"),
                        "--json")
            assert json.loads(out.stdout)["run"] == run
        assert ledger.stop() == 0
    print("\n" + "\n".join(f"{t:6.1f}s {what}" for what, t in timeline))
    urls = [n.url for n in nats_cluster.nodes.values() if n.running]
    messages = stream_messages(urls)
    mine = store_summary(data)
    reference = reference_fold(messages, host_rows(data), tmp_path / "fault-free")
    # What differs, said on failure: the rejections, and the segments only one fold holds.
    only = ({s[4]: s[:2] for s in mine.segments}.items()
            ^ {s[4]: s[:2] for s in reference.segments}.items())
    assert (mine.size, mine.root, mine.segments) == (reference.size, reference.root,
                                                    reference.segments), (
        mine.rejections, reference.rejections, sorted(only)[:20])
    assert mine.rejections == reference.rejections == []
    assert mine.size == len(messages)
    mine.check_leaves()
    written = traffic.outbox_segments()
    assert {(r, i, h) for r, i, h, _, _ in mine.segments} == written
