"""Builds docs/spec/vectors/runtime.json from its inputs (``python tests/gen_vectors_runtime.py``
rewrites it; tests/test_runtime_vectors.py checks the file both ways)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fleet_ledger.fleet.address import format_address, parse_address
from fleet_ledger.fleet.record.segment import CallAccount
from fleet_ledger.fleet.record.wait_proof import WaitTracker, verdict_json
from fleet_ledger.fleet.runtime.runtime_journal import (
    args_hash,
    blob_address,
    canon,
    entry_hash,
    genesis,
    interval_account,
    interval_root,
)

PATH = Path(__file__).resolve().parent.parent / "docs" / "spec" / "vectors" / "runtime.json"

RUN = format_address(bytes(range(32)))
WORKFLOW = "examples.triage:triage"
SALT = bytes([7]) * 32
ENTRIES: list[tuple[str, str, dict[str, Any]]] = [
    ("start", "", {"input": "VALUE0", "workflow": WORKFLOW}),
    ("dispatch", "c0", {"ask": {"args": "ARGS", "name": "classify"},
                        "site": "triage.py:30"}),
    ("resolve", "c0", {"value": "VALUE1"}),
    ("wait", "c1", {"ask": {"signal": "approve", "timeout": 86400}, "deadline": 1.5e9,
                    "site": "triage.py:31"}),
]

# A retried step: the process running interval 0 was killed inside step c0 (dispatched,
# result never journaled: a "lost" interval); interval 1 ran c0 again, resolved it, then
# handed c1 off and parked; interval 2 took c1's result and ended. Segments 1, 2 and 5 are
# the executed ones (3 parks, 4 resumes, 6 closes).
RETRIED: list[tuple[str, str, dict[str, Any]]] = [
    ("start", "", {"input": "VALUE0", "workflow": WORKFLOW}),
    ("dispatch", "c0", {"ask": {"args": "ARGS", "name": "classify"},
                        "site": "triage.py:30"}),
    ("resolve", "c0", {"value": "VALUE1"}),
    ("dispatch", "c1", {"ask": {"args": "ARGS", "handoff": True, "name": "build"},
                        "request": "VALUE0", "site": "triage.py:31"}),
    ("resolve", "c1", {"id": "r-1", "value": "VALUE1"}),
    ("end", "c2", {"ask": {}, "site": "end", "value": "VALUE1"}),
]
RETRIED_INTERVALS = [(0, 2, 1, "lost"), (2, 4, 2, "ok"), (4, 6, 5, "ok")]

# Effect classes: an effectful step without a key (c0) dispatched by a lost interval, run
# again by the next after journaling the lost attempt, its resolve flagged "duplicate";
# then a keyed effectful step (c1) whose first attempt timed out and whose retry answered.
EFFECTS: list[tuple[str, str, dict[str, Any]]] = [
    ("start", "", {"input": "VALUE0", "workflow": WORKFLOW}),
    ("dispatch", "c0", {"ask": {"args": "ARGS", "effect": "effectful", "keyed": False,
                                "name": "pay"}, "site": "triage.py:40"}),
    ("attempt", "c0", {"attempt": 1, "outcome": "lost"}),
    ("resolve", "c0", {"duplicate": True, "unknown": 1, "value": "VALUE1"}),
    ("dispatch", "c1", {"ask": {"args": "ARGS", "effect": "effectful", "keyed": True,
                                "name": "refund"},
                        "retry": {"backoff_s": 0.1, "factor": 2.0, "max_attempts": 3,
                                  "max_backoff_s": 10.0, "on_unknown": "retry"},
                        "site": "triage.py:41", "timeout": 5}),
    ("attempt", "c1", {"attempt": 1, "error": "StepTimeout: step refund ran past its"
                       " timeout of 5s (attempt 1)", "outcome": "timeout", "retry_in": 0.1}),
    ("resolve", "c1", {"attempts": 2, "unknown": 1, "value": "VALUE1"}),
    ("end", "c2", {"ask": {}, "site": "end", "value": "VALUE1"}),
]
EFFECTS_INTERVALS = [(0, 2, 1, "lost"), (2, 8, 2, "ok")]


def _chain(entries: list[tuple[str, str, dict[str, Any]]], subst: dict[str, str]
           ) -> list[dict[str, Any]]:
    prev = genesis(RUN, WORKFLOW)
    out = []
    for seq, (kind, call, body) in enumerate(entries):
        text = canon(body).decode()
        for key, value in subst.items():
            text = text.replace(key, value)
        prev = entry_hash(prev, seq, kind, call, text)
        out.append({"seq": seq, "kind": kind, "call": call, "body": text,
                    "hash": format_address(prev)})
    return out


def retried(subst: dict[str, str], entries: list[tuple[str, str, dict[str, Any]]] = RETRIED,
            spans: list[tuple[int, int, int, str]] = RETRIED_INTERVALS) -> dict[str, Any]:
    """The retried-step case (or ``entries`` cut at ``spans``): each interval's root and
    account, and the run's verdict."""
    out = _chain(entries, subst)
    rows = [(e["kind"], e["call"], e["body"]) for e in out]
    tracker = WaitTracker()
    intervals = []
    for first, end, segment, outcome in spans:
        dispatched, resolved = interval_account(rows, first, end)
        tracker.add(segment, CallAccount(dispatched, resolved))
        head = bytes(parse_address(out[end - 1]["hash"]))
        intervals.append({"first": first, "end": end, "segment": segment, "outcome": outcome,
                          "root": format_address(interval_root(first, end, head)),
                          "dispatched": list(dispatched), "resolved": list(resolved)})
    return {"entries": out, "intervals": intervals,
            "verdict": verdict_json(tracker.verdict())}


def build() -> dict[str, Any]:
    v0 = format_address(blob_address(SALT, canon({"ticket": 42})))
    v1 = format_address(blob_address(SALT, canon("bug")))
    args = format_address(args_hash(["printer on fire"], {}))
    subst = {"VALUE0": v0, "VALUE1": v1, "ARGS": args}
    out = _chain(ENTRIES, subst)
    prev = parse_address(out[-1]["hash"])
    return {
        "run": RUN, "workflow": WORKFLOW, "genesis": format_address(genesis(RUN, WORKFLOW)),
        "blobs": [{"salt": SALT.hex(), "value_json": '{"ticket":42}', "address": v0},
                  {"salt": SALT.hex(), "value_json": '"bug"', "address": v1}],
        "args": {"args": ["printer on fire"], "kwargs": {}, "hash": args},
        "entries": out,
        "interval": {"first": 0, "end": 4, "head": out[-1]["hash"],
                     "root": format_address(interval_root(0, 4, prev))},
        "retried": retried(subst),
        "effects": retried(subst, EFFECTS, EFFECTS_INTERVALS),
    }


if __name__ == "__main__":
    PATH.write_text(json.dumps(build(), indent=2, ensure_ascii=False) + "\n")
