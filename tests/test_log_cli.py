"""The fleet-log CLI as a subprocess: exit codes and one-line failures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

FLEET = str(Path(sys.executable).parent / "fleet")
VECTORS = Path(__file__).parent.parent / "docs" / "spec" / "vectors"
BUNDLE = json.loads((VECTORS / "bundle.json").read_text())
GO_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_NOTE = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n\n"
    "\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgK"
    "vqfqdngotpRZb6KE6RyyBwJnAM=\n"
)


def fleet(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([FLEET, *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
def files(tmp_path):
    (tmp_path / "ledger.vkey").write_text(BUNDLE["verifier_key"] + "\n")
    (tmp_path / "cp.note").write_text(BUNDLE["bundle"]["checkpoint"])
    (tmp_path / "bundle.json").write_text(json.dumps(BUNDLE["bundle"]))
    (tmp_path / "go.note").write_text(GO_NOTE)
    (tmp_path / "go.vkey").write_text(GO_VKEY + "\n")
    return tmp_path


def test_note_verify_go_example(files):
    """`fleet note verify` accepts the Go example note and key, and rejects a changed text."""
    ok = fleet("note", "verify", str(files / "go.note"), "--vkey", str(files / "go.vkey"))
    assert ok.returncode == 0 and "PeterNeumann+c74f20a3" in ok.stdout
    (files / "bad.note").write_text(GO_NOTE.replace("problem,", "problem;"))
    bad = fleet("note", "verify", str(files / "bad.note"), "--vkey", GO_VKEY)
    assert bad.returncode == 1
    assert bad.stderr.strip().startswith("BadSignature:") and len(bad.stderr.splitlines()) == 1


def test_checkpoint_verify_json(files):
    """`fleet checkpoint verify --json` prints origin, size and root of a valid checkpoint."""
    out = fleet("checkpoint", "verify", str(files / "cp.note"), "--vkey",
                str(files / "ledger.vkey"), "--json")  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {
        "origin": "fleet.example/log",
        "size": 37,
        "root": BUNDLE["bundle"]["checkpoint"].split("\n")[2],
    }
    wrong = fleet("checkpoint", "verify", str(files / "cp.note"), "--vkey", GO_VKEY)
    assert wrong.returncode == 1 and wrong.stderr.startswith("UnknownKey:")
    (files / "go-as-cp.note").write_text(GO_NOTE)
    bad_body = fleet("checkpoint", "verify", str(files / "go-as-cp.note"), "--vkey", GO_VKEY)
    assert bad_body.returncode == 1 and bad_body.stderr.startswith("MalformedCheckpoint:")


def test_verify_proof(files):
    """`fleet verify-proof` accepts the vector bundle and names the check a tampered one fails."""
    ok = fleet("verify-proof", str(files / "bundle.json"), "--vkey", str(files / "ledger.vkey"))
    assert ok.returncode == 0, ok.stderr
    tampered = dict(BUNDLE["bundle"], index=BUNDLE["bundle"]["index"] + 1)
    (files / "tampered.json").write_text(json.dumps(tampered))
    bad = fleet("verify-proof", str(files / "tampered.json"), "--vkey", str(files / "ledger.vkey"))
    assert bad.returncode == 1
    assert bad.stderr.startswith("LeafMismatch:") and len(bad.stderr.splitlines()) == 1


def test_missing_files_and_bad_keys_are_one_line(files):
    """A missing file, a missing key file or a malformed key: one line, no traceback, exit 2."""
    vkey = str(files / "ledger.vkey")
    for args in (
        ("verify-proof", str(files / "absent.json"), "--vkey", vkey),
        ("note", "verify", str(files / "cp.note"), "--vkey", str(files / "absent.vkey")),
        ("checkpoint", "verify", str(files / "cp.note"), "--vkey", "x+12345678+AAAA"),
        ("checkpoint",),
    ):
        out = fleet(*args)
        assert out.returncode == 2, args
        assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


def test_keygen_writes_private_key_0600_and_keys_work(tmp_path):
    """`fleet keygen` writes NAME.key (0600) and NAME.vkey that verify each other's notes."""
    out = fleet("keygen", "fleet.example/log", "--out", str(tmp_path / "keys"))
    assert out.returncode == 0, out.stderr
    key = tmp_path / "keys" / "fleet.example_log.key"
    vkey = tmp_path / "keys" / "fleet.example_log.vkey"
    assert os.stat(key).st_mode & 0o777 == 0o600
    assert key.read_text().startswith("PRIVATE+KEY+fleet.example/log+")
    from fleet_ledger.fleet.log.note import parse_signer_key, sign_note

    note = sign_note("hello\n", [parse_signer_key(key.read_text())])
    (tmp_path / "n.note").write_text(note)
    assert fleet("note", "verify", str(tmp_path / "n.note"), "--vkey", str(vkey)).returncode == 0
    again = fleet("keygen", "fleet.example/log", "--out", str(tmp_path / "keys"))
    assert again.returncode == 2


def test_bench_merkle_json_keys():
    """`fleet bench merkle --json` reports every figure for both implementations."""
    out = fleet("bench", "merkle", "--leaves", "300", "--proofs", "50", "--json")
    assert out.returncode == 0, out.stderr
    figures = json.loads(out.stdout)
    assert figures["leaves"] == 300
    for impl in ("ours", "pymerkle"):
        assert {
            "append_per_s",
            "inclusion_p50_ms",
            "inclusion_p99_ms",
            "consistency_p50_ms",
            "consistency_p99_ms",
            "peak_rss_mb",
        } <= set(figures[impl])
