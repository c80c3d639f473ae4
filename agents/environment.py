"""Resumption precondition 2 on the host: "same toolchain" checked by hash, not by trust.

A run parks with the address of the manifest of the environment it ran in. Before a host
seals a resume it turns the environment it will resume in - the devcontainer.json it runs,
an already built manifest file, or a :class:`~fleet.env.manifest.Manifest` - into that
environment's manifest address and offers it to the record's own rule
(:func:`fleet.record.kernel.resumed_step`, which checks the snapshot first, then the manifest). The
host names that rule's ManifestMismatch :class:`~fleet.env.manifest_errors.EnvironmentMismatch`
(nothing sealed, nothing queued, the run's state unchanged). A declaration the allowlist
refuses, or a manifest file that does not verify, is refused by its own name.

    run.resume(snapshot, environment=Path(".devcontainer/devcontainer.json"),
               idle_uj=..., provenance="estimated", meter="...")
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from fleet_ledger.fleet.env.manifest import Manifest, read_environment
from fleet_ledger.fleet.log.note import Verifier

Environment = Manifest | str | os.PathLike[str]


def environment_manifest(environment: Environment,
                         trusted: Iterable[Verifier] | None = None) -> Manifest:
    """The manifest of ``environment``: a Manifest as is, or a devcontainer.json or manifest
    file read from its path (a manifest file verified, against ``trusted`` when given)."""
    if isinstance(environment, Manifest):
        return environment
    return read_environment(Path(environment).read_bytes(), trusted)


def resume_manifest(manifest: bytes | None, environment: Environment | None) -> bytes:
    """The manifest address a resume offers: ``manifest`` as given (an old caller's raw
    32 bytes), or ``environment``'s manifest address. Either is checked by the record's rule
    alone (:func:`fleet.record.kernel.resumed_step`: the snapshot first, then the manifest); the
    host
    renames that rule's ManifestMismatch EnvironmentMismatch when an environment was given."""
    if (manifest is None) == (environment is None):
        raise TypeError("resume takes the manifest address or the environment, exactly one")
    if environment is not None:
        return environment_manifest(environment).digest
    assert manifest is not None
    return manifest


__all__ = ["Environment", "environment_manifest", "resume_manifest"]
