"""``fleet bench merkle``: our SQLite tree store against pymerkle's SqliteTree, same leaves.

Each implementation runs in its own subprocess (``python -m fleet_ledger.cli.bench_merkle``) so
its peak RSS is its own. Both get the same 84-byte fleet leaves, generated on the fly (never
held in a list, so memory measures the store, not the input). Appends are durable:

- ours: ``leaf_hashes`` + :meth:`TreeStore.append` per batch, one commit per batch, on a
  WAL database with ``synchronous=FULL`` (the commit returns after fsync);
- pymerkle: ``SqliteTree.append_entries`` over all leaves - its bulk API, one transaction
  (rollback journal, SQLite's default ``synchronous=FULL``).

Then the same random leaves (inclusion) and old sizes (consistency, to the full size) are
proved by both; latencies are per call, wall clock. pymerkle is a test extra, imported only
inside the worker.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from hashlib import sha256
from pathlib import Path
from typing import Any

import click

from fleet_ledger.cli._app import UserError, bench
from fleet_ledger.fleet.log.leaf import encode_leaf

IMPLS = ("ours", "pymerkle")
_RUN = sha256(b"bench run").digest()


def bench_leaves(start: int, stop: int) -> Iterator[bytes]:
    """Fleet leaves ``start .. stop - 1``: fixed run, segment i + 1, a head derived from i."""
    for i in range(start, stop):
        yield encode_leaf(_RUN, i + 1, i.to_bytes(32, "big"))


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return round(pick(0.50) * 1e3, 4), round(pick(0.99) * 1e3, 4)


def _timed(calls: Sequence[Callable[[], object]]) -> list[float]:
    out = []
    clock = time.perf_counter
    for call in calls:
        start = clock()
        call()
        out.append(clock() - start)
    return out


def _run_ours(path: Path, leaves: int, batch: int) -> tuple[float, Any]:
    from fleet_ledger.fleet.log.merkle import leaf_hashes
    from fleet_ledger.ledger.tree_store import open_tree_store

    store = open_tree_store(path)
    start = time.perf_counter()
    for first in range(0, leaves, batch):
        store.append(leaf_hashes(bench_leaves(first, min(leaves, first + batch))))
        store.conn.commit()
    elapsed = time.perf_counter() - start
    return elapsed, store


def worker(impl: str, leaves: int, proofs: int, batch: int, folder: Path, seed: int) -> dict:
    """Measure one implementation in this process; return its figures."""
    rng = random.Random(seed)
    indexes = [rng.randrange(leaves) for _ in range(proofs)]
    olds = [rng.randrange(1, leaves) if leaves > 1 else 1 for _ in range(proofs)]
    path = folder / f"{impl}.db"
    if impl == "ours":
        elapsed, store = _run_ours(path, leaves, batch)
        inclusion = [lambda i=i: store.inclusion_proof(i, leaves) for i in indexes]
        consistency = [lambda m=m: store.consistency_proof(m, leaves) for m in olds]
    else:
        import pymerkle

        tree = pymerkle.SqliteTree(str(path))
        start = time.perf_counter()
        tree.append_entries(bench_leaves(0, leaves))
        elapsed = time.perf_counter() - start
        inclusion = [lambda i=i: tree.prove_inclusion(i + 1, leaves) for i in indexes]
        consistency = [lambda m=m: tree.prove_consistency(m, leaves) for m in olds]
    inc50, inc99 = _percentiles(_timed(inclusion))
    con50, con99 = _percentiles(_timed(consistency))
    size = sum(p.stat().st_size for p in folder.glob(f"{impl}.db*"))
    return {
        "append_per_s": round(leaves / elapsed),
        "inclusion_p50_ms": inc50,
        "inclusion_p99_ms": inc99,
        "consistency_p50_ms": con50,
        "consistency_p99_ms": con99,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "db_mb": round(size / 1e6, 1),
    }


def _spawn(impl: str, leaves: int, proofs: int, batch: int, folder: Path) -> dict:
    args = [sys.executable, "-m", "fleet_ledger.cli.bench_merkle", impl, str(leaves), str(proofs),
            str(batch), str(folder)]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"the {impl} benchmark worker failed: {tail}")
    return json.loads(done.stdout)


@bench.command("merkle")
@click.option("--leaves", type=click.IntRange(min=2), default=100_000, show_default=True)
@click.option("--proofs", type=click.IntRange(min=1), default=10_000, show_default=True,
              help="Random inclusion proofs, and as many consistency proofs, per implementation.")
@click.option("--batch", type=click.IntRange(min=1), default=10_000, show_default=True,
              help="Leaves per committed transaction for our store.")
@click.option("--impl", type=click.Choice(["both", *IMPLS]), default="both", show_default=True)
@click.option("--dir", "work_dir", type=click.Path(file_okay=False), default=None,
              help="Where the temporary databases go (default: the system temp directory).")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")  # fmt: skip
def bench_merkle(
    leaves: int, proofs: int, batch: int, impl: str, work_dir: str | None, as_json: bool
) -> None:
    """Append rate, proof latency and peak RSS: our tree store vs pymerkle.SqliteTree."""
    impls = IMPLS if impl == "both" else (impl,)
    if "pymerkle" in impls and importlib.util.find_spec("pymerkle") is None:
        raise UserError("pymerkle is not installed (pip install 'fleet-ledger[test]'); "
                        "or run with --impl ours")  # fmt: skip
    if work_dir:
        os.makedirs(work_dir, exist_ok=True)
    result: dict[str, Any] = {"leaves": leaves, "proofs": proofs, "batch": batch}
    with tempfile.TemporaryDirectory(dir=work_dir, prefix="bench-merkle-") as folder:
        for name in impls:
            result[name] = _spawn(name, leaves, proofs, batch, Path(folder))
    if as_json:
        click.echo(json.dumps(result, indent=1))
        return
    click.echo(f"{leaves} leaves, {proofs} proofs each")
    for name in impls:
        figures = " ".join(f"{key}={value}" for key, value in result[name].items())
        click.echo(f"{name:9} {figures}")


if __name__ == "__main__":
    _impl, _leaves, _proofs, _batch, _folder = sys.argv[1:6]
    figures = worker(_impl, int(_leaves), int(_proofs), int(_batch), Path(_folder), seed=7)
    print(json.dumps(figures))
