"""docs/spec/vectors/manifest.json is reproduced by the code and its inputs behave as stated."""

from __future__ import annotations

import base64
import inspect
import json

import pytest
from blake3 import blake3
from nacl.signing import VerifyKey

from fleet_ledger.fleet.env import manifest_errors
from fleet_ledger.fleet.env.manifest_errors import (
    DevcontainerRefused,
    JsoncError,
    ManifestFileError,
)

import manifest_vectors as mv

FILE = json.loads(mv.PATH.read_text(encoding="utf-8"))


def test_checked_in_vectors_equal_what_the_code_builds() -> None:
    """Regenerating the vector file from the code changes nothing."""
    assert mv.PATH.read_text(encoding="utf-8") == mv.render()


@pytest.mark.parametrize("case", FILE["accepted"], ids=[c["name"] for c in FILE["accepted"]])
def test_each_accepted_input_gets_its_address(case: dict) -> None:
    """The core turns the input into exactly the stated address."""
    assert mv.outcome(case["input"]) == {"address": case["address"]}


@pytest.mark.parametrize("case", FILE["accepted"], ids=[c["name"] for c in FILE["accepted"]])
def test_canonical_bytes_check_out_without_the_core(case: dict) -> None:
    """With only BLAKE3, a JSON library and Ed25519: the canonical bytes are JCS of the
    document, hash to the address, and the file's signature verifies over the domain string
    and that hash."""
    canonical = bytes.fromhex(case["canonical_hex"])
    assert canonical == case["canonical"].encode("utf-8")
    document = json.loads(canonical)
    # JCS for this value domain (ASCII keys, strings, integers, booleans, null): sorted keys,
    # no whitespace, UTF-8 as is, JSON's short escapes.
    assert json.dumps(document, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False).encode("utf-8") == canonical
    assert document["format"] == FILE["format"]
    raw = blake3(canonical).digest()
    assert "b3:" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode() == case["address"]
    message = FILE["signature_domain"].encode("ascii") + raw
    assert message.hex() == case["signature_message_hex"]
    signed = json.loads(case["file"])
    assert signed["address"] == case["address"] and signed["manifest"] == document
    assert signed["signature"]["key"] == FILE["signer"]["verifier_key"]
    public = base64.b64decode(FILE["signer"]["verifier_key"].split("+", 2)[2])[1:]
    VerifyKey(public).verify(message, base64.b64decode(signed["signature"]["sig"]))
    assert mv.file_outcome(case["file"]) == "valid"


def test_reordered_and_commented_inputs_share_an_address() -> None:
    """The pairs the file holds for it (order and comments; the feature shorthand) agree."""
    by_name = {c["name"]: c["address"] for c in FILE["accepted"]}
    assert by_name["minimal"] == by_name["minimal-reordered-with-comments"]
    assert by_name["feature-shorthand"] == by_name["feature-version-option"]


@pytest.mark.parametrize("case", FILE["refused"], ids=[c["name"] for c in FILE["refused"]])
def test_each_refused_input_is_refused_as_stated(case: dict) -> None:
    """The declaration is refused with the stated rule, at the stated place."""
    assert mv.outcome(case["input"]) == {"rule": case["rule"], "where": case["where"]}


@pytest.mark.parametrize("case", FILE["refused_files"],
                         ids=[c["name"] for c in FILE["refused_files"]])
def test_each_refused_file_fails_as_stated(case: dict) -> None:
    """The manifest file does not verify, with the stated rule."""
    assert mv.file_outcome(case["file"]) == case["rule"]


def test_vectors_cover_every_refusal_of_a_declaration_and_a_file() -> None:
    """Every named refusal of the text, the declaration and the file has a vector
    (UntrustedManifestKey needs a caller's key list: tests/test_manifest.py has it)."""
    named = {name for name, cls in inspect.getmembers(manifest_errors, inspect.isclass)
             if issubclass(cls, DevcontainerRefused | JsoncError | ManifestFileError)
             and cls not in (DevcontainerRefused, JsoncError, ManifestFileError)}
    seen = {c["rule"] for c in FILE["refused"]} | {c["rule"] for c in FILE["refused_files"]}
    assert named - seen == {"UntrustedManifestKey"}
