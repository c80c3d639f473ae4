"""The rule a run's segments meet under the run's grant: inside its window, on a host and
under a manifest it allows, within its budget (``docs/spec/grants.md``).
"""

from __future__ import annotations

from fleet_ledger.fleet.address import format_address
from fleet_ledger.fleet.grants.grant import Terms, is_void
from fleet_ledger.fleet.grants.grant_book import GrantView
from fleet_ledger.fleet.grants.grant_errors import (
    GrantExpired,
    GrantNotYetValid,
    GrantRevoked,
    HostNotGranted,
    ManifestNotGranted,
    OverBudget,
    UnknownGrant,
)
from fleet_ledger.fleet.record import kernel

__all__ = ["check_segment", "check_step", "check_window"]


def check_window(terms: Terms, at_ms: int, index: int | None) -> None:
    if is_void(terms):
        raise GrantRevoked("the run's grant (or one above it) was revoked", segment=index)
    if at_ms < terms.not_before_ms:
        raise GrantNotYetValid(f"ledger time {at_ms} is before the grant's not-before "
                               f"{terms.not_before_ms}", segment=index)
    if at_ms >= terms.expires_ms:
        raise GrantExpired(f"ledger time {at_ms} is at or after the grant's expiry "
                           f"{terms.expires_ms}", segment=index)


def check_segment(terms: Terms, host: str, manifest: bytes | None, energy_after: int,
                  at_ms: int, index: int) -> None:
    """The rule a segment of a run meets under the run's effective grant ``terms``, in this
    order: not revoked, inside the window at ledger time ``at_ms``, sealed by a host the
    grant allows, under a manifest it allows (``manifest``: the one the segment parks,
    resumes or claims under), and the run's energy after it within the budget."""
    check_window(terms, at_ms, index)
    if terms.hosts is not None and host not in terms.hosts:
        raise HostNotGranted(f"host {host!r} may not hold a run under this grant",
                             segment=index)
    if manifest is not None and terms.manifests is not None and manifest not in terms.manifests:
        raise ManifestNotGranted(f"manifest {format_address(manifest)} is not allowed by "
                                 "the grant", segment=index)
    if energy_after > terms.budget_uj:
        raise OverBudget(f"the run would reach {energy_after} µJ; the grant allows "
                         f"{terms.budget_uj}", segment=index)


def check_step(view: GrantView, grants_id: bytes, host: str, held_park: bytes | None,
               kind: str, step: kernel.Step, energy_before: int, at_ms: int, index: int,
               require: bool) -> None:
    """The grant rule for one kernel ``step`` of a run under ``grants_id`` (``held_park``:
    the run's park before it; ``energy_before``: its energy so far): a run under no grant
    (:data:`fleet.record.kernel.NO_GRANTS`, a pool's own run) and a close pass (a close spends
    nothing and runs nothing, and ending a run is what revoking its grant asks for); a
    grant not in the book is ``UnknownGrant`` where grants are required (``require``) and
    passes otherwise; else :func:`check_segment` under its effective terms."""
    if kind == kernel.CLOSED or grants_id == kernel.NO_GRANTS:
        return
    terms = view.effective(grants_id)
    if terms is None:
        if require:
            raise UnknownGrant("the run's grant was not presented before its segments",
                               segment=index)
        return
    check_segment(terms, host, kernel.step_manifest(held_park, kind, step),
                  energy_before + kernel.step_uj(step), at_ms, index)


