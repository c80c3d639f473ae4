"""Environment manifests in the core: addresses that ignore order and comments and nothing
else, signed files that verify only as built, and trust in a signer only when asked.
(Every refusal by name is in the vectors: tests/test_manifest_vectors.py.)"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet import jsonc
from fleet.manifest import (
    is_manifest_file,
    manifest_of,
    manifest_of_text,
    read_environment,
    read_manifest_file,
    sign,
)
from fleet.manifest_errors import (
    BadManifestSignature,
    ManifestAddressMismatch,
    ManifestError,
    UntrustedManifestKey,
)
from fleet.note import signer_from_seed

from jsonc_helpers import render

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples" / "devcontainers")
                  .glob("*/devcontainer.json"))
SIGNER = signer_from_seed("builder", bytes(32))
OTHER = signer_from_seed("builder", bytes([1] * 32))


def test_there_are_sample_declarations_and_each_is_accepted() -> None:
    """examples/devcontainers holds several declarations, each with its own address."""
    addresses = {manifest_of_text(p.read_bytes()).address for p in EXAMPLES}
    assert len(EXAMPLES) >= 3 and len(addresses) == len(EXAMPLES)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.parent.name for p in EXAMPLES])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_reordering_and_comments_keep_the_address(path: Path, data: st.DataObject) -> None:
    """The sample rewritten with members in any order, other comments, whitespace, escapes
    and trailing commas has the same address."""
    value = jsonc.loads(path.read_bytes())
    text = render(value, data.draw, shuffle=True)
    assert manifest_of_text(text).address == manifest_of_text(path.read_bytes()).address


def _variants(value: Any) -> list[Any]:
    """Copies of ``value`` with one string or integer changed (one per place)."""
    out: list[Any] = []
    if isinstance(value, dict):
        for k, v in value.items():
            out += [{**value, k: w} for w in _variants(v)]
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += [[*value[:i], w, *value[i + 1:]] for w in _variants(v)]
    elif type(value) is str:
        last = value[-1:]
        out.append(value[:-1] + ("1" if last != "1" else "2"))
    elif type(value) is int:
        out.append(value + 1)
    elif type(value) is bool:
        out.append(not value)
    return out


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.parent.name for p in EXAMPLES])
def test_any_change_of_content_changes_the_address_or_is_refused(path: Path) -> None:
    """Changing any one value of a sample (a digest's last hex digit, a port, a flag, a name)
    either gives another address or a named refusal; never the same address."""
    value = jsonc.loads(path.read_bytes())
    address = manifest_of(value).address
    variants = _variants(value)
    assert len(variants) >= 8
    for changed in variants:
        with contextlib.suppress(ManifestError):
            assert manifest_of(changed).address != address, changed


def test_a_built_file_reads_back_as_the_same_manifest() -> None:
    """sign -> file text -> read gives the manifest, signer and signature back, and both
    forms of an environment (declaration and file) give one manifest."""
    text = EXAMPLES[0].read_bytes()
    m = manifest_of_text(text)
    signed = sign(m, SIGNER)
    back = read_manifest_file(signed.file_text())
    assert back == signed and back.manifest.address == m.address
    assert read_environment(text) == m == read_environment(signed.file_text())
    assert is_manifest_file(json.loads(signed.file_text()))
    assert not is_manifest_file(jsonc.loads(text))


def test_trust_is_checked_only_against_the_keys_given() -> None:
    """With verifier keys, a file signed by another key is UntrustedManifestKey; the signer's
    own key (among others) passes; without keys, only the signature itself is checked."""
    m = manifest_of_text(EXAMPLES[0].read_bytes())
    by_other = sign(m, OTHER).file_text()
    read_manifest_file(by_other)
    with pytest.raises(UntrustedManifestKey):
        read_manifest_file(by_other, [SIGNER.verifier()])
    assert read_manifest_file(by_other, [SIGNER.verifier(), OTHER.verifier()]).signer == (
        OTHER.verifier())
    with pytest.raises(UntrustedManifestKey):
        read_environment(by_other, [SIGNER.verifier()])


def test_a_signature_moved_to_another_manifest_does_not_verify() -> None:
    """A file whose document and address are another manifest's, under the first one's
    signature, is BadManifestSignature."""
    a, b = (manifest_of_text(p.read_bytes()) for p in EXAMPLES[:2])
    moved = sign(a, SIGNER).file_json()
    moved["manifest"], moved["address"] = b.document, b.address
    with pytest.raises(BadManifestSignature):
        read_manifest_file(json.dumps(moved))


def test_every_one_character_edit_of_a_file_is_refused_or_harmless() -> None:
    """Replacing any one character of a manifest file gives a named refusal, or (in
    whitespace) the very same manifest and signature; never another verified manifest."""
    signed = sign(manifest_of_text(EXAMPLES[0].read_bytes()), SIGNER)
    text = signed.file_text()
    refused = harmless = 0
    for i, ch in enumerate(text):
        edited = text[:i] + ("x" if ch not in "x\n " else "y") + text[i + 1:]
        try:
            back = read_manifest_file(edited)
        except ManifestError:
            refused += 1
            continue
        assert back == signed, f"position {i}"
        harmless += 1
    assert refused > 0.9 * len(text)
    assert harmless == 0  # no character of this file is insignificant to the reader


def test_an_address_edit_alone_is_caught_with_both_values() -> None:
    """A stated address that is not the document's is ManifestAddressMismatch carrying both."""
    a, b = (manifest_of_text(p.read_bytes()) for p in EXAMPLES[:2])
    doc = sign(a, SIGNER).file_json()
    doc["address"] = b.address
    with pytest.raises(ManifestAddressMismatch) as caught:
        read_manifest_file(json.dumps(doc))
    assert (caught.value.stated, caught.value.computed) == (b.address, a.address)
