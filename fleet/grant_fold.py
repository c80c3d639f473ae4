"""Grants as one batch of the ledger's fold sees them.

:class:`BatchGrants` overlays the batch's accepted grant events on the committed
:class:`~fleet.grant_events.GrantBook` (copies of the entries it changes, like
:class:`fleet.fold.BatchRuns`), so the committed book is changed only by :meth:`install`,
once the batch is durable. :func:`grant_gate` holds a segment the fold accepted to its
run's effective grant (:func:`fleet.grant_events.check_segment`); both fold paths end in it.
"""

from __future__ import annotations

from collections.abc import Collection

from fleet.errors import FleetError
from fleet.fold import Refused
from fleet.grant import Terms
from fleet.grant_events import (
    GrantAccepted,
    GrantBook,
    GrantEntry,
    RunAt,
    apply,
    decide_event,
    effective_terms,
)

__all__ = ["BatchGrants"]


class BatchGrants:
    """The committed book under one batch's accepted events (:attr:`accepted`)."""

    __slots__ = ("_effective", "accepted", "book", "entries", "triggers")

    def __init__(self, book: GrantBook) -> None:
        self.book = book
        self.entries: dict[bytes, GrantEntry] = {}
        self.triggers: dict[tuple[bytes, str], bytes] = {}
        self._effective: dict[bytes, Terms] = {}
        self.accepted: list[GrantAccepted] = []

    def entry(self, address: bytes) -> GrantEntry | None:
        held = self.entries.get(address)
        return held if held is not None else self.book.entry(address)

    def trigger(self, key: bytes, name: str) -> bytes | None:
        held = self.triggers.get((key, name))
        return held if held is not None else self.book.trigger(key, name)

    def effective(self, address: bytes) -> Terms | None:
        if not self.entries:
            return self.book.effective(address)
        held = self._effective.get(address)
        if held is None:
            held = effective_terms(self, address)
            if held is not None:
                self._effective[address] = held
        return held

    def put(self, entry: GrantEntry) -> None:
        self.entries[entry.address] = entry
        self._effective.clear()

    def put_trigger(self, key: bytes, name: str, child: bytes) -> None:
        self.triggers[(key, name)] = child

    def fold(self, stream_seq: int, at_ms: int, data: bytes, host_keys: Collection[bytes],
             run_at: RunAt, signatures_ok: bool | None = None) -> GrantAccepted | Refused:
        """Decide one event and, accepted, take it into the batch (``signatures_ok``: the
        verdict on its signatures where checked beside the fold)."""
        try:
            d = decide_event(self, data, stream_seq, at_ms, host_keys, run_at, signatures_ok)
        except FleetError as exc:
            return Refused(exc.rule, str(exc), None, None, None)
        apply(self, d)
        self.accepted.append(d)
        return d

    def install(self) -> None:
        """Make the batch's changes the committed book's (once the batch is durable)."""
        for entry in self.entries.values():
            self.book.put(entry)
        self.book.triggers.update(self.triggers)
