"""`fleet checkpoint` against replicas: whichever replica the queue group picks answers the
newest checkpoint the lease holder published, not its own older one; `--min-size` bounds it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from http_helpers import publish
from replica_helpers import checkpoints, enroll, operator, start_replicas

from fleet_ledger.plumbing.natsd import NatsServer

from fault_helpers import fleet, sealed_run, store_summary, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _sizes(url: str, n: int) -> list[int]:
    """The size of ``n`` checkpoints asked for one after another (the queue group spreads
    them over the replicas)."""
    return [json.loads(fleet("checkpoint", "--json", "--nats", url).stdout)["size"]
            for _ in range(n)]


def test_every_replica_answers_the_newest_checkpoint(nats_server: NatsServer,
                                                     tmp_path: Path) -> None:
    """After both replicas signed size 3 on request and the log grew to 6, every answer is
    the holder's published 6 (a follower would answer its own 3 without the fix);
    ``--min-size 7`` fails with one line, ``--min-size 6`` passes."""
    url = nats_server.url
    vkey, op = operator(tmp_path)
    procs = start_replicas(url, tmp_path, ["r1", "r2"], vkey, 2.0, "--replicas", "1")
    try:
        enroll(url, op, "h1")
        publish(url, sealed_run("h1", "a", "eec").messages)
        wait_until(lambda: all(store_summary(p.data).size == 3 for p in procs), 60,
                   "both replicas folded the first run")
        # Each replica signs (on request, or on the timer) a checkpoint of 3.
        wait_until(lambda: _sizes(url, 2)
                   and all(3 in [c[0] for c in checkpoints(p.data)] for p in procs),
                   60, "both replicas hold a checkpoint of 3")
        publish(url, sealed_run("h1", "b", "eec").messages)
        wait_until(lambda: any(6 in [c[0] for c in checkpoints(p.data)] for p in procs)
                   and all(store_summary(p.data).size == 6 for p in procs), 60,
                   "the holder signed 6")
        time.sleep(0.5)  # its publication reaches the follower
        followers = [p for p in procs if 6 not in [c[0] for c in checkpoints(p.data)]]
        assert followers, "a follower that signed nothing new (the case under test)"
        assert _sizes(url, 12) == [6] * 12
        short = fleet("checkpoint", "--min-size", "7", "--nats", url, check=False)
        assert short.returncode == 1
        assert "behind" in short.stderr and len(short.stderr.strip().splitlines()) == 1
        assert json.loads(fleet("checkpoint", "--json", "--min-size", "6", "--nats",
                                url).stdout)["size"] == 6
    finally:
        for p in procs:
            p.kill()
