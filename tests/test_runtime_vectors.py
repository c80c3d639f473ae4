"""docs/spec/vectors/runtime.json both ways: the code reproduces the file, and the file's
inputs behave as the spec says (a changed body breaks its hash and every later one)."""

from __future__ import annotations

import json

from gen_vectors_runtime import PATH, build

from fleet.address import format_address, parse_address
from fleet.runtime_journal import blob_address, entry_hash, genesis


def test_the_code_reproduces_the_runtime_vectors():
    """Generating the vectors from their inputs gives the committed file."""
    assert json.loads(PATH.read_text()) == build()


def test_the_vector_entries_chain_from_the_genesis_and_a_changed_body_breaks_it():
    """Recomputing the chain from the file's text alone gives its hashes; one changed byte
    in a body changes that entry's hash and every later one."""
    data = json.loads(PATH.read_text())
    prev = parse_address(data["genesis"])
    assert prev == genesis(data["run"], data["workflow"])
    for e in data["entries"]:
        prev = entry_hash(prev, e["seq"], e["kind"], e["call"], e["body"])
        assert format_address(prev) == e["hash"]
    first = data["entries"][1]
    changed = entry_hash(parse_address(data["entries"][0]["hash"]), 1, first["kind"],
                         first["call"], first["body"].replace("classify", "classifY"))
    assert format_address(changed) != first["hash"]
    for blob in data["blobs"]:
        salt = bytes.fromhex(blob["salt"])
        assert format_address(blob_address(salt, blob["value_json"].encode())) == blob["address"]
        assert format_address(blob_address(bytes(32), blob["value_json"].encode())) != \
            blob["address"]
