"""The host's warm pool: a claim carries the slot's warm-up and idle energy (never zero, more
after a longer idle), an eviction records it as the pool's overhead, and a slot ends once."""

from __future__ import annotations

import json
import threading

import pytest
from click.testing import CliRunner

from fleet_ledger.agents.energy import IntervalMeter
from fleet_ledger.agents.warm_pool import WarmPool
from fleet_ledger.cli import cli as fleet_cli
from fleet_ledger.fleet.address import digest, format_address
from fleet_ledger.fleet.env.pool_errors import SlotClaimed, SlotEvicted, UnknownSlot

MANIFEST = digest(b"manifest: python 3.11 toolchain")
ROOT = digest(b"fs root of the warmed image")
RUN = format_address(digest(b"a run"))
GIB = 2**30


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _estimated_meter() -> IntervalMeter:
    return IntervalMeter(use_rapl=False, cpu_clock=iter([0.0, 0.5]).__next__)


def test_a_claim_after_a_longer_idle_carries_more_energy(tmp_path):
    """Two slots warmed alike: the one claimed after an hour idle carries more idle energy
    than the one claimed after a minute, and both carry the warm-up's energy too."""
    clock = Clock()
    pool = WarmPool(tmp_path / "pool.db", "py", clock=clock)
    a = pool.warm(MANIFEST, fs_root=ROOT, volume_bytes=8 * GIB, meter=_estimated_meter())
    b = pool.warm(MANIFEST, fs_root=ROOT, volume_bytes=8 * GIB, meter=_estimated_meter())
    assert a.id != b.id and (a.seq, b.seq) == (1, 2)
    clock.t += 60
    short = pool.claim(a.id, RUN)
    clock.t += 3600 - 60
    long = pool.claim(b.id, RUN)
    assert long.idle.uj > short.idle.uj * 50
    assert short.warm == long.warm and short.warm.uj == 7_500_000  # 0.5 s at 15 W
    assert short.warm.meter == "estimate:cpu-time@15W"
    assert long.idle.provenance == "estimated"
    assert long.idle.meter == "estimate:volume@6W/TB"
    assert long.total_uj == long.warm.uj + long.idle.uj
    assert round(long.idle_seconds) == 3600
    # The figure is the one stored: reading it back later gives the same energy.
    clock.t += 10_000
    assert pool.accrued(b.id) == long


def test_a_claim_at_once_is_never_zero(tmp_path):
    """A slot claimed the instant it is ready still carries its warm-up and at least 1 uJ of
    idle: a fast start is never free."""
    pool = WarmPool(tmp_path / "pool.db", clock=Clock())
    s = pool.warm(MANIFEST, fs_root=ROOT, mem_image=digest(b"mem"), volume_bytes=GIB,
                  memory_bytes=GIB)
    got = pool.claim(s.id, RUN)
    assert got.idle.uj >= 1 and got.warm.uj >= 1 and got.total_uj >= 2
    assert got.idle.meter == "estimate:volume@6W/TB+mem@0.4W/GB"
    assert got.state == "claimed" and got.run == RUN


def test_ending_a_slot_twice_is_refused_by_name_and_changes_nothing(tmp_path):
    """A claim of an evicted slot is refused (SlotEvicted), a second claim (SlotClaimed),
    an unknown slot (UnknownSlot); the slots keep the energy and state they had."""
    clock = Clock()
    pool = WarmPool(tmp_path / "pool.db", clock=clock)
    evicted = pool.warm(MANIFEST, fs_root=ROOT, volume_bytes=GIB)
    claimed = pool.warm(MANIFEST, fs_root=ROOT, volume_bytes=GIB)
    clock.t += 100
    ev = pool.evict(evicted.id)
    cl = pool.claim(claimed.id, RUN)
    clock.t += 100
    with pytest.raises(SlotEvicted) as caught:
        pool.claim(evicted.id, RUN)
    assert caught.value.rule == "SlotEvicted"
    with pytest.raises(SlotEvicted):
        pool.evict(evicted.id)
    with pytest.raises(SlotClaimed):
        pool.claim(claimed.id, format_address(digest(b"another run")))
    with pytest.raises(SlotClaimed):
        pool.evict(claimed.id)
    with pytest.raises(UnknownSlot):
        pool.claim(format_address(digest(b"nope")), RUN)
    assert pool.accrued(evicted.id) == ev and pool.accrued(claimed.id) == cl
    assert [s.state for s in pool.slots()] == ["evicted", "claimed"]


def test_evictions_are_the_pools_overhead_and_survive_a_restart(tmp_path):
    """Each eviction's energy (never zero) adds to the pool's overhead, split by provenance;
    a pool reopened from its file reports the same; claimed slots are not overhead."""
    clock = Clock()
    pool = WarmPool(tmp_path / "pool.db", "ci", clock=clock)
    slots = [pool.warm(MANIFEST, fs_root=ROOT, volume_bytes=4 * GIB) for _ in range(3)]
    clock.t += 600
    e1, e2 = pool.evict(slots[0].id), pool.evict(slots[1].id)
    pool.claim(slots[2].id, RUN)
    assert e1.total_uj > 0 and e2.total_uj > 0
    over = pool.overhead()
    assert over["evicted"] == 2 and over["total_uj"] == e1.total_uj + e2.total_uj
    assert sum(over["by_provenance_uj"].values()) == over["total_uj"]
    pool.close()
    again = WarmPool(tmp_path / "pool.db", "ci", clock=Clock(clock.t + 10**6))
    assert again.overhead() == over
    assert WarmPool(tmp_path / "pool.db", "other").slots() == []


def test_two_claimers_of_one_slot_get_one_claim(tmp_path):
    """Two pool objects on the same file race to claim one slot: exactly one claim wins and
    the other is refused with SlotClaimed."""
    WarmPool(tmp_path / "pool.db").warm(MANIFEST, fs_root=ROOT, volume_bytes=GIB)
    pools = [WarmPool(tmp_path / "pool.db") for _ in range(2)]
    sid = pools[0].slots()[0].id
    results: list[str] = []
    barrier = threading.Barrier(2)

    def claim(p: WarmPool, n: int) -> None:
        barrier.wait()
        try:
            p.claim(sid, format_address(digest(b"run %d" % n)))
            results.append("claimed")
        except SlotClaimed:
            results.append("refused")

    threads = [threading.Thread(target=claim, args=(p, n)) for n, p in enumerate(pools)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["claimed", "refused"]


def test_a_malformed_slot_is_refused_before_anything_is_stored(tmp_path):
    """A memory image without its size, or a zero-sized volume, is refused and no slot
    exists afterwards."""
    pool = WarmPool(tmp_path / "pool.db")
    with pytest.raises(ValueError):
        pool.warm(MANIFEST, fs_root=ROOT, mem_image=digest(b"m"), volume_bytes=GIB)
    with pytest.raises(ValueError):
        pool.warm(MANIFEST, fs_root=ROOT, volume_bytes=0)
    assert pool.slots() == []


def test_cli_pool_warm_list_claim_evict(tmp_path):
    """``fleet pool`` warms (metering a warm-up command), lists, claims and evicts; a claim
    of an evicted slot exits 1 naming SlotEvicted."""
    def fleet(*args: str) -> tuple[int, str]:
        r = CliRunner().invoke(fleet_cli, ["pool", args[0], "--data", str(tmp_path),
                                           *args[1:]])
        return r.exit_code, r.output

    base = ["--manifest", format_address(MANIFEST), "--fs-root", format_address(ROOT),
            "--volume-bytes", str(GIB), "--json"]
    code, out = fleet("warm", *base, "--", "true")
    assert code == 0, out
    first = json.loads(out)
    code, out = fleet("warm", *base)
    second = json.loads(out)
    code, out = fleet("list", "--json")
    assert [s["slot"] for s in json.loads(out)["slots"]] == [first["slot"], second["slot"]]
    code, out = fleet("claim", first["slot"], "--run", RUN, "--json")
    assert code == 0 and json.loads(out)["total_uj"] > 0
    code, out = fleet("evict", second["slot"], "--json")
    assert code == 0 and json.loads(out)["state"] == "evicted"
    code, out = fleet("claim", second["slot"], "--run", RUN)
    assert code == 1 and "SlotEvicted" in out
    code, out = fleet("list", "--json")
    assert json.loads(out)["overhead"]["evicted"] == 1
