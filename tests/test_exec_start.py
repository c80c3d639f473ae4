"""Starting and ending a unit robustly (real processes, as root): a mount that vanishes
between listing and marking is skipped and logged while the rest are marked; a unit whose
first program is refused ends with the documented status 126, its summary and report."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

from fleet_ledger.agents import fanotify
from fleet_ledger.agents.exec_guard import file_mounts
from fleet_ledger.agents.unit_ns import UnitNamespace
from fleet_ledger.fleet.address import digest
from fleet_ledger.fleet.env.exec_policy import build_policy, policy_to_json

from exec_helpers import build_programs, install, require_guard, tmpfs

ROOT = Path(__file__).resolve().parent.parent


def test_a_mount_that_vanishes_before_marking_is_skipped_and_logged(tmp_path, caplog):
    """A mount listed in the unit's namespace and unmounted there before it is marked is
    skipped with a warning naming it; every other mount is still marked."""
    require_guard()
    with tmpfs(tmp_path / "going") as going:
        ns = UnitNamespace()
        group = fanotify.init()
        try:
            listed = file_mounts(ns.mounts())
            assert str(going) in [m.mount_point for m in listed]
            subprocess.run(["nsenter", f"--target={ns.pid}", "--mount", "umount",
                            str(going)], check=True)
            with caplog.at_level(logging.WARNING, logger="fleet.exec_guard"):
                marked, skipped = ns.mark(group, listed)
        finally:
            os.close(group)
            ns.close()
    assert str(going) in skipped and str(going) not in marked
    assert "/" in marked and len(marked) + len(skipped) == len(listed)
    assert any(str(going) in r.getMessage() for r in caplog.records)


def test_a_refused_first_program_exits_126_with_its_summary_and_report(tmp_path):
    """``fleet exec run`` whose command is itself denied exits 126, prints the summary line
    and writes --report (denied_first, the denial counted) and the journal entry."""
    require_guard()
    denied = build_programs(tmp_path / "programs")["denied"]
    with tmpfs(tmp_path / "unitfs") as fs:
        prog = install(denied, fs / "prog")
        policy = tmp_path / "policy.json"
        policy.write_text(json.dumps(policy_to_json(build_policy(
            "allow", [(digest(prog.read_bytes()), "deny", "denied")]))))
        report, journal = tmp_path / "report.json", tmp_path / "exec.db"
        done = subprocess.run([sys.executable, "-m", "fleet_ledger.cli", "exec", "run", "--policy",
                               str(policy), "--journal", str(journal), "--report",
                               str(report), "--", str(prog)],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 126, done.stderr
    assert "refused by the exec policy (exit 126)" in done.stderr
    assert "fleet exec: 1 denied, 0 allowed" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    got = json.loads(report.read_text())
    assert got["exit"] == 126 and got["denied_first"] is True
    assert got["stats"]["denied"] == 1
    shown = subprocess.run([sys.executable, "-m", "fleet_ledger.cli", "exec", "journal",
                            str(journal),
                            "--json"], cwd=ROOT, capture_output=True, text=True, check=True)
    decisions = [d for i in json.loads(shown.stdout)["intervals"] for d in i["decisions"]]
    assert [(d["access"], d["verdict"], d["label"]) for d in decisions] == [
        ("exec", "deny", "denied")]
