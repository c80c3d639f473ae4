"""Every route to run denied bytes, first shown to run without the guard, then refused with
it (real processes, as root). The table in docs/process-control.md names each route, what
stops it and the test here that shows it.

One driver (tests/exec_unit_driver.py) tries every route in turn: once as a plain root
process (every route must print the denied program's marker, so the test can fail), once
as a unit under a deny-listed policy (no route may print it, and each must fail the way
the table says). An outside process holds a descriptor of the denied file (for
``pidfd_getfd``) and stands in for ``/proc/PID/root``; the unit's stdin is the denied file
opened outside its namespace.
"""

from __future__ import annotations

import errno
import glob
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleet_ledger.agents.exec_guard import ExecGuard
from fleet_ledger.fleet.address import digest
from fleet_ledger.fleet.env.exec_policy import build_policy

from exec_helpers import DRIVER, build_programs, install, require_guard, tmpfs

EPERM, EACCES = errno.EPERM, errno.EACCES
MARK = "RAN-denied"


def _ld_so() -> str:
    found = sorted(glob.glob("/lib64/ld-linux-*.so.*") + glob.glob("/lib/ld-linux-*.so.*"))
    assert found, "no dynamic loader found"
    return found[0]


def _routes(fs: Path, denied: Path, holder: int) -> dict[str, dict[str, Any]]:
    """Route name -> the driver step that tries it (``denied.hex``: the denied bytes as the
    unit gets them from elsewhere, a file it may read)."""
    data = str(fs / "denied.hex")
    return {
        "direct": {"run": [str(denied)]},
        "renamed": {"run": [str(fs / "renamed")]},
        "hard link": {"run": [str(fs / "hard")]},
        "symlink": {"run": [str(fs / "sym")]},
        "wrapper (env)": {"run": ["env", str(denied)]},
        "shebang script": {"run": [str(fs / "evil.sh")]},
        "ld.so direct": {"run": [_ld_so(), str(denied)]},
        "sh reads a denied script": {"run": ["sh", str(fs / "evil.sh")]},
        "python reads a denied script": {"run": [sys.executable, str(fs / "evil.py")]},
        "execveat(fd, AT_EMPTY_PATH)": {"fexec": str(denied)},
        "/proc/self/fd/N": {"procfd": str(denied)},
        "memfd + fexecve": {"memfd_exec": data},
        "O_TMPFILE": {"tmpfile_exec": str(fs), "bytes": data},
        "anonymous shared memory via /proc/self/map_files": {
            "map_files_exec": data, "kind": "anon"},
        "SysV shm via /proc/self/map_files": {"map_files_exec": data, "kind": "sysv"},
        "POSIX shm (/dev/shm)": {"shm_exec": data},
        "pidfd_getfd from an outside process": {"getfd_exec": holder, "fd": 3},
        "/proc/PID/root of an outside process": {"run": [f"/proc/{holder}/root{denied}"]},
        "inherited descriptor (stdin)": {"fd_exec": 0},
    }


# What must stop each route under the guard: the errno and, where the route fails before
# its exec, the stage (see the table in docs/process-control.md).
STOPPED = {
    "direct": {"errno": EPERM},
    "renamed": {"errno": EPERM},
    "hard link": {"errno": EPERM},
    "symlink": {"errno": EPERM},
    "shebang script": {"errno": EPERM},
    "execveat(fd, AT_EMPTY_PATH)": {"errno": EPERM},
    "/proc/self/fd/N": {"errno": EPERM},
    "memfd + fexecve": {"errno": EPERM, "stage": "memfd_create"},
    "O_TMPFILE": {"errno": EPERM},
    "anonymous shared memory via /proc/self/map_files": {"errno": EPERM,
                                                         "stage": "map_files"},
    "SysV shm via /proc/self/map_files": {"errno": EPERM, "stage": "map_files"},
    "POSIX shm (/dev/shm)": {"errno": EPERM},
    "pidfd_getfd from an outside process": {"errno": EPERM, "stage": "pidfd_getfd"},
    "/proc/PID/root of an outside process": {"errno": EACCES},
    "inherited descriptor (stdin)": {"errno": EPERM},
}
# Routes whose program is allowed and fails because what it opens is refused: it exits
# non-zero with the marker never printed.
FAILS_TO_READ = {"wrapper (env)", "ld.so direct", "sh reads a denied script",
                 "python reads a denied script"}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Each route's result without the guard and with it."""
    require_guard()
    tmp = tmp_path_factory.mktemp("exec-routes")
    programs = build_programs(tmp / "programs")
    with tmpfs(tmp / "unitfs") as fs:
        denied = install(programs["denied"], fs / "denied")
        (fs / "denied.hex").write_text(denied.read_bytes().hex())
        os.rename(install(programs["denied"], fs / "to-rename"), fs / "renamed")
        os.link(denied, fs / "hard")
        os.symlink(denied, fs / "sym")
        (fs / "evil.sh").write_text(f"#!/bin/sh\necho {MARK}\n")
        (fs / "evil.sh").chmod(0o755)
        (fs / "evil.py").write_text(f"print({MARK!r})\n")
        policy = build_policy("allow", [(digest(p.read_bytes()), "deny", p.name) for p in
                                        (denied, fs / "evil.sh", fs / "evil.py")])
        # An outside process holding the denied file open on descriptor 3.
        holder = subprocess.Popen(
            [sys.executable, "-c", "import os, sys, time; os.dup2(os.open(sys.argv[1], "
             "os.O_RDONLY), 3); print('ready', flush=True); time.sleep(300)", str(denied)],
            stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout is not None and holder.stdout.readline() == "ready\n"
            routes = _routes(fs, denied, holder.pid)
            argv = [sys.executable, str(DRIVER), _json(list(routes.values()))]
            with denied.open("rb") as stdin:
                plain = subprocess.run(argv, stdin=stdin, capture_output=True, text=True,
                                       timeout=120)
            assert plain.returncode == 0, plain.stderr
            with ExecGuard(policy) as guard, denied.open("rb") as stdin:
                proc = guard.spawn(argv, stdin=stdin, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
                out, err = proc.communicate(timeout=120)
                assert proc.returncode == 0, err
        finally:
            holder.kill()
            holder.wait()
    yield {"names": list(routes), "without": _lines(plain.stdout), "with": _lines(out)}


def _json(value: object) -> str:
    import json

    return json.dumps(value)


def _lines(out: str) -> list[dict[str, Any]]:
    import json

    return [json.loads(line) for line in out.splitlines()]


def _result(outcomes: dict[str, Any], which: str, route: str) -> dict[str, Any]:
    result: dict[str, Any] = outcomes[which][outcomes["names"].index(route)]
    return result


ROUTE_NAMES = list(_routes(Path("/x"), Path("/x/denied"), 1))


@pytest.mark.parametrize("route", ROUTE_NAMES)
def test_the_route_runs_denied_bytes_without_the_guard(outcomes, route):
    """Without the guard, the route really runs the denied bytes (the test can fail)."""
    got = _result(outcomes, "without", route)
    assert MARK in got.get("out", ""), got


@pytest.mark.parametrize("route", ROUTE_NAMES)
def test_the_route_is_refused_under_the_guard(outcomes, route):
    """Under the guard, the route never runs the denied bytes and fails where the table
    says it is stopped."""
    got = _result(outcomes, "with", route)
    assert MARK not in got.get("out", "") + got.get("err", ""), got
    if route in FAILS_TO_READ:
        assert got["rc"] != 0, got
    else:
        assert got == STOPPED[route], got


def test_code_built_in_memory_is_a_stated_limit_closed_by_deny_write_exec(tmp_path):
    """Machine code written into anonymous memory and made executable with mprotect runs
    without the guard and, as the docs state, under a guard by default (no file holds it);
    with deny_write_exec the mprotect is refused (EACCES) and the code never runs."""
    require_guard()
    jit = build_programs(tmp_path / "programs")["jit"]
    policy = build_policy("allow", [(digest(b"nothing here"), "deny", "nothing")])
    plain = subprocess.run([str(jit)], capture_output=True, text=True, timeout=30)
    assert plain.stdout == "RAN-jit 42\n"
    results = []
    for mdwe in (False, True):
        with ExecGuard(policy, deny_write_exec=mdwe) as guard:
            proc = guard.spawn([str(jit)], stdout=subprocess.PIPE, text=True)
            out, _ = proc.communicate(timeout=30)
            results.append((proc.returncode, out))
    assert results == [(0, "RAN-jit 42\n"), (1, f"mprotect errno {EACCES}\n")]


def test_a_unit_user_reaches_host_mounts_through_its_own_users_processes(tmp_path):
    """The stated limit: a unit run as an ordinary user may follow /proc/PID/root of an
    outside process of the same user onto the host's (unmarked) mounts and run denied
    bytes there; a unit of its own user (here: another uid) cannot (EACCES)."""
    require_guard()
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="fleet-routes-", dir="/tmp"))
    base.chmod(0o755)
    try:
        with tmpfs(base / "fs") as fs:
            denied = install(build_programs(tmp_path / "programs")["denied"], fs / "denied")
            policy = build_policy("allow", [(digest(denied.read_bytes()), "deny", "denied")])
            outsider = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534",
                                         "--clear-groups", "sleep", "60"])
            try:
                _wait_dropped(outsider.pid, 65534)
                through = f"/proc/{outsider.pid}/root{denied}"
                got = []
                for uid in (65534, 65533):
                    with ExecGuard(policy, user=uid, group=uid) as guard:
                        direct = _try(guard, str(denied))
                        got.append((direct, _try(guard, through)))
            finally:
                outsider.kill()
                outsider.wait()
    finally:
        (base / "fs").rmdir()
        base.rmdir()
    assert got == [(("errno", EPERM), ("out", "RAN-denied\n")),
                   (("errno", EPERM), ("errno", EACCES))]


def _wait_dropped(pid: int, uid: int) -> None:
    """Until ``pid`` runs ``sleep`` as ``uid``: before setpriv has dropped to it and exec'd,
    the process is still root's, and /proc/PID/root would refuse the unit for that reason."""
    import time

    status = Path(f"/proc/{pid}/status")
    deadline = time.monotonic() + 30
    while True:
        fields = dict(line.split(":", 1) for line in status.read_text().splitlines())
        if fields["Name"].strip() == "sleep" and fields["Uid"].split()[:2] == [str(uid)] * 2:
            return
        assert time.monotonic() < deadline, f"{pid} did not become uid {uid}"
        time.sleep(0.01)


def _try(guard: ExecGuard, path: str) -> tuple[str, object]:
    try:
        proc = guard.spawn([path], stdout=subprocess.PIPE, text=True)
    except OSError as exc:
        return ("errno", exc.errno)
    out, _ = proc.communicate(timeout=30)
    return ("out", out)


def test_keep_capabilities_gives_up_the_guarantee(tmp_path):
    """With keep_capabilities (documented as leaving the guarantee) a root unit keeps
    CAP_SYS_ADMIN and runs denied bytes through /proc/self/map_files; by default the same
    step is refused at the open (EPERM)."""
    require_guard()
    denied = build_programs(tmp_path / "programs")["denied"]
    data = tmp_path / "denied.hex"
    data.write_text(denied.read_bytes().hex())
    policy = build_policy("allow", [(digest(denied.read_bytes()), "deny", "denied")])
    step = _json([{"map_files_exec": str(data), "kind": "anon"}])
    got = []
    for keep in (True, False):
        with ExecGuard(policy, keep_capabilities=keep) as guard:
            proc = guard.spawn([sys.executable, str(DRIVER), step], stdout=subprocess.PIPE,
                               text=True)
            out, _ = proc.communicate(timeout=60)
            got.append(_lines(out)[0])
    assert got == [{"rc": 0, "out": MARK + "\n"}, {"errno": EPERM, "stage": "map_files"}]
