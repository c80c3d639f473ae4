"""The committed runs a ledger holds in memory, least recently used forgotten first.

Only committed state is held: a batch decides against it through
:class:`fleet.fold.reference.BatchRuns` (copies) and the shell installs the changed runs once
the batch is durable. The cache is trimmed between batches only, never inside one, where a
run's new state is held nowhere else. Loading is a function handed in (the store's read).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping

from fleet_ledger.fleet.fold.reference import RunSlot

__all__ = ["RunCache"]


class RunCache:
    """Up to ``limit`` runs (after :meth:`trim`), loaded on a miss by ``load_one`` and, for
    a batch's runs at once, ``load_many``."""

    __slots__ = ("_load_many", "_load_one", "_runs", "limit")

    def __init__(self, limit: int, load_one: Callable[[bytes], RunSlot | None],
                 load_many: Callable[[Collection[bytes]], Mapping[bytes, RunSlot]]) -> None:
        self._runs: OrderedDict[bytes, RunSlot] = OrderedDict()
        self.limit = limit
        self._load_one = load_one
        self._load_many = load_many

    def __len__(self) -> int:
        return len(self._runs)

    def __contains__(self, run: object) -> bool:
        return run in self._runs

    def get(self, run: bytes) -> RunSlot | None:
        """The run's committed state (loaded on a miss), ``None`` for a run never folded."""
        slot = self._runs.get(run)
        if slot is None:
            slot = self._load_one(run)
            if slot is not None:
                self.remember(run, slot)
        else:
            self._runs.move_to_end(run)
        return slot

    def remember(self, run: bytes, slot: RunSlot) -> None:
        self._runs[run] = slot
        self._runs.move_to_end(run)

    def preload(self, runs: Collection[bytes]) -> Callable[[bytes], RunSlot | None]:
        """Load the runs of ``runs`` not held in one read; returns the batch's ``committed``
        (:class:`fleet.fold.reference.BatchRuns`): :meth:`get`, except that a run the
        store lacked is new and not asked for again."""
        held = self._runs
        unseen = set(runs) - held.keys()
        for run, slot in self._load_many(unseen).items():
            self.remember(run, slot)
        absent = unseen - held.keys()
        get = self.get

        def committed(run: bytes) -> RunSlot | None:
            if run in absent and run not in held:
                return None
            return get(run)
        return committed

    def trim(self) -> None:
        """Forget the least recently used runs beyond the limit (between batches only)."""
        runs = self._runs
        while len(runs) > self.limit:
            runs.popitem(last=False)
