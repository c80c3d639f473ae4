"""Named refusals of control events (enroll, revoke, re-key, operator rotation).

Kept apart from :mod:`fleet.errors` (the record's refusals) like :mod:`fleet.env.exec_errors`;
every class subclasses :class:`~fleet.errors.FleetError`, and the class name is the rule
name the ledger stores, counts and shows, as for a segment.
"""

from __future__ import annotations

from fleet_ledger.fleet.errors import FleetError

__all__ = [
    "BadControlSignature",
    "ControlConflict",
    "ControlError",
    "MalformedControl",
    "ReplayedControl",
    "UnknownOperator",
]


class ControlError(FleetError):
    """Base of the control events' refusals."""


class MalformedControl(ControlError):
    """Bytes on a control subject that are not one canonical control event."""


class UnknownOperator(ControlError):
    """An event signed by an operator key the ledger does not trust (never configured, or
    retired by a rotation earlier in the stream)."""


class BadControlSignature(ControlError):
    """An event whose signature does not verify under the operator key it names."""


class ReplayedControl(ControlError):
    """An event whose sequence number is not above the last one folded for its operator."""


class ControlConflict(ControlError):
    """A well-signed event the host table cannot take: enrolling a host already enrolled
    (or revoked: names are never reused), revoking or re-keying one that is not enrolled."""
