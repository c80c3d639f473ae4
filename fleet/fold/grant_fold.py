"""Grants as one batch of the ledger's fold sees them.

:class:`BatchGrants` overlays the batch's accepted grant events on the committed
:class:`~fleet.fold.grant_events.GrantBook` (copies of the entries it changes, like
:class:`fleet.fold.BatchRuns`), so the committed book is changed only by :meth:`install`,
once the batch is durable.
"""

from __future__ import annotations

from collections.abc import Collection

from fleet_ledger.fleet.fold import Refused
from fleet_ledger.fleet.fold.event_overlay import EventOverlay
from fleet_ledger.fleet.fold.grant_decide import GrantAccepted, RunAt, apply, decide_event
from fleet_ledger.fleet.grants.grant_book import GrantBook

__all__ = ["BatchGrants"]


class BatchGrants(GrantBook, EventOverlay[GrantAccepted]):
    """The committed book under one batch's accepted events (:attr:`accepted`)."""

    __slots__ = ("accepted",)

    ACCEPTED = GrantAccepted

    def __init__(self, book: GrantBook) -> None:
        super().__init__(book)
        self.accepted: list[GrantAccepted] = []

    def make(self, d: GrantAccepted) -> None:
        apply(self, d)

    def fold(self, stream_seq: int, at_ms: int, data: bytes, host_keys: Collection[bytes],
             run_at: RunAt, signatures_ok: bool | None = None) -> GrantAccepted | Refused:
        """Decide one event and, accepted, take it into the batch (``signatures_ok``: the
        verdict on its signatures where checked beside the fold)."""
        return self.take(decide_event(self, data, stream_seq, at_ms, host_keys, run_at,
                                      signatures_ok))
