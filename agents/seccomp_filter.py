"""The unit's seccomp filter: a plain classic-BPF program, installed before exec.

It closes the ways round the guard's filesystem marks:

* ``memfd_create`` / ``memfd_secret``: a file on no marked filesystem, which ``fexecve``
  (or ``dlopen`` of ``/proc/self/fd/N``) would run without any mark seeing its bytes;
* mounting anything new (``mount``, ``fsopen``/``fsconfig``/``fsmount``, ``open_tree``,
  ``move_mount``, ``fspick``, ``mount_setattr``, ``pivot_root``, ``umount2``): a fresh
  filesystem is an unmarked one;
* entering or making namespaces (``unshare``, ``setns``, ``clone`` with any ``CLONE_NEW*``
  flag; ``clone3``, whose flags sit behind a pointer BPF cannot read, answers ``ENOSYS``
  so libc falls back to ``clone``): a new user namespace would give the unit the
  capability to mount;
* loading kernel code (``init_module``, ``finit_module``, ``kexec_load``,
  ``kexec_file_load``);
* taking a descriptor out of another process (``pidfd_getfd``): a descriptor opened in
  the host's mount namespace lies on an unmarked mount.

Each answers ``EPERM`` (``clone3``: ``ENOSYS``). The filter checks the architecture first:
a system call made through another ABI (i386 ``int 0x80`` on x86-64, or x32's numbers) kills
the process, since its numbers mean other calls. ``PR_SET_NO_NEW_PRIVS`` is set first (the
kernel requires it of an unprivileged caller, and it stops a set-uid binary regaining
privileges inside the unit).

Plain BPF over ctypes was chosen over a libseccomp binding: it needs no system library (the
PyPI bindings wrap ``libseccomp.so``, which a host may not have), and the program is small
enough to read whole (:func:`program`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import platform
import struct
from dataclasses import dataclass

from fleet_ledger.agents.host_linux import load_libc

# seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6] (little-endian here)
_OFF_NR, _OFF_ARCH, _OFF_ARG0 = 0, 4, 16
_LD_W_ABS = 0x20
_JEQ_K, _JGE_K, _JSET_K = 0x15, 0x35, 0x45
_RET_K = 0x06
RET_ALLOW = 0x7FFF0000
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET (NEWTIME only exists
# for unshare and clone3, both refused outright).
CLONE_NEW_MASK = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 \
    | 0x20000000 | 0x40000000
X32_SYSCALL_BIT = 0x40000000


@dataclass(frozen=True)
class Arch:
    """One architecture's audit id and the numbers of the calls the filter concerns."""

    name: str
    audit: int
    refused: dict[str, int]
    clone: int
    clone3: int
    x32_bit: bool


_COMMON_NEW = {"open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
               "fsmount": 432, "fspick": 433, "mount_setattr": 442, "memfd_secret": 447,
               "open_tree_attr": 467, "pidfd_getfd": 438}
ARCHES = {
    "x86_64": Arch("x86_64", 0xC000003E, {
        "memfd_create": 319, "mount": 165, "umount2": 166, "pivot_root": 155,
        "unshare": 272, "setns": 308, "init_module": 175, "finit_module": 313,
        "kexec_load": 246, "kexec_file_load": 320, **_COMMON_NEW}, 56, 435, True),
    "aarch64": Arch("aarch64", 0xC00000B7, {
        "memfd_create": 279, "mount": 40, "umount2": 39, "pivot_root": 41,
        "unshare": 97, "setns": 268, "init_module": 105, "finit_module": 273,
        "kexec_load": 104, "kexec_file_load": 294, **_COMMON_NEW}, 220, 435, False),
}


class SeccompUnavailable(OSError):
    """This machine's architecture has no filter here, or the kernel refused it."""


def current_arch() -> Arch:
    machine = platform.machine()
    arch = ARCHES.get({"arm64": "aarch64", "amd64": "x86_64"}.get(machine, machine))
    if arch is None:
        raise SeccompUnavailable(errno.ENOSYS, f"no seccomp filter for architecture {machine}")
    return arch


def _ins(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def program(arch: Arch) -> list[bytes]:
    """The filter's instructions, in order (each a packed ``sock_filter``)."""
    numbers = sorted(set(arch.refused.values()))
    # Tail, in this order: [clone args check: ld arg0, jset], allow, eperm, enosys, kill.
    body: list[tuple[int, int | str, int | str, int]] = []
    body.append((_LD_W_ABS, 0, 0, _OFF_ARCH))
    body.append((_JEQ_K, 1, 0, arch.audit))
    body.append((_RET_K, 0, 0, RET_KILL_PROCESS))
    body.append((_LD_W_ABS, 0, 0, _OFF_NR))
    if arch.x32_bit:
        body.append((_JGE_K, "kill", 0, X32_SYSCALL_BIT))
    body += [(_JEQ_K, "eperm", 0, nr) for nr in numbers]
    body.append((_JEQ_K, "enosys", 0, arch.clone3))
    body.append((_JEQ_K, 0, "allow", arch.clone))
    body.append((_LD_W_ABS, 0, 0, _OFF_ARG0))
    body.append((_JSET_K, "eperm", "allow", CLONE_NEW_MASK))
    labels = {"allow": len(body), "eperm": len(body) + 1, "enosys": len(body) + 2,
              "kill": len(body) + 3}
    body += [(_RET_K, 0, 0, RET_ALLOW), (_RET_K, 0, 0, RET_ERRNO | errno.EPERM),
             (_RET_K, 0, 0, RET_ERRNO | errno.ENOSYS), (_RET_K, 0, 0, RET_KILL_PROCESS)]

    def jump(at: int, to: int | str) -> int:
        return to if isinstance(to, int) else labels[to] - at - 1

    return [_ins(code, jump(i, jt), jump(i, jf), k) for i, (code, jt, jf, k) in enumerate(body)]


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


class Filter:
    """A filter ready to install in a child between fork and exec: everything that
    allocates is done here, in the parent; :meth:`install` only makes two system calls."""

    def __init__(self, arch: Arch | None = None) -> None:
        self.arch = arch or current_arch()
        code = b"".join(program(self.arch))
        self._buf = ctypes.create_string_buffer(code, len(code))
        self._prog = _SockFprog(len(code) // 8, ctypes.addressof(self._buf))
        self._libc = load_libc()
        self._prctl = self._libc.prctl
        self._prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p,
                                ctypes.c_ulong, ctypes.c_ulong]
        self._prctl.restype = ctypes.c_int
        self._prog_ptr = ctypes.cast(ctypes.pointer(self._prog), ctypes.c_void_p)

    def install(self) -> None:
        """Set no-new-privileges and install the filter on the calling thread."""
        if self._prctl(PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0:
            code = ctypes.get_errno()
            raise SeccompUnavailable(code, f"PR_SET_NO_NEW_PRIVS: {os.strerror(code)}")
        if self._prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, self._prog_ptr, 0, 0) != 0:
            code = ctypes.get_errno()
            raise SeccompUnavailable(code, f"PR_SET_SECCOMP: {os.strerror(code)}")
