"""``fleet bench jobs``' ``fold`` section: the ledger's fold rate over item runs of a job
against the same runs as plain runs (goal: at least 0.95x).

Both streams hold the same number of runs of the same plan (executes, then a close) on
four enrolled hosts, sealed with real keys; the job stream opens one job first, its runs
are the job's items (every first segment passes the item gate, every close makes the
item's leaf, the last close builds the receipt). Each is folded by a fresh ledger's own
batch fold (:meth:`ledger.service.Ledger.fold_messages`: decide, write, commit) in batches
of 2048, in-process and without NATS, so only the fold is timed; the best of ``repeats``
runs of each is kept, alternating the two. (Forking a child for each fold did not narrow
the pairs' spread, and its copy-on-write page faults slowed both folds by some 15%.)
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


def _fold(workdir: Path, stream: list[tuple[str, bytes]], keys: dict[str, SigningKey]
          ) -> tuple[float, float, int]:
    """A fresh ledger folding ``stream``: seconds taken (wall clock, and this process's CPU
    time: what other processes on a shared machine change least), leaves made."""
    ledger = Ledger(LedgerConfig(data_dir=workdir, servers=[], seal_workers=0))
    try:
        for host, key in keys.items():
            ledger.store.enroll(host, encode_key(bytes(key.verify_key)))
        msgs = [(n + 1, s, d) for n, (s, d) in enumerate(stream)]
        # The fold before left its ledger's cycles behind: collected now, not in this timing.
        gc.collect()
        start, cpu = time.perf_counter(), time.process_time()
        for first in range(0, len(msgs), _BATCH):
            ledger.fold_messages(msgs[first:first + _BATCH])
        took, cpu = time.perf_counter() - start, time.process_time() - cpu
        size = ledger.store.tree.size()
    finally:
        ledger.store.close()
    return took, cpu, size


def measure_fold(runs: int = 2000, per_run: int = 4, repeats: int = 9) -> dict[str, Any]:
    """The ``fold`` section: messages a second folded as plain runs and as job items (the
    best of ``repeats`` each, wall clock), their ratio, and the median ratio of the
    back-to-back pairs in CPU time (``cpu_ratio_median``: what a shared machine's load
    changes least; the goal is read on it; ``cpu_ratios``: each pair's, in order)."""
    keys = {f"h{i}": SigningKey(digest(b"bench-jobs/host%d" % i)) for i in range(_HOSTS)}
    job = JobTerms("bench-fold", runs, bytes(SigningKey(digest(b"bench-jobs/owner"))
                                             .verify_key), bytes(16))
    plain, items = _stream(runs, per_run, None, keys), _stream(runs, per_run, job, keys)
    best = {"plain": float("inf"), "items": float("inf")}
    leaves: dict[str, int] = {}
    pairs = []
    with tempfile.TemporaryDirectory(prefix="fleet-bench-jobs-") as tmp:
        for r in range(repeats):
            cpu = {}
            order = (("plain", plain), ("items", items))
            for name, stream in order if r % 2 == 0 else order[::-1]:
                took, cpu[name], leaves[name] = _fold(Path(tmp) / f"{name}-{r}", stream, keys)
                best[name] = min(best[name], took)
            pairs.append(cpu["plain"] / cpu["items"])
    segments = runs * per_run
    if leaves != {"plain": segments, "items": segments + 1}:
        raise RuntimeError(f"the fold did not make every leaf: {leaves}")  # the receipt's too
    plain_rate, item_rate = segments / best["plain"], segments / best["items"]
    return {"runs": runs, "segments": segments, "plain_msgs_per_s": round(plain_rate),
            "items_msgs_per_s": round(item_rate), "ratio": round(item_rate / plain_rate, 3),
            "cpu_ratio_median": round(statistics.median(pairs), 3),
            "cpu_ratios": [round(p, 3) for p in pairs],
            "goal_ratio": 0.95, "repeats": repeats, "batch": _BATCH}
