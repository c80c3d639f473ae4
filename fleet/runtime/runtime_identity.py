"""What a runtime run's record says it runs: its code and its environment, by hash.

Every park of a runtime run names a manifest address, and a resume must offer the same
one (the record's precondition 2). That address commits to the workflow and its code:

    code          = BLAKE3("fleet.runtime.code/1" || the bytes of the workflow's module)
    code_version  = the workflow's declared ``code_version`` (text), else the address of
                    ``code``
    manifest      = with an environment (a devcontainer.json or a manifest file): the
                    address of the C7 manifest (fleet.env.manifest) of its declaration with
                    ``containerEnv`` stamped with FLEET_RUNTIME_WORKFLOW = workflow and
                    FLEET_RUNTIME_CODE_VERSION = code_version;
                    without one: BLAKE3("fleet.runtime.manifest/2" || text(workflow)
                    || text(code_version))

So a resume whose module bytes differ (with no declared version) or whose environment
differs offers another address and is refused by name before any step runs. Declaring a
``code_version`` is how an author says "this code continues runs parked under that
version": the change is then marked in the code with ``ctx.patched`` (docs/runtime.md).
"""

from __future__ import annotations

from typing import Any

from fleet_ledger.fleet.address import digest, format_address
from fleet_ledger.fleet.env.manifest import Manifest, manifest_of
from fleet_ledger.fleet.runtime.runtime_journal import text

__all__ = ["CODE_VERSION_ENV", "WORKFLOW_ENV", "code_digest", "code_version",
           "run_manifest", "stamped"]

WORKFLOW_ENV = "FLEET_RUNTIME_WORKFLOW"
CODE_VERSION_ENV = "FLEET_RUNTIME_CODE_VERSION"


def code_digest(module_bytes: bytes) -> bytes:
    return digest(b"fleet.runtime.code/1" + module_bytes)


def code_version(module_bytes: bytes, declared: str | None = None) -> str:
    """The version a run's manifest is stamped with: the declared one, else the code's
    address."""
    return declared if declared is not None else format_address(code_digest(module_bytes))


def stamped(environment: Manifest, workflow: str, version: str) -> Manifest:
    """``environment``'s manifest with the workflow and its code version in containerEnv
    (a real C7 manifest: its declaration passes the same allowlist)."""
    decl: dict[str, Any] = dict(environment.devcontainer)
    decl["containerEnv"] = {**decl.get("containerEnv", {}), WORKFLOW_ENV: workflow,
                            CODE_VERSION_ENV: version}
    return manifest_of(decl)


def run_manifest(workflow: str, version: str, environment: Manifest | None = None) -> bytes:
    """The manifest address a runtime run parks and resumes under."""
    if environment is not None:
        return stamped(environment, workflow, version).digest
    return digest(b"fleet.runtime.manifest/2" + text(workflow) + text(version))
