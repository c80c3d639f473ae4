"""``fleet bench runtime``, small: every key a script reads is there and the numbers are
positive; the resume run holds the journal size asked for."""

from __future__ import annotations

import json

from pipeline_helpers import cli


def test_bench_runtime_prints_the_contract_keys():
    """Step overhead and its same-run baseline, the resume of a 200-entry journal, and the
    resume with and without its checkpoint at each size asked for, and signal -> step
    latency with a worker waiting."""
    out = cli("bench", "runtime", "--json", "--steps", "20", "--rounds", "1",
              "--resume-entries", "200", "--resume-sizes", "100,300", "--signals", "3")
    doc = json.loads(out.stdout)
    assert doc["resume_entries"] == 200
    for key in ("step_us", "baseline_insert_fsync_us", "step_vs_baseline", "resume_ms",
                "resume_us_per_entry"):
        assert doc[key] > 0, key
    assert sorted(doc["resume_by_entries"]) == ["100", "300"]
    for row in doc["resume_by_entries"].values():
        assert row["checkpoint_ms"] > 0 and row["from_zero_ms"] > 0
    assert doc["signal_rounds"] == 3
    assert 0 < doc["signal_to_step_p50_ms"] <= doc["signal_to_step_p99_ms"]
