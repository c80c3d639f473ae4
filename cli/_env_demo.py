"""The demo's look at precondition 2: a resume offered in another environment, refused on
the host before anything is sealed."""

from __future__ import annotations

from pathlib import Path

from fleet_ledger.agents.environment import environment_manifest
from fleet_ledger.agents.host import Host
from fleet_ledger.agents.simulate import host_environments
from fleet_ledger.cli._app import CheckFailed, UserError
from fleet_ledger.fleet.address import digest
from fleet_ledger.fleet.env.manifest_errors import EnvironmentMismatch
from fleet_ledger.fleet.record.phases import PARKED
from fleet_ledger.fleet.record.segment import make_snapshot


def refused_resume(folder: Path) -> dict[str, str]:
    """Park a run in the first sample environment, offer the host another to resume in; the
    refusal's rule and both addresses (a host that resumed would be a failed check)."""
    host = Host("demo-env", folder)
    try:
        environments = host_environments(host)
        if len(environments) < 2:
            raise UserError(f"the demo needs two sample environments, {len(environments)} "
                            "found (FLEET_DEVCONTAINERS names their folder)")
        first, other = environments[:2]
        run = host.open_run(digest(b"fleet-demo/unit/environment"), digest(b"fleet-demo/grants"))
        if run.state.phase != PARKED:
            run.execute(uj=1000, provenance="estimated", meter="estimate:demo",
                        journal_root=digest(b"fleet-demo/journal"))
            run.suspend(make_snapshot(transcript=digest(b"fleet-demo/transcript")),
                        environment_manifest(first).digest)
        held = run.state.index
        try:
            run.resume(run.state.parked, environment=other, idle_uj=1000,
                       provenance="estimated", meter="estimate:demo")
        except EnvironmentMismatch as exc:
            if run.state.index != held:
                raise CheckFailed("the refused resume moved the run") from None
            return {"rule": exc.rule, "parked_in": _name(first), "recorded": exc.recorded,
                    "offered_in": _name(other), "offered": exc.offered}
        raise CheckFailed("the host resumed a run in another environment")
    finally:
        host.close()


def _name(manifest_file: Path) -> str:
    return manifest_file.name.removesuffix(".manifest.json")
