"""One batch's decisions as the fold takes them, built one way for its three families
(a run's segments, :class:`fleet.fold.BatchRuns`; control events,
:class:`fleet.fold.control.BatchControl`; grant events,
:class:`fleet.fold.grant_fold.BatchGrants`): a decision is a value (the family's accepted
decision, :attr:`EventOverlay.ACCEPTED`, or a :class:`fleet.fold.Refused`) made against
the batch's view, and :meth:`EventOverlay.take` makes an accepted one's change to that view
(:meth:`EventOverlay.make`) and keeps it (:attr:`EventOverlay.accepted`), in stream order.
A refusal changes nothing. The committed state is changed only when the shell installs the
batch (:attr:`EventOverlay.changed` is what it commits), once it is durable.

Each family's checks raise its named refusals (``check_*``); its ``decide_*`` turns the
first one into a :class:`~fleet.fold.Refused`, as the segment fold does
(:func:`fleet.fold.reference.decide`).

This module imports nothing of the fold: the run overlay sits beside the decisions it takes
(:mod:`fleet.fold.reference`), below the package that re-exports both.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import ClassVar, Generic, TypeVar

__all__ = ["EventOverlay"]

A = TypeVar("A")
D = TypeVar("D")  # a decision: accepted (an A) or refused


class EventOverlay(Generic[A]):
    """The accepted decisions of one batch (:attr:`accepted`); subclasses name their
    accepted type (:attr:`ACCEPTED`) and say how one changes their view (:meth:`make`)."""

    __slots__ = ()

    ACCEPTED: ClassVar[type]
    accepted: list[A]

    @property
    def changed(self) -> Collection[object]:
        """What the batch changed (empty: nothing): its accepted events; a family whose
        commit stores something else (the runs' copies) says so."""
        return self.accepted

    def take(self, d: D) -> D:
        """Take a decision: an accepted one changes the view and is kept; a refusal is
        returned as it is."""
        if isinstance(d, self.ACCEPTED):
            self.make(d)  # type: ignore[arg-type]  # isinstance through the class attribute ACCEPTED does not narrow D
            self.accepted.append(d)  # type: ignore[arg-type]  # as above: d is an ACCEPTED here
        return d

    def make(self, d: A) -> None:
        raise NotImplementedError
