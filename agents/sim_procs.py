"""Simulated hosts as separate processes (``fleet host simulate`` one host each)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def simulator_command(name: str, runs: int, url: str, host_dir: Path,
                      enroll_into: Path | None = None, nkey: Path | None = None) -> list[str]:
    cmd = [sys.executable, "-m", "fleet.cli.__main__", "host", "simulate", "--hosts", "1",
           "--name", name, "--runs", str(runs), "--nats", url, "--data", str(host_dir),
           "--json"]
    if enroll_into is not None:
        cmd += ["--enroll-into", str(enroll_into)]
    if nkey is not None:
        cmd += ["--nkey", str(nkey)]
    return cmd


def spawn_simulators(hosts: int, runs: int, url: str, base: Path,
                     enroll_into: Path | None = None, prefix: str = "host"
                     ) -> list[subprocess.Popen[str]]:
    """Start ``hosts`` simulator processes, host folders under ``base``."""
    procs = []
    for i in range(1, hosts + 1):
        name = f"{prefix}{i}"
        procs.append(subprocess.Popen(
            simulator_command(name, runs, url, base / name, enroll_into),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
        ))
    return procs
