"""A warm pool's energy on the record, on one host without a broker: a claim seals the run's
``claimed`` first segment, an eviction an ``evicted`` segment in the pool's own run; both
records verify offline (``fleet verify`` and ``--reference``), crashes between the pool and
the record lose and double nothing, and a claim of an evicted slot seals nothing."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from fleet_ledger.agents.energy import IntervalMeter
from fleet_ledger.agents.host import Host
from fleet_ledger.agents.outbox import Outbox
from fleet_ledger.agents.pool_records import (
    evict_to_record,
    pool_run,
    record_evictions,
    start_from_slot,
)
from fleet_ledger.agents.warm_pool import WarmPool
from fleet_ledger.cli import cli as fleet_cli
from fleet_ledger.fleet.address import digest, format_address
from fleet_ledger.fleet.env.pool_errors import SlotClaimed, SlotEvicted
from fleet_ledger.fleet.errors import PhaseViolation
from fleet_ledger.fleet.record.kernel import NO_GRANTS, genesis, pool_unit
from fleet_ledger.fleet.record.record import RunState
from fleet_ledger.fleet.record.wire import (
    RecordWire,
    decode_envelope,
    encode_record,
    segment_to_wire,
)

MANIFEST = digest(b"pool-records/manifest")
ROOT = digest(b"pool-records/fs-root")
GRANTS = digest(b"pool-records/grants")
GIB = 2**30


class Clock:
    def __init__(self, t: float = 2_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _meter() -> IntervalMeter:
    return IntervalMeter(use_rapl=False, cpu_clock=iter([0.0, 0.2]).__next__)


def _warm(pool: WarmPool) -> str:
    return pool.warm(MANIFEST, fs_root=ROOT, volume_bytes=8 * GIB, meter=_meter()).id


def record_of(host: Host, run: str) -> bytes:
    """The run's record file, from the host's outbox (every segment it sealed)."""
    envs = [decode_envelope(p) for p in host.outbox.payloads_after(run, 0)]
    first = envs[0]
    return encode_record(RecordWire(
        unit_id=format_address(first.unit_id), grants_id=format_address(first.grants_id),
        run=run, host_key=host.public_key,
        segments=[segment_to_wire(e.sealed) for e in envs]))


def _verify_both_ways(path: Path, key: str) -> list[dict]:
    out = []
    for extra in ([], ["--reference"]):
        got = CliRunner().invoke(fleet_cli, ["verify", str(path), "--host-key", key, "--json",
                                             *extra])
        assert got.exit_code == 0, got.output
        out.append(json.loads(got.output))
    # The fast path vouched for it itself (it did not fall back to the reference path).
    assert [o.pop("decoder") for o in out] == ["wire", "objects"]
    assert out[0] == out[1]
    return out


@pytest.fixture
def site(tmp_path: Path):  # type: ignore[no-untyped-def]
    clock = Clock()
    host = Host("h1", tmp_path / "h1")
    pool = WarmPool(tmp_path / "h1" / "pool.db", "py311", clock=clock)
    yield host, pool, clock
    pool.close()
    host.close()


def test_a_claim_after_a_long_idle_carries_the_larger_energy_on_the_record(site, tmp_path):
    """Two runs claimed from slots warmed alike, one after a minute and one after a day:
    each run's first segment carries its slot's warm-up and idle, the day-long one more,
    its run total includes it, and both records verify offline by both decoders."""
    host, pool, clock = site
    short_slot, long_slot = _warm(pool), _warm(pool)
    clock.t += 60
    short_run, short = start_from_slot(host, pool, short_slot, digest(b"u-short"), GRANTS)
    clock.t += 86_400
    long_run, long = start_from_slot(host, pool, long_slot, digest(b"u-long"), GRANTS)
    assert long.idle.uj > short.idle.uj * 1000 and long.warm == short.warm
    for run, got in ((short_run, short), (long_run, long)):
        run.execute(uj=1000, provenance="measured", meter="rapl:package-0",
                    journal_root=digest(b"j"))
        energy = run.state.energy
        assert sum(energy.claim.values()) == got.total_uj > 0
        assert energy.total_uj == got.total_uj + 1000
        path = tmp_path / f"{run.state.index}-{run.run[3:12]}.json"
        path.write_bytes(record_of(host, run.run))
        fast, _ref = _verify_both_ways(path, host.public_key)
        assert fast["energy"]["claim_uj"] == got.by_provenance()
        assert fast["energy"]["total_uj"] == got.total_uj + 1000
    text = CliRunner().invoke(fleet_cli, ["verify", str(path), "--host-key", host.public_key])
    assert f"claim {long.total_uj}" in text.output


def test_evictions_append_to_the_pools_own_run_which_verifies_offline(site, tmp_path):
    """Two evictions become segments 1 and 2 of the pool's run (unit from host and pool,
    no grants), whose overhead is their energy; its record verifies by both decoders."""
    host, pool, clock = site
    a, b = _warm(pool), _warm(pool)
    clock.t += 3600
    sealed_a, got_a = evict_to_record(host, pool, a)
    clock.t += 3600
    sealed_b, got_b = evict_to_record(host, pool, b)
    assert (sealed_a.index, sealed_b.index) == (1, 2)
    run = pool_run(host, "py311")
    assert run.state.run == genesis(pool_unit("h1", "py311"), NO_GRANTS)
    assert run.state.phase == "pool"
    assert sum(run.state.energy.overhead.values()) == got_a.total_uj + got_b.total_uj
    assert pool.overhead()["total_uj"] == got_a.total_uj + got_b.total_uj
    path = tmp_path / "pool.json"
    path.write_bytes(record_of(host, run.run))
    fast, _ref = _verify_both_ways(path, host.public_key)
    assert fast["segments"] == 2
    assert sum(fast["energy"]["overhead_uj"].values()) == got_a.total_uj + got_b.total_uj


def test_a_claim_of_an_evicted_slot_is_refused_and_seals_nothing(site):
    """Claiming an evicted slot is SlotEvicted; the run gets no segment."""
    host, pool, _clock = site
    sid = _warm(pool)
    evict_to_record(host, pool, sid)
    with pytest.raises(SlotEvicted):
        start_from_slot(host, pool, sid, digest(b"u-late"), GRANTS)
    run = host.open_run(digest(b"u-late"), GRANTS)
    assert run.state.index == 0 and host.outbox.payloads_after(run.run, 0) == []


def test_a_refused_claim_leaves_nothing_on_the_host(site, tmp_path):
    """A claim refused SlotEvicted (or SlotClaimed by another run) writes no run row to the
    host's runs database and nothing to its outbox."""
    host, pool, _clock = site
    evicted, claimed = _warm(pool), _warm(pool)
    evict_to_record(host, pool, evicted)
    start_from_slot(host, pool, claimed, digest(b"u-first"), GRANTS)
    before = _run_rows(tmp_path / "h1")
    with pytest.raises(SlotEvicted):
        start_from_slot(host, pool, evicted, digest(b"u-late"), GRANTS)
    with pytest.raises(SlotClaimed):
        start_from_slot(host, pool, claimed, digest(b"u-other"), GRANTS)
    assert _run_rows(tmp_path / "h1") == before and before
    late = format_address(RunState.open(digest(b"u-late"), GRANTS).run)
    assert host.outbox.payloads_after(late, 0) == []


def _run_rows(host_dir: Path) -> set[str]:
    """Every run named in a ``runs`` table of any SQLite file in ``host_dir``."""
    out: set[str] = set()
    for f in sorted(host_dir.glob("*.db")):
        db = sqlite3.connect(f)
        if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'runs'").fetchone():
            out |= {r[0] for r in db.execute("SELECT run FROM runs")}
        db.close()
    return out


class EvictedInTheGap(WarmPool):
    """A pool whose slot another connection to its file evicts (or another run claims) right
    after ``check_claim`` passes: the gap before ``claim``, hit every time, not by timing."""

    def __init__(self, path: Path, name: str, end: str) -> None:
        super().__init__(path, name)
        self._path, self._end_by = path, end

    def check_claim(self, sid: str, run: str) -> None:
        super().check_claim(sid, run)
        other = WarmPool(self._path, self.name)  # its own connection, as another process
        try:
            if self._end_by == "evict":
                other.evict(sid)
            else:
                other.claim(sid, format_address(digest(b"pool-records/another-run")))
        finally:
            other.close()


@pytest.mark.parametrize(("end", "refusal"), [("evict", SlotEvicted), ("claim", SlotClaimed)])
def test_a_slot_ended_between_the_check_and_the_claim_leaves_no_run_row(tmp_path, end,
                                                                         refusal):
    """A slot evicted (or claimed by another run) after check_claim passed and before claim
    is refused, and the run opened for it leaves no run row (in any of the host's files)
    and nothing in the outbox."""
    host = Host("h1", tmp_path / "h1")
    pool = EvictedInTheGap(tmp_path / "h1" / "pool.db", "py311", end)
    try:
        sid = _warm(pool)
        before = _run_rows(tmp_path / "h1")
        with pytest.raises(refusal):
            start_from_slot(host, pool, sid, digest(b"u-gap"), GRANTS)
        assert pool.slot(sid).state == ("evicted" if end == "evict" else "claimed")
        assert _run_rows(tmp_path / "h1") == before
        gap = format_address(RunState.open(digest(b"u-gap"), GRANTS).run)
        assert host.outbox.payloads_after(gap, 0) == []
        # The host still opens and records other runs (the transaction was let go).
        run = host.open_run(digest(b"u-after"), GRANTS)
        run.execute(uj=5, provenance="measured", meter="m", journal_root=digest(b"j"))
        assert run.run in _run_rows(tmp_path / "h1")
    finally:
        pool.close()
        host.close()


def test_a_run_with_segments_cannot_claim_and_the_slot_stays_warm(site):
    """A claim is a first segment: a run that already executed is refused (PhaseViolation)
    before the slot is touched."""
    host, pool, _clock = site
    sid = _warm(pool)
    run = host.open_run(digest(b"u-busy"), GRANTS)
    run.execute(uj=5, provenance="measured", meter="m", journal_root=digest(b"j"))
    with pytest.raises(PhaseViolation):
        start_from_slot(host, pool, sid, digest(b"u-busy"), GRANTS)
    assert pool.slot(sid).state == "warm"


def test_a_claim_interrupted_after_the_pool_is_sealed_once_from_the_stored_figures(site):
    """The pool ended the slot for the run but the host died before sealing: claiming it
    again for that run seals the stored figures; for another run it is SlotClaimed."""
    host, pool, clock = site
    sid = _warm(pool)
    unit = digest(b"u-crash")
    run_id = format_address(genesis(unit, GRANTS))
    clock.t += 600
    stored = pool.claim(sid, run_id)  # ... and the host dies here
    clock.t += 10_000
    run, got = start_from_slot(host, pool, sid, unit, GRANTS)
    assert got == stored and run.state.index == 1
    assert sum(run.state.energy.claim.values()) == stored.total_uj
    with pytest.raises(SlotClaimed):
        start_from_slot(host, pool, sid, digest(b"u-other"), GRANTS)


def test_an_eviction_interrupted_before_its_segment_is_recorded_once(site):
    """A slot evicted in the pool whose segment was never sealed (the host died) is sealed
    by the next recording, and recording again seals nothing more."""
    host, pool, clock = site
    lost, later = _warm(pool), _warm(pool)
    clock.t += 100
    pool.evict(lost)  # ... and the host dies before the segment
    pool.mark_recorded(lost, 1)  # even after noting which segment was meant to record it
    clock.t += 100
    sealed, _got = evict_to_record(host, pool, later)
    run = pool_run(host, "py311")
    assert run.state.index == 2 and sealed.index == 2
    assert record_evictions(host, pool) == []
    assert sum(run.state.energy.overhead.values()) == (
        pool.accrued(lost).total_uj + pool.accrued(later).total_uj)


def test_an_outbox_made_before_warm_pools_takes_their_segments(tmp_path):
    """An outbox file whose kinds CHECK predates claimed/evicted is rebuilt in place: its
    rows and ids are kept and a claimed segment can be put after them."""
    path = tmp_path / "outbox.db"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE segments (id INTEGER PRIMARY KEY AUTOINCREMENT, run TEXT NOT NULL,
            idx INTEGER NOT NULL,
            kind TEXT NOT NULL CHECK (kind IN ('executed', 'suspended', 'resumed', 'closed')),
            subject TEXT NOT NULL, msg_id TEXT NOT NULL, payload BLOB NOT NULL,
            acked_seq INTEGER, state TEXT NOT NULL DEFAULT 'pending'
            CHECK (state IN ('pending', 'acked', 'stopped')), UNIQUE (run, idx));
        INSERT INTO segments (run, idx, kind, subject, msg_id, payload)
            VALUES ('r0', 1, 'executed', 's', 'm0', x'00');
        INSERT INTO segments (run, idx, kind, subject, msg_id, payload)
            VALUES ('r0', 2, 'executed', 's', 'm1', x'01');
        DELETE FROM segments WHERE idx = 2;
    """)
    db.commit()
    db.close()
    with Outbox(path) as box:
        new_id = box.put("r1", 1, "claimed", "s", "m2", b"\x02")
        assert box.payloads_after("r0", 0) == [b"\x00"]
    assert new_id == 3  # ids keep counting past the deleted row


def test_cli_claim_and_evict_with_host_seal_the_record_and_mistakes_exit_2(tmp_path):
    """``fleet pool claim --host --unit --grants`` seals segment 1 of the run and ``evict
    --host`` segment 1 of the pool's run; a claim naming neither --run nor --host, --host
    without the run's ids, or a --run that is not theirs exits 2 with one line."""
    def fleet(*args: str) -> tuple[int, str]:
        r = CliRunner().invoke(fleet_cli, ["pool", args[0], "--data", str(tmp_path),
                                           *args[1:]])
        return r.exit_code, r.output

    warm = ["--manifest", format_address(MANIFEST), "--fs-root", format_address(ROOT),
            "--volume-bytes", str(GIB), "--json"]
    a, b = (json.loads(fleet("warm", *warm)[1])["slot"] for _ in range(2))
    ids = ["--unit", format_address(digest(b"u-cli")), "--grants", format_address(GRANTS)]
    for args in ([a], [a, "--host", "h9"], [a, "--host", "h9", *ids, "--run",
                                            format_address(digest(b"not it"))]):
        code, out = fleet("claim", *args)
        assert code == 2 and len(out.strip().splitlines()) == 1, out
    code, out = fleet("claim", a, "--host", "h9", *ids, "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["record"]["kind"] == "claimed" and doc["record"]["segment"] == 1
    assert sum(doc["record"]["energy"]["claim_uj"].values()) == doc["total_uj"]
    code, out = fleet("evict", b, "--host", "h9", "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["record"] == {"run": format_address(genesis(pool_unit("h9", "default"),
                                                           NO_GRANTS)),
                             "segment": 1, "kind": "evicted", "energy": doc["record"]["energy"]}
    assert sum(doc["record"]["energy"]["overhead_uj"].values()) == doc["total_uj"]


def test_a_run_state_stored_before_warm_pools_reads_with_no_claim_or_overhead(site):
    """A run state saved without claim/overhead keys (a host's old runs.db or a ledger's store
    from before) reads back with both at zero and the same total."""
    from fleet_ledger.fleet.record.run_codec import state_from_json, state_to_json

    host, _pool, _clock = site
    run = host.open_run(digest(b"u-old"), GRANTS)
    run.execute(uj=42, provenance="measured", meter="m", journal_root=digest(b"j"))
    doc = state_to_json(run.state)
    del doc["claim"], doc["overhead"]
    state = state_from_json(doc)
    assert state.energy.claim == state.energy.overhead == {"measured": 0, "estimated": 0}
    assert state.energy.total_uj == 42


def test_cli_pool_record_seals_an_eviction_a_crash_left_off_once(tmp_path):
    """``fleet pool record --host`` seals an eviction the pool holds but the pool run does
    not, and a second call seals nothing."""
    pool = WarmPool(tmp_path / "pool.db")
    sid = _warm(pool)
    got = pool.evict(sid)  # ... and the host dies before the segment
    pool.close()

    def record() -> dict:
        r = CliRunner().invoke(fleet_cli, ["pool", "record", "--data", str(tmp_path),
                                           "--host", "h7", "--json"])
        assert r.exit_code == 0, r.output
        return json.loads(r.output)

    first = record()
    assert first["sealed"] == [1] and first["segments"] == 1
    assert sum(first["energy"]["overhead_uj"].values()) == got.total_uj
    assert record()["sealed"] == []
