"""``fleet bench jobs``: sealing a job's Merkle-sum receipt and proving one item (the pure
core, :mod:`fleet.jobs`). JSON keys: ``seal`` and ``proof`` (more sections may be added)."""

from __future__ import annotations

import json
import random
import resource
import statistics
import sys
import time

import click

from fleet_ledger.cli._app import bench
from fleet_ledger.cli._bench_jobs_fold import measure_fold
from fleet_ledger.fleet.jobs.item_proof import (
    decode_item_proof,
    encode_item_proof,
    item_proof,
    tree_item_proof,
)
from fleet_ledger.fleet.jobs.item_proof import verify_item_proof as verify_proof
from fleet_ledger.fleet.jobs.job_id import JobTerms, item_run, job_id
from fleet_ledger.fleet.jobs.receipt import Receipt, encode_receipt, item_leaves, seal_leaves
from fleet_ledger.fleet.jobs.sum_tree import Item, SumTree

# A batch's CPU time here moves by up to 15% from one repeat to the next with the load of
# other jobs on the machine; over 9 repeats the fold's ratio still read 0.89-0.98 for one
# build, over 25 within about 0.02 (docs/benchmarks.md, issue 27 round 5).
FOLD_REPEATS = 25

_GRANTS = bytes([7]) * 32


def _rss_mb() -> float:
    """Peak resident set of this process so far (ru_maxrss: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1 << 20 if sys.platform == "darwin" else 1 << 10), 1)


def sample_job(items: int, missing_every: int = 50) -> tuple[JobTerms, list[Item | None]]:
    """A job of ``items`` items, every ``missing_every``-th missing, verdicts cycling."""
    terms = JobTerms("bench", items, bytes([1]) * 32, bytes(16))
    job = job_id(terms)
    out: list[Item | None] = []
    for i in range(items):
        if i % missing_every == missing_every - 1:
            out.append(None)
            continue
        code = 1 + i % 4
        out.append(Item(i, item_run(job, i, _GRANTS), _GRANTS, i.to_bytes(32, "big"),
                        (1000 + i, i % 7, 50 + i % 3, 0, i % 2, 0, 0, 0), code,
                        1 if code in (2, 3) else 0))
    return terms, out


def measure_seal(items: int) -> tuple[dict[str, object], JobTerms, list[bytes], Receipt]:
    """Seal a job of ``items`` items: from items (leaves made and checked, then the tree) and
    from stored leaves (what the ledger does at the seal)."""
    terms, its = sample_job(items)
    rss_before = _rss_mb()
    start = time.perf_counter()
    leaves = item_leaves(terms, its)
    made = time.perf_counter()
    receipt = seal_leaves(terms, leaves, 1)
    done = time.perf_counter()
    return {
        "items": items,
        "missing": len(receipt.missing),
        "seal_s": round(done - start, 3),
        "leaves_s": round(made - start, 3),
        "tree_s": round(done - made, 3),
        "items_per_s": round(items / (done - start)),
        "receipt_bytes": len(encode_receipt(receipt)),
        "rss_before_mb": rss_before,
        "peak_rss_mb": _rss_mb(),
    }, terms, leaves, receipt


def measure_proof(terms: JobTerms, leaves: list[bytes], receipt: Receipt, proofs: int,
                  verifies: int) -> dict[str, object]:
    """Make ``proofs`` item proofs from the stored leaves (O(n) each) and from a kept tree
    (O(log n) each, after one build), and verify one item's proof ``verifies`` times, from
    its bytes."""
    rng = random.Random(27)
    job = job_id(terms)
    indexes = [rng.randrange(len(leaves)) for _ in range(proofs)]
    make, sizes = [], []
    data = b""
    for i in indexes:
        start = time.perf_counter()
        data = encode_item_proof(item_proof(job, leaves, i))
        make.append(time.perf_counter() - start)
        sizes.append(len(data))
    start = time.perf_counter()
    tree = SumTree.from_leaves(leaves)
    built = time.perf_counter() - start
    kept = []
    for i in indexes * 20:
        start = time.perf_counter()
        encode_item_proof(tree_item_proof(job, tree, i, leaves[i]))
        kept.append(time.perf_counter() - start)
    times = []
    for _ in range(verifies):
        start = time.perf_counter()
        verify_proof(decode_item_proof(data), receipt)
        times.append(time.perf_counter() - start)
    times.sort()
    return {
        "proof_bytes_max": max(sizes),
        "proof_bytes_median": round(statistics.median(sizes)),
        "make_ms_median": round(statistics.median(make) * 1e3, 1),
        # A tree kept level by level (fleet.jobs.sum_tree.SumTree): built once, then each
        # proof is read in O(log n).
        "kept_tree_build_s": round(built, 3),
        "kept_tree_mb": round(sum(len(level) for level in tree.levels) / 2**20, 1),
        "kept_tree_make_us_median": round(statistics.median(kept) * 1e6, 1),
        "verify_ms_p50": round(times[len(times) // 2] * 1e3, 3),
        "verify_ms_p99": round(times[min(len(times) - 1, len(times) * 99 // 100)] * 1e3, 3),
        "verifies": verifies,
        "proofs": proofs,
    }


def measure(items: int, proofs: int, verifies: int, fold_runs: int = 0,
            fold_repeats: int = FOLD_REPEATS) -> dict[str, object]:
    seal, terms, leaves, receipt = measure_seal(items)
    fold = {} if not fold_runs else {"fold": measure_fold(fold_runs, repeats=fold_repeats)}
    return {"seal": seal, "proof": measure_proof(terms, leaves, receipt, proofs, verifies),
            **fold,
            "statistic": "wall time in this process (Python, one core); peak_rss_mb is the "
                         "process's peak resident set after sealing (items and leaves held)"}


@bench.command("jobs")
@click.option("--items", default=100_000, show_default=True, type=click.IntRange(1, 2**32 - 1))
@click.option("--proofs", default=5, show_default=True, type=click.IntRange(1),
              help="Item proofs to make (each rebuilds the tree from the stored leaves).")
@click.option("--verifies", default=1000, show_default=True, type=click.IntRange(1))
@click.option("--fold-runs", default=2000, show_default=True, type=click.IntRange(0),
              help="Runs folded by a ledger as job items and as plain runs (the fold "
                   "section; 0: skip it).")
@click.option("--fold-repeats", default=FOLD_REPEATS, show_default=True,
              type=click.IntRange(1),
              help="Times the two streams are folded side by side (the fold section's "
                   "ratios are read over them).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON only.")
def bench_jobs(items: int, proofs: int, verifies: int, fold_runs: int, fold_repeats: int,
               as_json: bool) -> None:
    """A job's Merkle-sum receipt: seal time and peak RSS, item proof size and verify time;
    the ledger's fold rate over job items against plain runs."""
    result = measure(items, proofs, verifies, fold_runs, fold_repeats)
    if as_json:
        click.echo(json.dumps(result))
        return
    for section, figures in result.items():
        click.echo(f"{section}: {figures}")
