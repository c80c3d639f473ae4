"""Named failures of exec policies and of the host's process control.

Kept apart from :mod:`fleet.errors` (the record's refusals, which the fold's tests count
one by one) like :mod:`fleet.log.log_errors`; every class still subclasses
:class:`~fleet.errors.FleetError`, and the class name is the rule name a CLI prints.
"""

from __future__ import annotations

from fleet_ledger.fleet.errors import FleetError

__all__ = [
    "ExecError",
    "ExecGuardUnavailable",
    "JournalEntryMismatch",
    "MalformedPolicy",
    "PolicyMismatch",
]


class ExecError(FleetError):
    """Base of the exec-policy failures."""


class MalformedPolicy(ExecError):
    """Exec-policy bytes or a policy file that do not decode to one canonical policy."""


class PolicyMismatch(ExecError):
    """A policy file whose stated address (or mode) is not what its rules hash to."""


class ExecGuardUnavailable(ExecError):
    """The host cannot enforce an exec policy (no fanotify permission events, no cgroup v2,
    no seccomp filter), so it refuses to start the unit rather than run it unprotected."""


class JournalEntryMismatch(ExecError):
    """An exec-journal entry whose stored canonical bytes are not those of its fields."""
