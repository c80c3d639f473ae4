"""Resumption precondition 2 on the host: "same toolchain" checked by hash, not by trust.

A run parks with the address of the manifest of the environment it ran in. Before a host
seals a resume it turns the environment it will resume in - the devcontainer.json it runs,
an already built manifest file, or a :class:`~fleet.manifest.Manifest` - into that
environment's manifest address, and refuses with
:class:`~fleet.manifest_errors.EnvironmentMismatch` (nothing sealed, nothing queued, the
run's state unchanged) unless it equals the address recorded at the park. A declaration the
allowlist refuses, or a manifest file that does not verify, is refused by its own name.

    run.resume(snapshot, environment=Path(".devcontainer/devcontainer.json"),
               idle_uj=..., provenance="estimated", meter="...")
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from fleet.address import format_address
from fleet.manifest import Manifest, read_environment
from fleet.manifest_errors import EnvironmentMismatch
from fleet.note import Verifier
from fleet.phases import PARKED
from fleet.record import RunState

Environment = Manifest | str | os.PathLike[str]


def environment_manifest(environment: Environment,
                         trusted: Iterable[Verifier] | None = None) -> Manifest:
    """The manifest of ``environment``: a Manifest as is, or a devcontainer.json or manifest
    file read from its path (a manifest file verified, against ``trusted`` when given)."""
    if isinstance(environment, Manifest):
        return environment
    return read_environment(Path(environment).read_bytes(), trusted)


def check_environment(state: RunState, environment: Environment,
                      trusted: Iterable[Verifier] | None = None) -> bytes:
    """The manifest address to resume ``state``'s run with in ``environment``, or
    :class:`EnvironmentMismatch` when the run is parked under another one. (A run that is
    not parked is left to the record's own rules, which refuse the resume by phase.)"""
    offered = environment_manifest(environment, trusted)
    recorded = state.parked_manifest
    if state.phase == PARKED and recorded is not None and offered.digest != recorded:
        given = ("the manifest given" if isinstance(environment, Manifest)
                 else os.fspath(environment))
        raise EnvironmentMismatch(
            f"the run parked in the environment {format_address(recorded)}; "
            f"{given} is {offered.address}",
            recorded=format_address(recorded), offered=offered.address,
            segment=state.index + 1)
    return offered.digest


def resume_manifest(state: RunState, manifest: bytes | None,
                    environment: Environment | None) -> bytes:
    """The manifest address a resume records: ``manifest`` as given (an old caller's raw
    32 bytes, checked by the record's rules alone), or ``environment``'s, checked here."""
    if (manifest is None) == (environment is None):
        raise TypeError("resume takes the manifest address or the environment, exactly one")
    if environment is not None:
        return check_environment(state, environment)
    assert manifest is not None
    return manifest


__all__ = ["Environment", "check_environment", "environment_manifest", "resume_manifest"]
