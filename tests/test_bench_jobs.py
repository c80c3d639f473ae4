"""`fleet bench jobs --json`: the figures a reader of docs/benchmarks.md looks for."""

from __future__ import annotations

import json

from click.testing import CliRunner

from fleet_ledger.cli import cli


def test_bench_jobs_json_has_the_seal_and_proof_figures():
    """A small run prints one JSON object with the ``seal`` and ``proof`` sections (the
    ``fold`` section has its own test: test_bench_jobs_fold.py)."""
    out = CliRunner().invoke(cli, ["bench", "jobs", "--items", "300", "--proofs", "2",
                                   "--verifies", "20", "--fold-runs", "0", "--json"])
    assert out.exit_code == 0, out.output
    figures = json.loads(out.output)
    assert "fold" not in figures
    assert figures["seal"]["items"] == 300 and figures["seal"]["missing"] == 6
    assert {"seal_s", "items_per_s", "peak_rss_mb", "receipt_bytes"} <= set(figures["seal"])
    # 300 items: at most 9 path nodes of 116 bytes after the 56-byte head, a leaf, a count.
    assert figures["proof"]["proof_bytes_max"] <= 56 + 174 + 1 + 9 * 116
    assert {"make_ms_median", "verify_ms_p50", "verify_ms_p99"} <= set(figures["proof"])
