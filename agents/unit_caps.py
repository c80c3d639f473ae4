"""Dropping a unit's capabilities before it runs (root units included).

A root process keeps every capability across exec, and several of them undo the guard:
``CAP_SYS_ADMIN`` (or ``CAP_CHECKPOINT_RESTORE``) opens ``/proc/*/map_files/*``, which
reopens anonymous or SysV shared memory as a file no mark sees; ``CAP_SYS_PTRACE`` reaches
other processes' memory and descriptors; ``CAP_DAC_READ_SEARCH`` opens files by handle;
``CAP_SYS_MODULE``, ``CAP_SYS_RAWIO``, ``CAP_BPF``, ``CAP_MKNOD`` reach the kernel or raw
devices. :class:`CapabilityDrop` empties the bounding set and the inheritable and ambient
sets in the child, so after its exec the unit holds no capability even as uid 0 (the
kernel gives root only what the bounding set still allows). Prepared in the parent;
:meth:`CapabilityDrop.apply` makes system calls only.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from fleet_ledger.agents.host_linux import load_libc

__all__ = ["CapabilityDrop"]

PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAP_V3 = 0x20080522
_SYS_CAPGET = {"x86_64": 125, "aarch64": 90}
_SYS_CAPSET = {"x86_64": 126, "aarch64": 91}


class _Header(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _Data(ctypes.Structure):
    _fields_ = (("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32))


class CapabilityDrop:
    """Everything the child needs to drop its capabilities, allocated here."""

    def __init__(self) -> None:
        self.last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
        libc = load_libc()
        self._prctl = libc.prctl
        self._prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                                ctypes.c_ulong]
        self._syscall = libc.syscall
        machine = os.uname().machine
        self._get, self._set = _SYS_CAPGET[machine], _SYS_CAPSET[machine]
        self._head = _Header(_CAP_V3, 0)
        self._data = (_Data * 2)()

    def apply(self) -> None:
        """In the child, before any change of user: no capability survives the exec."""
        for cap in range(self.last + 1):
            if self._prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
                code = ctypes.get_errno()
                raise OSError(code, f"PR_CAPBSET_DROP {cap}: {os.strerror(code)}")
        self._prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
        head, data = ctypes.byref(self._head), ctypes.byref(self._data)
        self._head.version = _CAP_V3
        if self._syscall(self._get, head, data) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"capget: {os.strerror(code)}")
        self._data[0].inheritable = self._data[1].inheritable = 0
        if self._syscall(self._set, head, data) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"capset: {os.strerror(code)}")
