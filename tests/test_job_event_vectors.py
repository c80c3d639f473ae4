"""docs/spec/vectors/job-events.json, both ways: the code reproduces the file, and the file's
messages are the layout the spec writes (rebuilt here from its text, not from the code),
decided as stated when folded in order, and each malformed message refused by its rule."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from gen_vectors_job_events import OUT, render
from nacl.signing import SigningKey

from fleet_ledger.fleet.address import digest
from fleet_ledger.fleet.errors import FleetError
from fleet_ledger.fleet.fold.job_events import decode_job_event
from fleet_ledger.fleet.fold.job_fold import BatchJobs, JobBook

VECTORS = json.loads(Path(OUT).read_text())


def test_the_code_reproduces_the_vector_file() -> None:
    """The generator, run now, writes exactly the checked-in file."""
    assert render() == Path(OUT).read_text()


@pytest.mark.parametrize("v", VECTORS["events"], ids=lambda v: v["name"])
def test_each_event_is_the_layout_the_spec_writes(v: dict) -> None:
    """event = "fleet.jev/1" || kind:u8 || signer[32] || body || Ed25519 signature over the
    rest; OPEN's body is len:u32 || terms, SEAL's the 32-byte job id; the job id of an open
    is BLAKE3("fleet.job/1" || terms); id = "jev-" || hex(BLAKE3(event)[:16])."""
    key = SigningKey(bytes.fromhex(v["signer_seed"]))
    body = bytes.fromhex(v["body"])
    if v["kind"] == "open":
        assert digest(b"fleet.job/1" + body).hex() == v["job"]
        body = struct.pack(">I", len(body)) + body
    signed = b"fleet.jev/1" + bytes([v["kind_code"]]) + bytes(key.verify_key) + body
    assert (signed + key.sign(signed).signature).hex() == v["message"]
    assert "jev-" + digest(bytes.fromhex(v["message"]))[:16].hex() == v["id"]
    ev = decode_job_event(bytes.fromhex(v["message"]))
    assert (ev.kind_name, ev.job.hex(), ev.signer) == (v["kind"], v["job"],
                                                      bytes(key.verify_key))


def test_folding_the_events_in_order_gives_the_stated_decisions() -> None:
    """Each event's decision, folded in the file's order, is the one it states."""
    operator = bytes(SigningKey(bytes.fromhex(VECTORS["operator_seed"])).verify_key)
    jobs = BatchJobs(JobBook(), lambda: 0)
    got = [getattr(jobs.fold(v["stream_seq"], 0, bytes.fromhex(v["message"]), None,
                             {operator}), "rule", "accepted") for v in VECTORS["events"]]
    assert got == [v["decision"] for v in VECTORS["events"]]


@pytest.mark.parametrize("rule,name", [(r, n) for r, cases in VECTORS["malformed"].items()
                                       for n in cases])
def test_each_malformed_vector_is_refused_by_its_rule(rule: str, name: str) -> None:
    """Every listed mutation is refused when decoded, by the rule it is filed under."""
    with pytest.raises(FleetError) as caught:
        decode_job_event(bytes.fromhex(VECTORS["malformed"][rule][name]))
    assert caught.value.rule == rule
