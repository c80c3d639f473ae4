"""A private tmpfs for a unit (root only): a filesystem no other process uses, so marking it
for fanotify permission events touches nothing else on the machine.

    with tmpfs(Path("/run/fleet/unit-7")) as root:
        ... ExecGuard(policy, marks=[str(root)]) ...
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
from collections.abc import Iterator
from pathlib import Path

from fleet_ledger.agents.host_linux import load_libc

MNT_DETACH = 2
_libc = load_libc()


@contextlib.contextmanager
def tmpfs(where: Path, size_mib: int = 64) -> Iterator[Path]:
    """A fresh tmpfs mounted at ``where`` (created if missing), detached afterwards."""
    where.mkdir(parents=True, exist_ok=True)
    options = f"size={size_mib}m,mode=0755".encode()
    if _libc.mount(b"fleet-unit", os.fsencode(where), b"tmpfs", 0, options) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount tmpfs at {where}: {os.strerror(err)}")
    try:
        yield where
    finally:
        _libc.umount2(os.fsencode(where), MNT_DETACH)
