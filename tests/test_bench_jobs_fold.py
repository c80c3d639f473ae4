"""`fleet bench jobs --json`'s ``fold`` section: a ledger's fold rate over job items
against the same runs as plain runs."""

from __future__ import annotations

import gc
import json

from click.testing import CliRunner

from fleet_ledger.cli import cli
from fleet_ledger.cli._bench_jobs_fold import measure_fold


def test_bench_jobs_fold_compares_items_with_plain_runs():
    """A small run prints the fold section: both rates, their ratios and the goal; every
    segment (and the receipt) became a leaf, or the bench fails. The bench freezes each
    batch's survivors while it runs and leaves nothing frozen after."""
    out = CliRunner().invoke(cli, ["bench", "jobs", "--items", "50", "--proofs", "1",
                                   "--verifies", "5", "--fold-runs", "60", "--fold-repeats", "5",
                                   "--json"])
    assert out.exit_code == 0, out.output
    fold = json.loads(out.output)["fold"]
    assert fold["runs"] == 60 and fold["segments"] == 240 and fold["goal_ratio"] == 0.95
    assert fold["plain_msgs_per_s"] > 0 and fold["items_msgs_per_s"] > 0
    assert fold["ratio"] == round(fold["items_msgs_per_s"] / fold["plain_msgs_per_s"], 3) \
        or abs(fold["ratio"] - fold["items_msgs_per_s"] / fold["plain_msgs_per_s"]) < 0.01
    assert len(fold["cpu_ratios"]) == fold["repeats"] == 5
    assert sorted(fold["cpu_ratios"])[len(fold["cpu_ratios"]) // 2] == fold["cpu_ratio_median"]
    assert 0 < fold["cpu_ratio_best"] < 10 and isinstance(fold["item_cpu_us"], float)
    assert gc.get_freeze_count() == 0
    assert fold["froze"] is True


def test_the_fold_bench_leaves_a_callers_frozen_objects_frozen():
    """Objects the caller froze stay frozen: the bench then freezes (and unfreezes)
    nothing of its own, and says so."""
    gc.freeze()
    try:
        held = gc.get_freeze_count()
        assert held > 0
        fold = measure_fold(runs=8, repeats=1)
        assert gc.get_freeze_count() == held and fold["froze"] is False
    finally:
        gc.unfreeze()
