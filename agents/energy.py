"""Energy meters for a host: measured where the host can measure, estimated and labelled
where it cannot, and never zero for a park.

Why: every executed interval carries an energy receipt and every resumed segment the idle
energy of its park (seeds/002, "Energy honesty across suspends"). Each function here
returns a :class:`Reading` ``(uj, provenance, meter)``: microjoules as an int, provenance
exactly ``"measured"`` or ``"estimated"``, and a meter text (1..128 printable UTF-8 bytes)
that names the meter or the estimate's model and its assumption, so a reader can redo it.

Meters:

- ``rapl:<zone>[+<zone>...]`` (measured): Linux RAPL package counters,
  ``/sys/class/powercap/intel-rapl:<n>/energy_uj``. They count the whole package, not
  one process. A counter wraps at ``max_energy_range_uj``; one wrap between two samples is
  undone, so call :meth:`IntervalMeter.sample` more often than a wrap takes (minutes at
  full load). Since CVE-2020-8694 the files are readable by root only on most kernels, and
  absent in most containers and VMs: :func:`rapl_zones` returns only readable zones.
- ``estimate:cpu-time@<W>W`` (estimated): CPU seconds of this process and its reaped
  children times an assumed ``<W>`` watts per busy core (default 15 W).
- ``estimate:storage@<W>W/TB`` (estimated): a transcript park's idle draw, the bytes kept
  times the seconds parked times ``<W>`` watts per stored terabyte (default 2 W/TB,
  replicated disk storage with its share of the server around it).
- ``estimate:volume@<W>W/TB[+mem@<W>W/GB]`` (estimated): an image park's idle draw, the
  retained volume's *provisioned* size at ``<W>`` per TB (default 6 W/TB, replicated block
  storage) plus, if a memory image stays resident, its size at ``<W>`` per GB of DRAM
  (default 0.4 W/GB).

Estimates are rounded up and are at least 1 µJ: whatever ran or was kept drew something.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, NamedTuple

from fleet_ledger.fleet.errors import ValueOutOfRange
from fleet_ledger.fleet.record.kernel import MAX_U64, check_provenance, encode_text

POWERCAP: Final = Path("/sys/class/powercap")
DEFAULT_WATTS_PER_CORE: Final = 15.0
DEFAULT_STORAGE_W_PER_TB: Final = 2.0
DEFAULT_VOLUME_W_PER_TB: Final = 6.0
DEFAULT_MEMORY_W_PER_GB: Final = 0.4
TB: Final = 10**12
GB: Final = 10**9


class Reading(NamedTuple):
    """Microjoules, ``"measured"``/``"estimated"``, and the meter that says how."""

    uj: int
    provenance: str
    meter: str


def reading(uj: int, provenance: str, meter: str) -> Reading:
    """A checked reading (else :class:`~fleet.errors.ValueOutOfRange`): a u64 of
    microjoules, a known provenance, a meter of 1..128 printable UTF-8 bytes."""
    if not isinstance(uj, int) or not 0 <= uj <= MAX_U64:
        raise ValueOutOfRange(f"energy is an int of microjoules in [0, 2**64), got {uj!r}")
    check_provenance(provenance)
    encode_text(meter, "meter")
    return Reading(uj, provenance, meter)


def _num(x: float) -> str:
    return f"{x:g}"


def _estimate(joules: float, meter: str) -> Reading:
    return reading(max(1, math.ceil(joules * 1_000_000)), "estimated", meter)


# -- RAPL -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RaplZone:
    """One top-level RAPL zone (a package); its subzones are inside its count."""

    path: Path
    name: str
    max_range_uj: int

    def read_uj(self) -> int:
        return int((self.path / "energy_uj").read_text())


def rapl_zones(root: Path = POWERCAP) -> list[RaplZone]:
    """The readable top-level ``intel-rapl:<n>`` zones under ``root`` (often none)."""
    zones = []
    for path in sorted(root.glob("intel-rapl:*")):
        if path.name.count(":") != 1:
            continue  # a subzone (core, uncore, dram of a package): counted in its package
        try:
            zone = RaplZone(
                path,
                (path / "name").read_text().strip() or path.name,
                int((path / "max_energy_range_uj").read_text()),
            )
            zone.read_uj()
        except (OSError, ValueError):
            continue
        zones.append(zone)
    return zones


def rapl_delta(start: int, end: int, max_range_uj: int) -> int:
    """Microjoules between two counter values, undoing one wrap at ``max_range_uj``."""
    return end - start if end >= start else max_range_uj - start + end


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its reaped children."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


# -- an executed interval -----------------------------------------------------------------


class IntervalMeter:
    """Meters one executed interval: RAPL if readable, else a CPU-time estimate.

    ``start()`` it, ``sample()`` it now and then for long intervals (RAPL wraps),
    ``stop()`` it for the :class:`Reading`.
    """

    def __init__(
        self,
        *,
        root: Path = POWERCAP,
        watts_per_core: float = DEFAULT_WATTS_PER_CORE,
        cpu_clock: Callable[[], float] = cpu_seconds,
        use_rapl: bool = True,
    ) -> None:
        self.zones = rapl_zones(root) if use_rapl else []
        self.watts_per_core = watts_per_core
        self.cpu_clock = cpu_clock
        self._last: list[int] = []
        self._measured = 0
        self._cpu_start = 0.0
        self._rapl_ok = bool(self.zones)

    @property
    def measuring(self) -> bool:
        """True while readings come from RAPL (``measured``)."""
        return self._rapl_ok

    def start(self) -> IntervalMeter:
        self._cpu_start = self.cpu_clock()
        self._measured = 0
        if self._rapl_ok:
            try:
                self._last = [zone.read_uj() for zone in self.zones]
            except (OSError, ValueError):
                self._rapl_ok = False
        return self

    def sample(self) -> None:
        """Fold the RAPL counters' progress since the last sample (guards against wraps)."""
        if not self._rapl_ok:
            return
        try:
            now = [zone.read_uj() for zone in self.zones]
        except (OSError, ValueError):
            self._rapl_ok = False  # it went away mid-interval: the estimate is the honest one
            return
        for zone, before, after in zip(self.zones, self._last, now, strict=True):
            self._measured += rapl_delta(before, after, zone.max_range_uj)
        self._last = now

    def stop(self) -> Reading:
        self.sample()
        if self._rapl_ok:
            meter = "rapl:" + "+".join(zone.name for zone in self.zones)
            if len(meter.encode()) > 128:
                meter = f"rapl:{len(self.zones)} packages"
            return reading(self._measured, "measured", meter)
        seconds = max(0.0, self.cpu_clock() - self._cpu_start)
        return cpu_estimate(seconds, self.watts_per_core)


def cpu_estimate(cpu_seconds: float, watts_per_core: float = DEFAULT_WATTS_PER_CORE) -> Reading:
    """``cpu_seconds`` of busy cores at ``watts_per_core`` (estimated, at least 1 µJ)."""
    return _estimate(cpu_seconds * watts_per_core, f"estimate:cpu-time@{_num(watts_per_core)}W")


# -- parks ------------------------------------------------------------------------------


def transcript_park_idle(
    bytes_kept: int, seconds: float, w_per_tb: float = DEFAULT_STORAGE_W_PER_TB
) -> Reading:
    """A transcript park's idle draw: its stored bytes for ``seconds``; never zero."""
    _check_park(bytes_kept, seconds)
    joules = w_per_tb * bytes_kept / TB * seconds
    return _estimate(joules, f"estimate:storage@{_num(w_per_tb)}W/TB")


def image_park_idle(
    volume_bytes: int,
    seconds: float,
    *,
    memory_bytes: int = 0,
    volume_w_per_tb: float = DEFAULT_VOLUME_W_PER_TB,
    memory_w_per_gb: float = DEFAULT_MEMORY_W_PER_GB,
) -> Reading:
    """An image park's idle draw: the provisioned volume, plus a resident memory image."""
    _check_park(volume_bytes, seconds)
    _check_park(memory_bytes, seconds)
    joules = volume_w_per_tb * volume_bytes / TB * seconds
    meter = f"estimate:volume@{_num(volume_w_per_tb)}W/TB"
    if memory_bytes:
        joules += memory_w_per_gb * memory_bytes / GB * seconds
        meter += f"+mem@{_num(memory_w_per_gb)}W/GB"
    return _estimate(joules, meter)


def _check_park(size: int, seconds: float) -> None:
    if size < 0 or seconds < 0:
        raise ValueError(f"a park has non-negative size and time, got {size} B, {seconds} s")
