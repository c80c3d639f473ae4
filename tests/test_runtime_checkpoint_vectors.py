"""docs/spec/vectors/runtime-checkpoint.json both ways: the code reproduces the file, and the
file's bytes alone give its key and MAC by the spec's formulas (a changed state breaks it)."""

from __future__ import annotations

import json
import struct

from blake3 import blake3
from gen_vectors_runtime_checkpoint import PATH, build

from fleet_ledger.agents.runtime.checkpoint import unpack


def _text(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">I", len(raw)) + raw


def test_the_code_reproduces_the_checkpoint_vectors():
    """Generating the vectors from their inputs gives the committed file."""
    assert json.loads(PATH.read_text()) == build()


def test_the_file_alone_gives_its_key_and_mac_and_a_changed_state_does_not():
    """The key and MAC recomputed from the spec's formulas over the file's bytes match; the
    state parses to entries ending at the head; one changed byte of the state changes the
    MAC."""
    v = json.loads(PATH.read_text())
    key = blake3(bytes.fromhex(v["seed_hex"]),
                 derive_key_context="fleet.runtime.checkpoint/1 mac key").digest()
    assert key.hex() == v["key_hex"]
    state, head = v["state"].encode(), bytes.fromhex(v["head_hex"])

    def mac(body: bytes) -> str:
        return blake3(b"fleet.runtime.checkpoint/1" + _text(v["run"]) + struct.pack(">Q", v["seq"])
                      + head + body, key=key).hexdigest()

    assert mac(state) == v["mac_hex"]
    es = unpack(state)
    assert len(es) == v["seq"] and es[-1].hash == head
    assert mac(state.replace(b"classify", b"classifz")) != v["mac_hex"]
