"""Which fold a message goes to, by its subject: a table, so no test depends on the order.

A fleet's stream holds four kinds of message (:mod:`fleet.subjects`): grant events on
``<fleet>.ctl.grant`` (:mod:`fleet.fold.grant_fold`), job events on ``<fleet>.ctl.job``
(:mod:`fleet.fold.job_fold`), the other control events on
``<fleet>.ctl.*`` (:mod:`fleet.fold.control`), and everything else as a segment
(:mod:`fleet.fold.reference`, which refuses a subject of another shape). The grant subject
sits under the control prefix; the table names it exactly, so it is never taken for a
control event whichever test is read first (nor is the job subject).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from fleet_ledger.fleet.subjects import FleetNames

__all__ = ["CONTROL", "GRANT", "JOB", "SEGMENT", "Route", "Router"]

Route = Literal["segment", "control", "grant", "job"]
SEGMENT: Route = "segment"
CONTROL: Route = "control"
GRANT: Route = "grant"
JOB: Route = "job"


class Router:
    """``router(subject)``: the fold a message on ``subject`` goes to, for one fleet."""

    __slots__ = ("_control", "_exact")

    def __init__(self, names: FleetNames) -> None:
        # Exact subjects first by construction (a dict), then the control prefix for the
        # rest of ``<fleet>.ctl.*`` (an unknown control subject is refused by the control fold).
        self._exact: dict[str, Route] = {
            names.grant_subject: GRANT,
            names.job_subject: JOB,
            names.control_subject("host"): CONTROL,
            names.control_subject("operator"): CONTROL,
        }
        self._control = names.control + "."

    def __call__(self, subject: str) -> Route:
        found = self._exact.get(subject)
        if found is not None:
            return found
        return CONTROL if subject.startswith(self._control) else SEGMENT

    def routes(self, subjects: Iterable[str]) -> list[Route]:
        """Each subject's fold, for a whole batch at once (a batch is routed once)."""
        exact, control = self._exact.get, self._control
        return [exact(s) or (CONTROL if s.startswith(control) else SEGMENT) for s in subjects]
