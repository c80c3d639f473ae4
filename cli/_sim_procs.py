"""Simulated hosts as separate processes (``fleet host simulate`` one host each)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def simulator_command(name: str, runs: int, url: str, host_dir: Path,
                      enroll_into: Path | None = None, nkey: Path | None = None,
                      migrate: tuple[float, str, Path, int] | None = None,
                      grant_hosts: list[str] | None = None, seed: str | None = None,
                      job_share: tuple[str, str] | None = None) -> list[str]:
    """``migrate``: (fraction, the ledger's verifier key, the hand-off folder, peers);
    ``grant_hosts``: the hosts the runs' grants allow (the whole simulated fleet);
    ``job_share``: (job id, ``OFFSET/STRIDE/ITEMS``) of the items this host records."""
    cmd = [sys.executable, "-m", "fleet_ledger.cli", "host", "simulate", "--hosts", "1",
           "--name", name, "--runs", str(runs), "--nats", url, "--data", str(host_dir),
           "--json"]
    if grant_hosts:
        cmd += ["--grant-hosts", ",".join(grant_hosts)]
    if seed is not None:
        cmd += ["--seed", seed]
    if enroll_into is not None:
        cmd += ["--enroll-into", str(enroll_into)]
    if nkey is not None:
        cmd += ["--nkey", str(nkey)]
    if job_share is not None:
        cmd += ["--job-id", job_share[0], "--job-share", job_share[1]]
    if migrate is not None:
        fraction, vkey, folder, peers = migrate
        cmd += ["--migrate", str(fraction), "--vkey", vkey, "--handoff", str(folder),
                "--peers", str(peers)]
    return cmd


def spawn_simulators(hosts: int, runs: int, url: str, base: Path,
                     enroll_into: Path | None = None, prefix: str = "host",
                     log_dir: Path | None = None, nkey: Path | None = None,
                     migrate: float = 0.0, vkey: str | None = None,
                     seed: str | None = None, job: tuple[str, int] | None = None
                     ) -> list[subprocess.Popen[str]]:
    """Start ``hosts`` simulator processes, host folders under ``base``; with ``migrate``
    (and the ledger's ``vkey``), that fraction of runs moves between them at a park.

    Their output is piped (read it with ``communicate()``), or with ``log_dir`` appended to
    ``<log_dir>/<name>.log``: a caller that does not read the pipes must use files, or a
    chatty simulator blocks once a pipe is full. ``job``: (job id, items): item ``i`` is
    recorded by host ``i mod hosts``.
    """
    procs = []
    names = [f"{prefix}{i}" for i in range(1, hosts + 1)]
    for i in range(1, hosts + 1):
        name = f"{prefix}{i}"
        moving = None
        if migrate > 0:
            assert vkey is not None, "moving runs needs the ledger's verifier key"
            moving = (migrate, vkey, base / "handoff", hosts)
        share = None if job is None else (job[0], f"{i - 1}/{hosts}/{job[1]}")
        cmd = simulator_command(name, runs, url, base / name, enroll_into, nkey, moving,
                                names, seed, share)
        if log_dir is None:
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True, stdin=subprocess.DEVNULL))
            continue
        log_dir.mkdir(parents=True, exist_ok=True)
        with (log_dir / f"{name}.log").open("a") as log:
            procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True,
                                          stdin=subprocess.DEVNULL))
    return procs
