"""Named refusals of a host's warm pool (docs/warm-pools.md).

Kept apart from :mod:`fleet.errors` (the record's refusals) like :mod:`fleet.log.log_errors`;
every class still subclasses :class:`~fleet.errors.FleetError`, and the class name is the
rule name a CLI prints.
"""

from __future__ import annotations

from fleet_ledger.fleet.errors import FleetError

__all__ = ["PoolError", "SlotClaimed", "SlotEvicted", "UnknownSlot"]


class PoolError(FleetError):
    """Base of the warm pool's refusals."""


class UnknownSlot(PoolError):
    """A slot this pool never warmed."""


class SlotEvicted(PoolError):
    """A claim (or eviction) of a slot already evicted: its energy is the pool's overhead."""


class SlotClaimed(PoolError):
    """A claim (or eviction) of a slot another run already claimed."""
