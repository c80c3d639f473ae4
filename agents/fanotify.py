"""Linux fanotify permission events through ctypes on libc: init, marks, events, answers.

Only what the exec guard needs: a ``FAN_CLASS_CONTENT`` group, ``FAN_MARK_MOUNT`` marks
(one mount object, not its filesystem) for ``FAN_OPEN_EXEC_PERM | FAN_OPEN_PERM``, reading
``fanotify_event_metadata`` records, answering ``FAN_ALLOW`` / ``FAN_DENY``. The kernel
opens each event's file for the listener (``O_RDONLY``, no events of its own), so the
listener reads the very bytes the opener would get, never a path that may have changed.

An unanswered permission event blocks the process that caused it, and closing the group's
last descriptor answers every pending event with "allow" and drops its marks; the guard is
written around both facts (``agents.exec_guard``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass

from fleet_ledger.agents.host_linux import load_libc

FAN_CLOEXEC = 0x01
FAN_NONBLOCK = 0x02
FAN_CLASS_CONTENT = 0x04
FAN_UNLIMITED_QUEUE = 0x10
FAN_UNLIMITED_MARKS = 0x20
FAN_REPORT_TID = 0x100
FAN_MARK_ADD = 0x01
FAN_MARK_INODE = 0x00
FAN_MARK_MOUNT = 0x10
FAN_OPEN_PERM = 0x00010000
FAN_OPEN_EXEC_PERM = 0x00040000
PERM_EVENTS = FAN_OPEN_PERM | FAN_OPEN_EXEC_PERM
# What the guard's marks ask for. Every exec opens its file, so FAN_OPEN_PERM alone sees
# every exec too; FAN_OPEN_EXEC_PERM would add a second round trip to each (the kernel asks
# both, one after the other). The guard tells an exec's open by the thread's system call.
GUARD_EVENTS = FAN_OPEN_PERM
FAN_ALLOW = 0x01
FAN_DENY = 0x02
METADATA_VERSION = 3
AT_FDCWD = -100

_METADATA = struct.Struct("=IBBHQii")
_RESPONSE = struct.Struct("=iI")

_libc = load_libc()
_init = getattr(_libc, "fanotify_init", None)
_mark = getattr(_libc, "fanotify_mark", None)
if _init is not None and _mark is not None:
    _init.argtypes = [ctypes.c_uint, ctypes.c_uint]
    _init.restype = ctypes.c_int
    _mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int,
                      ctypes.c_char_p]
    _mark.restype = ctypes.c_int


class FanotifyError(OSError):
    """A fanotify call failed (the errno says why: EPERM without CAP_SYS_ADMIN, EINVAL
    for a kernel without permission events, ENOSYS without fanotify at all)."""


def _fail(what: str) -> FanotifyError:
    code = ctypes.get_errno()
    return FanotifyError(code, f"{what}: {os.strerror(code)}")


def init() -> int:
    """A new content-class group's descriptor (close-on-exec, non-blocking reads,
    unlimited queue and marks: a dropped permission event would be an unanswerable one;
    each event names the thread that caused it, not only its process)."""
    if _init is None:
        raise FanotifyError(errno.ENOSYS, "this libc has no fanotify_init")
    fd = _init(FAN_CLASS_CONTENT | FAN_CLOEXEC | FAN_NONBLOCK | FAN_UNLIMITED_QUEUE
               | FAN_UNLIMITED_MARKS | FAN_REPORT_TID,
               os.O_RDONLY | os.O_LARGEFILE | os.O_CLOEXEC)
    if fd < 0:
        raise _fail("fanotify_init")
    return fd


def mark_mount(fd: int, target: int, mask: int = GUARD_EVENTS) -> None:
    """Mark the one mount that descriptor ``target`` (an ``O_PATH`` one will do) lies on:
    opens through other mounts of the same filesystem raise no event."""
    assert _mark is not None
    # Through the descriptor's magic link: the kernel resolves it to the very mount and
    # file the descriptor holds (a NULL path would refuse an O_PATH descriptor).
    where = b"/proc/self/fd/%d" % target
    if _mark(fd, FAN_MARK_ADD | FAN_MARK_MOUNT, mask, AT_FDCWD, where) != 0:
        raise _fail(f"fanotify_mark(FAN_MARK_MOUNT) of descriptor {target}")


def mark_inode(fd: int, path: str, mask: int) -> None:
    """Mark one inode for ``mask`` (the probe uses this: it never fires for a directory)."""
    assert _mark is not None
    if _mark(fd, FAN_MARK_ADD | FAN_MARK_INODE, mask, AT_FDCWD, os.fsencode(path)) != 0:
        raise _fail(f"fanotify_mark {path}")


@dataclass(frozen=True, slots=True)
class Event:
    """One event: its mask, the descriptor the kernel opened for it (-1: none) and the id
    of the thread that caused it (``FAN_REPORT_TID``)."""

    mask: int
    fd: int
    pid: int


def parse(buf: bytes) -> Iterator[Event]:
    """The events in one ``read`` of the group's descriptor."""
    off, end = 0, len(buf)
    while off + _METADATA.size <= end:
        length, version, _r, _mlen, mask, fd, pid = _METADATA.unpack_from(buf, off)
        if version != METADATA_VERSION or length < _METADATA.size:
            raise FanotifyError(errno.EPROTO, f"fanotify metadata version {version}")
        yield Event(mask, fd, pid)
        off += length


def respond(group: int, event_fd: int, allow: bool) -> None:
    """Answer one permission event."""
    os.write(group, _RESPONSE.pack(event_fd, FAN_ALLOW if allow else FAN_DENY))


def probe() -> str | None:
    """``None`` when this host gives fanotify permission events for exec and open, else the
    reason it does not. Marks only the inode of ``/`` (a directory is never executed or
    opened as a file), so probing blocks nothing."""
    try:
        fd = init()
    except FanotifyError as exc:
        return f"fanotify_init(FAN_CLASS_CONTENT) failed: {exc.strerror}"
    try:
        mark_inode(fd, "/", PERM_EVENTS)
    except FanotifyError as exc:
        return f"fanotify_mark(FAN_OPEN_EXEC_PERM | FAN_OPEN_PERM) failed: {exc.strerror}"
    finally:
        os.close(fd)
    return None
