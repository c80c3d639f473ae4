"""C2SP tlog-witness: two witnesses cosign an honest log and refuse a forked one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from witness_helpers import MemLog

import fleet_ledger.plumbing.files
from fleet_ledger.anchors.witness_client import post_add_checkpoint, submit
from fleet_ledger.anchors.witness_server import RunningWitness, Witness
from fleet_ledger.fleet.log.cosignature import (
    add_signatures,
    cosignatures,
    generate_witness_signer,
    parse_signature_lines,
)
from fleet_ledger.fleet.log.note import generate_signer, open_note
from fleet_ledger.fleet.log.witness import format_request

ORIGIN = "fleet-ledger.local/test"


@pytest.fixture
def log_signer():
    return generate_signer(ORIGIN)


@pytest.fixture
def witnesses(tmp_path, log_signer):
    signers = [generate_witness_signer(f"witness.test/w{i}") for i in (1, 2)]
    running = [RunningWitness(Witness(s, [log_signer.verifier()], tmp_path / f"w{i}"))
               for i, s in enumerate(signers)]
    try:
        yield list(zip(signers, running, strict=True))
    finally:
        for r in running:
            r.close()


def _post(url, old, proof, note):
    return post_add_checkpoint(url, format_request(old, proof, note))


def test_two_witnesses_cosign_an_honest_log_and_advance(witnesses, log_signer):
    """Both witnesses answer 200 with a verifiable cosignature/v1 line, first from 0, then with
    a consistency proof from the size each last cosigned."""
    log = MemLog(log_signer, 12)
    for size, old in ((5, 0), (12, 5)):
        note = log.note(size)
        for signer, running in witnesses:
            reply = _post(running.url, old, log.consistency_proof(old, size), note)
            assert reply.status == 200, reply.body
            cosigned = add_signatures(note, parse_signature_lines(reply.body.decode()))
            found = cosignatures(cosigned, [signer.key()])
            assert [c.witness for c in found] == [signer.key()]
            assert abs(found[0].timestamp - time.time()) < 60
            open_note(cosigned, [log_signer.verifier()])  # the log's own signature still holds


def test_a_forked_history_is_refused_by_both_witnesses(witnesses, log_signer):
    """A log key presenting another root at the size the witnesses cosigned gets 409 (their size)
    from both, and a longer fork with a proof from that size gets 422 from both."""
    honest = MemLog(log_signer, 8)
    forked = MemLog(log_signer, 11, seed=b"fork", fork_at=6)
    assert forked.root(8) != honest.root(8)
    for _, running in witnesses:
        assert _post(running.url, 0, [], honest.note(8)).status == 200
    for _, running in witnesses:
        same_size = _post(running.url, 8, [], forked.note(8))
        assert (same_size.status, same_size.body) == (409, b"8\n")
        assert same_size.content_type == "text/x.tlog.size"
        longer = _post(running.url, 8, forked.consistency_proof(8, 11), forked.note(11))
        assert longer.status == 422, longer.body


def test_409_carries_the_witness_size(witnesses, log_signer):
    """A stale old size is answered 409 with the witness's size; the client then catches up."""
    log = MemLog(log_signer, 9)
    _, running = witnesses[0]
    assert _post(running.url, 0, [], log.note(4)).status == 200
    stale = _post(running.url, 0, [], log.note(9))
    assert (stale.status, stale.conflict_size()) == (409, 4)
    reply, held = submit(running.url, log.note(9), 9, 0, log)
    assert (reply.status, held) == (200, 9)


def test_unknown_key_or_bad_signature_is_403(witnesses, log_signer):
    """A checkpoint signed by another key named as the log, or with a broken signature, is 403."""
    _, running = witnesses[0]
    impostor = MemLog(generate_signer(ORIGIN), 3)
    assert _post(running.url, 0, [], impostor.note(3)).status == 403
    note = MemLog(log_signer, 3).note(3)
    text, sig_line = note.rsplit("\n\n", 1)
    blob = sig_line.split(" ")[-1]
    bad = blob[:10] + ("A" if blob[10] != "A" else "B") + blob[11:]
    assert _post(running.url, 0, [], text + "\n\n" + sig_line.replace(blob, bad)).status == 403
    assert _post(running.url, 0, [], note).status == 200


def test_unknown_origin_is_404(witnesses):
    """A checkpoint of a log the witness was not configured with is 404."""
    _, running = witnesses[0]
    other = MemLog(generate_signer("other.example/log"), 2)
    assert _post(running.url, 0, [], other.note(2)).status == 404


def test_bad_consistency_proof_is_422_and_state_is_unchanged(witnesses, log_signer, tmp_path):
    """A proof with one flipped bit is 422, and the witness keeps its old size (409 says so)."""
    log = MemLog(log_signer, 10)
    _, running = witnesses[0]
    assert _post(running.url, 0, [], log.note(3)).status == 200
    proof = log.consistency_proof(3, 10)
    proof[0] = bytes([proof[0][0] ^ 1]) + proof[0][1:]
    assert _post(running.url, 3, proof, log.note(10)).status == 422
    assert _post(running.url, 0, [], log.note(10)).conflict_size() == 3
    assert _post(running.url, 0, [b"\0" * 32], log.note(3)).status == 409


def test_malformed_requests_are_400(witnesses, log_signer):
    """An old size above the checkpoint size, or a body without the empty line, is 400."""
    _, running = witnesses[0]
    note = MemLog(log_signer, 2).note(2)
    assert _post(running.url, 5, [], note).status == 400
    assert post_add_checkpoint(running.url, b"old 0\n" + note.encode()).status == 400


def test_state_survives_restart_and_a_failed_write_answers_nothing(tmp_path, log_signer,
                                                                   monkeypatch):
    """The state file is replaced atomically: after a restart the witness remembers its size,
    and when the replace fails no cosignature is given and the old state stays."""
    signer = generate_witness_signer("witness.test/w1")
    log = MemLog(log_signer, 7)
    first = Witness(signer, [log_signer.verifier()], tmp_path / "w")
    assert first.add_checkpoint(format_request(0, [], log.note(4)))[0] == 200
    again = Witness(signer, [log_signer.verifier()], tmp_path / "w")
    status, ctype, body = again.add_checkpoint(format_request(0, [], log.note(7)))
    assert (status, ctype, body) == (409, "text/x.tlog.size", b"4\n")

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fleet_ledger.plumbing.files.os, "replace", broken_replace)
    with pytest.raises(OSError):
        again.add_checkpoint(format_request(4, log.consistency_proof(4, 7), log.note(7)))
    monkeypatch.undo()
    assert again.state.states[ORIGIN].size == 4
    saved = json.loads((tmp_path / "w" / "witness-state.json").read_text())
    assert saved["logs"][ORIGIN]["size"] == 4
    assert [p.name for p in (tmp_path / "w").iterdir()] == ["witness-state.json"]  # no temp


def test_fleet_witness_serve_subprocess(tmp_path, log_signer):
    """`fleet witness serve` cosigns over HTTP, keeps its state on disk and stops on SIGTERM."""
    keys = tmp_path / "keys"
    subprocess.run([sys.executable, "-m", "fleet_ledger.cli", "witness", "keygen", "w.test/one",
                    "--out", str(keys)], check=True, capture_output=True)
    vkey_file = keys / "fleet-ledger.vkey"
    vkey_file.write_text(log_signer.verifier().text() + "\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleet_ledger.cli", "witness", "serve", "--key",
         str(keys / "w.test_one.key"), "--log-vkey", str(vkey_file), "--state",
         str(tmp_path / "state"), "--listen", "127.0.0.1:0"],
        stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        assert "listening on http://127.0.0.1:" in line, line
        url = line.split("listening on ")[1].split(" ")[0]
        log = MemLog(log_signer, 6)
        reply = _post(url, 0, [], log.note(6))
        assert reply.status == 200
        from fleet_ledger.fleet.log.cosignature import parse_witness_key
        wkey = parse_witness_key((keys / "w.test_one.vkey").read_text())
        assert cosignatures(add_signatures(log.note(6), parse_signature_lines(
            reply.body.decode())), [wkey])
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    assert proc.returncode == 0
    state = json.loads((tmp_path / "state" / "witness-state.json").read_text())
    assert state["logs"][ORIGIN]["size"] == 6
    assert not any(p.name.endswith(".tmp") for p in (tmp_path / "state").iterdir())
    assert os.stat(tmp_path / "state" / "witness-state.json").st_mode & 0o077 == 0
