"""Builds docs/spec/vectors/runtime_ids.json (``python tests/gen_vectors_runtime_ids.py``
rewrites it; tests/test_runtime_id_vectors.py checks the file both ways): the digest a
signal id is first sent with (docs/spec/runtime.md §4) and a run's manifest (§3)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fleet_ledger.fleet.address import format_address
from fleet_ledger.fleet.env.manifest import manifest_of
from fleet_ledger.fleet.runtime.runtime_identity import (
    code_digest,
    code_version,
    run_manifest,
    stamped,
)
from fleet_ledger.fleet.runtime.runtime_journal import signal_digest

PATH = Path(__file__).resolve().parent.parent / "docs" / "spec" / "vectors" / "runtime_ids.json"

RUN = format_address(bytes(range(32)))
SIGNALS: list[tuple[str, str, str, Any]] = [
    ("first send", "appr-1", "approve", {"by": "ana", "note": "ok"}),
    ("the same data, keys in another order: a duplicate", "appr-1", "approve",
     {"note": "ok", "by": "ana"}),
    ("other data under the id: a conflict", "appr-1", "approve", {"by": "mallory", "note": "ok"}),
    ("another name under the id: a conflict", "appr-1", "reject", {"by": "ana", "note": "ok"}),
    ("no data (null), a non-ASCII id", "résultat", "result:c0", None),
]


WORKFLOW = "triage:triage"
MODULE = "async def triage(ctx, inp):\n    return inp\n"
ENVIRONMENT = {"image": "ghcr.io/example/agent@sha256:" + "1" * 64,
               "containerEnv": {"LANG": "C.UTF-8"}}


def manifests() -> list[dict[str, Any]]:
    env = manifest_of(ENVIRONMENT)
    out = []
    for case, declared, environment in [
            ("the module's bytes, no environment", None, None),
            ("a declared code version, no environment", "triage-3", None),
            ("the module's bytes in an environment", None, env)]:
        version = code_version(MODULE.encode(), declared)
        row: dict[str, Any] = {
            "case": case, "workflow": WORKFLOW, "module": MODULE, "declared": declared,
            "code": format_address(code_digest(MODULE.encode())), "code_version": version,
            "environment": None if environment is None else ENVIRONMENT,
            "manifest": format_address(run_manifest(WORKFLOW, version, environment))}
        if environment is not None:
            row["stamped"] = stamped(environment, WORKFLOW, version).document
        out.append(row)
    return out


def build() -> dict[str, Any]:
    return {"run": RUN, "signals": [
        {"case": case, "id": sid, "name": name, "data": data,
         "digest": format_address(signal_digest(RUN, sid, name, data))}
        for case, sid, name, data in SIGNALS], "manifests": manifests()}


if __name__ == "__main__":
    PATH.write_text(json.dumps(build(), indent=2, ensure_ascii=False) + "\n")
