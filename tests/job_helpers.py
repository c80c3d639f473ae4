"""Jobs and items for the jobs tests and vectors: deterministic terms, item runs bound to
their job, and forgeries a dishonest sealer could make from leaves."""

from __future__ import annotations

import hashlib

from fleet_ledger.fleet.jobs.job_id import JobTerms, item_run, job_id
from fleet_ledger.fleet.jobs.sum_tree import Item


def seed(label: str) -> bytes:
    return hashlib.sha256(b"fleet-vectors/jobs/" + label.encode()).digest()


def terms(items: int, name: str = "eval-set", grant: bytes | None = None) -> JobTerms:
    return JobTerms(name, items, seed("issuer"), seed("nonce")[:16], grant)


def item(t: JobTerms, index: int, grants: bytes | None = None) -> Item:
    """Item ``index`` of the job of ``t``: a run bound to it, a made-up head, energy that
    differs per item and source, and a verdict cycling through the four."""
    g = grants if grants is not None else (t.grant or seed("grants"))
    code = 1 + index % 4
    energy = tuple((index + 1) * 1000 + k * 10 + (k % 2) for k in range(8))
    return Item(index, item_run(job_id(t), index, g), g, seed(f"head {index}"), energy, code,
                index + 1 if code in (2, 3) else 0)


def items(t: JobTerms, missing: tuple[int, ...] = ()) -> list[Item | None]:
    return [None if i in missing else item(t, i) for i in range(t.items)]
