"""Named refusals of job events (open, seal) as the stream carries them.

The refusals of jobs and items themselves (``UnknownJob``, ``JobSealed``, ``JobExists``,
``JobTagTaken``, ``JobTooLarge``, ``DuplicateItem``, ``ItemOutOfRange``,
``ItemGrantMismatch``, ``ItemEnergyOverflow``) are the core's
(:mod:`fleet.jobs.job_errors`); these are the event envelope's. Every class subclasses
:class:`~fleet.errors.FleetError` and its name is the rule the ledger stores, counts and
shows.
"""

from __future__ import annotations

from fleet_ledger.fleet.errors import FleetError

__all__ = ["BadJobSignature", "JobEventError", "MalformedJobEvent", "NotJobIssuer",
           "NotJobOwner"]


class JobEventError(FleetError):
    """Base of the job events' refusals."""


class MalformedJobEvent(JobEventError):
    """Bytes on the job subject that are not one canonical job event."""


class BadJobSignature(JobEventError):
    """An event whose signature does not verify under the key it names."""


class NotJobIssuer(JobEventError):
    """An open event not signed by the issuer its terms name."""


class NotJobOwner(JobEventError):
    """A seal signed by neither the key that opened the job nor a trusted operator."""
