"""Builds docs/spec/vectors/runtime.json from its inputs (``python tests/gen_vectors_runtime.py``
rewrites it; tests/test_runtime_vectors.py checks the file both ways)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fleet.address import format_address
from fleet.runtime_journal import args_hash, blob_address, canon, entry_hash, genesis, interval_root

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


def build() -> dict[str, Any]:
    v0 = format_address(blob_address(SALT, canon({"ticket": 42})))
    v1 = format_address(blob_address(SALT, canon("bug")))
    args = format_address(args_hash(["printer on fire"], {}))
    prev = genesis(RUN, WORKFLOW)
    out = []
    for seq, (kind, call, body) in enumerate(ENTRIES):
        text = canon(body).decode().replace("VALUE0", v0).replace("VALUE1", v1).replace(
            "ARGS", args)
        prev = entry_hash(prev, seq, kind, call, text)
        out.append({"seq": seq, "kind": kind, "call": call, "body": text,
                    "hash": format_address(prev)})
    return {
        "run": RUN, "workflow": WORKFLOW, "genesis": format_address(genesis(RUN, WORKFLOW)),
        "blobs": [{"salt": SALT.hex(), "value_json": '{"ticket":42}', "address": v0},
                  {"salt": SALT.hex(), "value_json": '"bug"', "address": v1}],
        "args": {"args": ["printer on fire"], "kwargs": {}, "hash": args},
        "entries": out,
        "interval": {"first": 0, "end": 4, "head": out[-1]["hash"],
                     "root": format_address(interval_root(0, 4, prev))},
    }


if __name__ == "__main__":
    PATH.write_text(json.dumps(build(), indent=2, ensure_ascii=False) + "\n")
