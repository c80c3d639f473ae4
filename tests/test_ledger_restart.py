"""Crashes and restarts in the pipeline: a ledger killed or stopped mid-stream, a host
killed mid-run, a store deleted or restored from an old backup. Each ends where a fault-free
fold of the same stream ends: same tree size and root, nothing lost, nothing twice."""

from __future__ import annotations

import random
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from fleet_ledger.agents.host import Host
from fleet_ledger.agents.sim_grants import SimGrants
from fleet_ledger.agents.simulate import host_manifests, plan, run_environment, salt
from fleet_ledger.fleet.address import digest, format_address
from fleet_ledger.fleet.record.record import genesis
from fleet_ledger.plumbing.natsd import NatsServer

from fault_helpers import LedgerProc, Summary, store_summary
from pipeline_helpers import (
    api,
    cli,
    cli_json,
    host_keys,
    last_seq,
    outbox_rows,
    spawn,
    stop,
    wait_folded,
    wait_for,
    wait_proc,
    watermark,
)

pytestmark = pytest.mark.timeout(240)


def _same_fold(got: Summary, want: Summary) -> None:
    assert (got.size, got.root.hex()) == (want.size, want.root.hex())
    assert got.segments == want.segments
    assert got.runs == want.runs
    assert got.rejections == want.rejections


def _fresh_fold(url: str, tmp_path: Path, keys: dict[str, str]) -> Summary:
    """A second ledger, new folder and name, folding the whole stream from its start."""
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    for name, pub in keys.items():
        cli("host", "enroll", name, "--pubkey", pub, "--data", str(fresh))
    with LedgerProc(url, fresh, "--name", "fresh", log=tmp_path / "fresh.log") as ledger:
        ledger.start()
        wait_folded(url, fresh)
    return store_summary(fresh)


@pytest.mark.slow
def test_ledger_killed_then_stopped_mid_stream_ends_as_a_fault_free_fold(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """SIGKILL the ledger while three hosts publish, restart it, SIGTERM it, restart it:
    its final tree equals that of a fresh ledger folding the same stream from scratch."""
    url, led, base = nats_server.url, tmp_path / "ledger", tmp_path / "hosts"
    keys = host_keys(base, ["host1", "host2", "host3"])
    led.mkdir()
    for name, pub in keys.items():
        cli("host", "enroll", name, "--pubkey", pub, "--data", str(led))
    sim = spawn("host", "simulate", "--hosts", "3", "--runs", "80", "--nats", url,
                "--data", str(base), "--json", log=tmp_path / "sim.log")
    try:
        with LedgerProc(url, led, "--name", "main", log=tmp_path / "ledger.log") as ledger:
            ledger.start()
            wait_for(lambda: watermark(led) >= 100, 60, "the ledger to fold 100 messages")
            assert sim.poll() is None, "the hosts finished before the crash: nothing tested"
            ledger.kill()
            at_kill = last_seq(url)
            # The hosts go on publishing while no ledger runs.
            wait_for(lambda: last_seq(url) >= at_kill + 50 or sim.poll() is not None, 60,
                     "the hosts to publish while the ledger is down")
            assert last_seq(url) > at_kill
            ledger.start()
            wait_for(lambda: watermark(led) > at_kill, 60, "the restarted ledger to fold")
            assert ledger.stop() == 0, ledger.log_text()[-2000:]
            ledger.start()
            assert wait_proc(sim, 180, "the simulated hosts") == 0
            top = wait_folded(url, led)
            assert ledger.alive()
        got = store_summary(led)
    finally:
        stop(sim, signal.SIGKILL)
    # The stream also holds each simulated run's grant, issued before its first segment.
    assert got.size == top - 3 * 80 and got.rejections == []
    got.check_leaves()
    _same_fold(got, _fresh_fold(url, tmp_path, keys))


def _count(host_dir: Path) -> int:
    try:
        return len(outbox_rows(host_dir))
    except sqlite3.OperationalError:
        return 0


def test_host_killed_mid_run_resumes_with_nothing_lost_or_twice(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """SIGKILL `fleet host simulate` while it publishes, run it again on the same folder:
    every planned segment of every run is folded once, with no refusal at all."""
    url, led, hd = nats_server.url, tmp_path / "ledger", tmp_path / "solo"
    runs = 100
    args = ("host", "simulate", "--hosts", "1", "--name", "solo", "--runs", str(runs),
            "--nats", url, "--data", str(hd), "--enroll-into", str(led), "--json")
    led.mkdir()
    with LedgerProc(url, led, "--name", "main", log=tmp_path / "ledger.log") as ledger:
        ledger.start()
        sim = spawn(*args, log=tmp_path / "sim1.log")
        try:
            wait_for(lambda: _count(hd) >= 150, 60, "the host to write 150 segments")
            assert sim.poll() is None, "the host finished before the kill: nothing tested"
        finally:
            stop(sim, signal.SIGKILL)
        at_kill = outbox_rows(hd)
        assert len({r for r, *_ in at_kill}) == runs  # every run had begun
        again = cli_json(*args, timeout=120)
        assert again["remaining"] == 0
        top = wait_folded(url, led)
        got = store_summary(led)

    rows = outbox_rows(hd)
    assert all(r[3] == "acked" for r in rows)
    # What the killed host had written is still there, unchanged; the rest came after it.
    assert [r[:3] for r in rows[:len(at_kill)]] == [a[:3] for a in at_kill]
    grants = runs  # each run's grant, issued once (not again after the kill)
    assert len({(r, i) for r, i, _, _ in rows}) == len(rows) == got.size == top - grants
    assert {(r, i, h) for r, i, h, _ in rows} == {(r, i, h) for r, i, h, _, _ in got.segments}
    assert got.rejections == []  # no Fork, IndexGap, Replay or anything else
    got.check_leaves()
    # Every run is complete: it holds exactly the steps of its plan, closed if the plan closes.
    s = salt(hd)
    host = Host("solo", hd)
    try:
        environments = host_manifests(host)
    finally:
        host.close()
    # Each run's grant is a function of the seed, the host's folder and the run's number.
    sim = SimGrants("solo", hd, ["solo"])
    plans = {format_address(genesis(digest(b"unit/" + s + b"/%d" % n), sim.grants_id(
        n, run_environment(environments, n).digest))): plan(random.Random(s + b"%d" % n))
        for n in range(runs)}
    held = {r: (n, phase) for r, _host, n, _head, phase in got.runs}
    assert held == {r: (len(p), "closed" if p[-1].kind == "closed" else held[r][1])
                    for r, p in plans.items()}
    assert all(phase != "closed" for r, (_, phase) in held.items()
               if plans[r][-1].kind != "closed")


def test_deleted_store_is_rebuilt_from_the_stream(nats_server: NatsServer, tmp_path: Path
                                                   ) -> None:
    """Stop a ledger, delete its ledger.db and key, start it again: it replays the stream
    (its consumer is ahead, so it is recreated) to the same tree, hosts and runs."""
    url, led, base = nats_server.url, tmp_path / "ledger", tmp_path / "hosts"
    led.mkdir()
    with LedgerProc(url, led, "--name", "main", log=tmp_path / "ledger.log") as ledger:
        ledger.start()
        cli("host", "simulate", "--hosts", "2", "--runs", "15", "--nats", url,
            "--data", str(base), "--enroll-into", str(led), "--json")
        wait_folded(url, led)
        before = store_summary(led)
        signed = api(url, "checkpoint")
        old_vkey = (led / "ledger.vkey").read_text()
        assert ledger.stop() == 0
        for name in ("ledger.db", "ledger.db-wal", "ledger.db-shm", "ledger.key", "ledger.vkey"):
            (led / name).unlink(missing_ok=True)
        ledger.start()
        wait_folded(url, led)
        after = store_summary(led)
        assert "replaying from the store's position" in ledger.log_text()
        consistency = api(url, "consistency", {"old": signed["size"]})
    assert before.size > 0
    _same_fold(after, before)
    assert (led / "ledger.vkey").read_text() != old_vkey  # a new key, the same log
    # The checkpoint signed before the loss still holds for the rebuilt log.
    assert consistency["old_root"] == signed["root"]
    assert consistency["new_root"] == before.root.hex()


def test_restored_backup_replays_to_the_same_root(nats_server: NatsServer, tmp_path: Path
                                                  ) -> None:
    """Back up ledger.db (SQLite backup API) mid-stream, let hosts publish on (one of them
    enrolled after the backup), then restore the backup: the ledger reaches the same root."""
    url, led, base = nats_server.url, tmp_path / "ledger", tmp_path / "hosts"
    led.mkdir()
    backup = tmp_path / "backup.db"
    with LedgerProc(url, led, "--name", "main", log=tmp_path / "ledger.log") as ledger:
        ledger.start()
        cli("host", "simulate", "--hosts", "2", "--runs", "10", "--nats", url,
            "--data", str(base), "--enroll-into", str(led), "--json")
        wait_folded(url, led)
        src = sqlite3.connect(led / "ledger.db")
        dst = sqlite3.connect(backup)
        try:
            src.backup(dst)
        finally:
            src.close()
            dst.close()
        at_backup = watermark(led)
        # More traffic after the backup: the same hosts, and a host enrolled only now.
        cli("host", "simulate", "--hosts", "2", "--runs", "20", "--nats", url,
            "--data", str(base), "--enroll-into", str(led), "--json")
        cli("host", "simulate", "--hosts", "1", "--name", "late", "--runs", "5", "--nats", url,
            "--data", str(base / "late"), "--enroll-into", str(led), "--json")
        wait_folded(url, led)
        before = store_summary(led)
        assert ledger.stop() == 0
        for name in ("ledger.db-wal", "ledger.db-shm"):
            (led / name).unlink(missing_ok=True)
        backup.replace(led / "ledger.db")
        assert watermark(led) == at_backup < before.watermark
        time.sleep(0.1)
        ledger.start()
        wait_folded(url, led)
        after = store_summary(led)
    assert "late" in {h for _r, h, *_ in after.runs}
    _same_fold(after, before)
