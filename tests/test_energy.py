"""Energy meters: RAPL when readable, labelled estimates otherwise, parks never zero."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from fleet_ledger.agents.energy import (
    IntervalMeter,
    Reading,
    cpu_estimate,
    image_park_idle,
    rapl_delta,
    rapl_zones,
    reading,
    transcript_park_idle,
)
from fleet_ledger.fleet.errors import ValueOutOfRange
from fleet_ledger.fleet.record.kernel import encode_text


def _zone(root: Path, name: str, label: str, value: int, max_range: int = 1000) -> Path:
    path = root / name
    path.mkdir(parents=True)
    (path / "name").write_text(label + "\n")
    (path / "energy_uj").write_text(f"{value}\n")
    (path / "max_energy_range_uj").write_text(f"{max_range}\n")
    return path


def _valid(r: Reading) -> None:
    assert r.provenance in ("measured", "estimated")
    assert 1 <= len(r.meter.encode()) <= 128 and r.meter.isprintable()
    encode_text(r.meter, "meter")


def test_rapl_delta_undoes_one_wrap():
    """A counter that passed max_energy_range_uj counts on from zero."""
    assert rapl_delta(100, 400, 1000) == 300
    assert rapl_delta(900, 100, 1000) == 200


def test_rapl_zones_reads_packages_only_and_skips_unreadable(tmp_path):
    """Top-level zones are read; subzones and unreadable counters are left out."""
    _zone(tmp_path, "intel-rapl:0", "package-0", 5)
    _zone(tmp_path, "intel-rapl:0:0", "core", 5)
    broken = _zone(tmp_path, "intel-rapl:1", "package-1", 5)
    (broken / "energy_uj").unlink()
    (broken / "energy_uj").symlink_to(tmp_path / "missing")  # unreadable, as without root
    assert [z.name for z in rapl_zones(tmp_path)] == ["package-0"]


def test_interval_meter_measures_with_rapl_across_a_wrap(tmp_path):
    """With readable RAPL the interval is measured, summed over packages, wraps undone."""
    p0 = _zone(tmp_path, "intel-rapl:0", "package-0", 900)
    p1 = _zone(tmp_path, "intel-rapl:1", "package-1", 10)
    meter = IntervalMeter(root=tmp_path).start()
    (p0 / "energy_uj").write_text("50\n")  # wrapped at 1000: +150
    meter.sample()
    (p0 / "energy_uj").write_text("70\n")  # +20
    (p1 / "energy_uj").write_text("40\n")  # +30
    r = meter.stop()
    assert r == Reading(200, "measured", "rapl:package-0+package-1")
    _valid(r)


def test_interval_meter_without_rapl_estimates_from_cpu_time(tmp_path):
    """Without RAPL the reading is CPU seconds times watts per core, labelled as estimated."""
    clock = iter([10.0, 12.5])
    r = (
        IntervalMeter(root=tmp_path, watts_per_core=20, cpu_clock=lambda: next(clock))
        .start()
        .stop()
    )
    assert r == Reading(50_000_000, "estimated", "estimate:cpu-time@20W")
    _valid(r)


def test_this_host_yields_a_valid_nonzero_interval_reading():
    """On this machine (RAPL readable or not) a busy interval gives a valid, non-zero reading."""
    meter = IntervalMeter().start()
    end = time.process_time() + 0.05
    while time.process_time() < end:
        pass
    r = meter.stop()
    _valid(r)
    assert r.uj > 0
    assert r.provenance == ("measured" if meter.measuring else "estimated")
    readable = any(os.access(z.path / "energy_uj", os.R_OK) for z in rapl_zones())
    assert meter.measuring == readable


def test_estimates_round_up_and_are_never_zero():
    """An estimate rounds up to whole microjoules and is at least 1 µJ."""
    assert cpu_estimate(0.0).uj == 1
    assert cpu_estimate(1e-9, watts_per_core=1.5).uj == 1  # 0.0015 µJ
    assert cpu_estimate(1.0000001, watts_per_core=1.0).uj == 1_000_001


def test_transcript_park_is_priced_by_bytes_and_time_never_zero():
    """A transcript park draws its stored bytes' power for the wait, and never zero."""
    tiny = transcript_park_idle(1, 1.0)
    assert tiny == Reading(1, "estimated", "estimate:storage@2W/TB")
    week = transcript_park_idle(10**6, 7 * 24 * 3600.0)  # 1 MB for a week: 1.2096 J
    assert week.uj == 1_209_600
    assert transcript_park_idle(0, 3600.0).uj == 1
    _valid(week)


def test_image_park_costs_more_than_a_transcript_park_of_the_same_bytes():
    """An image park prices its provisioned volume and any resident memory image."""
    size, seconds = 10 * 10**9, 3600.0
    disk = image_park_idle(size, seconds)
    with_mem = image_park_idle(size, seconds, memory_bytes=2 * 10**9)
    assert disk == Reading(216_000_000, "estimated", "estimate:volume@6W/TB")
    assert with_mem.uj == disk.uj + 2_880_000_000
    assert with_mem.meter == "estimate:volume@6W/TB+mem@0.4W/GB"
    assert disk.uj > transcript_park_idle(size, seconds).uj
    _valid(with_mem)


def test_reading_refuses_bad_provenance_meter_or_energy():
    """A reading with an unknown provenance, a bad meter or negative energy is refused."""
    assert reading(5, "measured", "rapl:package-0") == (5, "measured", "rapl:package-0")
    for uj, provenance, meter in [
        (5, "guessed", "m"),
        (5, "measured", ""),
        (5, "measured", "x" * 129),
        (5, "measured", "bad\nmeter"),
        (-1, "measured", "m"),
        (2**64, "measured", "m"),
    ]:
        with pytest.raises(ValueOutOfRange):
            reading(uj, provenance, meter)


def test_negative_park_inputs_are_refused():
    """A park with negative bytes or seconds is a caller error."""
    with pytest.raises(ValueError):
        transcript_park_idle(-1, 1.0)
    with pytest.raises(ValueError):
        image_park_idle(1, -1.0)
