"""``fleet bench ingest`` as a subprocess, small: every key users' scripts read is there."""

from __future__ import annotations

import json

from pipeline_helpers import cli

CONTRACT_KEYS = ("raw_publish_per_s", "raw_consume_per_s", "fold_per_s",
                 "fold_ratio_to_raw_consume", "e2e_per_s", "e2e_latency_p50_ms",
                 "e2e_latency_p99_ms")


def test_bench_ingest_prints_the_contract_keys():
    out = cli("bench", "ingest", "--segments", "300", "--e2e-segments", "200", "--rate", "400",
              "--repeats", "2", "--json", timeout=240)
    result = json.loads(out.stdout)
    for key in CONTRACT_KEYS:
        assert result[key] > 0, key
    assert len(result["fold_runs_per_s"]) == 2
    assert min(result["fold_runs_per_s"]) <= result["fold_per_s"] <= max(
        result["fold_runs_per_s"])
    assert result["seal_verifier"] in ("ed25519-dalek", "libsodium")
    assert result["e2e_latency_p50_ms"] <= result["e2e_latency_p99_ms"]
