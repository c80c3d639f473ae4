"""A host's warm pool: sandboxes prepared ahead of demand, whose fast starts have a price.

    pool = WarmPool(host_dir / "pool.db", name="py311")
    slot = pool.warm(manifest, fs_root=root, volume_bytes=8 * 2**30, warmup=prepare)
    ...
    energy = pool.claim(slot.id, run=run_address)   # warm-up + idle until now, never zero
    energy = pool.evict(slot.id)                    # the same, as the pool's overhead

Each **slot** is an image park under a manifest: a filesystem root (and optionally a
resident memory image) that a run can start from instead of building it. Its energy accrues
from the moment warm-up begins:

* **warm-up**: metered while ``warmup`` runs (:class:`agents.energy.IntervalMeter`: RAPL
  where readable, ``measured``; else a CPU-time estimate, ``estimated``);
* **idle**: from the end of warm-up until the slot is claimed or evicted, the retained
  volume (and memory image) at the image-park rates of :func:`agents.energy.image_park_idle`,
  ``estimated`` and labelled by its meter text; at least 1 µJ, so never zero.

A **claim** hands the slot to one run and returns its accrued energy (:class:`Accrued`): the
claiming run's record is to carry it, so a fast start shows its joule price in the run's
total. An **eviction** ends the slot unclaimed and returns the same sum as the pool's
**overhead**. A slot is claimed or evicted once: claiming an evicted slot is refused
(:class:`~fleet.env.pool_errors.SlotEvicted`), a claimed one too
(:class:`~fleet.env.pool_errors.SlotClaimed`), an unknown one
(:class:`~fleet.env.pool_errors.UnknownSlot`); a refusal changes nothing. State lives in one
SQLite file and every change is one ``BEGIN IMMEDIATE`` transaction, so two processes
claiming the same slot get one claim and one refusal.

Slot ids are content addresses: ``BLAKE3("fleet.warmslot/1" || text(pool) || seq:u64 ||
manifest[32] || snapshot)``, ``snapshot`` as in the run record (an image park's bytes), so
an id names what was warmed and where it stands in its pool's order. A claim goes on the
record as the claiming run's first segment (``claimed``) and an eviction as a segment of the
pool's own run (``evicted``): :mod:`agents.pool_records`, docs/warm-pools.md. Each slot row
keeps the index of the pool-run segment that records its eviction (``recorded``).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleet_ledger.agents.energy import (
    DEFAULT_MEMORY_W_PER_GB,
    DEFAULT_VOLUME_W_PER_TB,
    IntervalMeter,
    Reading,
    image_park_idle,
    reading,
)
from fleet_ledger.fleet.address import digest, format_address, parse_address
from fleet_ledger.fleet.env.pool_errors import SlotClaimed, SlotEvicted, UnknownSlot
from fleet_ledger.fleet.record.kernel import check_digest, encode_text, snapshot_bytes
from fleet_ledger.plumbing import sqlite
from fleet_ledger.plumbing.transactions import immediate

SLOT_DOMAIN = b"fleet.warmslot/1"
WARM, CLAIMED, EVICTED = "warm", "claimed", "evicted"

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS slots (id TEXT PRIMARY KEY, pool TEXT NOT NULL,"
    " seq INTEGER NOT NULL, manifest TEXT NOT NULL, fs_root TEXT NOT NULL, mem_image TEXT,"
    " volume_bytes INTEGER NOT NULL, memory_bytes INTEGER NOT NULL,"
    " warm_uj INTEGER NOT NULL, warm_provenance TEXT NOT NULL, warm_meter TEXT NOT NULL,"
    " warm_at REAL NOT NULL, ready_at REAL NOT NULL, state TEXT NOT NULL, ended_at REAL,"
    " run TEXT, idle_uj INTEGER, idle_provenance TEXT, idle_meter TEXT, recorded INTEGER)",
    "CREATE UNIQUE INDEX IF NOT EXISTS slots_seq ON slots (pool, seq)",
)
_COLUMNS = ("id, pool, seq, manifest, fs_root, mem_image, volume_bytes, memory_bytes, warm_uj,"
            " warm_provenance, warm_meter, warm_at, ready_at, state, ended_at, run, idle_uj,"
            " idle_provenance, idle_meter")


def slot_id(pool: str, seq: int, manifest: bytes, fs_root: bytes,
            mem_image: bytes | None) -> bytes:
    """The content address of a slot (see the module docstring)."""
    return digest(SLOT_DOMAIN + encode_text(pool, "pool name") + struct.pack(">Q", seq)
                  + check_digest(manifest, "manifest")
                  + snapshot_bytes(fs_root, mem_image, None))


@dataclass(frozen=True)
class Slot:
    """One slot as the pool holds it."""

    id: str
    pool: str
    seq: int
    manifest: str
    fs_root: str
    mem_image: str | None
    volume_bytes: int
    memory_bytes: int
    warm: Reading
    warm_at: float
    ready_at: float
    state: str
    ended_at: float | None
    run: str | None

    def to_json(self) -> dict[str, Any]:
        return {"slot": self.id, "pool": self.pool, "seq": self.seq, "manifest": self.manifest,
                "fs_root": self.fs_root, "mem_image": self.mem_image,
                "volume_bytes": self.volume_bytes, "memory_bytes": self.memory_bytes,
                "warm_uj": self.warm.uj, "warm_provenance": self.warm.provenance,
                "warm_meter": self.warm.meter, "warm_at": self.warm_at,
                "ready_at": self.ready_at, "state": self.state, "ended_at": self.ended_at,
                "run": self.run}


@dataclass(frozen=True)
class Accrued:
    """A slot's energy from the start of its warm-up to its claim or eviction."""

    slot: str
    manifest: str
    warm: Reading
    idle: Reading
    idle_seconds: float
    state: str
    run: str | None

    @property
    def total_uj(self) -> int:
        return self.warm.uj + self.idle.uj

    def by_provenance(self) -> dict[str, int]:
        out = {"measured": 0, "estimated": 0}
        for r in (self.warm, self.idle):
            out[r.provenance] += r.uj
        return out

    def to_json(self) -> dict[str, Any]:
        return {"slot": self.slot, "manifest": self.manifest, "state": self.state,
                "run": self.run, "total_uj": self.total_uj,
                "by_provenance_uj": self.by_provenance(),
                "warm": {"uj": self.warm.uj, "provenance": self.warm.provenance,
                         "meter": self.warm.meter},
                "idle": {"uj": self.idle.uj, "provenance": self.idle.provenance,
                         "meter": self.idle.meter, "seconds": round(self.idle_seconds, 3)}}


class WarmPool:
    """One pool of warm slots in a SQLite file (several pools may share the file)."""

    def __init__(self, path: Path | str, name: str = "default", *,
                 clock: Callable[[], float] = time.time,
                 volume_w_per_tb: float = DEFAULT_VOLUME_W_PER_TB,
                 memory_w_per_gb: float = DEFAULT_MEMORY_W_PER_GB) -> None:
        encode_text(name, "pool name")
        self.name = name
        self._clock = clock
        self._rates = (volume_w_per_tb, memory_w_per_gb)
        self._db = sqlite.connect(path)
        for stmt in _SCHEMA:
            self._db.execute(stmt)

    def close(self) -> None:
        self._db.close()

    # -- warming -----------------------------------------------------------------------------

    def warm(self, manifest: bytes, *, fs_root: bytes, mem_image: bytes | None = None,
             volume_bytes: int, memory_bytes: int = 0,
             warmup: Callable[[], object] | None = None,
             meter: IntervalMeter | None = None) -> Slot:
        """Warm a slot: run ``warmup`` (metered), then hold the slot ready."""
        snapshot_bytes(fs_root, mem_image, None)  # refuses a malformed park before anything
        check_digest(manifest, "manifest")
        if volume_bytes <= 0 or memory_bytes < 0 or (memory_bytes > 0) != (mem_image
                                                                            is not None):
            raise ValueError("a slot keeps a volume of some size, and memory bytes exactly "
                             "when it keeps a memory image")
        started = self._clock()
        m = (meter or IntervalMeter()).start()
        if warmup is not None:
            warmup()
        got = m.stop()
        warm = reading(max(1, got.uj), got.provenance, got.meter)
        ready = self._clock()
        with immediate(self._db):
            row = self._db.execute("SELECT coalesce(max(seq), 0) + 1 FROM slots WHERE pool = ?",
                                   (self.name,)).fetchone()
            seq = row[0]
            sid = format_address(slot_id(self.name, seq, manifest, fs_root, mem_image))
            self._db.execute(
                f"INSERT INTO slots ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
                " ?, NULL, NULL, NULL, NULL, NULL)",
                (sid, self.name, seq, format_address(manifest), format_address(fs_root),
                 format_address(mem_image) if mem_image is not None else None, volume_bytes,
                 memory_bytes, warm.uj, warm.provenance, warm.meter, started, ready, WARM))
        return self.slot(sid)

    # -- reading -----------------------------------------------------------------------------

    def _row(self, sid: str) -> tuple[Any, ...]:
        """Slot ``sid``'s row in this pool, or :class:`UnknownSlot`."""
        row: tuple[Any, ...] | None = self._db.execute(
            f"SELECT {_COLUMNS} FROM slots WHERE id = ? AND pool = ?", (sid, self.name)
        ).fetchone()
        if row is None:
            raise UnknownSlot(f"pool {self.name!r} has no slot {sid}")
        return row

    def slot(self, sid: str) -> Slot:
        return _slot(self._row(sid))

    def slots(self, state: str | None = None) -> list[Slot]:
        rows = self._db.execute(f"SELECT {_COLUMNS} FROM slots WHERE pool = ? ORDER BY seq",
                                (self.name,)).fetchall()
        return [s for s in map(_slot, rows) if state is None or s.state == state]

    def accrued(self, sid: str) -> Accrued:
        """A slot's energy so far (a warm slot's, up to now; an ended one's, as ended)."""
        row = self._row(sid)
        s = _slot(row)
        if s.state == WARM:
            return self._accrue(s, self._clock())
        assert s.ended_at is not None
        idle = reading(row[16], row[17], row[18])
        return Accrued(s.id, s.manifest, s.warm, idle, s.ended_at - s.ready_at, s.state, s.run)

    def overhead(self) -> dict[str, Any]:
        """The pool's overhead so far: the energy of every evicted slot."""
        ended = [self.accrued(s.id) for s in self.slots(EVICTED)]
        by = {"measured": 0, "estimated": 0}
        for a in ended:
            for k, v in a.by_provenance().items():
                by[k] += v
        return {"pool": self.name, "evicted": len(ended),
                "total_uj": sum(a.total_uj for a in ended), "by_provenance_uj": by}

    def evictions_to_record(self, upto: int) -> list[Slot]:
        """Evicted slots whose eviction is not yet a segment of the pool's run (which has
        ``upto`` segments): never recorded, or meant for a segment past its end."""
        rows = self._db.execute(
            f"SELECT {_COLUMNS} FROM slots WHERE pool = ? AND state = ? AND"
            " (recorded IS NULL OR recorded > ?) ORDER BY ended_at, seq",
            (self.name, EVICTED, upto)).fetchall()
        return [_slot(r) for r in rows]

    def mark_recorded(self, sid: str, index: int) -> None:
        """Note that segment ``index`` of the pool's run records slot ``sid``'s eviction."""
        with immediate(self._db):
            self._db.execute("UPDATE slots SET recorded = ? WHERE id = ? AND pool = ?",
                             (index, sid, self.name))

    # -- ending a slot ------------------------------------------------------------------------

    def check_claim(self, sid: str, run: str) -> None:
        """Refuse, changing nothing, a claim of ``sid`` by ``run`` that :meth:`claim` would
        refuse (``SlotEvicted``, ``UnknownSlot``, ``SlotClaimed`` by another run): asked
        before anything else is written for the run, so a refused claim leaves nothing."""
        s = _slot(self._row(sid))
        if s.state == EVICTED or (s.state == CLAIMED and s.run != run):
            raise _refusal(s)

    def claim(self, sid: str, run: str) -> Accrued:
        """Hand a warm slot to ``run``: its energy, which the run's record is to carry."""
        parse_address(run)
        return self._end(sid, CLAIMED, run)

    def evict(self, sid: str) -> Accrued:
        """End a warm slot unclaimed: its energy, the pool's overhead."""
        return self._end(sid, EVICTED, None)

    def _end(self, sid: str, state: str, run: str | None) -> Accrued:
        with immediate(self._db):
            s = _slot(self._row(sid))
            if s.state != WARM:
                raise _refusal(s)
            now = max(self._clock(), s.ready_at)
            a = self._accrue(s, now)
            self._db.execute(
                "UPDATE slots SET state = ?, ended_at = ?, run = ?, idle_uj = ?,"
                " idle_provenance = ?, idle_meter = ? WHERE id = ?",
                (state, now, run, a.idle.uj, a.idle.provenance, a.idle.meter, sid))
        return Accrued(a.slot, a.manifest, a.warm, a.idle, a.idle_seconds, state, run)

    def _accrue(self, s: Slot, now: float) -> Accrued:
        seconds = max(0.0, now - s.ready_at)
        idle = image_park_idle(s.volume_bytes, seconds, memory_bytes=s.memory_bytes,
                               volume_w_per_tb=self._rates[0], memory_w_per_gb=self._rates[1])
        return Accrued(s.id, s.manifest, s.warm, idle, seconds, s.state, s.run)


def _refusal(s: Slot) -> SlotEvicted | SlotClaimed:
    """Why slot ``s``, no longer warm, cannot be ended again."""
    if s.state == EVICTED:
        return SlotEvicted(f"slot {s.id} was evicted at {s.ended_at}; its energy is the "
                           f"pool's overhead and it cannot start a run")
    return SlotClaimed(f"slot {s.id} was claimed by run {s.run}")


def _slot(row: tuple[Any, ...]) -> Slot:
    return Slot(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7],
                reading(row[8], row[9], row[10]), row[11], row[12], row[13], row[14], row[15])
