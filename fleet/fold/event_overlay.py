"""One batch's signed events (control and grant events) as the fold takes them, built one
way: a decision (a value: the family's accepted event or :class:`fleet.fold.Refused`)
against the batch's view, and for an accepted one, its change made to that view and the
event kept (:attr:`EventOverlay.accepted`), in stream order. The committed state is changed
only when the shell installs the batch, once it is durable.

Each family's checks raise its named refusals (``check_*``); its ``decide_*`` turns the
first one into a :class:`~fleet.fold.Refused`, as the segment fold does
(:func:`fleet.fold.reference.decide`).
"""

from __future__ import annotations

from typing import Generic, TypeVar

from fleet_ledger.fleet.fold import Refused

__all__ = ["EventOverlay"]

A = TypeVar("A")


class EventOverlay(Generic[A]):
    """The accepted events of one batch (:attr:`accepted`); subclasses say how an accepted
    event changes their view (:meth:`make`)."""

    __slots__ = ()

    accepted: list[A]

    @property
    def changed(self) -> bool:
        return bool(self.accepted)

    def take(self, d: A | Refused) -> A | Refused:
        """Take a decision: an accepted event changes the view and is kept."""
        if not isinstance(d, Refused):
            self.make(d)
            self.accepted.append(d)
        return d

    def make(self, d: A) -> None:
        raise NotImplementedError
