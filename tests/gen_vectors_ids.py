"""Regenerate docs/spec/vectors/message_ids.json: ``python tests/gen_vectors_ids.py``.

Tests read the checked-in file; they also check this script would write the same bytes.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

from nacl.signing import SigningKey

from fleet_ledger.fleet.address import digest, format_address
from fleet_ledger.fleet.fold.control import ENROLL, encode_event, event_id, sign_event
from fleet_ledger.fleet.fold.grant_events import event_id as grant_event_id
from fleet_ledger.fleet.fold.grant_events import issue_event
from fleet_ledger.fleet.grants.grant import make_terms, sign_grant
from fleet_ledger.fleet.record.builder import RecordBuilder
from fleet_ledger.fleet.record.segment import make_snapshot
from fleet_ledger.fleet.record.wire import encode_envelope, segment_id

OUT = Path(__file__).parent.parent / "docs" / "spec" / "vectors" / "message_ids.json"


def _key(label: str) -> SigningKey:
    return SigningKey(hashlib.sha256(b"fleet-vectors/ids/" + label.encode()).digest())


def _parked(host: str) -> RecordBuilder:
    """A run parked by host ``a`` and held (in state) by ``host``, ready to resume."""
    a = RecordBuilder(_key("a"), digest(b"ids/unit"), digest(b"ids/grants"))
    a.execute(uj=1000, provenance="measured", meter="rapl:package-0",
              journal_root=digest(b"ids/journal"))
    a.suspend(make_snapshot(transcript=digest(b"ids/park")), digest(b"ids/manifest"))
    b = RecordBuilder(_key(host), digest(b"ids/unit"), digest(b"ids/grants"))
    b.state = a.state
    return b


def _resume(host: str) -> dict[str, Any]:
    b = _parked(host)
    assert b.state.parked is not None
    sealed = b.resume(b.state.parked, digest(b"ids/manifest"), 700, "estimated",
                      "estimate:test")
    message = encode_envelope(host, b.run, b.state.unit_id, b.state.grants_id, sealed)
    return {"name": f"resume of one park sealed by host {host}", "kind": "segment",
            "host_seed": bytes(_key(host)).hex(), "head": format_address(sealed.head),
            "message": base64.b64encode(message).decode(), "id": segment_id(message)}


def build() -> dict[str, Any]:
    op = _key("operator")
    ctl = encode_event(sign_event(op, ENROLL, 1, "a", bytes(_key("a").verify_key)))
    issuer, agent = _key("issuer"), _key("agent")
    grant = sign_grant(issuer, bytes(agent.verify_key), make_terms(
        scopes=["/fs/work"], budget_uj=10_000, not_before_ms=0, expires_ms=3_600_000,
        hosts=["a"], manifests=[digest(b"ids/manifest")], mint=None))
    gev = issue_event(issuer, grant)
    return {
        "comment": "Nats-Msg-Id = <kind> '-' hex(BLAKE3(message)[:16]) over every byte of "
                   "the message as sent (docs/spec/ledger.md, Message ids); the two resumes "
                   "share one head and differ in id",
        "messages": [
            _resume("a"), _resume("b"),
            {"name": "enroll of host a", "kind": "control",
             "message": base64.b64encode(ctl).decode(), "id": event_id(ctl)},
            {"name": "issue of a grant", "kind": "grant",
             "message": base64.b64encode(gev).decode(), "id": grant_event_id(gev)},
        ],
    }


def render() -> str:
    return json.dumps(build(), indent=1) + "\n"


if __name__ == "__main__":
    OUT.write_text(render())
