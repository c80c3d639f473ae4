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

from fleet_ledger.fleet.record import kinds

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
    (FRESH, kinds.EXECUTED): RAN,
    (FRESH, kinds.CLOSED): CLOSED,
    (RAN, kinds.EXECUTED): RAN,
    (RAN, kinds.SUSPENDED): PARKED,
    (RAN, kinds.CLOSED): CLOSED,
    (PARKED, kinds.RESUMED): RESUMED,
    (PARKED, kinds.CLOSED): CLOSED,
    (RESUMED, kinds.EXECUTED): RAN,
    (RESUMED, kinds.CLOSED): CLOSED,
    (FRESH, kinds.CLAIMED): RESUMED,
    (FRESH, kinds.EVICTED): POOL,
    (POOL, kinds.EVICTED): POOL,
    (POOL, kinds.CLOSED): CLOSED,
}
