"""The exec guard never touches a process outside its unit (real processes, as root).

A reader outside every unit opens files in a loop (system files, the very bytes the unit's
policy denies, a system file a deny-listed policy names) while units start and stop one
after another in both modes, each marking every mount of its namespace (the default). The
reader must see no refusal at all, while every unit really was guarded (its denied program
was refused, its allowed one ran). The reader's open latency with the guards running and
without any is printed (``-s`` shows it); ``fleet bench exec`` measures it properly.
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from fleet_ledger.agents.exec_guard import ExecGuard
from fleet_ledger.fleet.address import digest
from fleet_ledger.fleet.env.exec_policy import ExecPolicy, build_policy

from exec_helpers import build_programs, install, require_guard, tmpfs

OUTSIDER = Path(__file__).parent / "exec_outsider.py"
# Each unit is a whole guard start (namespace, marks, watchdog), two execs and a close:
# 50 in each mode take about 20 s on the shared 2-core machine.
UNITS_PER_MODE = 50


def _libraries(program: Path) -> list[Path]:
    """The dynamic loader and libraries ``program`` loads, and the loader's cache."""
    out = subprocess.run(["ldd", str(program)], capture_output=True, text=True, check=True)
    found = [Path(os.path.realpath(p)) for p in re.findall(r"(/\S+) \(0x", out.stdout)]
    return [*found, Path("/etc/ld.so.cache")]


def _reader(paths: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(OUTSIDER), *paths], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)


def _stop(reader: subprocess.Popen[str]) -> dict[str, object]:
    out, _ = reader.communicate(timeout=60)
    assert reader.returncode == 0
    return json.loads(out)


def _unit(policy: ExecPolicy, benign: Path, denied: Path) -> tuple[str, int | None, int]:
    """One unit under ``policy``: the benign program's output, the denied one's errno, and
    how many events came from outside the unit."""
    with ExecGuard(policy) as guard:
        proc = guard.spawn([str(benign)], stdout=subprocess.PIPE, text=True)
        out, _ = proc.communicate(timeout=30)
        try:
            guard.spawn([str(denied)]).wait(timeout=30)
            refused = None
        except PermissionError as exc:
            refused = exc.errno
    return out, refused, guard.stats.outside


def test_an_outside_reader_is_never_refused_while_units_start_and_stop(tmp_path):
    """While units come and go in both modes, each guarding every mount of its namespace
    and refusing its own denied program, a reader outside them opening the same denied
    bytes and a deny-listed system file in a loop gets no refusal at all, and raises no
    event in any guard."""
    require_guard()
    programs = build_programs(tmp_path / "programs")
    system = sorted(glob.glob(f"{os.path.dirname(os.__file__)}/*.py"))[:200]
    assert len(system) > 50
    with tmpfs(tmp_path / "unitfs") as fs:
        benign = install(programs["benign"], fs / "benign")
        denied = install(programs["denied"], fs / "denied")
        named = Path(system[0])
        denylist = build_policy("allow", [(digest(denied.read_bytes()), "deny", "denied"),
                                          (digest(named.read_bytes()), "deny", "unrelated")])
        allowlist = build_policy("deny", [(digest(p.read_bytes()), "allow", p.name[:100])
                                          for p in [benign, *_libraries(benign)]])
        paths = [*system, str(denied), str(benign), str(named)]

        quiet = _reader(paths)
        time.sleep(2.0)
        before = _stop(quiet)

        busy = _reader(paths)
        outcomes = []
        try:
            for i in range(2 * UNITS_PER_MODE):
                outcomes.append(_unit(denylist if i % 2 else allowlist, benign, denied))
        finally:
            during = _stop(busy)
    print(f"\noutsider opens without a guard: {before}\nwith units starting and stopping: "
          f"{during}")
    # Every unit ran its benign program and was refused its denied one (EPERM), and not one
    # event of the reader's reached any guard.
    assert outcomes == [("RAN-benign\n", 1, 0)] * (2 * UNITS_PER_MODE)
    assert before["refusals"] == 0
    assert during["refusals"] == 0, during
    assert during["opens"] > 10 * len(paths)


def test_events_from_outside_the_unit_are_allowed_while_it_runs_and_as_it_closes(tmp_path):
    """An outsider reaching into the unit's namespace (through /proc/PID/root of a unit
    process, the one way an outsider's open meets the guard's marks) is allowed, never
    refused, while the unit runs and while the guard closes, though the bytes it opens
    are denied to the unit."""
    require_guard()
    programs = build_programs(tmp_path / "programs")
    with tmpfs(tmp_path / "unitfs") as fs:
        denied = install(programs["denied"], fs / "denied")
        policy = build_policy("allow", [(digest(denied.read_bytes()), "deny", "denied")])
        guard = ExecGuard(policy).start()
        try:
            unit = guard.spawn(["sleep", "30"])
            inside = f"/proc/{unit.pid}/root{denied}"
            reader = _reader([inside])
            deadline = time.monotonic() + 20
            while guard.stats.outside < 200:
                assert time.monotonic() < deadline, guard.stats
                time.sleep(0.01)
            assert guard.stats.denied == 0
        finally:
            guard.close()  # the reader is still opening: these events meet the close
        got = _stop(reader)
    assert got["refusals"] == 0, got
    assert got["opens"] >= 200
