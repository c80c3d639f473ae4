"""Proof bundles carry witness cosignatures; verify-proof checks them and counts a quorum."""

from __future__ import annotations

import asyncio
import json

import nats
from anchor_helpers import anchored, fleet, publish_run, running_ledger, wait_for
from tsa_helpers import OpenSslTsa, make_ca

from fleet_ledger.anchors.base import AnchorConfig
from fleet_ledger.anchors.runner import COSIGNED_SUBJECT
from fleet_ledger.anchors.witness_server import RunningWitness, Witness
from fleet_ledger.fleet.log.cosignature import cosignatures, generate_witness_signer
from fleet_ledger.fleet.log.note import generate_signer

ORIGIN = "fleet-ledger.local/anchored"


def test_prove_carries_cosignatures_and_require_witnesses_counts_them(nats_server, tmp_path):
    """`fleet prove` after two witnesses cosigned and a TSA stamped gives a bundle that
    `fleet verify-proof --require-witnesses 2 --tsa-ca` accepts with both witness keys and
    refuses with one (or with another CA); `fleet status`
    shows each witness's anchored size and lag; the cosigned checkpoint is published."""
    data = tmp_path / "ledger"
    data.mkdir()
    # The ledger's key must exist before the witnesses learn it: create it as the ledger will.
    from fleet_ledger.ledger.keys import load_or_create_signer

    log_vkey = load_or_create_signer(data, ORIGIN).verifier()
    signers = [generate_witness_signer(f"witness.test/w{i}") for i in (1, 2)]
    witnesses = [RunningWitness(Witness(s, [log_vkey], tmp_path / f"w{i}"))
                 for i, s in enumerate(signers)]
    tsa = OpenSslTsa(tmp_path / "tsa").__enter__()
    try:
        configs = [AnchorConfig("witness", f"w{i + 1}", {"url": w.url, "vkey": s.key().text()})
                   for i, (s, w) in enumerate(zip(signers, witnesses, strict=True))]
        configs.append(AnchorConfig("tsa", "tsa", {"url": tsa.url, "ca": str(tsa.ca)}))

        async def scenario():
            async with running_ledger(nats_server.url, data, configs) as ledger:
                nc = await nats.connect(nats_server.url)
                published = await nc.subscribe(COSIGNED_SUBJECT)
                run = await publish_run(nats_server.url, "unit-a")
                await wait_for(lambda: ledger.store.run_row(run), 20, "the run to fold")
                await wait_for(lambda: anchored(ledger, {"w1", "w2", "tsa"}), 20,
                               "both cosignatures and a timestamp")
                keys = [s.key() for s in signers]
                while len(cosignatures((await published.next_msg(10)).data.decode(),
                                       keys)) < 2:
                    pass  # the last cosigned checkpoint carries both witnesses' lines
                await nc.close()
                prove = await asyncio.to_thread(fleet, "prove", run, "--nats", nats_server.url)
                status = await asyncio.to_thread(fleet, "status", "--nats", nats_server.url)
                return run, prove, status

        _run, prove, status = asyncio.run(scenario())
    finally:
        for w in witnesses:
            w.close()
        tsa.__exit__(None, None, None)
    assert prove.returncode == 0, prove.stderr
    bundle = json.loads(prove.stdout)
    assert {a["anchor"] for a in bundle["anchors"]} == {"w1", "w2", "tsa"}
    assert "w1 (witness): anchored size 3   lag 0 leaves" in status.stdout, status.stdout
    bundle_file = tmp_path / "bundle.json"
    bundle_file.write_text(prove.stdout)
    vkey = log_vkey.text()
    both = [arg for s in signers for arg in ("--witness-vkey", s.key().text())]
    ok = fleet("verify-proof", str(bundle_file), "--vkey", vkey, *both,
               "--require-witnesses", "2", "--tsa-ca", str(tsa.ca), "--json")
    assert ok.returncode == 0, ok.stderr
    result = json.loads(ok.stdout)
    assert result["witnesses"] == ["witness.test/w1", "witness.test/w2"]
    assert all(a["verified"] for a in result["anchors"]), result["anchors"]
    other_ca = make_ca(tmp_path / "other-ca", "Not The TSA Root")
    wrong_ca = fleet("verify-proof", str(bundle_file), "--vkey", vkey, "--tsa-ca", str(other_ca))
    assert wrong_ca.returncode == 1 and wrong_ca.stderr.startswith("BadTimestamp"), wrong_ca.stderr
    one = fleet("verify-proof", str(bundle_file), "--vkey", vkey, "--witness-vkey",
                signers[0].key().text(), "--require-witnesses", "2")
    assert one.returncode == 2  # asking for more witnesses than keys given is a usage error
    one = fleet("verify-proof", str(bundle_file), "--vkey", vkey,
                "--witness-vkey", signers[0].key().text(),
                "--witness-vkey", generate_witness_signer("witness.test/w3").key().text(),
                "--require-witnesses", "2")
    assert one.returncode == 1 and one.stderr.startswith("MissingCosignatures"), one.stderr
    # A cosignature tampered in the bundle is a named failure, not a smaller count.
    tampered = dict(bundle)
    first = next(a for a in bundle["anchors"] if a["kind"] == "witness")
    sig = first["receipt"].rstrip("\n").rsplit(" ", 1)
    flipped = sig[1][:20] + ("A" if sig[1][20] != "A" else "B") + sig[1][21:]
    tampered["anchors"] = [{**a, "receipt": f"{sig[0]} {flipped}\n"} if a is first else a
                           for a in bundle["anchors"]]
    bundle_file.write_text(json.dumps(tampered))
    bad = fleet("verify-proof", str(bundle_file), "--vkey", vkey, *both)
    assert bad.returncode == 1 and bad.stderr.startswith("BadSignature"), bad.stderr
    assert generate_signer(ORIGIN).verifier() != log_vkey


def _later_bundle(log, fork=None):
    """A bundle (anchor keys only) on size 5 whose witness receipt covers size 9."""
    from fleet_ledger.fleet.log.cosignature import parse_witness_key

    witness = generate_witness_signer("witness.test/w1")
    later = fork or log
    body = later.note(9).split("\n\n")[0] + "\n"
    receipt = witness.cosign(body, 1700000000).line()
    bundle = {
        "checkpoint": log.note(5),
        "anchors": [{"anchor": "w1", "kind": "witness", "size": 9, "receipt": receipt}],
        "anchor_checkpoints": {"9": later.note(9)},
        "anchor_consistency": {"9": [h.hex() for h in log.consistency_proof(5, 9)]},
    }
    return bundle, parse_witness_key(witness.key().text())


def test_a_later_anchored_checkpoint_counts_only_through_its_consistency_proof():
    """A cosignature of a later checkpoint covers the bundle's when the consistency proof from
    the bundle's size holds, and is a named proof failure when the later one is a fork."""
    import pytest
    from witness_helpers import MemLog

    from fleet_ledger.fleet.log.anchor_bundle import verify_anchors
    from fleet_ledger.fleet.log.checkpoint import open_checkpoint
    from fleet_ledger.fleet.log.log_errors import RootMismatch

    signer = generate_signer(ORIGIN)
    log = MemLog(signer, 9)
    bundle, wkey = _later_bundle(log)
    cp = open_checkpoint(bundle["checkpoint"], [signer.verifier()])
    report = verify_anchors(bundle, cp, [signer.verifier()], [wkey], require_witnesses=1)
    assert report.witnesses == ("witness.test/w1",) and report.checks[0].verified
    forked, wkey = _later_bundle(log, MemLog(signer, 9, seed=b"fork", fork_at=7))
    with pytest.raises(RootMismatch):
        verify_anchors(forked, cp, [signer.verifier()], [wkey])
