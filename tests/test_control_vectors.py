"""docs/spec/vectors/control.json, both ways: the code reproduces the file, and the file's
inputs behave as it states (bytes rebuilt from the spec's text, not from the code)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from gen_vectors_control import OUT, render
from nacl.signing import SigningKey, VerifyKey

from fleet_ledger.fleet.address import digest
from fleet_ledger.fleet.fold.control import (
    ControlAccepted,
    ControlState,
    apply,
    decide_control,
    decode_event,
)
from fleet_ledger.fleet.fold.control_errors import MalformedControl

VECTORS = json.loads(Path(OUT).read_text())


def test_the_code_reproduces_the_vector_file() -> None:
    """The generator, run now, writes exactly the checked-in file."""
    assert render() == Path(OUT).read_text()


@pytest.mark.parametrize("v", VECTORS["events"], ids=lambda v: v["name"])
def test_each_event_is_the_layout_the_spec_writes(v: dict) -> None:
    """signed = "fleet.ctl/1" || kind:u8 || operator[32] || seq:u64 || host_len:u8 || host ||
    key[32]; message = signed || Ed25519(signed); id = "ctl-" || hex(BLAKE3(message)[:16])."""
    op = SigningKey(bytes.fromhex(v["operator_seed"]))
    host = v["host"].encode()
    signed = (b"fleet.ctl/1" + struct.pack(">B32sQB", v["kind_code"], bytes(op.verify_key),
                                           v["seq"], len(host)) + host + bytes.fromhex(v["key"]))
    assert signed.hex() == v["signed"]
    assert (signed + op.sign(signed).signature).hex() == v["message"]
    assert "ctl-" + digest(bytes.fromhex(v["message"]))[:16].hex() == v["id"]
    ev = decode_event(bytes.fromhex(v["message"]))
    assert (ev.kind_name, ev.seq, ev.host, ev.key.hex()) == (v["kind"], v["seq"], v["host"],
                                                            v["key"])


def test_folding_the_events_in_order_gives_the_stated_decisions_and_hosts() -> None:
    """Each event's decision, and the host table and operators left, are as the file says."""
    state = ControlState({bytes.fromhex(k): 0 for k in VECTORS["initial_operators"]}, {})
    for v in VECTORS["events"]:
        d = decide_control(state, v["stream_seq"], bytes.fromhex(v["message"]))
        if isinstance(d, ControlAccepted):
            apply(state, d)
        assert ("accepted" if isinstance(d, ControlAccepted) else d.rule) == v["decision"]
    hosts = {n: {"public_key": bytes(e.verify_key).hex(), "enrolled_after": e.enrolled_after,
                 "revoked_after": e.revoked_after} for n, e in state.hosts.items()}
    assert hosts == VECTORS["final_hosts"]
    assert {k.hex(): s for k, s in state.operators.items()} == VECTORS["final_operators"]


@pytest.mark.parametrize("name", list(VECTORS["malformed"]))
def test_each_malformed_vector_is_refused(name: str) -> None:
    """Every listed mutation is MalformedControl, except a flipped signature, which decodes
    and is BadControlSignature when decided."""
    data = bytes.fromhex(VECTORS["malformed"][name])
    if name.startswith("signature flipped"):
        decode_event(data)
        state = ControlState({bytes.fromhex(VECTORS["initial_operators"][0]): 0}, {})
        assert decide_control(state, 1, data).rule == "BadControlSignature"  # type: ignore[union-attr]
        with pytest.raises(Exception):  # noqa: B017 - nacl's own error, any is a refusal
            VerifyKey(data[12:44]).verify(data[:-64], data[-64:])
        return
    with pytest.raises(MalformedControl):
        decode_event(data)
