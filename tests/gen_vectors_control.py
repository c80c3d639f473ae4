"""Regenerate docs/spec/vectors/control.json: ``python tests/gen_vectors_control.py``.

Tests read the checked-in file; they also check this script would write the same bytes.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from nacl.signing import SigningKey

from fleet_ledger.fleet.fold.control import (
    ENROLL,
    KINDS,
    OPERATOR,
    REKEY,
    REVOKE,
    ControlAccepted,
    ControlState,
    apply,
    decide_control,
    encode_event,
    event_id,
    sign_event,
    signed_bytes,
)

OUT = Path(__file__).parent.parent / "docs" / "spec" / "vectors" / "control.json"


def _seed(label: str) -> bytes:
    return hashlib.sha256(b"fleet-vectors/control/" + label.encode()).digest()


def _key(label: str) -> SigningKey:
    return SigningKey(_seed(label))


def _pub(label: str) -> bytes:
    return bytes(_key(label).verify_key)


EVENTS: list[tuple[str, str, int, int, str, str | None]] = [
    # (name, operator seed label, kind, seq, host, subject key label)
    ("enroll h1", "op", ENROLL, 1, "h1", "h1-key"),
    ("enroll h2", "op", ENROLL, 2, "h2", "h2-key"),
    ("replay of enroll h1", "op", ENROLL, 1, "h1", "h1-key"),
    ("enroll h1 again", "op", ENROLL, 3, "h1", "h1-key"),
    ("enroll by a stranger", "stranger", ENROLL, 1, "h3", "h3-key"),
    ("rekey h1", "op", REKEY, 4, "h1", "h1-key-2"),
    ("revoke h2", "op", REVOKE, 5, "h2", None),
    ("rekey the revoked h2", "op", REKEY, 6, "h2", "h2-key-2"),
    ("rotate to op2", "op", OPERATOR, 7, "", "op2"),
    ("revoke h1 by the retired op", "op", REVOKE, 8, "h1", None),
    ("revoke h1 by op2", "op2", REVOKE, 1, "h1", None),
]


def _tamper(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 1])


def build() -> dict[str, Any]:
    state = ControlState({_pub("op"): 0}, {})
    events = []
    for n, (name, op, kind, seq, host, key) in enumerate(EVENTS, start=1):
        ev = sign_event(_key(op), kind, seq, host, None if key is None else _pub(key))
        data = encode_event(ev)
        d = decide_control(state, n, data)
        if isinstance(d, ControlAccepted):
            apply(state, d)
        events.append({
            "name": name, "stream_seq": n, "operator_seed": _seed(op).hex(),
            "kind": KINDS[kind], "kind_code": kind, "seq": seq, "host": host,
            "key": "00" * 32 if key is None else _pub(key).hex(),
            "signed": signed_bytes(ev).hex(), "message": data.hex(), "id": event_id(data),
            "decision": "accepted" if isinstance(d, ControlAccepted) else d.rule,
        })
    good = bytes.fromhex(events[0]["message"])
    bad = {
        "truncated": good[:-1].hex(),
        "a byte too many": (good + b"\0").hex(),
        "unknown kind 9": (good[:11] + b"\x09" + good[12:]).hex(),
        "a revoke with a key": (good[:11] + bytes([REVOKE]) + good[12:]).hex(),
        "signature flipped (decodes; BadControlSignature when decided)": _tamper(good).hex(),
        "not the domain": (b"fleet.ctl/2" + good[11:]).hex(),
    }
    hosts = {name: {"public_key": bytes(e.verify_key).hex(), "enrolled_after": e.enrolled_after,
                    "revoked_after": e.revoked_after}
             for name, e in sorted(state.hosts.items())}
    return {
        "comment": "Control events (docs/spec/ledger.md, 'Control events'): each event's "
                   "signed bytes, message and id from its inputs (Ed25519 seeds), and the "
                   "decision when the events are folded in this order at stream sequences "
                   "1.. starting from one trusted operator (operator_seed of 'enroll h1').",
        "initial_operators": [_pub("op").hex()],
        "events": events,
        "malformed": bad,
        "final_hosts": hosts,
        "final_operators": {k.hex(): v for k, v in sorted(state.operators.items())},
    }


def render() -> str:
    return json.dumps(build(), indent=1) + "\n"


if __name__ == "__main__":
    OUT.write_text(render())
