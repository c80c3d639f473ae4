"""``fleet demo --runtime``: the triage example runs on A, waits with no process, finishes
on C, under an issued grant on a ledger that requires one, and its record is proved and
verified offline."""

from __future__ import annotations

from pipeline_helpers import cli_json


def test_the_runtime_demo_moves_the_agent_across_three_hosts():
    """The summary shows one stored approval of two sends, the holders A, B, C, eight
    segments proved, and the wait proof the runtime's intervals earned (Blocked: the tool
    calls were awaited inside their intervals)."""
    doc = cli_json("demo", "--runtime", "--json", timeout=120)
    assert doc["signal_stored"] == [True, False]
    assert [h["host"] for h in doc["holders"]] == ["A", "B", "C"]
    assert doc["record_segments"] == doc["proved_index"] == 8
    assert doc["result"]["approved_by"] == "ana" and doc["verdict"]["verdict"] == "Blocked"
    assert doc["grants"] == "require" and doc["grant"].startswith("b3:")  # folded, none refused
