"""Named refusals of grants, their events (issue, trigger, mint, amend, checkpoint) and of
segments a run's grant does not allow.

Kept apart from :mod:`fleet.errors` like :mod:`fleet.fold.control_errors`; the class name is the
rule name the ledger stores, counts and shows. Refusals of a *segment* (the run's grant
does not allow it) are :class:`GrantRefusal`, a :class:`~fleet.errors.RecordError` that
carries the segment's index like every other segment refusal; refusals of a grant *event*
are :class:`GrantEventError`.
"""

from __future__ import annotations

from fleet_ledger.fleet.errors import FleetError, RecordError

__all__ = [
    "AmendmentOutOfOrder",
    "BadGrantSignature",
    "CheckpointMismatch",
    "ChildMismatch",
    "ChildNotMinted",
    "DuplicateGrant",
    "DuplicateTrigger",
    "GrantError",
    "GrantEventError",
    "GrantExpired",
    "GrantNotYetValid",
    "GrantRefusal",
    "GrantRevoked",
    "GrantWidens",
    "HostNotGranted",
    "IssuerIsHost",
    "IssuerIsSubject",
    "MalformedGrant",
    "ManifestNotGranted",
    "MintLimitReached",
    "MintRateExceeded",
    "MissingExpiry",
    "NonCanonicalGrant",
    "NotGrantSubject",
    "NotHolder",
    "NotIssuer",
    "NotStanding",
    "OverBudget",
    "ReplayedAmendment",
    "ReplayedChild",
    "ReplayedTrigger",
    "UnknownGrant",
    "UnknownTrigger",
]


class GrantError(FleetError):
    """Base of every grant refusal (``segment``: the segment it concerns, if any)."""

    fault = "grant"

    def __init__(self, message: str, *, segment: int | None = None) -> None:
        super().__init__(message)
        self.segment = segment


class GrantEventError(GrantError):
    """A grant, trigger, mint, amendment or checkpoint the ledger does not take."""


# -- the bytes ------------------------------------------------------------------------------


class MalformedGrant(GrantEventError):
    """Bytes that do not decode to one grant, its terms or a grant event."""


class NonCanonicalGrant(GrantEventError):
    """Bytes that decode but are not the canonical encoding of what they hold (sets out of
    order or repeated, a scope not in its normal form), refused even under a valid
    signature: two encodings of one grant would be two addresses."""


class BadGrantSignature(GrantEventError):
    """A grant or grant event whose signature does not verify under the key it names."""


# -- a grant as issued ------------------------------------------------------------------------


class IssuerIsSubject(GrantEventError):
    """A grant whose issuer is its own subject: only a distinct principal may amend, so an
    agent can never grant (or loosen) itself."""


class IssuerIsHost(GrantEventError):
    """A grant (or amendment) signed with a key enrolled for a host: hosts hold runs, they
    never issue or amend what the runs may do."""


class MissingExpiry(GrantEventError):
    """A grant without an expiry after its not-before (every grant ends)."""


class GrantWidens(GrantEventError):
    """A child or an amendment that would allow anything its parent (or the grant as it
    stands) does not: a wider scope, a larger budget, a longer window, another host or
    manifest, a looser mint policy. Refused whole, never clamped."""


class DuplicateGrant(GrantEventError):
    """A grant already folded, presented again."""


class ChildNotMinted(GrantEventError):
    """A grant with a parent presented outside a mint: a child exists only by its mint."""


class UnknownGrant(GrantEventError):
    """A grant address no folded grant has: an event naming it, or a run opened under it
    where the ledger requires every run's grant."""


# -- standing grants --------------------------------------------------------------------------


class NotStanding(GrantEventError):
    """A mint from a grant without a mint policy (or one amended away)."""


class NotHolder(GrantEventError):
    """A mint not signed by the standing grant's subject (its holder)."""


class ChildMismatch(GrantEventError):
    """A minted child that is not the standing grant's: another parent, or an issuer other
    than the holder who mints it."""


class UnknownTrigger(GrantEventError):
    """A mint naming a trigger that no event in the stream raised (under the policy's
    trigger key)."""


class DuplicateTrigger(GrantEventError):
    """A trigger raised again under a name its key already used."""


class ReplayedTrigger(GrantEventError):
    """A mint on a trigger an earlier mint already used: a trigger mints once."""


class ReplayedChild(GrantEventError):
    """A mint of a child grant already folded."""


class MintRateExceeded(GrantEventError):
    """A mint beyond ``max_per_window`` in the policy's window (ledger time)."""


class MintLimitReached(GrantEventError):
    """A mint beyond ``max_children``, over all windows."""


# -- amendments and checkpoints ---------------------------------------------------------------


class NotIssuer(GrantEventError):
    """An amendment signed by anyone but the grant's issuer (the agent, a host, a stranger)."""


class ReplayedAmendment(GrantEventError):
    """An amendment whose sequence number the grant already used."""


class AmendmentOutOfOrder(GrantEventError):
    """An amendment that skips a sequence number or names another previous amendment."""


class NotGrantSubject(GrantEventError):
    """A checkpoint not signed by the subject of the run's grant (the agent holding it)."""


class CheckpointMismatch(GrantEventError):
    """A checkpoint bound to a run or head the ledger does not hold."""


# -- segments under a grant -------------------------------------------------------------------


class GrantRefusal(RecordError):
    """A segment the run's effective grant does not allow."""

    fault = "grant"


class GrantRevoked(GrantRefusal):
    """A segment of a run whose grant (or an ancestor) was revoked: amended to nothing."""


class GrantNotYetValid(GrantRefusal):
    """A segment folded (stream time) before the grant's not-before."""


class GrantExpired(GrantRefusal):
    """A segment folded (stream time) at or after the grant's expiry."""


class HostNotGranted(GrantRefusal):
    """A segment sealed by a host the grant does not let hold the run."""


class ManifestNotGranted(GrantRefusal):
    """A park, resume or claim under an environment manifest the grant does not allow."""


class OverBudget(GrantRefusal):
    """A segment that takes the run's energy past the grant's budget (landing exactly on
    the budget is allowed)."""
