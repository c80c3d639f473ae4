"""A support agent: a model loop with tool calls, a compacted context, and a human approval.

The "model" is a stand-in (a local function, no network) that reads what
``ctx.projection`` shows it (the task, a summary of the middle of the run, the last turns
verbatim) and answers with the next tool call or a final answer, as a real model would.
A refund needs a human's approval: the run parks (no process runs while it waits) and any
host's worker continues it when the signal arrives. Run it with:

    fleet runtime start support_agent:support order-7 --input '{"order": 7}' \\
        --path examples --data hosts/A --nats $NATS
    fleet signal RUN approve --data '{"ok": true, "by": "ana"}' --nats $NATS
    fleet runtime worker --once --path examples --data hosts/B --vkey ledger.vkey ...

``$SUPPORT_CALLS`` (optional) names a file where each model and summariser call appends
one line, so a test can show that a replay re-runs neither.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from fleet_ledger.agents.runtime import Context

ORDERS = {7: {"item": "kettle", "paid": 40, "days": 12}, 9: {"item": "lamp", "paid": 25,
                                                            "days": 90}}


def _trace(what: str) -> None:
    path = os.environ.get("SUPPORT_CALLS")
    if path:
        with Path(path).open("a") as f:
            f.write(what + "\n")


# -- tools -------------------------------------------------------------------------------

def task(order: int) -> dict[str, Any]:
    """The task as stated: the first history item, pinned in the projection's head."""
    return {"task": "refund request", "order": order}


def lookup_order(order: int) -> dict[str, Any]:
    return {"order": order, **ORDERS.get(order, {"item": None, "paid": 0, "days": 0})}


def order_history(order: int) -> list[str]:
    return [f"order {order} placed", f"order {order} delivered"]


def check_policy(days: int) -> dict[str, Any]:
    return {"refundable": days <= 30, "rule": "refunds within 30 days"}


def refund(order: int, amount: int, idempotency_key: str) -> dict[str, Any]:
    """The outward effect; a real payment API would dedupe by the key."""
    _trace(f"refund {order} {amount} {idempotency_key}")
    return {"refunded": amount, "order": order}


TOOLS = {"lookup_order": (lookup_order, "pure"), "order_history": (order_history, "pure"),
         "check_policy": (check_policy, "pure"), "refund": (refund, "effectful")}


# -- the stand-in models -------------------------------------------------------------------

def summarize(previous: Any, items: list[dict[str, Any]]) -> dict[str, Any]:
    """The summariser: folds new middle items into the previous summary (which steps ran,
    and the facts they established)."""
    _trace(f"summarize {len(items)}")
    out = dict(previous or {"steps": [], "facts": {}})
    out["steps"] = [*out["steps"], *(i.get("step") or i.get("signal") for i in items)]
    facts = dict(out["facts"])
    for i in items:
        if isinstance(i.get("value"), dict):
            facts.update({k: v for k, v in i["value"].items() if k != "tool"})
    out["facts"] = facts
    return out


def model(view: dict[str, Any]) -> dict[str, Any]:
    """The model: the next tool call (with whether it needs approval) or a final answer,
    decided from the projected view alone."""
    _trace("model")
    summary = view["summary"] or {"steps": [], "facts": {}}
    visible = view["head"] + view["tail"]
    seen = set(summary["steps"]) | {i.get("step") or i.get("signal") for i in visible}
    facts = dict(summary["facts"])
    for i in visible:
        if isinstance(i.get("value"), dict):
            facts.update(i["value"])
    order = view["head"][0]["value"]["order"]
    if "lookup_order" not in seen:
        return {"tool": "lookup_order", "args": [order]}
    if "order_history" not in seen:
        return {"tool": "order_history", "args": [order]}
    if "check_policy" not in seen:
        return {"tool": "check_policy", "args": [facts.get("days", 0)]}
    if not facts.get("refundable"):
        return {"final": f"order {order} is not refundable ({facts.get('rule')})"}
    if "refund" not in seen:
        return {"tool": "refund", "args": [order, facts["paid"]], "approval": True}
    return {"final": f"refunded {facts.get('refunded')} for order {order}"}


# -- the agent -------------------------------------------------------------------------------

async def support(ctx: Context, inp: dict[str, Any]) -> dict[str, Any]:
    await ctx.step("task", task, inp["order"], effect="pure")
    for _turn in range(int(inp.get("max_turns", 12))):
        view = await ctx.projection(head=1, tail=int(inp.get("tail", 2)),
                                    summarize=summarize)
        decision = await ctx.model("decide", model, view)
        if "final" in decision:
            return {"answer": decision["final"]}
        if decision.get("approval"):
            approved = await ctx.signal("approve")
            if not approved.get("ok"):
                return {"answer": f"refund declined by {approved.get('by')}"}
        fn, effect = TOOLS[decision["tool"]]
        await ctx.step(decision["tool"], fn, *decision["args"], effect=effect)
    return {"answer": "gave up"}


if __name__ == "__main__":  # pragma: no cover - a quick look at one projection
    print(json.dumps(model({"head": [{"value": {"order": 7}}], "summary": None,
                            "summarized": 0, "tail": []})))
