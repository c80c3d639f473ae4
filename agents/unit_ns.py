"""The unit's own mount namespace: the mounts the guard marks, which no other process uses.

At the guard's start a *holder* process (forked, it does nothing but wait) unshares a mount
namespace and makes every mount in it private, so no mount or unmount propagates in or out.
Its mounts are copies of the host's: the same filesystems, but new mount objects with ids of
their own. The guard marks those copies with ``FAN_MARK_MOUNT`` (:meth:`UnitNamespace.mark`),
never a whole filesystem, so an open through the host's mounts (every process outside the
unit) raises no event at all: outsiders neither wait for the guard nor can be refused by it.
Each mark is checked to land on a mount of this namespace (the mount id the kernel reports
for the opened mount point must be the one listed), so a symlink or a mount that vanished in
between can never make the guard mark a host mount; such a mount point is skipped and logged.

In that namespace the kernel's knobs (:data:`KERNEL_FILES`: ``/proc/sys``, sysfs, ...) are
read-only mounts: a root unit without capabilities could otherwise still write them by file
mode alone (and so have the kernel run a program of its choosing as full root).

Every process of the unit enters the namespace between fork and exec (:meth:`join`, a
``setns``), with its working directory carried over by name. A process inside it reaches
files only through marked mounts (or pseudo filesystems that hold no programs).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import signal
from collections.abc import Iterable

from fleet_ledger.agents import fanotify
from fleet_ledger.agents.host_linux import Mount, load_libc, mounts

__all__ = ["NamespaceUnavailable", "UnitNamespace"]

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND = 32, 4096
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
# The kernel's own knobs: uid 0 may write them by file mode alone, no capability needed, and
# some make the kernel run a program as full root outside the unit (kernel.modprobe,
# kernel.core_pattern, uevent_helper), reboot the host (sysrq-trigger) or turn off the
# guard's leases (fs.leases-enable, fs.lease-break-time). Read-only in the unit's namespace,
# as container runtimes keep them.
KERNEL_FILES = ("/proc/sys", "/proc/sysrq-trigger", "/proc/bus", "/proc/fs", "/proc/irq",
                "/sys")
PR_SET_PDEATHSIG = 1
log = logging.getLogger("fleet.exec_guard")

_libc = load_libc()
_unshare = _libc.unshare
_setns = _libc.setns
_mount = _libc.mount
_prctl = _libc.prctl
_unshare.argtypes = [ctypes.c_int]
_setns.argtypes = [ctypes.c_int, ctypes.c_int]
_mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                   ctypes.c_void_p]
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                   ctypes.c_ulong]


class NamespaceUnavailable(OSError):
    """The unit's mount namespace could not be made (no CAP_SYS_ADMIN, no namespaces)."""


def unshare_cgroup() -> None:
    """In the child: a cgroup namespace rooted at the unit's group, so that even a process
    that may write ``cgroup.procs`` cannot move itself out of the unit."""
    if _unshare(CLONE_NEWCGROUP) != 0:
        code = ctypes.get_errno()
        raise NamespaceUnavailable(code, f"unshare(CLONE_NEWCGROUP): {os.strerror(code)}")


def _mount_id(fd: int) -> int:
    with open(f"/proc/self/fdinfo/{fd}", "rb") as f:
        for line in f:
            if line.startswith(b"mnt_id:"):
                return int(line.split()[1])
    return -1


class UnitNamespace:
    """One unit's mount namespace, held open by a waiting process until :meth:`close`."""

    def __init__(self) -> None:
        ready_r, ready_w = os.pipe()
        stop_r, self._stop_w = os.pipe()
        plan = kernel_files_plan(mounts())  # read here: the holder makes os calls only
        pid = os.fork()
        if pid == 0:  # the holder
            try:
                _hold(ready_w, stop_r, plan)
            finally:
                os._exit(0)
        os.close(ready_w)
        os.close(stop_r)
        self.pid = pid
        try:
            word = os.read(ready_r, 64)
        finally:
            os.close(ready_r)
        if word != b"ok":
            self.close()
            code = int(word or b"0") or errno.EPERM
            raise NamespaceUnavailable(code, f"a mount namespace for the unit: "
                                       f"{os.strerror(code)}")
        self.fd = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)

    def mounts(self) -> list[Mount]:
        """The namespace's mounts, as its own table lists them."""
        return mounts(f"/proc/{self.pid}/mountinfo")

    def mark(self, group: int, wanted: Iterable[Mount]) -> tuple[list[str], list[str]]:
        """Mark each of ``wanted`` (mounts of this namespace) in fanotify ``group``:
        (mount points marked, mount points skipped). A mount that is gone by now is
        skipped with a warning; one hidden under another mount (no path reaches it),
        quietly."""
        marked, skipped = [], []
        for m in wanted:
            if self._mark_one(group, m.mount_point, {m.mount_id}):
                marked.append(m.mount_point)
                continue
            skipped.append(m.mount_point)
            if m.mount_id in {n.mount_id for n in self.mounts()}:
                log.debug("exec guard: mount %s is hidden under another: skipped",
                          m.mount_point)
            else:
                log.warning("exec guard: mount %s of the unit's namespace vanished before "
                            "it was marked: skipped", m.mount_point)
        return marked, skipped

    def mark_paths(self, group: int, paths: Iterable[str]) -> list[str]:
        """Mark the namespace's mount holding each of ``paths``; ``FileNotFoundError`` for
        a path the namespace does not have."""
        ids = {m.mount_id for m in self.mounts()}
        marked = []
        for path in paths:
            if not self._mark_one(group, os.path.abspath(path), ids):
                raise FileNotFoundError(errno.ENOENT, f"{path}: not on a mount of the unit's "
                                        "namespace")
            marked.append(path)
        return marked

    def _mark_one(self, group: int, path: str, ids: set[int]) -> bool:
        """Mark the mount ``path`` leads to in the namespace, if it is one of ``ids``
        (never a mount of another namespace, whatever the path's links say)."""
        try:
            fd = os.open(f"/proc/{self.pid}/root{path}", os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            if _mount_id(fd) not in ids:
                return False
            fanotify.mark_mount(group, fd)
            return True
        finally:
            os.close(fd)

    def join(self) -> None:
        """In the child, between fork and exec: enter the namespace, keeping the working
        directory (by its name: the copy of the same folder)."""
        cwd = os.getcwd()
        if _setns(self.fd, CLONE_NEWNS) != 0:
            code = ctypes.get_errno()
            raise NamespaceUnavailable(code, f"setns(mount): {os.strerror(code)}")
        os.chdir(cwd)

    def close(self) -> None:
        """Let the holder go (the namespace lives on while a unit process is in it)."""
        if self._stop_w >= 0:
            os.close(self._stop_w)
            self._stop_w = -1
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
        if getattr(self, "fd", -1) >= 0:
            os.close(self.fd)
            self.fd = -1


def kernel_files_plan(table: list[Mount]) -> tuple[list[bytes], list[bytes]]:
    """From the host's mount table (the new namespace starts as its copy): the paths of
    :data:`KERNEL_FILES` to bind onto themselves (those inside a mount, so they alone can be
    made read-only), then every mount point to make read-only (those paths, and each mount
    at or below one of them)."""
    points = [m.mount_point for m in table]
    binds = [p for p in KERNEL_FILES if p not in points]
    below = [m for m in points
             if any(m == p or m.startswith(p + "/") for p in KERNEL_FILES)]
    ordered = list(dict.fromkeys(binds + below))
    return [p.encode() for p in binds], [p.encode() for p in ordered]


def _read_only_kernel_files(binds: list[bytes], read_only: list[bytes]) -> int:
    """In the holder's new namespace: carry out :func:`kernel_files_plan` (the host's mounts
    are other objects and keep their flags); 0, or the errno that stops it (the guard then
    refuses to start rather than leave them writable). A path the host lacks is skipped."""
    for path in binds:
        if os.path.lexists(path) and _mount(path, path, None, MS_BIND | MS_REC, None) != 0:
            return ctypes.get_errno()
    for path in read_only:
        try:
            keep = os.statvfs(path).f_flag & (MS_NOSUID | MS_NODEV | MS_NOEXEC)
        except OSError:
            continue  # not on this host, or gone meanwhile: nothing to reach there
        if _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | keep, None) != 0:
            return ctypes.get_errno()
    return 0


def _hold(ready_w: int, stop_r: int, plan: tuple[list[bytes], list[bytes]]) -> None:
    # A forked copy of a threaded process: os calls and the libc pointers loaded above only.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_IGN)
    _prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    keep = sorted((ready_w, stop_r))
    os.closerange(3, keep[0])
    os.closerange(keep[0] + 1, keep[1])
    os.closerange(keep[1] + 1, 1 << 16)
    if _unshare(CLONE_NEWNS) != 0 or _mount(None, b"/", None, MS_REC | MS_PRIVATE,
                                            None) != 0:
        os.write(ready_w, str(ctypes.get_errno()).encode())
        return
    code = _read_only_kernel_files(*plan)
    if code:
        os.write(ready_w, str(code).encode())
        return
    os.write(ready_w, b"ok")
    os.close(ready_w)
    with contextlib.suppress(OSError):
        os.read(stop_r, 1)  # end of file: the guard closed or died
