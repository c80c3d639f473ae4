"""``fleet bench ingest``, small: every key users' scripts read is there, the fold runs at the
ledger's default checkpoint cadence, and a fold that refuses segments fails the bench."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from nacl.signing import SigningKey

from fleet_ledger.cli import _bench_ingest_run as bench_ingest
from fleet_ledger.cli import cli as fleet_cli
from fleet_ledger.ledger.service import LedgerConfig

from pipeline_helpers import cli

CONTRACT_KEYS = ("raw_publish_per_s", "raw_consume_per_s", "fold_per_s",
                 "fold_ratio_to_raw_consume", "e2e_per_s", "e2e_latency_p50_ms",
                 "e2e_latency_p99_ms")
DEFAULTS = LedgerConfig(data_dir=Path(), servers=[])


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
    # Every segment became a leaf (checked, else the bench fails), and the cadence is shown.
    assert result["fold_leaves"] == 300
    assert result["checkpoint_every"] == DEFAULTS.checkpoint_every == 1000
    assert result["checkpoint_ms"] == DEFAULTS.checkpoint_ms == 1000
    assert len(result["fold_checkpoints_signed"]) == 2
    assert all(isinstance(n, int) and n >= 0 for n in result["fold_checkpoints_signed"])
    assert (result["e2e_checkpoint_every"], result["e2e_checkpoint_ms"]) == (10**9, 100)


def test_bench_ingest_grants_compares_folds_with_and_without_grants():
    """`--grants`: fresh ledgers fold the stream without grants and with a grant on every
    run (both timings), all segments leaves each time, and the ratio and the bar printed."""
    out = cli("bench", "ingest", "--grants", "--segments", "300", "--repeats", "2", "--json",
              timeout=240)
    result = json.loads(out.stdout)
    assert (result["segments"], result["runs"], result["grant_events"]) == (300, 30, 30)
    for key in ("without_grants", "with_grants", "with_grant_events"):
        runs = result[f"fold_runs_per_s_{key}"]
        assert len(runs) == 2 and min(runs) <= result[f"fold_per_s_{key}"] <= max(runs)
    assert result["fold_ratio_grants_to_without"] == pytest.approx(
        result["fold_per_s_with_grants"] / result["fold_per_s_without_grants"], abs=0.01)
    assert result["bar"] == 0.9 and result["within_bar"] == (
        result["fold_per_s_with_grants"] >= 0.9 * result["fold_per_s_without_grants"])


def test_the_grant_mode_holds_every_run_to_its_grant(monkeypatch):
    """Grants of a 1 µJ budget: every run's first segment is refused OverBudget, so the
    grant mode's fold fails the bench (its runs are really held to their grants)."""
    from fleet_ledger.fleet.fold.grant_events import issue_event
    from fleet_ledger.fleet.grants.grant import make_terms, sign_grant

    def tiny(run_no: int, hosts: list[str], manifest: bytes, now_ms: int) -> bytes:
        terms = make_terms([f"/bench/{run_no}"], 1, now_ms - 60_000, now_ms + 600_000)
        issuer = bench_ingest.BENCH_ISSUER
        return issue_event(issuer, sign_grant(issuer, bytes(bench_ingest.BENCH_AGENT.verify_key),
                                              terms))

    monkeypatch.setattr(bench_ingest, "bench_grant", tiny)
    result = CliRunner().invoke(fleet_cli, ["bench", "ingest", "--grants", "--segments", "200",
                                            "--repeats", "1", "--json"])
    assert result.exit_code == 1, result.output
    line = result.stderr.strip()
    assert line.startswith("bench ingest: fold grants0: 0 of 200 segments"), line
    assert "OverBudget 20" in line


def test_the_fold_phase_signs_checkpoints_at_the_default_cadence(tmp_path):
    """1,200 segments pass ``checkpoint_every`` (1,000), so the fold signs at least one
    checkpoint (with the old cadence switched off it signed none), and all are leaves."""
    messages, keys = bench_ingest.make_segments(1200)
    rates, lean, checkpoints = asyncio.run(bench_ingest.fold_rates(tmp_path, messages, keys, 1))
    assert len(rates) == 1 and rates[0] > 0 and lean > 0
    assert checkpoints[0] >= 1, checkpoints


def test_a_fold_that_refuses_segments_fails_the_bench(monkeypatch):
    """One host enrolled under a key other than the one that sealed its segments: its 80 of
    the 300 segments are refused, and the bench exits 1 with one line naming the shortfall
    instead of printing a (fast) fold rate."""
    real = bench_ingest.make_segments

    def wrong_key_for_bench0(count: int) -> tuple[list, dict[str, SigningKey]]:
        messages, keys = real(count)
        return messages, {**keys, "bench0": SigningKey(b"\x09" * 32)}

    monkeypatch.setattr(bench_ingest, "make_segments", wrong_key_for_bench0)
    result = CliRunner().invoke(fleet_cli, ["bench", "ingest", "--segments", "300",
                                            "--repeats", "1", "--json"])
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("bench ingest: fold 1: 220 of 300 segments became leaves"), lines
    assert "BadSeal" in lines[0]


def test_check_all_folded_names_the_shortfall(tmp_path):
    """The check itself: an empty store against 5 expected segments fails, naming both."""
    from fleet_ledger.ledger.store import LedgerStore

    store = LedgerStore(tmp_path)
    try:
        assert bench_ingest.check_all_folded(store, 0, "x") == 0
        with pytest.raises(bench_ingest.BenchError, match=r"^x: 0 of 5 segments became leaves"
                           r" \(0 folded; refused: none\)$"):
            bench_ingest.check_all_folded(store, 5, "x")
    finally:
        store.close()


def test_bench_adopt_prints_its_phases(tmp_path):
    """`fleet bench adopt` folds a run, adopts it through the API and reports each phase
    beside bare Ed25519 on the same seals."""
    from click.testing import CliRunner

    result = CliRunner().invoke(fleet_cli, ["bench", "adopt", "--segments", "40", "--repeats",
                                            "1", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["segments"] == 40 and doc["record_bytes"] > 40 * 300
    assert doc["adopt_ms"] >= doc["fetch_ms"] + doc["prove_ms"] > 0
    assert doc["verify_over_bare_ed25519"] > 0


def test_bench_host_prints_its_segment_cost():
    """`fleet bench host` times durable host segments and reports the median round; a zero
    size is refused with one line and a non-zero exit."""
    result = CliRunner().invoke(fleet_cli, ["bench", "host", "--segments", "5", "--rounds",
                                            "2", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["segments"] == 5 and len(doc["rounds_us"]) == 2 and doc["segment_us"] > 0
    refused = CliRunner().invoke(fleet_cli, ["bench", "host", "--segments", "0"])
    assert refused.exit_code != 0 and "at least 1" in refused.output
