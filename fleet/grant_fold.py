"""Grants as one batch of the ledger's fold sees them.

:class:`BatchGrants` overlays the batch's accepted grant events on the committed
:class:`~fleet.grant_events.GrantBook` (copies of the entries it changes, like
:class:`fleet.fold.BatchRuns`), so the committed book is changed only by :meth:`install`,
once the batch is durable.
"""

from __future__ import annotations

from collections.abc import Collection

from fleet.errors import FleetError
from fleet.fold import Refused
from fleet.grant_events import (
    GrantAccepted,
    GrantBook,
    RunAt,
    apply,
    decide_event,
)

__all__ = ["BatchGrants"]


class BatchGrants(GrantBook):
    """The committed book under one batch's accepted events (:attr:`accepted`)."""

    __slots__ = ("accepted",)

    def __init__(self, book: GrantBook) -> None:
        super().__init__(book)
        self.accepted: list[GrantAccepted] = []

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
