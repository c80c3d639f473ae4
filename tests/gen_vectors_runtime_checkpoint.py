"""Builds docs/spec/vectors/runtime-checkpoint.json (docs/spec/runtime.md §6) from its inputs
(``python tests/gen_vectors_runtime_checkpoint.py`` rewrites it;
tests/test_runtime_checkpoint_vectors.py checks the file both ways)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fleet_ledger.agents.runtime.checkpoint import _mac, mac_key, pack
from fleet_ledger.agents.runtime.journal import Entry
from fleet_ledger.fleet.address import format_address
from fleet_ledger.fleet.runtime.runtime_journal import canon, entry_hash, genesis

PATH = (Path(__file__).resolve().parent.parent / "docs" / "spec" / "vectors"
        / "runtime-checkpoint.json")

RUN = format_address(bytes(range(32)))
WORKFLOW = "examples.triage:triage"
SEED = bytes(range(100, 132))
ROWS = [("start", "", {"input": "b3:AAAA", "workflow": WORKFLOW}),
        ("dispatch", "c0", {"ask": {"args": "b3:BBBB", "name": "classify"}, "site": "t.py:3"}),
        ("resolve", "c0", {"value": "b3:CCCC"})]


def entries() -> list[Entry]:
    out, prev = [], genesis(RUN, WORKFLOW)
    for seq, (kind, call, body) in enumerate(ROWS):
        text = canon(body).decode()
        prev = entry_hash(prev, seq, kind, call, text)
        out.append(Entry(seq, kind, call, text, prev))
    return out


def build() -> dict[str, Any]:
    es = entries()
    state, key = pack(es), mac_key(SEED)
    return {"run": RUN, "workflow": WORKFLOW, "seed_hex": SEED.hex(), "key_hex": key.hex(),
            "seq": len(es), "head_hex": es[-1].hash.hex(), "state": state.decode(),
            "mac_hex": _mac(key, RUN, len(es), es[-1].hash, state).hex()}


if __name__ == "__main__":
    PATH.write_text(json.dumps(build(), indent=1) + "\n")
