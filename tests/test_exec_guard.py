"""The exec guard on real processes, as root: denied bytes never run, whatever runs them.

Every test builds its own tmpfs for the unit and marks only the unit's mount of it (the
unit's mounts are its own namespace's, so no other process on the machine meets a mark in
any case), except the CLI test that marks ``/`` as well to refuse an interpreter of the
system. Each expected refusal is asserted: the errno of the
refused exec or the failure of the program, that the denied program's marker never
printed, and the journal entry naming the bytes and the policy.
"""

from __future__ import annotations

import errno
import glob
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from fleet_ledger.agents.exec_guard import ExecGuard
from fleet_ledger.agents.exec_journal_store import ExecJournal, read_journal
from fleet_ledger.fleet.address import digest, format_address
from fleet_ledger.fleet.env.exec_errors import ExecGuardUnavailable
from fleet_ledger.fleet.env.exec_policy import ExecPolicy, build_policy, policy_to_json

from exec_helpers import build_programs, drive, install, require_guard, run_in_unit, tmpfs

EPERM = errno.EPERM
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    require_guard()
    return build_programs(tmp_path_factory.mktemp("exec-programs"))


@pytest.fixture
def unitfs(tmp_path: Path) -> Iterator[Path]:
    require_guard()
    with tmpfs(tmp_path / "unitfs") as where:
        yield where


def addr(path: Path) -> str:
    return format_address(digest(path.read_bytes()))


def denylist(*paths: Path, label: str = "denied") -> ExecPolicy:
    return build_policy("allow", [(digest(p.read_bytes()), "deny", label) for p in paths])


@contextmanager
def guarded(policy: ExecPolicy, unitfs: Path, tmp_path: Path, **kw: Any) -> Iterator[ExecGuard]:
    journal = ExecJournal(tmp_path / "exec.db")
    try:
        with ExecGuard(policy, marks=[str(unitfs)], journal=journal, **kw) as guard:
            yield guard
    finally:
        journal.close()


def decisions(tmp_path: Path) -> list[dict[str, Any]]:
    return [d for i in read_journal(tmp_path / "exec.db")["intervals"] for d in i["decisions"]]


def never_ran(results: list[dict[str, Any]], marker: str = "RAN-denied") -> None:
    for r in results:
        assert marker not in r.get("out", "") + r.get("err", ""), r


def test_denied_binary_is_refused_by_path(programs, unitfs, tmp_path):
    """Exec of denied bytes by their path fails with EPERM and is journaled with the bytes'
    and the policy's addresses; other bytes beside them run."""
    denied = install(programs["denied"], unitfs / "denied")
    benign = install(programs["benign"], unitfs / "benign")
    policy = denylist(denied)
    with guarded(policy, unitfs, tmp_path) as guard:
        r = drive(guard, [{"run": [str(denied)]}, {"run": [str(benign)]}])
    assert r[0] == {"errno": EPERM}
    assert r[1]["out"] == "RAN-benign\n"
    assert [(d["access"], d["verdict"], d["cause"], d["bytes"], d["policy"], d["label"])
            for d in decisions(tmp_path)] == [
        ("exec", "deny", "policy", addr(denied), format_address(policy.address), "denied")]


def test_denied_bytes_are_refused_after_copy_move_hard_link_and_symlink(
        programs, unitfs, tmp_path):
    """Copies, moves, hard links and symlinks of denied bytes (made outside the unit or by
    it) are refused like the original: the decision follows the bytes, not the name."""
    (unitfs / "sub").mkdir()
    original = install(programs["denied"], unitfs / "denied")
    copy = install(programs["denied"], unitfs / "sub" / "copy")
    moved = unitfs / "sub" / "moved-away"
    os.rename(install(programs["denied"], unitfs / "to-move"), moved)
    os.link(original, unitfs / "hard")
    os.symlink(copy, unitfs / "sym")
    os.symlink("sym", unitfs / "sym2")
    names = [original, copy, moved, unitfs / "hard", unitfs / "sym", unitfs / "sym2"]
    with guarded(denylist(original), unitfs, tmp_path) as guard:
        r = drive(guard, [{"run": [str(p)]} for p in names] + [
            {"run": ["mv", str(copy), str(unitfs / "moved-by-unit")]},
            {"run": [str(unitfs / "moved-by-unit")]},
            {"run": ["cp", str(original), str(unitfs / "copied-by-unit")]},
            {"run": ["ln", str(original), str(unitfs / "linked-by-unit")]},
            {"run": [str(unitfs / "linked-by-unit")]},
        ])
    assert r[:6] == [{"errno": EPERM}] * 6
    assert r[6]["rc"] == 0 and r[7] == {"errno": EPERM}  # a rename opens nothing; exec still
    assert r[8]["rc"] != 0 and "Operation not permitted" in r[8]["err"]  # cp cannot read
    assert not (unitfs / "copied-by-unit").exists() or (
        unitfs / "copied-by-unit").read_bytes() != original.read_bytes()
    assert r[9]["rc"] == 0 and r[10] == {"errno": EPERM}
    never_ran(r)


def test_execveat_empty_path_and_proc_self_fd_are_refused(programs, unitfs, tmp_path):
    """Exec through a descriptor (execveat(fd, "", AT_EMPTY_PATH), i.e. fexecve of an O_PATH
    descriptor) and through /proc/self/fd/N is refused for denied bytes, and works for
    others."""
    denied = install(programs["denied"], unitfs / "denied")
    benign = install(programs["benign"], unitfs / "benign")
    with guarded(denylist(denied), unitfs, tmp_path) as guard:
        r = drive(guard, [{"fexec": str(denied)}, {"procfd": str(denied)},
                          {"fexec": str(benign)}, {"procfd": str(benign)}])
    assert r[:2] == [{"errno": EPERM}] * 2
    assert r[2] == r[3] == {"rc": 0, "out": "RAN-benign\n"}


def _ld_so() -> str:
    found = sorted(glob.glob("/lib64/ld-linux-*.so.*") + glob.glob("/lib/ld-linux-*.so.*"))
    assert found, "no dynamic loader found"
    return found[0]


def test_the_dynamic_loader_cannot_load_a_denied_binary(programs, unitfs, tmp_path):
    """``ld.so ./denied`` never execs the binary, it opens it: the open is refused, the
    loader fails, the marker never prints and the journal shows an open denial."""
    denied = install(programs["denied"], unitfs / "denied")
    benign = install(programs["benign"], unitfs / "benign")
    with guarded(denylist(denied), unitfs, tmp_path) as guard:
        r = drive(guard, [{"run": [_ld_so(), str(denied)]}, {"run": [_ld_so(), str(benign)]}])
    assert r[0]["rc"] != 0 and r[0]["out"] == ""
    assert r[1] == {"rc": 0, "out": "RAN-benign\n", "err": ""}
    assert [(d["access"], d["bytes"]) for d in decisions(tmp_path)] == [("open", addr(denied))]


def test_a_denied_shebang_script_is_refused(programs, unitfs, tmp_path):
    """A script whose own bytes are denied cannot be executed by its shebang."""
    script = unitfs / "evil.sh"
    script.write_text("#!/bin/sh\necho RAN-denied-script\n")
    script.chmod(0o755)
    with guarded(denylist(script), unitfs, tmp_path) as guard:
        r = drive(guard, [{"run": [str(script)]}])
    assert r == [{"errno": EPERM}]
    assert "exec" in {d["access"] for d in decisions(tmp_path)}


def test_an_allowed_script_whose_interpreter_is_denied_is_refused(programs, unitfs, tmp_path):
    """A script allowed itself, whose shebang names a denied interpreter, does not run: the
    kernel's exec of the interpreter is refused. The same script text with an allowed
    interpreter runs (the control)."""
    interp = install(Path(os.path.realpath("/bin/sh")), unitfs / "mysh")
    script = unitfs / "ok.sh"
    script.write_text(f"#!{interp}\necho RAN-script\n")
    control = unitfs / "control.sh"
    control.write_text("#!/bin/sh\necho RAN-control\n")
    for s in (script, control):
        s.chmod(0o755)
    with guarded(denylist(interp, label="shell copy"), unitfs, tmp_path) as guard:
        r = drive(guard, [{"run": [str(script)]}, {"run": [str(interp), "-c", "echo hi"]},
                          {"run": [str(control)]}])
    assert r[0] == {"errno": EPERM} and r[1] == {"errno": EPERM}
    assert r[2]["out"] == "RAN-control\n"
    assert {(d["access"], d["bytes"], d["label"]) for d in decisions(tmp_path)} == {
        ("exec", addr(interp), "shell copy")}


def test_interpreters_cannot_read_a_denied_script(programs, unitfs, tmp_path):
    """python, sh, bash and env (and sourcing, and exec(open(...))) on a denied script all
    fail: the interpreter's plain open of the script is refused."""
    py = unitfs / "evil.py"
    py.write_text("print('RAN-denied-py')\n")
    sh = unitfs / "evil.sh"
    sh.write_text("echo RAN-denied-sh\n")
    python = sys.executable
    steps = [[python, str(py)], ["sh", str(sh)], ["bash", str(sh)], ["env", python, str(py)],
             ["env", "sh", str(sh)], ["bash", "-c", f". {sh}"],
             [python, "-c", f"exec(open({str(py)!r}).read())"]]
    with guarded(denylist(py, sh), unitfs, tmp_path) as guard:
        r = drive(guard, [{"run": s} for s in steps])
    for result, argv in zip(r, steps, strict=True):
        assert result["rc"] != 0, (argv, result)
        assert "RAN-denied" not in result["out"], (argv, result)
    assert {d["access"] for d in decisions(tmp_path)} == {"open"}
    assert {d["bytes"] for d in decisions(tmp_path)} == {addr(py), addr(sh)}


def test_memfd_and_nameless_files_cannot_run_denied_bytes(programs, unitfs, tmp_path):
    """memfd_create is refused in the unit (outside it, memfd + fexecve runs the very same
    denied bytes: the hole the filter closes); denied bytes written into a nameless
    O_TMPFILE on a marked filesystem are refused at exec; mounts and user namespaces are
    refused."""
    denied, benign = programs["denied"], programs["benign"]
    outside = subprocess.run([sys.executable, str(ROOT / "tests" / "exec_unit_driver.py"),
                              f'[{{"memfd_exec": "{denied}"}}]'],
                             capture_output=True, text=True, check=True)
    assert '"RAN-denied\\n"' in outside.stdout
    with guarded(denylist(denied), unitfs, tmp_path) as guard:
        r = drive(guard, [{"memfd_exec": str(denied)}, {"memfd": True},
                          {"tmpfile_exec": str(unitfs), "bytes": str(denied)},
                          {"tmpfile_exec": str(unitfs), "bytes": str(benign)},
                          {"syscall": "unshare"}, {"syscall": "mount"}])
    assert r[0] == {"errno": EPERM, "stage": "memfd_create"}
    assert r[1] == {"errno": EPERM}
    assert r[2] == {"errno": EPERM}
    assert r[3] == {"rc": 0, "out": "RAN-benign\n"}
    assert r[4] == r[5] == {"errno": EPERM}


def test_a_multi_call_binary_is_judged_as_a_whole(programs, unitfs, tmp_path):
    """A busybox-style binary is one set of bytes: denied, every applet name (symlink or
    hard link) is refused; allowed in allow-listed mode, every applet runs, unlisted bytes
    do not, and the allow is journaled once with the policy's address."""
    mc = install(programs["multicall"], unitfs / "multicall")
    os.symlink("multicall", unitfs / "hello")
    os.link(mc, unitfs / "evil")
    benign = install(programs["benign"], unitfs / "benign")
    names = [str(unitfs / n) for n in ("multicall", "hello", "evil")]
    with guarded(denylist(mc), unitfs, tmp_path) as guard:
        r = drive(guard, [{"run": [n]} for n in names])
    assert r == [{"errno": EPERM}] * 3
    allow = build_policy("deny", [(digest(mc.read_bytes()), "allow", "multicall")])
    (tmp_path / "exec.db").unlink()
    with guarded(allow, unitfs, tmp_path) as guard:
        r = drive(guard, [{"run": [n]} for n in names] + [{"run": [str(benign)]}])
    assert [x.get("out") for x in r[:3]] == [
        "RAN-multicall-multicall\n", "RAN-applet-hello\n", "RAN-applet-evil\n"]
    assert r[3] == {"errno": EPERM}
    got = [(d["access"], d["verdict"], d["bytes"], d["policy"]) for d in decisions(tmp_path)]
    # An exec's open is one event, judged as the exec: its first allow is journaled once
    # for all three names.
    assert got == [("exec", "allow", addr(mc), format_address(allow.address)),
                   ("exec", "deny", addr(benign), format_address(allow.address))]


def test_a_swap_race_never_runs_denied_bytes(programs, unitfs, tmp_path):
    """While the unit runs two paths over and over, one is rewritten in place and the other
    renamed over, alternating benign and denied bytes of the same size: the denied bytes
    never run (benign runs and denials both happen, so the race was on)."""
    good, bad = programs["benign"].read_bytes(), programs["denied"].read_bytes()
    flip = install(programs["benign"], unitfs / "flip")
    swap = install(programs["benign"], unitfs / "swap")
    stop = threading.Event()

    def in_place() -> None:
        i = 0
        while not stop.is_set():
            try:
                fd = os.open(flip, os.O_WRONLY)
            except OSError:  # ETXTBSY while an exec holds it
                continue
            os.pwrite(fd, bad if i % 2 else good, 0)
            os.close(fd)
            i += 1
            time.sleep(0.0005)

    def renamer() -> None:
        i = 0
        while not stop.is_set():
            tmp = unitfs / f".swap-{i}"
            tmp.write_bytes(bad if i % 2 else good)
            tmp.chmod(0o755)
            os.rename(tmp, swap)
            i += 1
            time.sleep(0.0005)

    with guarded(denylist(programs["denied"]), unitfs, tmp_path) as guard:
        threads = [threading.Thread(target=f) for f in (in_place, renamer)]
        for t in threads:
            t.start()
        try:
            r = drive(guard, [{"loop": [str(flip), str(swap)], "count": 800}], timeout=120)
        finally:
            stop.set()
            for t in threads:
                t.join()
        stats = guard.stats
    counts = r[0]["counts"]
    assert "RAN-denied" not in counts, counts
    assert counts.get("RAN-benign", 0) > 0, counts
    assert stats.denied > 0, counts


def test_an_edited_cached_inode_is_hashed_again(programs, unitfs, tmp_path):
    """A second exec of an unchanged file uses the cached hash; once its bytes are edited in
    place (same inode, same size) it is hashed again and refused, and allowed again when
    the edit is undone."""
    prog = install(programs["benign"], unitfs / "prog")
    inode = prog.stat().st_ino
    with guarded(denylist(programs["denied"]), unitfs, tmp_path) as guard:
        assert drive(guard, [{"run": [str(prog)]}])[0]["out"] == "RAN-benign\n"
        hashed, hits = guard.stats.hashed, guard.stats.cache_hits
        assert drive(guard, [{"run": [str(prog)]}])[0]["out"] == "RAN-benign\n"
        assert guard.stats.hashed == hashed and guard.stats.cache_hits > hits
        with prog.open("r+b") as f:
            f.write(programs["denied"].read_bytes())
        assert prog.stat().st_ino == inode
        assert drive(guard, [{"run": [str(prog)]}]) == [{"errno": EPERM}]
        assert guard.stats.hashed == hashed + 1
        with prog.open("r+b") as f:
            f.write(programs["benign"].read_bytes())
        assert drive(guard, [{"run": [str(prog)]}])[0]["out"] == "RAN-benign\n"


def test_a_policy_update_reaches_cached_inodes(programs, unitfs, tmp_path):
    """Bytes allowed and cached under one policy are refused as soon as a new policy denies
    them (the cache is flushed), and the denial names the new policy."""
    prog = install(programs["benign"], unitfs / "prog")
    first = denylist(programs["denied"])
    second = build_policy("allow", [(digest(prog.read_bytes()), "deny", "now denied")])
    with guarded(first, unitfs, tmp_path) as guard:
        assert drive(guard, [{"run": [str(prog)]}] * 2)[1]["out"] == "RAN-benign\n"
        assert guard.stats.cache_hits >= 1
        guard.update_policy(second)
        assert drive(guard, [{"run": [str(prog)]}]) == [{"errno": EPERM}]
        guard.update_policy(first)
        assert drive(guard, [{"run": [str(prog)]}])[0]["out"] == "RAN-benign\n"
    assert [(d["bytes"], d["policy"], d["label"]) for d in decisions(tmp_path)] == [
        (addr(prog), format_address(second.address), "now denied")]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def _write_policy(policy: ExecPolicy, where: Path) -> Path:
    import json

    where.write_text(json.dumps(policy_to_json(policy)))
    return where


def test_killing_the_supervisor_leaves_no_unit_running(programs, unitfs, tmp_path):
    """SIGKILL to ``fleet exec run`` (the supervisor) kills every process of its unit,
    children and grandchildren alike, and the unit's cgroup is removed: the guard fails
    closed."""
    policy = _write_policy(denylist(programs["denied"]), tmp_path / "policy.json")
    pids = unitfs / "pids"
    script = (f"sleep 300 & echo $! >> {pids}; (sleep 300 & echo $! >> {pids}; wait) & "
              f"echo $$ >> {pids}; wait")
    sup = subprocess.Popen([sys.executable, "-m", "fleet_ledger.cli", "exec", "run", "--policy",
                            str(policy), "--journal", str(tmp_path / "exec.db"), "--mark",
                            str(unitfs), "--", "sh", "-c", script], cwd=ROOT,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not (pids.exists() and len(pids.read_text().split()) == 3):
            assert time.monotonic() < deadline and sup.poll() is None, sup.stderr
            time.sleep(0.02)
        unit = [int(x) for x in pids.read_text().split()]
        assert all(_alive(p) for p in unit)
        groups = glob.glob(f"/sys/fs/cgroup/**/fleet-exec-{sup.pid}-*", recursive=True)
        assert len(groups) == 1
        members = {int(x) for x in Path(groups[0], "cgroup.procs").read_text().split()}
        assert set(unit) <= members
        os.kill(sup.pid, signal.SIGKILL)
        sup.wait(timeout=10)
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in unit) or os.path.exists(groups[0]):
            assert time.monotonic() < deadline, [p for p in unit if _alive(p)]
            time.sleep(0.02)
    finally:
        if sup.poll() is None:
            sup.kill()
            sup.wait()


def test_allowed_programs_run_normally(programs, unitfs, tmp_path):
    """Under a denylist, an ordinary shell session in the unit works as without the guard:
    it copies and runs programs, writes and reads files, runs Python, and exits 0."""
    install(programs["benign"], unitfs / "benign")
    script = (f"cd {unitfs} && cp benign b2 && ./b2 && echo data > f.txt && cat f.txt && "
              f"ls | sort | tr '\\n' ' ' && echo && "
              f"{sys.executable} -c 'import json; print(json.dumps([1, 2]))'")
    with guarded(denylist(programs["denied"]), unitfs, tmp_path) as guard:
        done = run_in_unit(guard, ["bash", "-c", script])
    assert done.returncode == 0, done.stderr
    assert done.stdout == "RAN-benign\ndata\nb2 benign f.txt \n[1, 2]\n"
    assert decisions(tmp_path) == []


def test_allow_listed_mode_runs_and_reads_only_listed_bytes(programs, unitfs, tmp_path):
    """Under an allowlist only listed bytes run or are read on a marked filesystem: listed
    ones work (their first allow journaled once per access kind and interval), unlisted programs and
    data are refused, and so is a new (empty, unlisted) file."""
    benign = install(programs["benign"], unitfs / "benign")
    denied = install(programs["denied"], unitfs / "denied")
    data = unitfs / "data.txt"
    data.write_text("listed data\n")
    other = unitfs / "other.txt"
    other.write_text("unlisted data\n")
    policy = build_policy("deny", [(digest(benign.read_bytes()), "allow", "benign"),
                                   (digest(data.read_bytes()), "allow", "data")])
    with guarded(policy, unitfs, tmp_path) as guard:
        r = drive(guard, [{"run": [str(benign)]}, {"run": [str(benign)]},
                          {"run": [str(denied)]}, {"read": str(data)}, {"read": str(other)},
                          {"write": str(unitfs / "new.txt")}])
    assert r[0]["out"] == r[1]["out"] == "RAN-benign\n"
    assert r[2] == {"errno": EPERM} and r[4] == {"errno": EPERM}
    assert r[5] == {"errno": EPERM}  # a new file is empty bytes, unlisted too
    assert r[3] == {"read": len("listed data\n")}
    assert [(d["access"], d["verdict"], d["label"]) for d in decisions(tmp_path)] == [
        ("exec", "allow", "benign"), ("exec", "deny", "default"), ("open", "allow", "data"),
        ("open", "deny", "default"), ("open", "deny", "default")]


def test_a_host_without_fanotify_permission_events_refuses_to_start_a_unit(tmp_path):
    """When the probe reports no fanotify permission events (simulated here by injecting
    the probe), starting a unit under a denylist fails with ExecGuardUnavailable naming
    the reason, before any group, mark or process exists."""
    policy = build_policy("allow", [(digest(b"x"), "deny", "x")])
    guard = ExecGuard(policy, marks=[str(tmp_path)],
                      probe=lambda: "simulated: kernel without CONFIG_FANOTIFY_ACCESS_PERMISSIONS")
    before = set(glob.glob(f"/sys/fs/cgroup/**/fleet-exec-{os.getpid()}-*", recursive=True))
    with pytest.raises(ExecGuardUnavailable) as caught:
        guard.start()
    assert "simulated: kernel without CONFIG_FANOTIFY_ACCESS_PERMISSIONS" in str(caught.value)
    assert "refusing to start a unit under denylist policy" in str(caught.value)
    assert set(glob.glob(f"/sys/fs/cgroup/**/fleet-exec-{os.getpid()}-*",
                         recursive=True)) == before
    with pytest.raises(RuntimeError):
        guard.spawn(["true"])


def test_the_cli_refuses_a_system_program_on_the_root_filesystem(unitfs, tmp_path):
    """``fleet exec run`` marking ``/`` too refuses the system's own ``env`` bytes while
    bash and everything else runs, and exits with the unit's status; the journal it leaves
    shows the denials and its roots verify."""
    env = Path(os.path.realpath(shutil.which("env") or "/usr/bin/env"))
    policy = _write_policy(denylist(env, label="env"), tmp_path / "policy.json")
    journal = tmp_path / "exec.db"
    script = f"{env} echo RAN-env; echo rc=$?; echo RAN-bash; exit 3"
    done = subprocess.run([sys.executable, "-m", "fleet_ledger.cli", "exec", "run",
                           "--policy", str(policy),
                           "--journal", str(journal), "--mark", "/", "--mark", str(unitfs),
                           "--report", str(tmp_path / "report.json"), "--", "bash", "-c",
                           script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr
    assert done.stdout == "rc=126\nRAN-bash\n"
    shown = subprocess.run([sys.executable, "-m", "fleet_ledger.cli", "exec", "journal",
                            str(journal),
                            "--json"], cwd=ROOT, capture_output=True, text=True, check=True)
    import json

    doc = json.loads(shown.stdout)
    got = [(d["access"], d["verdict"], d["label"], d["bytes"]) for i in doc["intervals"]
           for d in i["decisions"]]
    # bash's exec is refused, then its look into the file to say why (an open) too.
    # The exec and the open event of one exec are decided on different threads: journaled
    # in either order, both denials of the same bytes.
    assert ("exec", "deny", "env", addr(env)) in got
    assert {g[1:] for g in got} == {("deny", "env", addr(env))}
    assert all(i["root_matches"] for i in doc["intervals"])
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["exit"] == 3 and report["stats"]["denied"] == len(got)
    assert report["root"] == doc["intervals"][-1]["root"]


def test_bench_exec_compares_guarded_execs_with_a_baseline_of_the_same_run(programs):
    """``fleet bench exec --json`` reports exec latency without the guard and with it (cached
    and cold) and for an outsider on the guarded filesystem, with ratios to the baseline."""
    import json

    done = subprocess.run([sys.executable, "-m", "fleet_ledger.cli", "bench", "exec",
                           "--execs", "10",
                           "--rounds", "1", "--binary", str(programs["benign"]), "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    for key in ("baseline_exec_us", "guarded_cached_exec_us", "guarded_cold_exec_us",
                "outside_unit_exec_us"):
        assert 0 < result[key]["p50"] <= result[key]["p90"], key
    assert result["cached_over_baseline_ratio"] > 0 and result["cold_over_baseline_ratio"] > 0
    assert result["binary_bytes"] == programs["benign"].stat().st_size
