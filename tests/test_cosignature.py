"""C2SP cosignature/v1 and add-checkpoint vectors: the checked-in file, both ways."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import gen_vectors_anchor
import pytest
from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

from fleet_ledger.fleet.log.cosignature import (
    cosignatures,
    parse_witness_key,
    parse_witness_signer,
    verify_cosignature_lines,
)
from fleet_ledger.fleet.log.log_errors import BadSignature, MalformedKey
from fleet_ledger.fleet.log.note import parse_note, parse_verifier_key
from fleet_ledger.fleet.log.witness import WitnessState, decide

VECTORS = Path(__file__).parent.parent / "docs" / "spec" / "vectors" / "cosignature.json"
DATA = json.loads(VECTORS.read_text(encoding="utf-8"))


def test_checked_in_vectors_match_the_generator():
    """docs/spec/vectors/cosignature.json is exactly what tests/gen_vectors_anchor.py writes."""
    assert VECTORS.read_text(encoding="utf-8") == gen_vectors_anchor.render()


def _independent_verify(vkey_text: str, body: str, line: str) -> int | None:
    """A from-the-spec check: key id over 0x04, u64be time, message prefix, Ed25519."""
    name, kid, blob = vkey_text.split("+", 2)
    raw = base64.b64decode(blob)
    assert raw[0] == 0x04
    assert hashlib.sha256(name.encode() + b"\n" + raw).digest()[:4].hex() == kid
    sig_name, sig_blob = line.removeprefix("\u2014 ").rstrip("\n").split(" ")
    data = base64.b64decode(sig_blob)
    if sig_name != name or data[:4].hex() != kid:
        return None
    when = int.from_bytes(data[4:12], "big")
    message = b"cosignature/v1\ntime " + str(when).encode() + b"\n" + body.encode()
    try:
        VerifyKey(raw[1:]).verify(message, data[12:])
    except BadSignatureError:
        return -1
    return when if when < 2**63 else -1


@pytest.mark.parametrize("case", DATA["cosignature_cases"], ids=lambda c: c["name"])
def test_cosignature_cases_agree_with_an_independent_check(case):
    """Each vector line gets the same verdict from fleet.log.cosignature and from a check written
    straight from the spec."""
    key = parse_witness_key(DATA["witness_vkey"])
    body = DATA["checkpoint"]
    sigs = parse_note(DATA["log_note"] + case["line"])[1]
    independent = _independent_verify(DATA["witness_vkey"], body, case["line"])
    if case["result"] == "valid":
        found = verify_cosignature_lines(body, sigs, [key])
        assert [c.timestamp for c in found] == [case["timestamp"]] == [independent]
    elif case["result"] == "ignored":
        assert verify_cosignature_lines(body, sigs, [key]) == [] and independent is None
    else:
        assert independent == -1
        with pytest.raises(BadSignature):
            verify_cosignature_lines(body, sigs, [key])


def test_signed_message_and_cosigned_note():
    """The signed message is the spec's two header lines plus the body, and the cosigned note
    carries both the log's signature and the witness's cosignature."""
    assert DATA["signed_message"] == f"cosignature/v1\ntime {DATA['time']}\n" + DATA["checkpoint"]
    found = cosignatures(DATA["cosigned_note"], [parse_witness_key(DATA["witness_vkey"])])
    assert [c.timestamp for c in found] == [DATA["time"]]
    signer = parse_witness_signer(DATA["witness_signer_key"])
    assert signer.key().text() == DATA["witness_vkey"]


def test_witness_keys_are_type_0x04_not_note_keys():
    """A witness vkey is refused as a checkpoint key and a note key is refused as a witness key."""
    with pytest.raises(MalformedKey):
        parse_verifier_key(DATA["witness_vkey"])
    with pytest.raises(MalformedKey):
        parse_witness_key(DATA["log_vkey"])


@pytest.mark.parametrize("case", DATA["add_checkpoint_cases"], ids=lambda c: c["name"])
def test_add_checkpoint_cases(case):
    """fleet.log.witness.decide gives each vector request its recorded status and response body."""
    log = parse_verifier_key(DATA["log_vkey"])
    state = {}
    if case["witness_size"] is not None:
        state[log.name] = WitnessState(case["witness_size"],
                                       base64.b64decode(case["witness_root"]), "")
    signer = parse_witness_signer(DATA["witness_signer_key"])
    outcome = decide(case["request"].encode(), {log.name: [log]}, state, signer, DATA["time"])
    assert outcome.status == case["status"]
    if "response" in case:
        assert outcome.body.decode() == case["response"]
    assert (outcome.new_state is not None) == (case["status"] == 200)
