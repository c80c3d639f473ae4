"""Helpers for the exec guard's tests: real programs, a tmpfs for the unit, a driver.

The guard needs root, fanotify permission events and cgroup v2. Elsewhere its tests skip
with the reason; where ``FLEET_REQUIRE_EXEC_GUARD=1`` (``.ci/run`` sets it on a root
machine) a missing capability fails them instead, so CI cannot pass by skipping.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fleet_ledger.agents import fanotify
from fleet_ledger.agents.exec_guard import ExecGuard
from fleet_ledger.agents.scratch_fs import tmpfs as tmpfs
from fleet_ledger.agents.unit_cgroup import CgroupUnavailable, cgroup2_mount

PROGRAMS = Path(__file__).parent / "exec_programs"
DRIVER = Path(__file__).parent / "exec_unit_driver.py"
REQUIRE = os.environ.get("FLEET_REQUIRE_EXEC_GUARD") == "1"


def guard_unavailable() -> str | None:
    """Why the exec guard cannot run here, or ``None``."""
    if os.geteuid() != 0:
        return "the exec guard needs root (fanotify permission events, mounts, cgroups)"
    why = fanotify.probe()
    if why is not None:
        return f"no fanotify permission events: {why}"
    try:
        cgroup2_mount()
    except CgroupUnavailable as exc:
        return f"no cgroup v2: {exc.strerror}"
    if shutil.which("gcc") is None:
        return "no gcc to build the test programs"
    return None


def require_guard() -> None:
    """Skip (or, where required, fail) a test the guard cannot run on this machine."""
    why = guard_unavailable()
    if why is None:
        return
    if REQUIRE:
        pytest.fail(f"FLEET_REQUIRE_EXEC_GUARD=1 but {why}")
    pytest.skip(why)


def build_programs(out: Path) -> dict[str, Path]:
    """The C test programs, compiled into ``out``: ``denied`` and ``benign`` markers (the
    same size), a multi-call binary and ``jit`` (code built in memory, jit.c)."""
    out.mkdir(parents=True, exist_ok=True)
    built = {}
    for name, src, flags in (("denied", "marker.c", ['-DMARK="denied"']),
                             ("benign", "marker.c", ['-DMARK="benign"']),
                             ("multicall", "multicall.c", []), ("jit", "jit.c", [])):
        target = out / name
        subprocess.run(["gcc", "-O1", *flags, "-o", str(target), str(PROGRAMS / src)],
                       check=True, capture_output=True)
        built[name] = target
    assert built["denied"].stat().st_size == built["benign"].stat().st_size
    return built


def install(src: Path, dest: Path) -> Path:
    """Copy a program (keeping it executable)."""
    shutil.copyfile(src, dest)
    dest.chmod(0o755)
    return dest


def drive(guard: ExecGuard, steps: list[dict[str, Any]], timeout: float = 60.0
          ) -> list[dict[str, Any]]:
    """Run the driver in the unit: one result per step (see exec_unit_driver.py)."""
    proc = guard.spawn([sys.executable, str(DRIVER), json.dumps(steps)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    return [json.loads(line) for line in out.splitlines()]


def run_in_unit(guard: ExecGuard, argv: list[str], timeout: float = 60.0, **kw: Any
                ) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as a unit process to its end."""
    proc = guard.spawn(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)
