"""C2SP signed notes: the Go sumdb/note vectors, key text formats and named failures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleet_ledger.fleet.log.log_errors import (
    AmbiguousKey,
    BadSignature,
    MalformedKey,
    MalformedNote,
    UnknownKey,
)
from fleet_ledger.fleet.log.note import (
    generate_signer,
    key_id,
    open_note,
    parse_note,
    parse_signer_key,
    parse_verifier_key,
    sign_note,
)

# golang.org/x/mod sumdb/note note_test.go / example_test.go
PETER_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
PETER_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
ENOCH_VKEY = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
PETER_SIG = (
    "\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgK"
    "vqfqdngotpRZb6KE6RyyBwJnAM=\n"
)
ENOCH_SIG = (
    "\u2014 EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOT"
    "GwnWLox33WWd1RvMc+QQ=\n"
)
VECTORS = Path(__file__).parent.parent / "docs" / "spec" / "vectors" / "note.json"


def test_go_vkey_parses_and_round_trips():
    """The Go example verifier key parses, its id recomputes, and it prints back identically."""
    verifier = parse_verifier_key(PETER_VKEY)
    assert verifier.name == "PeterNeumann"
    assert verifier.key_id == 0xC74F20A3 == key_id("PeterNeumann", verifier.public_key)
    assert verifier.text() == PETER_VKEY


def test_go_signer_reproduces_the_published_signature():
    """Signing the Go example text with the Go example key gives the published note exactly."""
    signer = parse_signer_key(PETER_SKEY)
    assert signer.text() == PETER_SKEY
    assert signer.verifier() == parse_verifier_key(PETER_VKEY)
    assert sign_note(TEXT, [signer]) == TEXT + "\n" + PETER_SIG


def test_go_two_signature_note_opens():
    """The Go two-signature note verifies with both keys, or with one and keeps the other aside."""
    note = TEXT + "\n" + PETER_SIG + ENOCH_SIG
    both = open_note(note, [parse_verifier_key(PETER_VKEY), parse_verifier_key(ENOCH_VKEY)])
    assert both.text == TEXT and len(both.verified) == 2 and not both.unverified
    one = open_note(note, [parse_verifier_key(PETER_VKEY)])
    assert [s.name for s in one.verified] == ["PeterNeumann"]
    assert [s.name for s in one.unverified] == ["EnochRoot"]


def test_mangled_vkeys_are_refused():
    """Every proper substring and every single-byte increment of the vkey is refused (as in Go)."""
    raw = PETER_VKEY
    for i in range(len(raw) + 1):
        for j in range(i + 1, len(raw) + 1):
            if (i, j) != (0, len(raw)):
                with pytest.raises(MalformedKey):
                    parse_verifier_key(raw[i:j])
    for i in range(len(raw)):
        with pytest.raises(MalformedKey):
            parse_verifier_key(raw[:i] + chr(ord(raw[i]) + 1) + raw[i + 1 :])
    for bad in (
        "PeterNeumann+cc469956+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TWBADKEY==",
        "PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "PeterNeumann+C74F20A3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
    ):
        with pytest.raises(MalformedKey):
            parse_verifier_key(bad)


def test_mangled_signer_keys_are_refused():
    """Truncated or altered signer keys are refused."""
    for bad in (PETER_SKEY[:-1], PETER_SKEY[8:], PETER_SKEY.replace("c74f20a3", "c74f20a4")):
        with pytest.raises(MalformedKey):
            parse_signer_key(bad)


def test_bad_signature_unknown_key_and_malformed_are_named():
    """A broken signature, no known signer and bad syntax each raise their own error."""
    peter = parse_verifier_key(PETER_VKEY)
    with pytest.raises(BadSignature) as err:
        open_note(TEXT.replace("cryptography", "cryptographY") + "\n" + PETER_SIG, [peter])
    assert err.value.name == "PeterNeumann" and err.value.key_id == 0xC74F20A3
    with pytest.raises(BadSignature):
        open_note(TEXT + "\n" + PETER_SIG[:60] + "ABCD" + PETER_SIG[60:], [peter])
    with pytest.raises(UnknownKey):
        open_note(TEXT + "\n" + ENOCH_SIG, [peter])
    bad_messages = [
        TEXT,
        TEXT + "\n",
        TEXT + "\n" + PETER_SIG[:-1],
        "\x01" + TEXT + "\n" + PETER_SIG,
        TEXT + "\n" + "\u2014 Bad Name x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZ"
        "SNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n",
        TEXT + "\n" + PETER_SIG + "Unexpected line.\n",
        TEXT + "\n" + PETER_SIG * 101,
    ]
    for message in bad_messages:
        with pytest.raises(MalformedNote):
            open_note(message, [peter])
    with pytest.raises(MalformedNote):
        open_note(b"\xff" + (TEXT + "\n" + PETER_SIG).encode(), [peter])


def test_duplicate_lines_count_once_and_ambiguous_keys_refuse():
    """Identical signature lines count once; two keys with one name and id are ambiguous."""
    peter = parse_verifier_key(PETER_VKEY)
    note = open_note(TEXT + "\n" + PETER_SIG + PETER_SIG, [peter])
    assert len(note.verified) == 1
    impostor = type(peter)(peter.name, peter.key_id, b"\x01" * 32)
    with pytest.raises(AmbiguousKey):
        open_note(TEXT + "\n" + PETER_SIG, [peter, impostor])


def test_generated_keys_round_trip_through_text():
    """A generated signer and its verifier survive their text forms and verify each other."""
    signer = generate_signer("fleet.example/log")
    again = parse_signer_key(signer.text())
    verifier = parse_verifier_key(signer.verifier().text())
    note = sign_note("hello\n\nworld\n", [again])
    assert open_note(note, [verifier]).text == "hello\n\nworld\n"
    assert parse_note(note)[0] == "hello\n\nworld\n"


def test_checked_in_note_vectors():
    """docs/spec/vectors/note.json: positive cases open, negative cases raise the named error."""
    data = json.loads(VECTORS.read_text())
    signer = parse_signer_key(data["signer_key"])
    verifier = parse_verifier_key(data["verifier_key"])
    assert signer.verifier() == verifier
    assert sign_note(data["text"], [signer]) == data["note"]
    for case in data["cases"]:
        if case["valid"]:
            assert open_note(case["note"], [verifier]).text == data["text"]
        else:
            with pytest.raises(NOTE_ERRORS[case["error"]]):
                open_note(case["note"], [verifier])


NOTE_ERRORS = {
    "BadSignature": BadSignature,
    "UnknownKey": UnknownKey,
    "MalformedNote": MalformedNote,
}
