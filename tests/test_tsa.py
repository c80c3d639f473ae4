"""RFC 3161 anchor against a real TSA (openssl ts -reply): receipts verify, forgeries do not."""

from __future__ import annotations

import asyncio
import base64

import pytest
from tsa_helpers import OpenSslTsa, make_ca
from witness_helpers import MemLog

from fleet_ledger.anchors.tsa import TsaAnchor, load_trust_anchors, verify_receipt
from fleet_ledger.fleet.log.anchor_bundle import verify_anchors
from fleet_ledger.fleet.log.checkpoint import open_checkpoint
from fleet_ledger.fleet.log.log_errors import BadTimestamp
from fleet_ledger.fleet.log.note import generate_signer, parse_note


@pytest.fixture
def tsa(tmp_path):
    with OpenSslTsa(tmp_path / "tsa") as server:
        yield server


@pytest.fixture
def log():
    return MemLog(generate_signer("fleet-ledger.local/tsa"), 6)


def _anchor(tsa, log, size=6):
    anchor = TsaAnchor("tsa", tsa.url, str(tsa.ca))
    return asyncio.run(anchor.anchor(log.note(size), size, log))


def test_receipt_verifies_against_the_trust_anchor(tsa, log):
    """The TSA's token verifies under its CA, with imprint SHA-256 of the checkpoint body."""
    receipt = _anchor(tsa, log)
    body = parse_note(log.note(6))[0]
    when = verify_receipt(receipt.data, body, load_trust_anchors([tsa.ca]))
    assert when[:2] == "20" and receipt.kind == "tsa" and receipt.size == 6


def test_receipt_fails_under_another_ca(tsa, log, tmp_path):
    """A receipt does not verify when the trust anchor given is some other CA."""
    receipt = _anchor(tsa, log)
    other = make_ca(tmp_path / "other", "Some Other Root")
    with pytest.raises(BadTimestamp):
        verify_receipt(receipt.data, parse_note(log.note(6))[0], load_trust_anchors([other]))


def test_receipt_fails_for_another_checkpoint(tsa, log):
    """A receipt for size 6 does not verify as a receipt for size 5 (imprint mismatch)."""
    receipt = _anchor(tsa, log)
    with pytest.raises(BadTimestamp):
        verify_receipt(receipt.data, parse_note(log.note(5))[0], load_trust_anchors([tsa.ca]))


def test_tampered_receipt_fails(tsa, log):
    """One flipped byte inside the token's signed content is a BadTimestamp."""
    receipt = _anchor(tsa, log)
    der = bytearray(base64.b64decode(receipt.data))
    der[len(der) // 3] ^= 0x01
    with pytest.raises(BadTimestamp):
        verify_receipt(base64.b64encode(bytes(der)).decode(), parse_note(log.note(6))[0],
                       load_trust_anchors([tsa.ca]))


def test_bundle_tsa_receipt_is_checked_with_a_tsa_check(tsa, log):
    """verify_anchors reports a TSA receipt verified only when given the TSA trust anchor."""
    receipt = _anchor(tsa, log)
    bundle = {"checkpoint": log.note(6), "anchors": [receipt.as_json()]}
    cp = open_checkpoint(bundle["checkpoint"], [log.signer.verifier()])
    unchecked = verify_anchors(bundle, cp, [log.signer.verifier()])
    assert not unchecked.checks[0].verified
    roots = load_trust_anchors([tsa.ca])
    checked = verify_anchors(bundle, cp, [log.signer.verifier()],
                             tsa_check=lambda r, b: verify_receipt(r, b, roots))
    assert checked.checks[0].verified
