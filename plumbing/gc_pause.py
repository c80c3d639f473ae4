"""The cyclic garbage collector held off for one bounded burst of allocation.

A ledger batch allocates some hundred thousand short-lived objects (decoded envelopes,
decisions, run-state copies, rows) and keeps a large cache of run states alive. With the
collector on, the young generation fills every 700 allocations and, every tenth time, the
middle one is collected and sometimes the whole heap: 12-17% of the fold's CPU went to
collections that found almost nothing (the figures are in ``docs/benchmarks.md``). Paused
for the batch, the objects freed by reference counting are freed as before, and the cycles
a batch leaves (bounded by its size) wait for the next collection after it.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_paused"]


@contextmanager
def gc_paused() -> Iterator[None]:
    """Run the body with the cyclic collector off, and turn it back on after (on an error
    too). A body inside another's, or run while something else holds the collector off,
    leaves it as it found it."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
