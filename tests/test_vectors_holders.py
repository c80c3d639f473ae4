"""docs/spec/vectors/holders.json: records sealed by several hosts verify as stated, through
both decoders, and the file is what the code builds."""

from __future__ import annotations

import copy
import json

import holder_vectors as hv
import pytest
from nacl.signing import SigningKey

from fleet_ledger.fleet.record.seal import encode_key
from fleet_ledger.fleet.record.verify import verify_record
from fleet_ledger.fleet.record.wire import decode_record

FILE = json.loads(hv.PATH.read_text())
CASES = FILE["cases"]


def test_checked_in_vectors_equal_what_the_code_builds():
    """Regenerating the vector file from the code changes nothing."""
    assert hv.PATH.read_text() == hv.render()


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_each_record_verifies_as_stated_by_both_decoders(case):
    """The wire fast path and the object path reach the stated verdict on every record."""
    assert hv.outcome(case["record"], fast=True) == case["expect"]
    assert hv.outcome(case["record"], fast=False) == case["expect"]
    if "valid" in case["expect"]:  # a valid record is accepted by the wire path itself
        report = verify_record(decode_record(json.dumps(case["record"]).encode()))
        assert report.decoder == "wire"


def test_keys_come_from_the_stated_seeds():
    """Each listed host key is the Ed25519 key of its seed in the file."""
    for case in CASES:
        for name, key in case["record"]["hosts"].items():
            seed = bytes.fromhex(FILE["host_seeds_hex"][name])
            assert key == encode_key(bytes(SigningKey(seed).verify_key))


def test_naming_another_sealer_breaks_the_seal():
    """Naming another host (A or C) as the sealer of B's resume fails its seal: no host can
    claim another's segment, nor disown its own."""
    for claimed in ("A", "C"):
        record = copy.deepcopy(CASES[0]["record"])
        record["segments"][2]["host"] = claimed
        for fast in (True, False):
            assert hv.outcome(record, fast) == {"refused": "BadSeal", "segment": 3}


def test_mixed_forms_are_refused():
    """A multi-host record must name a listed host on every segment and carry no single
    host_key; a single-host record names no host per segment."""
    record = copy.deepcopy(CASES[0]["record"])
    record["segments"][0]["host"] = "D"
    assert hv.outcome(record) == {"refused": "MalformedSegment", "segment": 1}
    record = copy.deepcopy(CASES[0]["record"])
    record["host_key"] = record["hosts"]["A"]
    assert hv.outcome(record)["refused"] == "MalformedSegment"
    record = copy.deepcopy(CASES[0]["record"])
    record["host_key"] = record["hosts"].pop("A")
    del record["hosts"]
    assert hv.outcome(record)["refused"] == "MalformedSegment"
