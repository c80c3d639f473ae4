"""docs/spec/vectors/runtime_ids.json both ways: the code reproduces the file, and the
file's digests are recomputed from the spec's text with nothing but BLAKE3."""

from __future__ import annotations

import json
import struct
from typing import Any

from blake3 import blake3
from gen_vectors_runtime_ids import PATH, build

from fleet_ledger.fleet.address import format_address
from fleet_ledger.fleet.env.manifest import manifest_of


def _text(s: str) -> bytes:
    raw = s.encode()
    return struct.pack(">I", len(raw)) + raw


def _canon(v: Any) -> bytes:
    return json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode()


def test_the_code_reproduces_the_id_vectors():
    """Generating the vectors from their inputs gives the committed file."""
    assert json.loads(PATH.read_text()) == build()


def test_signal_digests_follow_the_spec_and_tell_duplicates_from_conflicts():
    """Each digest is BLAKE3 over the spec's bytes; the reordered send equals the first,
    the other data and the other name differ from it."""
    data = json.loads(PATH.read_text())
    got = []
    for s in data["signals"]:
        raw = (b"fleet.runtime.signal/1" + _text(data["run"]) + _text(s["id"])
               + _text(s["name"]) + _canon(s["data"]))
        assert format_address(blake3(raw).digest()) == s["digest"], s["case"]
        got.append(s["digest"])
    assert got[1] == got[0] and got[2] != got[0] and got[3] != got[0]


def test_run_manifests_follow_the_spec():
    """The code digest, the default manifest and the stamped C7 manifest recomputed from
    the spec's text (the stamped declaration hashed as any C7 declaration)."""
    for m in json.loads(PATH.read_text())["manifests"]:
        code = blake3(b"fleet.runtime.code/1" + m["module"].encode()).digest()
        assert format_address(code) == m["code"]
        assert m["code_version"] == (m["declared"] or m["code"])
        if m["environment"] is None:
            raw = (b"fleet.runtime.manifest/2" + _text(m["workflow"])
                   + _text(m["code_version"]))
            assert format_address(blake3(raw).digest()) == m["manifest"], m["case"]
        else:
            env = m["stamped"]["devcontainer"]["containerEnv"]
            assert env["FLEET_RUNTIME_WORKFLOW"] == m["workflow"]
            assert env["FLEET_RUNTIME_CODE_VERSION"] == m["code_version"]
            assert manifest_of(m["stamped"]["devcontainer"]).address == m["manifest"]
