"""Failover of ledger replicas, measured: who holds the lease, how long until another takes
it after its holder is SIGKILLed (``fleet bench failover``; the replica tests use it too)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

FLEET = [sys.executable, "-m", "fleet_ledger.cli"]


async def _replicas(servers: list[str], prefix: str) -> tuple[str | None, list[dict]]:
    import nats

    from fleet_ledger.fleet.subjects import fleet_names
    from fleet_ledger.ledger.replica import read_replicas

    nc = await nats.connect(servers, connect_timeout=2, max_reconnect_attempts=2)
    try:
        return await read_replicas(nc.jetstream(timeout=2.0), fleet_names(prefix))
    finally:
        await nc.close()


def replicas_now(servers: list[str], prefix: str = "fleet") -> tuple[str | None, list[dict]]:
    """(the lease holder, the replicas' heartbeats); (None, []) if the cluster did not
    answer."""
    try:
        return asyncio.run(_replicas(servers, prefix))
    except Exception:
        return None, []


def lease_holder(servers: list[str], prefix: str = "fleet") -> str | None:
    """The replica holding the lease now (None: nobody, or the cluster did not answer)."""
    return replicas_now(servers, prefix)[0]


def wait_takeover(servers: list[str], old: str | None, timeout: float,
                  prefix: str = "fleet") -> tuple[str, float]:
    """(the new holder, seconds from now until a replica other than ``old`` holds it)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        holder = lease_holder(servers, prefix)
        if holder is not None and holder != old:
            return holder, time.monotonic() - start
        time.sleep(0.05)
    raise TimeoutError(f"no replica took the lease from {old} within {timeout}s")


class ReplicaProcs:
    """Ledger replicas as child processes (``fleet ledger serve --replica``), one data
    folder each under ``base``, sharing the first one's signing key; stopped by pid."""

    def __init__(self, url: str, base: Path, names: list[str], ttl: float,
                 *extra: str) -> None:
        self.url, self.base, self.names, self.ttl, self.extra = url, base, names, ttl, extra
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str) -> None:
        data = self.base / name
        first = self.base / self.names[0]
        if name != self.names[0] and not (data / "ledger.key").exists():
            data.mkdir(parents=True, exist_ok=True)
            shutil.copy(first / "ledger.key", data / "ledger.key")
        log_path = self.base / f"{name}.log"
        mark = log_path.stat().st_size if log_path.exists() else 0
        log = log_path.open("ab")
        self.procs[name] = subprocess.Popen(
            [*FLEET, "ledger", "serve", "--nats", self.url, "--data", str(data), "--name",
             name, "--replica", str(self.ttl), "--checkpoint-ms", "200", *self.extra],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
        log.close()
        deadline = time.monotonic() + 60
        while b"serving" not in log_path.read_bytes()[mark:]:
            if self.procs[name].poll() is not None or time.monotonic() > deadline:
                raise TimeoutError(f"replica {name} did not start: "
                                   + log_path.read_text(errors="replace")[-500:])
            time.sleep(0.05)

    def start_all(self) -> None:
        for name in self.names:
            self.start(name)

    def kill(self, name: str) -> None:
        p = self.procs.get(name)
        if p is not None and p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            p.wait(10)

    def stop_all(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                os.kill(p.pid, signal.SIGTERM)
        for p in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(15)
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
                p.wait(10)


def kill_holders(servers: list[str], replicas: ReplicaProcs, kills: int, bound: float
                 ) -> list[float]:
    """SIGKILL the lease holder ``kills`` times (restarting it after each takeover); the
    takeover times in seconds."""
    times: list[float] = []
    for _ in range(kills):
        holder = None
        deadline = time.monotonic() + 60
        while holder is None and time.monotonic() < deadline:
            holder = lease_holder(servers)
            time.sleep(0.1)
        if holder is None:
            raise TimeoutError("nobody holds the lease")
        replicas.kill(holder)
        _new, took = wait_takeover(servers, holder, bound * 4 + 10)
        times.append(took)
        replicas.start(holder)
        time.sleep(replicas.ttl)  # the restarted replica back in the group
    return times
