"""Ledger replicas with one identity on a real 3-node NATS cluster: control events and
segments folded at different speeds end in one log, checkpoints never conflict, and the
lease moves when its holder dies."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from http_helpers import publish
from replica_helpers import (
    check_all_consistent,
    enroll,
    operator,
    replica,
    same_log,
    start_replicas,
)

from fleet_ledger.plumbing.natsd import NatsCluster

from fault_helpers import LedgerProc, fleet, sealed_run, store_summary, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


def _status(url: str) -> dict:
    return json.loads(fleet("status", "--json", "--nats", url).stdout)


def test_three_replicas_at_different_speeds_reach_one_log(nats_cluster: NatsCluster,
                                                          tmp_path: Path) -> None:
    """Three replicas (one SIGSTOPped for a while) fold enrollments, revocations and
    segments to the same size and root; every checkpoint any signed is consistent with
    every other; a new replica on an empty store, given only the operator's verifier key,
    rebuilds the same log."""
    url = nats_cluster.url
    pub_url = nats_cluster.urls[0]
    vkey, op = operator(tmp_path)
    names = ["r1", "r2", "r3"]
    procs = start_replicas(url, tmp_path, names, vkey)
    late: LedgerProc | None = None
    try:
        enroll(url, op, "h1")
        enroll(url, op, "h2")
        publish(pub_url, [m for n in range(3) for m in sealed_run("h1", f"a{n}", "eec").messages])
        wait_until(lambda: all(store_summary(p.data).size == 9 for p in procs), 60,
                   "every replica folded the first runs")
        os.kill(procs[2].pid, signal.SIGSTOP)
        try:
            publish(pub_url, sealed_run("h2", "b0", "epr").messages)
            fleet("host", "revoke", "h1", "--nats", url, *op)
            enroll(url, op, "h3")
            publish(pub_url, sealed_run("h1", "a-late", "e").messages
                    + sealed_run("h3", "c0", "ee").messages
                    + sealed_run("h2", "b1", "eec").messages)
            wait_until(lambda: store_summary(procs[0].data).size == 17, 60, "r1 folded")
            time.sleep(1.0)  # checkpoints signed while r3 is paused
        finally:
            os.kill(procs[2].pid, signal.SIGCONT)
        wait_until(lambda: all(store_summary(p.data).watermark
                               == store_summary(procs[0].data).watermark for p in procs),
                   60, "every replica caught up")
        log = same_log([p.data for p in procs])
        assert log.size == 17
        assert [rule for _, rule in log.rejections] == ["RevokedHost"]
        status = _status(url)
        assert status["lease_holder"] in names
        assert {r["name"] for r in status["replicas"]} == set(names)
        text = fleet("status", "--nats", url).stdout
        assert f"lease       held by {status['lease_holder']}" in text
        assert text.count("replica     r") == 3
        assert check_all_consistent([p.data for p in procs], procs[0].data) >= 2
        # A new replica on an empty store with only the operator's verifier key.
        late = replica(url, tmp_path, "r4", vkey, "r1").start()
    finally:
        for p in procs:
            p.kill()
    assert late is not None
    try:
        wait_until(lambda: store_summary(late.data).watermark
                   == store_summary(procs[0].data).watermark, 60, "the new replica rebuilt")
        same_log([procs[0].data, late.data])
    finally:
        late.kill()


def test_a_replica_refuses_hosts_enrolled_offline(tmp_path: Path) -> None:
    """A replica over a store with a host enrolled offline (in its store only) would fork
    from the others: it refuses to start, in one line, before connecting."""
    from fleet_ledger.fleet.record.seal import encode_key

    from fault_helpers import host_key

    data = tmp_path / "r1"
    data.mkdir()
    fleet("host", "enroll", "h1", "--pubkey", encode_key(bytes(host_key("h1").verify_key)),
          "--data", str(data))
    r = fleet("ledger", "serve", "--nats", "nats://127.0.0.1:1", "--data", str(data),
              "--replica", "2", check=False)
    assert r.returncode != 0
    assert r.stderr.strip().count("\n") == 0, r.stderr
    assert "cannot run as a replica: hosts enrolled offline (h1)" in r.stderr
