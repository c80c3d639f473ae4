"""What the exec guard's modules read of the Linux host, spelled once: the mount table
(``/proc/self/mountinfo``), libc through ctypes, and the BLAKE3 of a file's bytes read
through a descriptor."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
from dataclasses import dataclass

from blake3 import blake3

__all__ = ["Mount", "hash_fd", "load_libc", "mounts"]

_CHUNK = 1 << 20
_ESCAPE = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True, slots=True)
class Mount:
    """One line of ``mountinfo``: the mounted filesystem's device (``major:minor``),
    where it is mounted (octal escapes such as ``\\040`` undone), its type and the mount's
    id (unique on the host while it exists: two namespaces' copies of one mount differ)."""

    device: str
    mount_point: str
    fstype: str
    mount_id: int = -1


def _unescape(field: str) -> str:
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def mounts(mountinfo: str = "/proc/self/mountinfo") -> list[Mount]:
    """Every mount this process sees, in the table's order."""
    out = []
    with open(mountinfo) as f:
        for line in f:
            left, _, right = line.rstrip("\n").partition(" - ")
            parts = left.split(" ")
            out.append(Mount(parts[2], _unescape(parts[4]), right.split(" ", 1)[0],
                             int(parts[0])))
    return out


def load_libc() -> ctypes.CDLL:
    """libc with errno kept (a new handle: argtypes set on one caller's functions never
    reach another's)."""
    return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def hash_fd(fd: int) -> bytes:
    """BLAKE3 of the bytes of the file open at ``fd``, read from offset 0 in chunks
    (the descriptor's own offset is left alone)."""
    h = blake3()
    offset = 0
    while chunk := os.pread(fd, _CHUNK, offset):
        h.update(chunk)
        offset += len(chunk)
    return h.digest()
