"""docs/spec/vectors/runtime-checkpoint.json both ways: the code reproduces the file, and the
file's bytes alone give its state, key and MAC by the spec's formulas (a changed state
breaks it)."""

from __future__ import annotations

import json
import struct

from blake3 import blake3
from gen_vectors_runtime_checkpoint import PATH, build


def _text(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">I", len(raw)) + raw


def test_the_code_reproduces_the_checkpoint_vectors():
    """Generating the vectors from their inputs gives the committed file."""
    assert json.loads(PATH.read_text()) == build()


def test_the_file_alone_gives_its_state_key_and_mac_and_a_changed_state_does_not():
    """The state recomputed from the spec's rules over the file's entries (the last
    ``continue``, the commands before it, the stored bytes and delivered ids before it),
    the key and the MAC match; one changed byte of the state changes the MAC."""
    v = json.loads(PATH.read_text())
    es = v["entries"]
    epoch = max(seq for seq, kind, *_ in es if kind == "continue")
    want = {"epoch": epoch,
            "cursor": sum(1 for e in es[:epoch] if e[1] not in ("start", "resolve",
                                                                 "signal", "timeout",
                                                                 "fired", "attempt")),
            "size": sum(len(e[3]) + 64 for e in es[:epoch]),
            "delivered": sorted(json.loads(e[3])["id"] for e in es[:epoch]
                                if e[1] == "signal")}
    assert json.loads(v["state"]) == want
    assert v["state"] == json.dumps(want, sort_keys=True, separators=(",", ":"))
    key = blake3(bytes.fromhex(v["seed_hex"]),
                 derive_key_context="fleet.runtime.checkpoint/1 mac key").digest()
    assert key.hex() == v["key_hex"]
    state, head = v["state"].encode(), bytes.fromhex(v["head_hex"])
    assert head.hex() == es[v["seq"] - 1][4]

    def mac(body: bytes) -> str:
        return blake3(b"fleet.runtime.checkpoint/2" + _text(v["run"])
                      + struct.pack(">Q", v["seq"]) + head + body, key=key).hexdigest()

    assert mac(state) == v["mac_hex"]
    assert mac(state.replace(b'"cursor":2', b'"cursor":3')) != v["mac_hex"]
