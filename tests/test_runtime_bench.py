"""``fleet bench runtime``, small: every key a script reads is there and the numbers are
positive; the resume run holds the journal size asked for."""

from __future__ import annotations

import json

from pipeline_helpers import cli


def test_bench_runtime_prints_the_contract_keys():
    """Step overhead and its same-run baseline, and the resume of a 200-entry journal."""
    out = cli("bench", "runtime", "--json", "--steps", "20", "--rounds", "1",
              "--resume-entries", "200")
    doc = json.loads(out.stdout)
    assert doc["resume_entries"] == 200
    for key in ("step_us", "baseline_insert_fsync_us", "step_vs_baseline", "resume_ms",
                "resume_us_per_entry"):
        assert doc[key] > 0, key
