"""Context projection: a long agent run's middle compacted by a journaled summarising step
(replayed, never re-run), the projection a pure function of the journal whose hash is the
model call's argument hash; the example support agent parks on approval and finishes
elsewhere (another folder in one process; another host through a real nats-server, the
ledger and a worker)."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from test_moving_runs import fleet as fleet  # three enrolled hosts and a ledger

from fleet_ledger.agents.runtime import Runtime, workflow_name
from fleet_ledger.agents.runtime.context import Context, Inbox
from fleet_ledger.agents.runtime.projection import summarized_view
from fleet_ledger.fleet.address import format_address
from fleet_ledger.fleet.runtime.runtime_journal import projection_hash

EXAMPLES = str(Path(__file__).resolve().parent.parent / "examples")
sys.path.insert(0, EXAMPLES)
import support_agent  # noqa: E402  (examples/ is not a package)

from pipeline_helpers import api, cli, wait_folded  # noqa: E402


def advance(rt: Runtime, run: str):  # type: ignore[no-untyped-def]
    return asyncio.run(rt.advance(run))


def calls(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def recomputed(rt: Runtime, run: str, head: int, tail: int) -> list[tuple[str, str]]:
    """Each model call's journaled argument hash beside the hash of its view rebuilt from
    the journal alone (the history before it and the last summary journaled before it)."""
    name, wf, _status, _meta = rt.journal.run_row(run)  # type: ignore[misc]
    entries = rt.journal.entries(run)
    ctx = Context(rt.journal, run, name, wf, entries, Inbox())
    summary: Any = None
    summaries = {e.call for e in entries if e.kind == "dispatch"
                 and e.data()["ask"].get("summary")}
    out = []
    for e in entries:
        if e.kind == "resolve" and e.call in summaries:
            summary = rt.journal.value(e.data()["value"])
        elif e.kind == "dispatch" and "projection" in e.data()["ask"]:
            ask = e.data()["ask"]
            view = summarized_view(ctx.history(e.seq), head, tail, summary)
            out.append((ask["args"], format_address(projection_hash(ask["projection"], view))))
    return out


def test_the_projection_replays_equal_to_the_live_run_and_never_reruns_a_summary(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The support agent runs live until it parks at the approval; its journal moves to
    another folder, where a replay rebuilds every projection to the same hash (else
    ReplayDiverged) and continues to the refund. Across both folders each journaled model
    and summary call ran exactly once (the replay re-ran none), and each view's hash is
    recomputed from the journal alone."""
    trace = tmp_path / "calls.txt"
    monkeypatch.setenv("SUPPORT_CALLS", str(trace))
    rt = Runtime(tmp_path / "A")
    run = rt.start(support_agent.support, "order-7", {"order": 7})
    parked = advance(rt, run)
    assert parked.status == "waiting" and parked.wait["signal"] == "approve"
    live = calls(trace)
    assert live.count("model") == 4 and any(c.startswith("summarize") for c in live)
    rt.close()
    shutil.copytree(tmp_path / "A", tmp_path / "B")

    other = Runtime(tmp_path / "B")
    other.send(run, "approve", {"ok": True, "by": "ana"}, "appr-1")
    done = advance(other, run)
    assert done.status == "done" and done.result == {"answer": "refunded 40 for order 7"}
    everything = calls(trace)
    assert everything[:len(live)] == live  # nothing live re-ran on replay
    journal = other.journal.entries(run)
    decides = [e for e in journal if e.kind == "dispatch" and e.data()["ask"]["name"] == "decide"]
    summaries = [e for e in journal if e.kind == "dispatch" and e.data()["ask"].get("summary")]
    assert everything.count("model") == len(decides) == 5
    assert sum(c.startswith("summarize") for c in everything) == len(summaries) >= 3
    assert len([c for c in everything if c.startswith("refund")]) == 1
    pairs = recomputed(other, run, 1, 2)
    assert len(pairs) == 5 and all(a == b for a, b in pairs)
    other.close()


def test_a_replay_whose_projection_differs_diverges_by_name(tmp_path: Path):
    """The attack the argument hash closes: replaying the parked run with a wider tail
    would show the model something else; the replay stops with ReplayDiverged at the
    first model call, and nothing is appended."""
    from fleet_ledger.agents.runtime import ReplayDiverged

    rt = Runtime(tmp_path / "A")
    run = rt.start(support_agent.support, "order-9", {"order": 7})
    assert advance(rt, run).status == "waiting"
    before = len(rt.journal.entries(run))
    _name, wf, _s, _m = rt.journal.run_row(run)  # type: ignore[misc]

    async def wider(ctx: Context, inp: dict[str, Any]) -> Any:
        return await support_agent.support(ctx, {**inp, "tail": 3})

    other = Runtime(tmp_path / "A", workflows={wf: wider})
    other.send(run, "approve", {"ok": True}, "a")
    with pytest.raises(ReplayDiverged, match="decide"):
        advance(other, run)
    assert len(other.journal.entries(run)) == before


@pytest.mark.timeout(240)
def test_the_support_agent_parks_on_approval_and_finishes_on_another_host(
        fleet, tmp_path: Path):  # type: ignore[no-untyped-def]
    """Host A starts the agent, which parks at the refund approval; the signal is sent
    while nothing runs; B (an empty folder) adopts the run, replays every projection and
    model call from the journal and finishes with one refund; the ledger holds A then B."""
    import os

    url, led, base = fleet
    env = {**os.environ, "SUPPORT_CALLS": str(tmp_path / "calls.txt")}
    (parked,) = [json.loads(line) for line in cli(
        "runtime", "start", "support_agent:support", "order-7", "--input", '{"order": 7}',
        "--path", EXAMPLES, "--data", str(base / "A"), "--name", "A", "--nats", url,
        "--json", env=env).stdout.splitlines() if line.strip()]
    assert parked["status"] == "parked" and parked["wait"]["signal"] == "approve"
    live = calls(tmp_path / "calls.txt")
    cli("signal", parked["run"], "approve", "--data", '{"ok": true, "by": "ana"}', "--nats",
        url)
    wait_folded(url, led)
    out = cli("runtime", "worker", "--once", "--path", EXAMPLES, "--data", str(base / "B"),
              "--name", "B", "--vkey", str(led / "ledger.vkey"), "--nats", url, "--json",
              env=env).stdout
    (done,) = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert done["status"] == "done" and done["host"] == "B", done
    assert done["result"] == {"answer": "refunded 40 for order 7"}
    everything = calls(tmp_path / "calls.txt")
    assert everything[:len(live)] == live
    assert everything.count("model") == 5
    assert len([c for c in everything if c.startswith("refund")]) == 1
    wait_folded(url, led)
    shown = api(url, "run", {"run": parked["run"]})
    assert [h["host"] for h in shown["holders"]] == ["A", "B"]
    assert workflow_name(support_agent.support) == "support_agent:support"
