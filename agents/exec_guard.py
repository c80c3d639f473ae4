"""The exec guard: a root supervisor that lets a unit execute or open only the file bytes its
policy allows, whatever the file is called, wherever it lies and whatever runs it.

    policy = build_policy("allow", [(digest(evil_bytes), "deny", "evil")])
    with ExecGuard(policy, marks=["/srv/unit"], journal=ExecJournal(host_dir / "exec.db")
                   ) as guard:
        proc = guard.spawn(["python3", "job.py"])
        proc.wait()
        root = guard.seal_interval()     # the interval's exec journal root

How it decides. The unit lives in a mount namespace of its own (:mod:`agents.unit_ns`),
whose mounts are private copies of the host's. The guard marks those copies (``marks``: by
default every one that can hold files; else the ones holding the given paths) for
fanotify's ``FAN_OPEN_PERM`` with ``FAN_MARK_MOUNT``. The kernel then holds every open
*through those mounts*, an exec's included, until the guard answers (an open made inside
``execve``/``execveat``, as the thread's ``/proc/TID/syscall`` shows, is judged and
journaled as an exec), and nothing else: a process outside the unit opens files through
the host's mounts, which carry no mark, so it raises no event, never waits and is never
refused. An event that still comes from outside the unit's cgroup (a process reaching in
through ``/proc/PID/root`` of a unit process) is allowed at once, as is any event whose origin
cannot be read, and every event left when the guard closes that is not the unit's. For
the unit's, the guard hashes the file through the descriptor the kernel opened for the
event, never its path, and answers with the policy's verdict for those bytes. So the same
bytes are refused under any name, link, copy or move; and since opens are judged too, so
are ``python x.py``, ``sh x``, ``env python x``, ``ld.so ./x``, ``dlopen`` and ``cp``.

Caching. A hash is kept under the file's (device, inode, size, mtime, ctime): any write
changes size or the times (the kernel gives fine-grained times to a file whose times were
just read), so an edited inode is hashed again. The cache is flushed when the policy
changes (:meth:`ExecGuard.update_policy`).

Exec races. Between the guard's read and the kernel's refusal of writers during exec
there is a window. The guard closes it with a read lease on the event's file, taken before
hashing and held until the process runs the new image (or 50 ms): a writer who arrives
meanwhile waits for the lease, and by then the kernel refuses it (``ETXTBSY``). A file that
someone holds open for writing cannot be leased and is refused unverified (cause
``unpinned``), as are bytes that change while being hashed.

The unit. :meth:`ExecGuard.spawn` starts it in its own cgroup v2 group, with
``PR_SET_PDEATHSIG=SIGKILL``, in its mount namespace and a cgroup namespace rooted at its
group (so it cannot move itself out), with no capabilities left even as root
(:mod:`agents.unit_caps`; ``keep_capabilities=True`` keeps them and gives up the
guarantee) and the seccomp filter of :mod:`agents.seccomp_filter` (no ``memfd_create``,
no mounts, no namespaces, no descriptors taken from other processes). A watchdog process
kills the group if the supervisor dies (:mod:`agents.unit_cgroup`). A host without fanotify
permission events, cgroup v2, namespaces or the filter refuses to start it
(:class:`~fleet.env.exec_errors.ExecGuardUnavailable`).

Evidence. Every denial, and in allow-listed mode the first allow of each content address
per access kind and interval, goes to the exec journal with the bytes' and the policy's
addresses (:mod:`agents.exec_journal_store`, :mod:`fleet.env.exec_journal`).

This module is the shell: it reads events, hashes, leases and answers. The verdict for
the bytes under the policy and the lease's outcome, and what of it is journaled, are the
core's (:func:`fleet.env.exec_decision.judge`, :class:`fleet.env.exec_decision.JournalBook`).

The hosting process opens files through the host's mounts, so it raises no events and
cannot wait on itself.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import fcntl
import os
import queue
import select
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from fleet_ledger.agents import fanotify
from fleet_ledger.agents.exec_journal_store import ExecJournal
from fleet_ledger.agents.host_linux import Mount, hash_fd, load_libc, mounts
from fleet_ledger.agents.seccomp_filter import Filter, SeccompUnavailable
from fleet_ledger.agents.unit_caps import CapabilityDrop
from fleet_ledger.agents.unit_cgroup import CgroupUnavailable, UnitGroup, Watchdog
from fleet_ledger.agents.unit_ns import NamespaceUnavailable, UnitNamespace, unshare_cgroup
from fleet_ledger.fleet.address import format_address
from fleet_ledger.fleet.env.exec_decision import (
    EXEC,
    LEASE_HELD,
    LEASE_NONE,
    LEASE_UNSUPPORTED,
    LEASE_WRITER,
    OPEN,
    UNPINNED,
    Verdict,
    is_exec_syscall,
    judge,
)
from fleet_ledger.fleet.env.exec_errors import ExecGuardUnavailable
from fleet_ledger.fleet.env.exec_policy import ExecPolicy

__all__ = ["ExecGuard", "GuardStats", "reachable_filesystems"]

# Filesystem types that hold no files a unit could run or read code from.
PSEUDO_FS = frozenset({
    "proc", "sysfs", "cgroup", "cgroup2", "devpts", "mqueue", "debugfs", "tracefs",
    "securityfs", "pstore", "bpf", "configfs", "fusectl", "autofs", "binfmt_misc",
    "rpc_pipefs", "nsfs", "efivarfs", "selinuxfs", "hugetlbfs"})
LEASE_HOLD_S = 0.05
# How often held leases look for their process's new image: releasing one late only keeps
# a writer waiting a little longer, while polling often takes the GIL from the answers.
LEASE_POLL_S = 0.002
_CACHE_LIMIT = 1 << 16
PR_SET_PDEATHSIG = 1
PR_SET_MDWE, PR_GET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN = 65, 66, 1


def reachable_filesystems(mountinfo: str = "/proc/self/mountinfo") -> list[str]:
    """One mount point per filesystem that can hold files (pseudo filesystems left out),
    as this process sees them."""
    seen: dict[str, str] = {}
    for m in mounts(mountinfo):
        if m.fstype not in PSEUDO_FS and m.device not in seen:
            seen[m.device] = m.mount_point
    return sorted(seen.values())


def deny_write_exec_unavailable(wanted: bool) -> bool:
    """Whether ``wanted`` memory-deny-write-execute is missing from this kernel."""
    if not wanted:
        return False
    prctl = load_libc().prctl
    return bool(prctl(PR_GET_MDWE, 0, 0, 0, 0) < 0)


def file_mounts(table: list[Mount]) -> list[Mount]:
    """Every mount of ``table`` that can hold files (a filesystem mounted twice, by a bind
    mount say, is two mounts: both are reachable, both are marked)."""
    return [m for m in table if m.fstype not in PSEUDO_FS]


@dataclass
class GuardStats:
    """Counts since the guard started."""

    events: int = 0
    outside: int = 0
    outside_unknown: int = 0
    unit: int = 0
    hashed: int = 0
    cache_hits: int = 0
    allowed: int = 0
    denied: int = 0
    unpinned: int = 0
    leases: int = 0
    by_access: dict[str, int] = field(default_factory=lambda: {"exec": 0, "open": 0})

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


class ExecGuard:
    """Supervises one unit (any number of processes in one cgroup) under one policy at a
    time. Use as a context manager, or call :meth:`start` and :meth:`close`."""

    def __init__(self, policy: ExecPolicy, *, marks: Sequence[str] | None = None,
                 journal: ExecJournal | None = None,
                 probe: Callable[[], str | None] = fanotify.probe,
                 user: int | None = None, group: int | None = None,
                 keep_capabilities: bool = False, deny_write_exec: bool = False) -> None:
        self._policy = policy
        self._wanted = list(marks) if marks is not None else None
        self.marks: list[str] = []
        self.skipped: list[str] = []
        self._keep_caps = keep_capabilities
        self._deny_write_exec = deny_write_exec
        self._ns: UnitNamespace | None = None
        self.journal = journal
        self._probe = probe
        self._user, self._gid = user, group
        self.stats = GuardStats()
        self._lock = threading.Lock()
        self._cache: collections.OrderedDict[tuple[int, ...], bytes] = (
            collections.OrderedDict())
        self._fan = -1
        self._group: UnitGroup | None = None
        self._watchdog: Watchdog | None = None
        self._threads: list[threading.Thread] = []
        self._work: queue.Queue[fanotify.Event | None] = queue.Queue()
        self._holds: queue.Queue[tuple[int, int, tuple[int, int], tuple[int, int] | None]
                                 | None] = queue.Queue()
        self._spawns: queue.Queue[tuple[list[str], dict[str, Any], Future[Any]] | None] = (
            queue.Queue())
        self._wake_r, self._wake_w = -1, -1
        self._procs: list[subprocess.Popen[Any]] = []
        self._pid = os.getpid()
        self._started = False

    @property
    def policy(self) -> ExecPolicy:
        return self._policy

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> ExecGuard:
        """Check the host can enforce, create the unit's group, mark, start answering."""
        why = self._probe()
        if why is not None:
            raise ExecGuardUnavailable(
                f"fanotify permission events are unavailable on this host ({why}): refusing "
                f"to start a unit under {self._policy.mode} policy "
                f"{format_address(self._policy.address)} rather than run it unprotected")
        try:
            self._filter = Filter()
            self._caps = None if self._keep_caps else CapabilityDrop()
        except SeccompUnavailable as exc:
            raise ExecGuardUnavailable(f"no seccomp filter for the unit: {exc.strerror}"
                                       ) from None
        except (OSError, KeyError) as exc:
            raise ExecGuardUnavailable(f"cannot drop the unit's capabilities: {exc}") from None
        if deny_write_exec_unavailable(self._deny_write_exec):
            raise ExecGuardUnavailable("this kernel cannot refuse memory made executable "
                                       "after being written (PR_SET_MDWE needs Linux 6.3)")
        try:
            self._group = UnitGroup()
        except CgroupUnavailable as exc:
            raise ExecGuardUnavailable(
                f"the unit needs a cgroup v2 group to be killed if the supervisor dies: "
                f"{exc.strerror}") from None
        try:
            self._ns = UnitNamespace()
            self._fan = fanotify.init()
            if self._wanted is None:
                self.marks, self.skipped = self._ns.mark(self._fan,
                                                         file_mounts(self._ns.mounts()))
            else:
                self.marks = self._ns.mark_paths(self._fan, self._wanted)
        except (fanotify.FanotifyError, NamespaceUnavailable, FileNotFoundError) as exc:
            self._abort()
            raise ExecGuardUnavailable(f"cannot mark the unit's mounts: {exc.strerror}"
                                       ) from None
        self._watchdog = Watchdog(self._group, self._fan)
        self._wake_r, self._wake_w = os.pipe()
        for name, target in (("exec-guard-events", self._event_loop),
                             ("exec-guard-decide", self._decide_loop),
                             ("exec-guard-leases", self._lease_loop),
                             ("exec-guard-spawn", self._spawn_loop)):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)
        self._started = True
        return self

    def __enter__(self) -> ExecGuard:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Kill whatever is left of the unit, then stop answering and drop the marks."""
        if not self._started:
            return
        self._started = False
        assert self._group is not None and self._watchdog is not None
        self._group.kill()
        self._group.wait_empty(10.0)
        for proc in self._procs:
            with contextlib.suppress(Exception):
                proc.wait(timeout=5.0)
        self._spawns.put(None)
        self._work.put(None)
        self._holds.put(None)
        # The watchdog lets go of its copy of the group first, so that closing ours below
        # really drops the marks (an unread group would block every open on them).
        self._watchdog.stand_down()
        os.write(self._wake_w, b"x")
        for t in self._threads:
            t.join(timeout=10.0)
        os.close(self._fan)
        os.close(self._wake_r)
        os.close(self._wake_w)
        self._group.remove()
        if self._ns is not None:
            self._ns.close()
        if self.journal is not None:
            self.journal.flush()

    def _abort(self) -> None:
        if self._fan >= 0:
            os.close(self._fan)
            self._fan = -1
        if self._ns is not None:
            self._ns.close()
        if self._group is not None:
            self._group.remove()

    # -- the unit ----------------------------------------------------------------------------

    def spawn(self, argv: Sequence[str], **popen: Any) -> subprocess.Popen[Any]:
        """Start a process of the unit (``subprocess.Popen`` keywords pass through, but
        ``preexec_fn`` is the guard's). Every process it starts belongs to the unit."""
        if not self._started:
            raise RuntimeError("the guard is not started")
        done: Future[subprocess.Popen[Any]] = Future()
        self._spawns.put((list(argv), popen, done))
        return done.result()

    def _spawn_loop(self) -> None:
        # One long-lived thread starts every unit process: PR_SET_PDEATHSIG fires when the
        # *thread* that forked the child ends, so it must be one that lives as long as we do.
        while (item := self._spawns.get()) is not None:
            argv, popen, done = item
            try:
                setup = self._child_setup(tuple(popen.get("pass_fds", ())))
                proc = subprocess.Popen(argv, preexec_fn=setup, **popen)
                self._procs.append(proc)
                done.set_result(proc)
            except BaseException as exc:
                done.set_exception(exc)

    def _child_setup(self, pass_fds: tuple[int, ...]) -> Callable[[], None]:
        group, filt, parent, ns = self._group, self._filter, os.getpid(), self._ns
        uid, gid, kill, caps = self._user, self._gid, int(signal.SIGKILL), self._caps
        fan, inherited, mdwe = self._fan, (0, 1, 2, *pass_fds), self._deny_write_exec
        prctl = load_libc().prctl
        assert group is not None and ns is not None

        def setup() -> None:  # in the child, between fork and exec
            group.join_self()
            unshare_cgroup()
            ns.join()
            prctl(PR_SET_PDEATHSIG, kill, 0, 0, 0)
            if os.getppid() != parent:
                os._exit(137)  # the supervisor is already gone
            _mark_inherited(fan, inherited)
            if mdwe and prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0) != 0:
                os._exit(126)
            if caps is not None:
                caps.apply()
            if gid is not None:
                os.setgroups([])
                os.setresgid(gid, gid, gid)
            if uid is not None:
                os.setresuid(uid, uid, uid)
            filt.install()

        return setup

    # -- policy, journal ---------------------------------------------------------------------

    def update_policy(self, policy: ExecPolicy) -> None:
        """Decide by ``policy`` from now on; every cached hash is dropped."""
        with self._lock:
            self._policy = policy
            self._cache.clear()

    def seal_interval(self) -> bytes:
        """End the journal's interval; its root (what the interval's attestation commits to)."""
        if self.journal is None:
            raise RuntimeError("this guard keeps no journal")
        return self.journal.seal_interval()[1]

    # -- answering events --------------------------------------------------------------------

    def _event_loop(self) -> None:
        # Never blocks on anything but poll, opens nothing on a marked filesystem, and
        # answers every event it does not hand on: an unanswered event blocks its process.
        poller = select.poll()
        poller.register(self._fan, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        while True:
            ready = {fd for fd, _ in poller.poll()}
            if self._wake_r in ready:
                self._drain_on_close()
                return
            try:
                buf = os.read(self._fan, 1 << 16)
            except BlockingIOError:
                continue
            for ev in fanotify.parse(buf):
                self._dispatch(ev)

    def _dispatch(self, ev: fanotify.Event) -> None:
        self.stats.events += 1
        if ev.fd < 0:
            return
        if not ev.mask & fanotify.PERM_EVENTS:
            os.close(ev.fd)
            return
        try:
            outside = ev.pid == self._pid or not self._in_unit(ev.pid)
        except Exception:
            # Not provably the unit's: a live unit process's cgroup can always be read,
            # so this is an outsider (or a process already gone); never refuse one.
            outside = True
            self.stats.outside_unknown += 1
        if outside:
            self.stats.outside += 1
            self._answer(ev.fd, True)
            os.close(ev.fd)
        elif not self._decide_quickly(ev):
            self._work.put(ev)

    def _in_unit(self, pid: int) -> bool:
        # The group is made before the threads that ask start; the callers take any error
        # (this assertion included) as "not provably the unit's".
        assert self._group is not None
        return self._group.contains(pid)

    def _decide_quickly(self, ev: fanotify.Event) -> bool:
        # Bytes already hashed are decided here, without a hand-over to the hashing thread;
        # the rest (``False``) wait for it, so hashing never delays anyone else's answer.
        try:
            st = os.fstat(ev.fd)
            with self._lock:
                known = _key(st) in self._cache
            if known or not stat.S_ISREG(st.st_mode):
                self._decide(ev, st)
                return True
            return False
        except BaseException:
            self._answer(ev.fd, False)
            with contextlib.suppress(OSError):
                os.close(ev.fd)
            return True

    def _drain_on_close(self) -> None:
        # Closing: the unit has been killed; whatever is still queued in the kernel is
        # allowed unless it is provably the unit's. Bounded, since an outsider reaching in
        # may keep raising events: closing the group right after allows whatever is left.
        for _ in range(64):
            try:
                events = list(fanotify.parse(os.read(self._fan, 1 << 16)))
            except (BlockingIOError, OSError):
                return
            for ev in events:
                if ev.fd >= 0:
                    try:
                        mine = ev.pid != self._pid and self._in_unit(ev.pid)
                    except Exception:
                        mine = False
                    self._answer(ev.fd, not mine)
                    os.close(ev.fd)

    def _answer(self, fd: int, allow: bool) -> None:
        with contextlib.suppress(OSError):  # the event may be gone with its process
            fanotify.respond(self._fan, fd, allow)

    def _decide_loop(self) -> None:
        while (ev := self._work.get()) is not None:
            try:
                self._decide(ev)
            except BaseException:  # fail closed, and never leave an event unanswered
                self._answer(ev.fd, False)
                with contextlib.suppress(OSError):
                    os.close(ev.fd)
        # Closing: refuse what is still queued (its processes are dead or dying).
        while True:
            try:
                ev = self._work.get_nowait()
            except queue.Empty:
                return
            if ev is not None:
                self._answer(ev.fd, False)
                os.close(ev.fd)

    def _decide(self, ev: fanotify.Event, st: os.stat_result | None = None) -> None:
        fd = ev.fd
        exec_ = ev.mask & fanotify.FAN_OPEN_EXEC_PERM or _in_exec(ev.pid)
        access = EXEC if exec_ else OPEN
        self.stats.unit += 1
        self.stats.by_access[access] += 1
        if st is None:
            st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # devices, fifos, sockets: not code, never run
            self._answer(fd, True)
            os.close(fd)
            return
        lease, old_exe = LEASE_NONE, None
        if access == EXEC:
            old_exe = _exe_of(ev.pid)
            lease = _take_lease(fd)
            self.stats.leases += lease == LEASE_HELD
            st = os.fstat(fd)
        content, stable = self._content(fd, st)
        with self._lock:
            policy = self._policy
        verdict = judge(policy, access, content, lease=lease, stable=stable)
        self._answer(fd, verdict.allow)
        if verdict.allow:
            self.stats.allowed += 1
        else:
            self.stats.denied += 1
            self.stats.unpinned += verdict.cause == UNPINNED
        self._record(verdict, fd)
        if lease == LEASE_HELD and verdict.allow:
            self._holds.put((fd, ev.pid, (st.st_dev, st.st_ino), old_exe))
        else:
            os.close(fd)

    def _content(self, fd: int, st: os.stat_result) -> tuple[bytes, bool]:
        """BLAKE3 of the file's bytes through ``fd`` (cached by inode and times), and whether
        they held still while being read."""
        key = _key(st)
        with self._lock:
            held = self._cache.get(key)
        if held is not None:
            self.stats.cache_hits += 1
            return held, True
        content = b""
        for _ in range(3):
            content = hash_fd(fd)
            self.stats.hashed += 1
            now = _key(os.fstat(fd))
            if now == key:
                with self._lock:
                    self._cache[key] = content
                    if len(self._cache) > _CACHE_LIMIT:
                        self._cache.popitem(last=False)
                return content, True
            key = now
        return content, False

    def _record(self, verdict: Verdict, fd: int) -> None:
        # The core decides what is journaled; the path is looked up only for that.
        if self.journal is None or not self.journal.wants(verdict):
            return
        try:  # bytes, so a name that is not UTF-8 is journaled as \xNN escapes
            path = os.readlink(b"/proc/self/fd/%d" % fd).decode("utf-8", "backslashreplace")
        except OSError:
            path = ""
        self.journal.record(verdict, path)

    def _lease_loop(self) -> None:
        holds: list[tuple[int, int, tuple[int, int], tuple[int, int] | None, float]] = []
        while True:
            try:
                item = self._holds.get(timeout=LEASE_POLL_S) if holds else self._holds.get()
            except queue.Empty:
                pass  # no new hold: the held ones are looked at again
            else:
                if item is None:
                    break
                holds.append((*item, time.monotonic() + LEASE_HOLD_S))
            now, kept = time.monotonic(), []
            for hold in holds:
                fd, pid, inode, old_exe, deadline = hold
                exe = _exe_of(pid)
                if exe is None or exe == inode or exe != old_exe or now > deadline:
                    os.close(fd)  # releases the lease
                else:
                    kept.append(hold)
            holds = kept
        for hold in holds:
            os.close(hold[0])


def _mark_inherited(fan: int, fds: tuple[int, ...]) -> None:
    """In the child: mark the inode of each inherited descriptor that is a regular file. It
    was opened outside the unit's namespace, on a mount without marks, so an exec or a
    reopen of it through ``/proc/self/fd`` would otherwise go unjudged. (Anyone else
    opening that one file meets the mark too, and is answered at once.)"""
    for fd in fds:
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                fanotify.mark_inode(fan, f"/proc/self/fd/{fd}", fanotify.GUARD_EVENTS)
        except OSError:
            continue


def _key(st: os.stat_result) -> tuple[int, ...]:
    """What identifies a file's bytes in the cache: any write changes size or the times."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


_MACHINE = os.uname().machine


def _in_exec(tid: int) -> bool:
    """Whether thread ``tid`` (blocked in the open being judged) is inside an exec (then
    the open is the exec's, before the kernel denies writers the file)."""
    try:
        fd = os.open(f"/proc/{tid}/syscall", os.O_RDONLY)
    except OSError:
        return False  # gone: its answer no longer matters
    try:
        return is_exec_syscall(os.read(fd, 64), _MACHINE)
    except OSError:
        return False
    finally:
        os.close(fd)


def _exe_of(pid: int) -> tuple[int, int] | None:
    try:
        s = os.stat(f"/proc/{pid}/exe")
    except OSError:
        return None
    return (s.st_dev, s.st_ino)


def _take_lease(fd: int) -> str:
    """A read lease on the event's file, so no writer can get in before the kernel denies
    writes for the exec: :data:`~fleet.env.exec_decision.LEASE_HELD`, or why not (a writer
    holds the file open, or the filesystem has no leases); :func:`judge` weighs it."""
    try:
        # A lease break signals the file's owner: make that SIGURG (ignored by default)
        # and then no one, so a writer's knock never kills the supervisor.
        fcntl.fcntl(fd, fcntl.F_SETSIG, signal.SIGURG)
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
        fcntl.fcntl(fd, fcntl.F_SETOWN, 0)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EBUSY):
            return LEASE_WRITER
        return LEASE_UNSUPPORTED
    return LEASE_HELD
