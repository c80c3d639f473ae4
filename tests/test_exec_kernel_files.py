"""The kernel's own knobs are out of a root unit's reach: without capabilities, uid 0 may still
open for writing /proc/sys (kernel.modprobe, kernel.core_pattern: programs the kernel runs as
full root outside the unit; fs.leases-enable, fs.lease-break-time: the guard's exec leases),
/proc/sysrq-trigger and sysfs; in the unit's namespace they are read-only (EROFS). Real
processes, as root. Nothing is ever written: each file is only opened for writing and closed.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

from agents.exec_guard import ExecGuard
from agents.unit_caps import CapabilityDrop
from fleet.exec_policy import build_policy

from exec_helpers import require_guard

KNOBS = ["/proc/sys/kernel/modprobe", "/proc/sys/kernel/core_pattern",
         "/proc/sys/fs/leases-enable", "/proc/sys/fs/lease-break-time", "/proc/sysrq-trigger",
         "/sys/kernel/uevent_helper", "/sys/kernel/mm/transparent_hugepage/enabled"]
# Opens each path for writing, closes it at once (never writes), prints path -> errno or 0.
PROBE = """
import json, os, sys
out = {}
for path in sys.argv[1:]:
    try:
        os.close(os.open(path, os.O_WRONLY))
        out[path] = 0
    except OSError as exc:
        out[path] = exc.errno
print(json.dumps(out))
"""


def _probe_argv(paths: list[str]) -> list[str]:
    return [sys.executable, "-c", PROBE, *paths]


def test_a_root_unit_cannot_open_kernel_knobs_for_writing():
    """A root process without capabilities opens every knob for writing (the attack: no
    capability is needed); the same process as a unit under the guard gets EROFS for each."""
    require_guard()
    paths = [p for p in KNOBS if os.path.exists(p)]
    assert "/proc/sys/kernel/core_pattern" in paths  # the rest where this kernel has them
    drop = CapabilityDrop()
    plain = subprocess.run(_probe_argv(paths), preexec_fn=drop.apply, capture_output=True,
                           text=True, timeout=60)
    assert plain.returncode == 0, plain.stderr
    assert json.loads(plain.stdout) == dict.fromkeys(paths, 0)
    with ExecGuard(build_policy("allow", [])) as guard:
        proc = guard.spawn(_probe_argv(paths), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert json.loads(out) == dict.fromkeys(paths, errno.EROFS)
