"""docs/spec/vectors/durable.json is reproduced by the code and its inputs behave as stated."""

from __future__ import annotations

import json

import pytest
from blake3 import blake3

from fleet_ledger.fleet.address import format_address, parse_address

import durable_vectors as dv

FILE = json.loads(dv.PATH.read_text())


def test_checked_in_vectors_equal_what_the_code_builds():
    """Regenerating the vector file from the code changes nothing."""
    assert dv.PATH.read_text() == dv.render()


@pytest.mark.parametrize("case", FILE["cases"], ids=[c["name"] for c in FILE["cases"]])
def test_each_case_replays_as_stated(case):
    """Replaying a case's steps yields its stated refusals, heads, energy and wait proof."""
    assert dv.run_steps(case["unit_id"], case["grants_id"], case["steps"]) == case["expect"]


@pytest.mark.parametrize("case", FILE["cases"], ids=[c["name"] for c in FILE["cases"]])
def test_heads_recompute_from_canonical_bytes_alone(case):
    """An implementation that knows only BLAKE3 and the hex bytes gets every stated head."""
    head = blake3(b"sandbox.runrecord/1" + parse_address(case["unit_id"])
                  + parse_address(case["grants_id"])).digest()
    assert format_address(head) == case["genesis"]
    for result in case["expect"]["results"]:
        if "refused" in result:
            continue
        head = blake3(head + bytes.fromhex(result["canonical"])).digest()
        assert format_address(head) == result["head"]
        if "attestation" in result:
            addr = blake3(bytes.fromhex(result["attestation_canonical"])).digest()
            assert format_address(addr) == result["attestation"]
    assert format_address(head) == case["expect"]["final_head"]


def test_vectors_cover_every_refusal_and_verdict():
    """The file holds each refusal the issue names and all four wait-proof verdicts."""
    refusals = {r["refused"] for c in FILE["cases"] for r in c["expect"]["results"]
                if "refused" in r}
    assert {"PhaseViolation", "SnapshotMismatch", "ManifestMismatch", "RecordClosed",
            "MalformedSnapshot", "ZeroIdleEnergy", "AttestationMismatch", "ZeroClaimEnergy",
            "ZeroOverheadEnergy"} <= refusals
    verdicts = {c["expect"]["wait_proof"]["verdict"] for c in FILE["cases"]}
    assert verdicts == {"NonBlocking", "Blocked", "Malformed", "Unproved"}


def test_a_tampered_vector_is_caught():
    """Changing one expected head in a copy of a case makes the replay disagree."""
    case = json.loads(json.dumps(FILE["cases"][0]))
    first = case["expect"]["results"][0]
    first["head"] = first["head"][:-2] + ("AA" if not first["head"].endswith("AA") else "BA")
    assert dv.run_steps(case["unit_id"], case["grants_id"], case["steps"]) != case["expect"]


def test_accounted_case_is_the_transcript_case_plus_accounts():
    """transcript-park-accounted differs from transcript-park only by its accounts: cutting
    each executed segment's account off its canonical bytes gives transcript-park's heads
    (so an implementation that dropped accounts would be caught), and with them it does not."""
    cases = {c["name"]: c for c in FILE["cases"]}
    plain, accounted = cases["transcript-park"], cases["transcript-park-accounted"]
    assert plain["genesis"] == accounted["genesis"]
    head = parse_address(accounted["genesis"])
    for mine, theirs in zip(accounted["expect"]["results"], plain["expect"]["results"],
                            strict=True):
        raw = bytes.fromhex(mine["canonical"])
        if raw[0] == 0x01:  # executed: tag, attestation, then the account
            assert len(raw) > 33 and raw[33] == 0x01
            assert mine["head"] != theirs["head"]
            raw = raw[:33]
        head = blake3(head + raw).digest()
        assert format_address(head) == theirs["head"]
    assert accounted["expect"]["wait_proof"] == {"verdict": "NonBlocking"}
    assert plain["expect"]["wait_proof"] == {"verdict": "Unproved"}


def test_pool_cases_are_a_pools_run_and_others_claim_energy():
    """The pool cases' genesis is the pool unit of host-1/py311 with no grants and their
    energy is overhead only; claim-then-execute's total is its claim plus its receipt."""
    from fleet_ledger.fleet.record.kernel import NO_GRANTS, genesis, pool_unit

    cases = {c["name"]: c for c in FILE["cases"]}
    pool = cases["pool-evictions"]
    assert parse_address(pool["genesis"]) == genesis(pool_unit("host-1", "py311"), NO_GRANTS)
    e = pool["expect"]["energy"]
    assert e["total_uj"] == sum(e["overhead_uj"].values()) > 0
    assert pool["expect"]["phase"] == "closed"
    claimed = cases["claim-then-execute"]["expect"]
    e = claimed["energy"]
    assert e["total_uj"] == (sum(e["claim_uj"].values()) + sum(e["receipts_uj"].values())
                             + sum(e["idle_uj"].values()))
    assert bytes.fromhex(claimed["results"][0]["canonical"])[0] == 0x05
