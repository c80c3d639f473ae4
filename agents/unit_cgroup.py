"""A unit's own cgroup v2 group, and the watchdog that kills it if its supervisor dies.

The guard asks two things of a group: *who is in the unit* (a permission event from a
process outside it is allowed at once) and *kill everything in it*, atomically against
forks (``cgroup.kill``). The group is a child of the supervisor's own v2 group, named
``fleet-exec-<pid>-<n>``, created empty and removed when the unit is gone.

The watchdog is a forked copy of the supervisor that holds two descriptors: the read end
of a pipe whose write end only the supervisor holds, and a duplicate of the supervisor's
fanotify group. When the pipe reports end-of-file (the supervisor died, however) it writes
``cgroup.kill`` *first* and only then lets go of the fanotify group: while it holds it,
an event the dead supervisor left unanswered stays unanswered (its process blocked) instead
of being allowed by the kernel's release of the group. It calls nothing but ``os``
functions, so it never loads code from a marked filesystem nobody answers for any more.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import signal
import time
from pathlib import Path

from fleet_ledger.agents.host_linux import mounts

_COUNTER = itertools.count(1)
_DONE = b"d"  # the supervisor's "I cleaned up; just exit"


class CgroupUnavailable(OSError):
    """No writable cgroup v2 hierarchy on this host."""


def cgroup2_mount(mountinfo: str = "/proc/self/mountinfo") -> Path:
    """Where the cgroup v2 hierarchy is mounted (``/sys/fs/cgroup`` on a unified host,
    ``/sys/fs/cgroup/unified`` on a hybrid one)."""
    found = [Path(m.mount_point) for m in mounts(mountinfo) if m.fstype == "cgroup2"]
    if not found:
        raise CgroupUnavailable(errno.ENOENT, "no cgroup2 filesystem is mounted")
    return min(found, key=lambda p: len(p.parts))


def own_group(proc_cgroup: str = "/proc/self/cgroup") -> str:
    """This process's v2 group, as ``/path`` under the hierarchy's root."""
    for line in Path(proc_cgroup).read_text().splitlines():
        if line.startswith("0::"):
            return line[3:]
    raise CgroupUnavailable(errno.ENOENT, "this process is in no cgroup v2 group")


class UnitGroup:
    """One unit's group. ``rel`` is its path under the hierarchy (``/fleet-exec-...``)."""

    def __init__(self) -> None:
        root = cgroup2_mount()
        parent = own_group().rstrip("/")
        name = f"fleet-exec-{os.getpid()}-{next(_COUNTER)}"
        self.rel = f"{parent}/{name}"
        self.path = root / self.rel.lstrip("/")
        try:
            self.path.mkdir()
        except OSError as exc:
            raise CgroupUnavailable(exc.errno, f"cannot create {self.path}: {exc.strerror}"
                                    ) from None
        self._procs = os.fsencode(self.path / "cgroup.procs")
        self._kill = os.fsencode(self.path / "cgroup.kill")
        self._events = os.fsencode(self.path / "cgroup.events")
        self._line = ("0::" + self.rel).encode()

    # -- for the child, between fork and exec: no allocation beyond os calls ---------------

    def join_self(self) -> None:
        """Move the calling process into the group."""
        fd = os.open(self._procs, os.O_WRONLY)
        try:
            os.write(fd, b"0")  # "0" is the writing process itself
        finally:
            os.close(fd)

    # -- for the supervisor ------------------------------------------------------------------

    def contains(self, pid: int) -> bool:
        """Whether process ``pid`` is in the group (or a group below it)."""
        try:
            fd = os.open(f"/proc/{pid}/cgroup", os.O_RDONLY)
        except OSError:
            return False
        try:
            data = os.read(fd, 4096)
        finally:
            os.close(fd)
        for line in data.splitlines():
            if line.startswith(b"0::"):
                return line == self._line or line.startswith(self._line + b"/")
        return False

    def populated(self) -> bool:
        try:
            fd = os.open(self._events, os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            return b"populated 1" in os.read(fd, 4096)
        finally:
            os.close(fd)

    def kill(self) -> None:
        """SIGKILL every process in the group (``cgroup.kill``; one by one where the kernel
        predates it)."""
        _kill_group(self._kill, self._procs)

    def wait_empty(self, timeout: float) -> bool:
        """Wait until nothing runs in the group; ``False`` if ``timeout`` passed first."""
        deadline = time.monotonic() + timeout
        while self.populated():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)
        return True

    def remove(self) -> None:
        """Kill what is left and remove the group."""
        if not self.path.exists():
            return
        self.kill()
        self.wait_empty(5.0)
        with contextlib.suppress(FileNotFoundError):
            self.path.rmdir()


def _kill_group(kill_file: bytes, procs_file: bytes) -> None:
    try:
        fd = os.open(kill_file, os.O_WRONLY)
    except FileNotFoundError:
        fd = -1
    if fd >= 0:
        try:
            os.write(fd, b"1")
            return
        except OSError:
            pass
        finally:
            os.close(fd)
    # No cgroup.kill (before Linux 5.14): kill the members until none are left.
    for _ in range(100):
        try:
            pfd = os.open(procs_file, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            pids = os.read(pfd, 1 << 16).split()
        finally:
            os.close(pfd)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)


class Watchdog:
    """Kills ``group`` if this process dies; see the module docstring."""

    def __init__(self, group: UnitGroup, fanotify_fd: int) -> None:
        read_end, self._write_end = os.pipe()
        kill_file, procs_file, events_file = group._kill, group._procs, group._events
        group_dir = os.fsencode(group.path)
        pid = os.fork()
        if pid == 0:  # the watchdog
            try:
                _watch(read_end, fanotify_fd, kill_file, procs_file, events_file, group_dir)
            finally:
                os._exit(0)
        os.close(read_end)
        self.pid = pid

    def stand_down(self) -> None:
        """The supervisor has killed the unit itself: the watchdog lets go and exits."""
        try:
            os.write(self._write_end, _DONE)
        finally:
            os.close(self._write_end)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)


def _watch(read_end: int, fanotify_fd: int, kill_file: bytes, procs_file: bytes,
           events_file: bytes, group_dir: bytes) -> None:
    # A copy of the supervisor: drop every descriptor but the two it needs, leave the
    # terminal's process group (a Ctrl-C meant for the supervisor must not kill the
    # watchdog) and ignore the signals a shell sends a job.
    os.setsid()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_IGN)
    keep = sorted((read_end, fanotify_fd))
    os.closerange(0, keep[0])
    os.closerange(keep[0] + 1, keep[1])
    os.closerange(keep[1] + 1, 1 << 16)
    while True:
        try:
            word = os.read(read_end, 1)
            break
        except InterruptedError:
            continue
    if word == _DONE:
        return
    _kill_group(kill_file, procs_file)
    os.close(fanotify_fd)  # every unit process has SIGKILL pending: none runs again
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        try:
            fd = os.open(events_file, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            if b"populated 0" in os.read(fd, 4096):
                break
        finally:
            os.close(fd)
        _kill_group(kill_file, procs_file)
        time.sleep(0.005)
    with contextlib.suppress(OSError):
        os.rmdir(group_dir)
