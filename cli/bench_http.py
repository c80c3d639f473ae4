"""``fleet bench http``: the fold's rate with and without followers on the HTTP log, in one
run, and the tiles they were served (:mod:`cli._bench_http_run`)."""

from __future__ import annotations

import asyncio

import click

from fleet_ledger.cli._app import CheckFailed, bench
from fleet_ledger.cli._common import emit_result


@bench.command("http")
@click.option("--segments", default=30_000, show_default=True, type=click.IntRange(1000),
              help="Sealed segments each ledger folds.")
@click.option("--clients", default=64, show_default=True, type=click.IntRange(1),
              help="Concurrent HTTP followers while the loaded ledgers fold.")
@click.option("--repeats", default=3, show_default=True, type=click.IntRange(1),
              help="Quiet and loaded folds each (alternating; medians reported).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON only.")
def bench_http(segments: int, clients: int, repeats: int, as_json: bool) -> None:
    """Fold rate quiet vs under CLIENTS HTTP followers; tiles/s and checkpoint latency.
    Fails (exit 1, one line) unless every segment of each fold became a leaf."""
    from fleet_ledger.cli._bench_http_run import BenchError, run_bench

    try:
        result = asyncio.run(run_bench(segments, clients, repeats))
    except BenchError as exc:
        raise CheckFailed(f"bench http: {exc}") from None
    emit_result(result, as_json)
