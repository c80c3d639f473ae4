"""A 3-node JetStream cluster with the FLEET stream at 3 replicas, under load: the stream
leader SIGKILLed, then a follower (quorum lost), then one node restarted. Publishing resumes
after each election, no segment is lost or doubled, the ledger keeps folding and the proofs
it serves verify offline."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet_ledger.fleet.subjects import STREAM
from fleet_ledger.plumbing.natsd import NatsCluster
from fleet_ledger.plumbing.testing import running_cluster

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
    _check_fault_free(nats_cluster, data, traffic, tmp_path)


def _check_fault_free(cluster: NatsCluster, data: Path, traffic: HostTraffic, tmp: Path,
                      note: str = "") -> int:
    """The stopped ledger's tree equals a fault-free fold of the stream as the cluster holds
    it, every host segment once; returns the number of leaves."""
    urls = [n.url for n in cluster.nodes.values() if n.running]
    messages = stream_messages(urls)
    mine = store_summary(data)
    reference = reference_fold(messages, host_rows(data), tmp / "fault-free")
    # What differs, said on failure: the rejections, and the segments only one fold holds.
    only = ({s[4]: s[:2] for s in mine.segments}.items()
            ^ {s[4]: s[:2] for s in reference.segments}.items())
    assert (mine.size, mine.root, mine.segments) == (reference.size, reference.root,
                                                    reference.segments), (
        note, mine.size, reference.size, mine.rejections, reference.rejections,
        sorted(only)[:20])
    assert mine.rejections == reference.rejections == [], note
    assert mine.size == len(messages), note
    mine.check_leaves()
    written = traffic.outbox_segments()
    assert {(r, i, h) for r, i, h, _, _ in mine.segments} == written, note
    return mine.size


# The soak: FLEET_SOAK_KILLS SIGKILLs in all (default 4, the CI form), at most
# FLEET_SOAK_KILLS_PER_RUN on one cluster before its tree is compared with a fault-free fold
# and a fresh cluster starts; FLEET_SOAK_SEED replays a recorded seed; FLEET_SOAK_LOAD
# busy processes (nice 19) compete for the CPU; FLEET_SOAK_REPORT: a JSON line per run.
SOAK_KILLS = int(os.environ.get("FLEET_SOAK_KILLS", "4"))
SOAK_KILLS_PER_RUN = int(os.environ.get("FLEET_SOAK_KILLS_PER_RUN", "20"))

_BURN = """
import random, sys, time
rng = random.Random(int(sys.argv[1]))
while True:
    busy = rng.uniform(0.05, 0.5)
    end = time.monotonic() + busy
    while time.monotonic() < end:
        pass
    time.sleep(rng.uniform(0.0, 0.2))
"""


@contextlib.contextmanager
def _cpu_load(count: int, seed: int) -> Iterator[None]:
    """``count`` niced busy processes with seeded duty cycles, killed (by pid) on exit."""
    procs = [subprocess.Popen([sys.executable, "-c", _BURN, str(seed + i)],
                              stdin=subprocess.DEVNULL, preexec_fn=lambda: os.nice(19))
             for i in range(count)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(10)


def _kill_cycle(cluster: NatsCluster, rng: random.Random, budget: int) -> int:
    """Kill the stream's leader, then (budget allowing) a follower, so quorum is lost;
    restart both in a seeded order once publishing has resumed; returns the kills made."""
    time.sleep(rng.uniform(0.0, 1.5))
    leader = cluster.stream_leader(STREAM, timeout=60)
    cluster.kill(leader)
    dead = [leader]
    new_leader = cluster.stream_leader(STREAM, timeout=60)
    _progress(cluster, rng.randint(5, 30), 120, "publishing after the leader election")
    if budget > 1:
        time.sleep(rng.uniform(0.0, 1.5))
        follower = rng.choice(sorted(n for n, node in cluster.nodes.items()
                                     if node.running and n != new_leader))
        cluster.kill(follower)
        dead.append(follower)
        time.sleep(rng.uniform(0.5, 2.5))
    rng.shuffle(dead)
    for name in dead:
        cluster.start_node(name)
    _progress(cluster, rng.randint(5, 30), 120, "publishing after the restarts")
    return len(dead)


def _soak_run(cluster: NatsCluster, base: Path, rng: random.Random, kills: int,
              note: str) -> tuple[int, int, int]:
    """One cluster's share of the soak: (kills made, leaves compared, holes the fold saw in
    its consumer's deliveries and folded again from its watermark)."""
    url = cluster.url
    data = base / "ledger"
    done = 0
    with LedgerProc(url, data, "--replicas", "3") as ledger:
        ledger.start()
        with HostTraffic(url, base / "hosts", data, hosts=2, step=10) as traffic:
            wait_until(lambda: store_summary(data).size > 20, 90, "a first fold")
            while done < kills:
                done += _kill_cycle(cluster, rng, kills - done)
            folded = store_summary(data).watermark
            wait_until(lambda: store_summary(data).watermark > folded, 90,
                       "the ledger to keep folding")
        assert traffic.failures() == [], (note, traffic.failures())
        last = _last_seq(cluster)
        wait_until(lambda: store_summary(data).watermark >= last, 120,
                   "the ledger to catch up")
        assert ledger.stop() == 0
        holes = ledger.log_text().count("was next: folding again")
    return done, _check_fault_free(cluster, data, traffic, base, note), holes


@pytest.mark.soak
@pytest.mark.timeout(300 + 90 * SOAK_KILLS)
def test_r3_soak_leader_and_follower_kills(tmp_path: Path) -> None:
    """Leader and follower SIGKILLs repeated under CPU load with a recorded seed: after each
    cluster's rounds the ledger's tree equals a fault-free fold of the same stream."""
    seed = int(os.environ.get("FLEET_SOAK_SEED") or random.SystemRandom().randrange(2**32))
    rng = random.Random(seed)
    report = Path(os.environ.get("FLEET_SOAK_REPORT") or tmp_path / "soak.jsonl")
    print(f"\nsoak seed {seed}: FLEET_SOAK_SEED={seed} replays it")
    kills = 0
    run = 0
    with _cpu_load(int(os.environ.get("FLEET_SOAK_LOAD", "1")), seed):
        while kills < SOAK_KILLS:
            run += 1
            base = tmp_path / f"run{run}"
            note = f"soak seed {seed}, cluster run {run}, after {kills} kills"
            started = time.monotonic()
            with running_cluster(base / "nats") as cluster:
                done, leaves, holes = _soak_run(cluster, base, rng, min(
                    SOAK_KILLS_PER_RUN, SOAK_KILLS - kills), note)
            kills += done
            line = {"seed": seed, "run": run, "kills": done, "total_kills": kills,
                    "leaves": leaves, "holes": holes,
                    "seconds": round(time.monotonic() - started, 1)}
            with report.open("a") as out:
                out.write(json.dumps(line) + "\n")
            print(json.dumps(line), flush=True)
            shutil.rmtree(base, ignore_errors=True)  # kept only when it fails
    assert kills >= SOAK_KILLS
