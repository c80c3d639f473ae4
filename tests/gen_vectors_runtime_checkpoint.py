"""Builds docs/spec/vectors/runtime-checkpoint.json (docs/spec/runtime.md §6) from its inputs
(``python tests/gen_vectors_runtime_checkpoint.py`` rewrites it;
tests/test_runtime_checkpoint_vectors.py checks the file both ways)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fleet_ledger.agents.runtime.checkpoint import Epoch, _mac, mac_key
from fleet_ledger.agents.runtime.journal import Entry
from fleet_ledger.fleet.address import format_address
from fleet_ledger.fleet.runtime.runtime_journal import canon, entry_hash, genesis

PATH = (Path(__file__).resolve().parent.parent / "docs" / "spec" / "vectors"
        / "runtime-checkpoint.json")

RUN = format_address(bytes(range(32)))
WORKFLOW = "examples.triage:triage"
SEED = bytes(range(100, 132))
# A signal delivered, a step, then a ``continue`` (entry 5: the epoch) and a step after it.
ROWS = [("start", "", {"input": "b3:AAAA", "workflow": WORKFLOW}),
        ("wait", "c0", {"ask": {"signal": "go", "timeout": None}, "deadline": None,
                        "site": "t.py:2"}),
        ("signal", "c0", {"id": "go-1", "name": "go", "value": "b3:DDDD"}),
        ("dispatch", "c1", {"ask": {"args": "b3:BBBB", "name": "classify"}, "site": "t.py:3"}),
        ("resolve", "c1", {"value": "b3:CCCC"}),
        ("continue", "c2", {"ask": {"args": "b3:EEEE"}, "site": "t.py:4", "value": "b3:FFFF"}),
        ("dispatch", "c3", {"ask": {"args": "b3:GGGG", "name": "close"}, "site": "t.py:5"})]


def entries() -> list[Entry]:
    out, prev = [], genesis(RUN, WORKFLOW)
    for seq, (kind, call, body) in enumerate(ROWS):
        text = canon(body).decode()
        prev = entry_hash(prev, seq, kind, call, text)
        out.append(Entry(seq, kind, call, text, prev))
    return out


def build() -> dict[str, Any]:
    es = entries()
    epoch = Epoch().moved(es, 5, 2)
    state, key = epoch.state(), mac_key(SEED)
    return {"run": RUN, "workflow": WORKFLOW, "seed_hex": SEED.hex(), "key_hex": key.hex(),
            "entries": [[e.seq, e.kind, e.call, e.body, e.hash.hex()] for e in es],
            "seq": len(es), "head_hex": es[-1].hash.hex(), "state": state.decode(),
            "mac_hex": _mac(key, RUN, len(es), es[-1].hash, state).hex()}


if __name__ == "__main__":
    PATH.write_text(json.dumps(build(), indent=1) + "\n")
