"""``fleet exec run``'s supervisor: this process hosts the guard and nothing else.

Everything it will call is imported before the marks go on, and it runs no other code
meanwhile, so it never waits on itself for a file of a marked filesystem (the guard's
answering thread needs the GIL; see agents.exec_guard).
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fleet_ledger.agents import fanotify
from fleet_ledger.agents.exec_guard import ExecGuard
from fleet_ledger.agents.exec_journal_store import ExecJournal
from fleet_ledger.agents.seccomp_filter import SeccompUnavailable, current_arch
from fleet_ledger.agents.unit_cgroup import CgroupUnavailable, cgroup2_mount, own_group
from fleet_ledger.agents.unit_ns import NamespaceUnavailable, UnitNamespace
from fleet_ledger.fleet.address import format_address
from fleet_ledger.fleet.env.exec_policy import ExecPolicy

DENIED_EXIT = 126  # the unit's first program was refused: nothing of the unit ran


def run_unit(policy: ExecPolicy, policy_file: Path, argv: list[str], *, journal: Path,
             run_id: str | None, marks: list[str] | None, uid: int | None, gid: int | None,
             load: Callable[[Path], ExecPolicy], keep_capabilities: bool = False,
             deny_write_exec: bool = False) -> tuple[int, dict[str, Any]]:
    """Run ``argv`` under ``policy`` until it ends: (exit status, summary). A first program
    the guard refuses ends the unit at once with :data:`DENIED_EXIT`."""
    store = ExecJournal(journal, run=run_id)
    guard = ExecGuard(policy, marks=marks, journal=store, user=uid, group=gid,
                      keep_capabilities=keep_capabilities, deny_write_exec=deny_write_exec)
    sealed: list[dict[str, Any]] = []
    refused = False
    try:
        guard.start()
        try:
            proc = guard.spawn(argv)
        except PermissionError as exc:
            if exc.errno != errno.EPERM:  # EACCES: not executable, noexec: not the guard
                raise
            refused, code = True, DENIED_EXIT
        else:
            code = _wait(proc, guard, store, policy_file, load, sealed)
    finally:
        guard.close()
        number, root, count = store.seal_interval()
        store.close()
    sealed.append({"interval": number, "root": format_address(root), "entries": count})
    code = 128 - code if code < 0 else code
    return code, {"exit": code, "denied_first": refused,
                  "policy": format_address(guard.policy.address),
                  "mode": guard.policy.mode, "marks": guard.marks, "skipped": guard.skipped,
                  "journal": str(journal), "root": sealed[-1]["root"], "intervals": sealed,
                  "stats": guard.stats.to_json()}


def _wait(proc: subprocess.Popen[Any], guard: ExecGuard, store: ExecJournal,
          policy_file: Path, load: Callable[[Path], ExecPolicy],
          sealed: list[dict[str, Any]]) -> int:
    """Serve the unit's signals until its first process ends: its status."""

    def reload(_sig: int, _frame: Any) -> None:
        try:
            guard.update_policy(load(policy_file))
        except Exception as exc:  # a bad file keeps the policy in force
            os.write(2, f"fleet exec: policy not reloaded: {exc}\n".encode())

    def seal(_sig: int, _frame: Any) -> None:
        number, root, count = store.seal_interval()
        sealed.append({"interval": number, "root": format_address(root), "entries": count})

    def forward(sig: int, _frame: Any) -> None:
        proc.send_signal(sig)

    signal.signal(signal.SIGHUP, reload)
    signal.signal(signal.SIGUSR1, seal)
    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    return proc.wait()


def probe_host() -> dict[str, Any]:
    """What the guard needs, each ``None`` when present or the reason it is not."""
    checks: dict[str, str | None] = {"fanotify": fanotify.probe()}
    try:
        cgroup2_mount()
        own_group()
        checks["cgroup2"] = None
    except CgroupUnavailable as exc:
        checks["cgroup2"] = exc.strerror
    try:
        current_arch()
        checks["seccomp"] = None
    except SeccompUnavailable as exc:
        checks["seccomp"] = exc.strerror
    try:
        UnitNamespace().close()
        checks["mount_namespace"] = None
    except NamespaceUnavailable as exc:
        checks["mount_namespace"] = exc.strerror
    checks["root"] = None if os.geteuid() == 0 else "not running as root"
    return {"ok": all(v is None for v in checks.values()), "checks": checks}

