"""The wait proof: did any executed interval of a run wait for an outward call?

Walk the executed segments in order, holding the calls dispatched and resolved so far.
The verdict is one of:

* ``Malformed(segment)``: the first accounted segment whose account does not add up: an id
  dispatched twice (in one set or across segments), an id resolved twice, or a result for
  a call never dispatched. "Never dispatched" is only decidable while every earlier
  interval accounted, so after an unaccounted interval an unknown result is not Malformed.
* ``Blocked(segment)``: otherwise, the first accounted segment that resolved a call it
  dispatched itself (it waited inside its own receipt).
* ``Unproved``: otherwise, when some executed interval carries no account, or none does.
  A property of no intervals is not a property.
* ``NonBlocking``: every executed interval accounted and resolved only calls outstanding
  at its start.

Malformed outranks Blocked because an account that cannot be read says nothing reliable
about waiting; Blocked outranks Unproved because it is a definite fact about one interval.
The tracker is incremental, so the ledger keeps one per run instead of re-walking records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import msgspec

__all__ = ["Blocked", "Calls", "Malformed", "NonBlocking", "Unproved", "Verdict", "WaitTracker",
           "verdict_json", "waited_inside", "why"]


class Calls(Protocol):
    """A call account as any decoder holds it."""

    @property
    def dispatched(self) -> Sequence[str]: ...

    @property
    def resolved(self) -> Sequence[str]: ...


class NonBlocking(msgspec.Struct, frozen=True):
    name = "NonBlocking"


class Blocked(msgspec.Struct, frozen=True):
    segment: int
    name = "Blocked"


class Malformed(msgspec.Struct, frozen=True):
    segment: int
    name = "Malformed"


class Unproved(msgspec.Struct, frozen=True):
    name = "Unproved"


Verdict = NonBlocking | Blocked | Malformed | Unproved


def waited_inside(calls: Calls) -> list[str]:
    """The Blocked rule: the calls a segment resolved that it dispatched itself (it waited
    for them inside its own receipt), in the order it resolved them."""
    own = set(calls.dispatched)
    return [call_id for call_id in calls.resolved if call_id in own]


@dataclass(slots=True)
class WaitTracker:
    """Incremental state of the walk; feed executed segments in order, read ``verdict()``."""

    dispatched: set[str] = field(default_factory=set)
    resolved: set[str] = field(default_factory=set)
    accounted: int = 0
    unaccounted: int = 0
    first_malformed: int | None = None
    first_blocked: int | None = None

    def add(self, segment: int, calls: Calls | None) -> None:
        if calls is None:
            self.unaccounted += 1
            return
        self.accounted += 1
        malformed = False
        own: set[str] = set()
        for call_id in calls.dispatched:
            if call_id in self.dispatched or call_id in own:
                malformed = True
            own.add(call_id)
        seen: set[str] = set()
        for call_id in calls.resolved:
            if call_id in self.resolved or call_id in seen:
                malformed = True
            seen.add(call_id)
            if (call_id not in own and call_id not in self.dispatched
                    and self.unaccounted == 0):
                malformed = True
        blocked = bool(waited_inside(calls))
        if malformed and self.first_malformed is None:
            self.first_malformed = segment
        if blocked and self.first_blocked is None:
            self.first_blocked = segment
        self.dispatched |= own
        self.resolved |= seen

    def copy(self) -> WaitTracker:
        return WaitTracker(set(self.dispatched), set(self.resolved), self.accounted,
                           self.unaccounted, self.first_malformed, self.first_blocked)

    def verdict(self) -> Verdict:
        if self.first_malformed is not None:
            return Malformed(self.first_malformed)
        if self.first_blocked is not None:
            return Blocked(self.first_blocked)
        if self.unaccounted or not self.accounted:
            return Unproved()
        return NonBlocking()


def why(verdict: Verdict, accounts: Sequence[tuple[int, Calls | None]]) -> str:
    """One sentence saying why ``verdict`` holds over the executed segments ``accounts``
    (``(segment, calls or None)`` in order), naming the deciding segment and calls."""
    by_segment = dict(accounts)
    if isinstance(verdict, Malformed):
        return (f"segment {verdict.segment}'s call account does not add up (an id dispatched"
                " or resolved twice, or a result for a call never dispatched)")
    if isinstance(verdict, Blocked):
        calls = by_segment.get(verdict.segment)
        waited = ", ".join(waited_inside(calls)) if calls is not None else "?"
        return (f"segment {verdict.segment} resolved calls it dispatched itself ({waited}):"
                " it waited for its own work inside its receipt")
    if isinstance(verdict, Unproved):
        if not accounts:
            return "no executed interval yet: a property of no intervals is not a property"
        missing = [str(seg) for seg, calls in accounts if calls is None]
        return ("executed segments without a call account: " + ", ".join(missing)
                if missing else "no executed interval carries a call account")
    return ("every executed interval carries a call account and resolved only calls"
            " outstanding at its start")


def verdict_json(verdict: Verdict) -> dict[str, object]:
    """``{"verdict": name}`` plus ``"segment"`` where the verdict names one."""
    out: dict[str, object] = {"verdict": verdict.name}
    if isinstance(verdict, Blocked | Malformed):
        out["segment"] = verdict.segment
    return out
