"""``fleet bench failover``, small: it kills a lease holder, reports the takeover with the
keys a script reads, and the replicas folded the simulated host's segments meanwhile."""

from __future__ import annotations

import json

import pytest

from pipeline_helpers import cli

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_bench_failover_prints_its_keys() -> None:
    """One kill: a takeover time within the bench's own bound (else exit 1), median and
    worst equal to it, leaves folded under load."""
    out = cli("bench", "failover", "--kills", "1", "--ttl", "1", "--json", timeout=240)
    result = json.loads(out.stdout)
    assert result["kills"] == 1 and len(result["failover_s"]) == 1
    assert result["median_s"] == result["worst_s"] == result["failover_s"][0] > 0
    assert result["bound_s"] == 1.75
    assert result["leaves_folded_meanwhile"] > 0
