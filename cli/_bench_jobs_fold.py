"""``fleet bench jobs``' ``fold`` section: the ledger's fold rate over item runs of a job
against the same runs as plain runs (goal: at least 0.95x).

Both streams hold the same number of runs of the same plan (executes, then a close) on
four enrolled hosts, sealed with real keys; the job stream opens one job first, its runs
are the job's items (every first segment passes the item gate, every close makes the
item's leaf, the last close builds the receipt). Each is folded by a fresh ledger's own
batch fold (:meth:`ledger.service.Ledger.fold_messages`: decide, write, commit) in batches
of 2048, in-process and without NATS, so only the fold is timed; the two ledgers fold side
by side (:func:`measure_fold` says how, and what is timed). (Forking a child for each fold
did not narrow the spread, and its copy-on-write page faults slowed both folds by 15%.)
"""

from __future__ import annotations

import gc
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from nacl.signing import SigningKey

from fleet_ledger.fleet.address import digest, format_address
from fleet_ledger.fleet.fold.job_events import open_event
from fleet_ledger.fleet.jobs.job_id import JobTerms, encode_terms, item_unit, job_id
from fleet_ledger.fleet.record.builder import RecordBuilder
from fleet_ledger.fleet.record.seal import encode_key
from fleet_ledger.fleet.record.segment import CallAccount
from fleet_ledger.fleet.record.wire import encode_envelope
from fleet_ledger.fleet.subjects import DEFAULT_FLEET
from fleet_ledger.ledger.service import Ledger, LedgerConfig

_HOSTS = 4
_BATCH = 2048
_GRANTS = digest(b"bench-jobs/grants")


def _stream(runs: int, per_run: int, job: JobTerms | None,
            keys: dict[str, SigningKey]) -> list[tuple[str, bytes]]:
    """The (subject, message) of every segment of ``runs`` runs, round by round (so runs
    interleave as on a busy fleet); with ``job``, its open event first and the runs are its
    items."""
    out: list[tuple[str, bytes]] = []
    owner = SigningKey(digest(b"bench-jobs/owner"))
    if job is not None:
        out.append((DEFAULT_FLEET.job_subject, open_event(owner, encode_terms(job))))
    names = sorted(keys)
    builders = []
    for n in range(runs):
        host = names[n % _HOSTS]
        unit = (item_unit(job_id(job), n) if job is not None
                else digest(b"bench-jobs/unit/%d" % n))
        builders.append((host, RecordBuilder(keys[host], unit, _GRANTS)))
    for step in range(per_run):
        for n, (host, b) in enumerate(builders):
            if step == per_run - 1:
                sealed = b.close()
            else:
                sealed = b.execute(uj=1000 + n, provenance="measured", meter="rapl:package-0",
                                   journal_root=digest(b"j%d/%d" % (n, step)),
                                   calls=CallAccount((f"c{step}",), (f"c{step - 1}",)
                                                     if step else ()))
            s = b.state
            out.append((DEFAULT_FLEET.segment_subject(host, format_address(s.run)),
                        encode_envelope(host, s.run, s.unit_id, s.grants_id, sealed)))
    return out


class _Fold:
    """A fresh ledger folding one stream batch by batch (:meth:`step`)."""

    def __init__(self, workdir: Path, stream: list[tuple[str, bytes]],
                 keys: dict[str, SigningKey], freeze: bool = True) -> None:
        self.ledger = Ledger(LedgerConfig(data_dir=workdir, servers=[], seal_workers=0))
        for host, key in keys.items():
            self.ledger.store.enroll(host, encode_key(bytes(key.verify_key)))
        msgs = [(n + 1, s, d) for n, (s, d) in enumerate(stream)]
        self.batches = [msgs[first:first + _BATCH] for first in range(0, len(msgs), _BATCH)]
        self.wall = self.cpu = 0.0
        self.cpus: list[float] = []  # each batch's
        self.freeze = freeze

    def step(self, n: int) -> None:
        """Fold batch ``n`` and collect what it left in the young generations, timed (wall
        clock, and this process's CPU time: what other processes on a shared machine
        change least); then freeze the survivors, untimed (unless told not to)."""
        if n >= len(self.batches):
            return
        start, cpu = time.perf_counter(), time.process_time()
        self.ledger.fold_messages(self.batches[n])
        gc.collect(1)
        cpu = time.process_time() - cpu
        self.wall += time.perf_counter() - start
        self.cpu += cpu
        self.cpus.append(cpu)
        if self.freeze:
            gc.freeze()

    def close(self) -> int:
        """Close the ledger: the leaves it made."""
        try:
            return self.ledger.store.tree.size()
        finally:
            self.ledger.store.close()


def _side_by_side(folds: list[_Fold], first: int) -> None:
    """Fold the ledgers' streams batch by batch, each batch of one then the same batch of
    the others, the order turning each batch (``first``: who starts)."""
    gc.collect()
    if folds[0].freeze:
        gc.freeze()
    for n in range(max(len(f.batches) for f in folds)):
        turn = (n + first) % len(folds)
        for fold in folds[turn:] + folds[:turn]:
            fold.step(n)


def measure_fold(runs: int = 2000, per_run: int = 4, repeats: int = 9) -> dict[str, Any]:
    """The ``fold`` section: messages a second folded as plain runs and as job items (the
    best of ``repeats`` each, wall clock), their ratio (``ratio``), and in CPU time: the
    median over the repeats of the two folds' ratio (``cpu_ratio_median``; ``cpu_ratios``:
    each repeat's, in order) and the ratio of their least CPU times, each batch's least
    over the repeats added up (``cpu_ratio_best``: the machine's load only ever adds time,
    so the least is the estimate it moves least, as :mod:`timeit` reads its repeats), and
    from those least times what an item run costs the fold more than a plain run, once
    (``item_cpu_us``: its gate, binding, leaf, rows and share of the receipt's tree).

    Each repeat folds both streams side by side in two fresh ledgers, a batch of one then
    the same batch of the other, the order turning, so a shared machine's load at any
    moment falls on both alike (folded one after the other, a pair's ratio ranged
    0.71-1.18 here). Each batch's time includes collecting the cyclic garbage it left in
    the young generations; what survives is frozen after (:func:`gc.freeze`), so neither
    ledger's collections walk the other's objects. The whole-heap collections a ledger
    process also makes now and then are left out of both (they walk its long-lived cache,
    the same for both streams): the ratio is the stricter for it.

    A caller that froze objects of its own keeps them frozen: the bench then freezes
    nothing (``froze``: false), since unfreezing its own would unfreeze the caller's too."""
    keys = {f"h{i}": SigningKey(digest(b"bench-jobs/host%d" % i)) for i in range(_HOSTS)}
    job = JobTerms("bench-fold", runs, bytes(SigningKey(digest(b"bench-jobs/owner"))
                                             .verify_key), bytes(16))
    streams = {"plain": _stream(runs, per_run, None, keys),
               "items": _stream(runs, per_run, job, keys)}
    best = {"plain": float("inf"), "items": float("inf")}
    least: dict[str, list[float]] = {}
    leaves: dict[str, int] = {}
    pairs = []
    froze = gc.get_freeze_count() == 0
    with tempfile.TemporaryDirectory(prefix="fleet-bench-jobs-") as tmp:
        for r in range(repeats):
            folds: dict[str, _Fold] = {}
            try:
                for name, stream in streams.items():
                    folds[name] = _Fold(Path(tmp) / f"{name}-{r}", stream, keys, froze)
                _side_by_side(list(folds.values()), r)
            finally:
                if froze:
                    gc.unfreeze()
                for name, fold in folds.items():
                    leaves[name] = fold.close()
            for name, fold in folds.items():
                best[name] = min(best[name], fold.wall)
                least[name] = list(map(min, least.get(name, fold.cpus), fold.cpus))
            pairs.append(folds["plain"].cpu / folds["items"].cpu)
    segments = runs * per_run
    if leaves != {"plain": segments, "items": segments + 1}:
        raise RuntimeError(f"the fold did not make every leaf: {leaves}")  # the receipt's too
    plain_rate, item_rate = segments / best["plain"], segments / best["items"]
    return {"runs": runs, "segments": segments, "plain_msgs_per_s": round(plain_rate),
            "items_msgs_per_s": round(item_rate), "ratio": round(item_rate / plain_rate, 3),
            "cpu_ratio_median": round(statistics.median(pairs), 3),
            "cpu_ratio_best": round(sum(least["plain"]) / sum(least["items"]), 3),
            "item_cpu_us": round((sum(least["items"]) - sum(least["plain"])) / runs * 1e6, 1),
            "cpu_ratios": [round(p, 3) for p in pairs],
            "goal_ratio": 0.95, "repeats": repeats, "batch": _BATCH, "froze": froze}
