"""A triage agent written against the durable runtime (docs/runtime.md).

It classifies a ticket with a tool call, waits (for hours, with no process running) for a
human's approval signal, sleeps before acting, then files the fix. Run it with:

    fleet runtime start triage:triage ticket-42 --input '{"ticket": 42, "text": "..."}' \
        --path examples --data hosts/A --nats $NATS
    fleet signal ticket-42 approve --data '{"by": "ana"}' --nats $NATS
    fleet runtime worker --once --path examples --data hosts/B --vkey ledger.vkey ...

Side effects go through ``ctx.step`` and receive an idempotency key that stays the same if
the step is retried after a crash; the "tracker" here is a JSON-lines file named by
``$TRIAGE_TRACKER`` that, like a real ticket tracker, ignores a repeated key.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from fleet_ledger.agents.runtime import Context


def classify(text: str) -> str:
    """The tool: a keyword classifier standing in for a model call."""
    lowered = text.lower()
    return "outage" if "down" in lowered or "fire" in lowered else "question"


def file_fix(ticket: int, label: str, idempotency_key: str) -> dict[str, Any]:
    """An outward effect: one tracker entry per idempotency key."""
    path = Path(os.environ.get("TRIAGE_TRACKER", "tracker.jsonl"))
    seen = path.read_text().splitlines() if path.exists() else []
    if not any(json.loads(line)["key"] == idempotency_key for line in seen):
        with path.open("a") as f:
            f.write(json.dumps({"key": idempotency_key, "ticket": ticket, "label": label})
                    + "\n")
    return {"ticket": ticket, "filed": label}


async def triage(ctx: Context, inp: dict[str, Any]) -> dict[str, Any]:
    label = await ctx.step("classify", classify, inp["text"])
    approval = await ctx.signal("approve", timeout=inp.get("approve_within", 3 * 86400))
    await ctx.sleep(inp.get("cool_down", 3600))
    filed = await ctx.step("file_fix", file_fix, inp["ticket"], label)
    return {"label": label, "approved_by": approval.get("by"), **filed}
