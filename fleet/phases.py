"""The phase rules of a run record, as data.

A record starts ``fresh``. The table maps (phase, segment kind) to the next phase; a pair
that is not in it is a :class:`~fleet.errors.PhaseViolation`, and any segment after
``closed`` is :class:`~fleet.errors.RecordClosed`. Alternation is strict: a run parks only
after it has executed, resumes only while parked, and executes before it parks again.
A record may be closed in any phase, parked included.

    fresh   --executed--> ran      ran     --executed--> ran
    ran     --suspended-> parked   parked  --resumed---> resumed
    resumed --executed--> ran      any     --closed----> closed

A run started from a warm pool's slot opens with a claim, which leaves it where a resume
does (it executes or closes next); a pool's own run holds evictions only:

    fresh   --claimed---> resumed
    fresh   --evicted---> pool     pool    --evicted---> pool
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "CLOSED",
    "FRESH",
    "PARKED",
    "POOL",
    "RAN",
    "RESUMED",
    "TRANSITIONS",
]


FRESH: Final = "fresh"
RAN: Final = "ran"
PARKED: Final = "parked"
RESUMED: Final = "resumed"
CLOSED: Final = "closed"
POOL: Final = "pool"

TRANSITIONS: Final[dict[tuple[str, str], str]] = {
    (FRESH, "executed"): RAN,
    (FRESH, "closed"): CLOSED,
    (RAN, "executed"): RAN,
    (RAN, "suspended"): PARKED,
    (RAN, "closed"): CLOSED,
    (PARKED, "resumed"): RESUMED,
    (PARKED, "closed"): CLOSED,
    (RESUMED, "executed"): RAN,
    (RESUMED, "closed"): CLOSED,
    (FRESH, "claimed"): RESUMED,
    (FRESH, "evicted"): POOL,
    (POOL, "evicted"): POOL,
    (POOL, "closed"): CLOSED,
}
