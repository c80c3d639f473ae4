"""tlog-checkpoint bodies and the guard that refuses to sign an inconsistent checkpoint."""

from __future__ import annotations

import pytest
from merkle_helpers import consistency, node_map

from fleet_ledger.fleet.log.checkpoint import (
    Checkpoint,
    check_consistent_then_sign,
    make_checkpoint,
    open_checkpoint,
    parse_checkpoint,
)
from fleet_ledger.fleet.log.log_errors import (
    InconsistentCheckpoint,
    MalformedCheckpoint,
    ShrinkingCheckpoint,
)
from fleet_ledger.fleet.log.merkle import fold, leaf_hashes, root_plan
from fleet_ledger.fleet.log.note import generate_signer

ROOT = bytes(range(32))
HASHES = leaf_hashes(i.to_bytes(2, "big") for i in range(50))
NODES = node_map(HASHES)


def _cp(size: int, origin: str = "fleet.example/log") -> Checkpoint:
    return make_checkpoint(origin, size, fold([NODES[n] for n in root_plan(size)]))


def test_body_round_trips():
    """A checkpoint body is origin, decimal size and base64 root, each ending in a newline."""
    cp = Checkpoint("fleet.example/log", 37, ROOT, ("ext one",))
    body = cp.body()
    assert body == "fleet.example/log\n37\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\next one\n"
    assert parse_checkpoint(body) == cp


@pytest.mark.parametrize(
    "body",
    [
        "fleet.example/log\n37\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
        "\n37\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n",
        "o\n037\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n",
        "o\n-1\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n",
        "o\n+1\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n",
        "o\n1\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8\n",
        "o\n1\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHg==\n",
        "o\n1\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n\n",
        "o\n1\n",
        "o\n99999999999999999999\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n",
    ],
)
def test_malformed_bodies_are_refused(body):
    """Missing newline, empty origin, non-canonical size, bad root or empty extension: refused."""
    with pytest.raises(MalformedCheckpoint):
        parse_checkpoint(body)


def test_signed_checkpoint_opens():
    """A signed checkpoint verifies under the origin's key and parses back."""
    signer = generate_signer("fleet.example/log")
    note = check_consistent_then_sign(None, _cp(10), [], signer)
    assert open_checkpoint(note, [signer.verifier()]) == _cp(10)


def test_guard_signs_an_extension():
    """A new checkpoint with a valid consistency proof from the last one is signed."""
    signer = generate_signer("fleet.example/log")
    for old, new in ((10, 10), (10, 11), (1, 50), (32, 33)):
        note = check_consistent_then_sign(_cp(old), _cp(new), consistency(NODES, old, new), signer)
        assert open_checkpoint(note, [signer.verifier()]).size == new


def test_guard_refuses_shrinking_forking_or_foreign():
    """Smaller size, a different tree, a bad proof or another origin are refused by name."""
    signer = generate_signer("fleet.example/log")
    with pytest.raises(ShrinkingCheckpoint):
        check_consistent_then_sign(_cp(20), _cp(19), [], signer)
    forked = make_checkpoint("fleet.example/log", 30, bytes(32))
    with pytest.raises(InconsistentCheckpoint):
        check_consistent_then_sign(_cp(20), forked, consistency(NODES, 20, 30), signer)
    same_size_other_root = make_checkpoint("fleet.example/log", 20, bytes(32))
    with pytest.raises(InconsistentCheckpoint):
        check_consistent_then_sign(_cp(20), same_size_other_root, [], signer)
    with pytest.raises(InconsistentCheckpoint):
        check_consistent_then_sign(_cp(20), _cp(30), consistency(NODES, 21, 30), signer)
    with pytest.raises(InconsistentCheckpoint):
        proof = consistency(NODES, 20, 30)
        check_consistent_then_sign(_cp(20), _cp(30, "other/log"), proof, signer)
