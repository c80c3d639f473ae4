"""Context projection: what a model call sees, rebuilt from the journal by a pure function.

The journal grows without bound; a model's context does not. A :class:`Projection` is a
named pure function from the run's *history* (every step result and delivered signal
journaled before the call, in journal order) to the model's input. ``ctx.model(name, fn,
projection)`` journals the hash of the projection's name and output as the call's
argument hash, so a replay that would show the model something else diverges by name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

History = list[dict[str, Any]]


@dataclass(frozen=True)
class Projection:
    """A named pure function of the history. The name is part of the argument hash: two
    projections that happen to agree on one history are still different calls."""

    name: str
    fn: Callable[[History], Any]

    def __call__(self, history: History) -> Any:
        return self.fn(history)


def tail(n: int) -> Projection:
    """The last ``n`` items of the history, verbatim."""
    return Projection(f"tail/{n}", lambda history: history[-n:] if n else [])


def head_tail(head: int, tail_n: int) -> Projection:
    """The first ``head`` items (the task as stated), a count of the items left out, and
    the last ``tail_n`` items."""
    def project(history: History) -> Any:
        if len(history) <= head + tail_n:
            return {"head": history, "omitted": 0, "tail": []}
        return {"head": history[:head], "omitted": len(history) - head - tail_n,
                "tail": history[len(history) - tail_n:]}
    return Projection(f"head-tail/{head}/{tail_n}", project)


@dataclass(frozen=True)
class Projected:
    """A projection already computed (``ctx.projection``): its name and its view, whose
    hash ``ctx.model`` journals as the call's argument hash."""

    name: str
    view: Any


def summarized_view(history: History, head: int, tail_n: int, summary: Any) -> Any:
    """``ctx.projection``'s view, a pure function of the history and the journaled summary
    of its middle: the first ``head`` items verbatim, the summary of the items between and
    how many it covers, the last ``tail_n`` items verbatim."""
    cut = max(head, len(history) - tail_n)
    return {"head": history[:head], "summary": summary, "summarized": cut - head,
            "tail": history[cut:]}


__all__ = ["History", "Projected", "Projection", "head_tail", "summarized_view", "tail"]
