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

from fleet_ledger.agents.exec_guard import ExecGuard
from fleet_ledger.agents.host_linux import Mount
from fleet_ledger.agents.unit_caps import CapabilityDrop
from fleet_ledger.agents.unit_ns import kernel_files_plan
from fleet_ledger.fleet.env.exec_policy import build_policy

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


def test_the_plan_binds_paths_inside_mounts_and_makes_every_mount_below_read_only():
    """Paths inside a mount (/proc/sys) are bound onto themselves first; every mount at or
    below a knob path (sysfs, its cgroup mounts, binfmt_misc under /proc/sys) is made
    read-only; other mounts (/, /proc itself, /srv, /system) are left alone."""
    table = [Mount("0:1", p, t, i) for i, (p, t) in enumerate([
        ("/", "ext4"), ("/proc", "proc"), ("/proc/sys/fs/binfmt_misc", "binfmt_misc"),
        ("/sys", "sysfs"), ("/sys/fs/cgroup", "cgroup2"), ("/srv", "tmpfs"),
        ("/system", "tmpfs")])]
    binds, read_only = kernel_files_plan(table)
    assert b"/sys" not in binds and binds[0] == b"/proc/sys"
    assert set(binds) == {b"/proc/sys", b"/proc/sysrq-trigger", b"/proc/bus", b"/proc/fs",
                          b"/proc/irq"}
    assert read_only == [*binds, b"/proc/sys/fs/binfmt_misc", b"/sys", b"/sys/fs/cgroup"]
