"""``fleet bench ingest``: raw JetStream vs the ledger's fold vs end to end, in one run."""

from __future__ import annotations

import asyncio

import click

from fleet_ledger.cli._app import CheckFailed, bench
from fleet_ledger.cli._common import emit_result


@bench.command("ingest")
@click.option("--segments", default=20_000, show_default=True, type=click.IntRange(100),
              help="Messages for the raw baseline and the fold phase.")
@click.option("--rate", default=2000.0, show_default=True, type=click.FloatRange(1),
              help="Target publish rate of the end-to-end phase (segments/s).")
@click.option("--e2e-segments", default=10_000, show_default=True, type=click.IntRange(100),
              help="Segments published in the end-to-end phase.")
@click.option("--repeats", default=3, show_default=True, type=click.IntRange(1),
              help="Fresh ledgers folding the pre-filled stream (the median is reported).")
@click.option("--grants", "with_grants", is_flag=True,
              help="Instead: the fold with a grant on every run (each its own, issued in the "
                   "stream before the runs) against the same fold without, alternating fresh "
                   "ledgers (--repeats of each).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON only.")
def bench_ingest(segments: int, rate: float, e2e_segments: int, repeats: int,
                 with_grants: bool, as_json: bool) -> None:
    """Raw nats-py publish/consume, the ledger folding a pre-filled stream, end to end.
    Fails (exit 1, one line) unless every segment of each fold became a leaf."""
    from fleet_ledger.cli._bench_ingest_run import BenchError, grant_bench, run_bench

    try:
        if with_grants:
            result = asyncio.run(grant_bench(segments, repeats))
        else:
            result = asyncio.run(run_bench(segments, rate, e2e_segments, repeats))
    except BenchError as exc:
        raise CheckFailed(f"bench ingest: {exc}") from None
    emit_result(result, as_json)
