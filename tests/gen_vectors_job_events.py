"""Regenerate docs/spec/vectors/job-events.json: ``python tests/gen_vectors_job_events.py``.

Tests read the checked-in file; they also check this script would write the same bytes.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from nacl.signing import SigningKey

from fleet_ledger.fleet.fold.job_events import KINDS, OPEN, SEAL, event_id, open_event, seal_event
from fleet_ledger.fleet.fold.job_fold import BatchJobs, JobBook
from fleet_ledger.fleet.jobs.job_id import JobTerms, encode_terms, job_id

OUT = Path(__file__).parent.parent / "docs" / "spec" / "vectors" / "job-events.json"


def _seed(label: str) -> bytes:
    return hashlib.sha256(b"fleet-vectors/job-events/" + label.encode()).digest()


def _key(label: str) -> SigningKey:
    return SigningKey(_seed(label))


def terms(name: str, items: int, issuer: str = "issuer", grant: bytes | None = None
          ) -> JobTerms:
    return JobTerms(name, items, bytes(_key(issuer).verify_key), bytes(range(16)), grant)


FIRST = terms("vectors", 3)
# (name, signer label, kind, the terms opened or the job sealed)
EVENTS: list[tuple[str, str, int, JobTerms | bytes]] = [
    ("open a job of 3 items", "issuer", OPEN, FIRST),
    ("open it again", "issuer", OPEN, FIRST),
    ("open signed by another key than the terms' issuer", "stranger", OPEN,
     terms("vectors-2", 2)),
    ("open under a grant the ledger never folded", "issuer", OPEN,
     terms("granted", 2, grant=bytes(32))),
    ("seal by a stranger", "stranger", SEAL, job_id(FIRST)),
    ("seal by a trusted operator", "operator", SEAL, job_id(FIRST)),
    ("seal it again", "issuer", SEAL, job_id(FIRST)),
    ("seal a job never opened", "issuer", SEAL, bytes(32)),
    ("open a job of 2**20 + 1 items, one more than a ledger folds", "issuer", OPEN,
     terms("too-large", 2**20 + 1)),
]


def _event(signer: str, kind: int, what: JobTerms | bytes) -> bytes:
    if kind == OPEN:
        assert isinstance(what, JobTerms)
        return open_event(_key(signer), encode_terms(what))
    assert isinstance(what, bytes)
    return seal_event(_key(signer), what)


def build() -> dict[str, Any]:
    operators = {bytes(_key("operator").verify_key)}
    jobs = BatchJobs(JobBook(), lambda: 0)
    events = []
    for n, (name, signer, kind, what) in enumerate(EVENTS, start=1):
        data = _event(signer, kind, what)
        d = jobs.fold(n, 0, data, None, operators)
        events.append({
            "name": name, "stream_seq": n, "signer_seed": _seed(signer).hex(),
            "kind": KINDS[kind], "kind_code": kind,
            "body": (encode_terms(what) if isinstance(what, JobTerms) else what).hex(),
            "job": (job_id(what) if isinstance(what, JobTerms) else what).hex(),
            "message": data.hex(), "id": event_id(data),
            "decision": getattr(d, "rule", "accepted"),
        })
    good = bytes.fromhex(events[0]["message"])
    seal = bytes.fromhex(events[5]["message"])
    bad = {
        "MalformedJobEvent": {
            "truncated": good[:40].hex(),
            "unknown kind 9": (good[:11] + b"\x09" + good[12:]).hex(),
            "not the domain": (b"fleet.jev/2" + good[11:]).hex(),
            "a seal's body of 31 bytes": (seal[:-65] + seal[-64:]).hex(),
        },
        "BadJobSignature": {"signature flipped": (good[:-1] + bytes([good[-1] ^ 1])).hex()},
    }
    return {
        "comment": "Job events (docs/spec/jobs.md section 11): each event's message and id "
                   "from its inputs (Ed25519 seeds, the body: an open's terms, a seal's job "
                   "id), and the decision when the events are folded in this order at "
                   "stream sequences 1.. with one trusted operator (operator_seed) and no "
                   "grants; then bytes that do not decode, by the rule refusing them.",
        "operator_seed": _seed("operator").hex(),
        "events": events,
        "malformed": bad,
    }


def render() -> str:
    return json.dumps(build(), indent=1) + "\n"


if __name__ == "__main__":
    OUT.write_text(render())
