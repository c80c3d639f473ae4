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

from fleet_ledger.fleet.env import jsonc
from fleet_ledger.fleet.env.manifest import (
    ALLOWED,
    is_manifest_file,
    manifest_of,
    manifest_of_text,
    read_environment,
    read_manifest_file,
    sign,
)
from fleet_ledger.fleet.env.manifest_errors import (
    BadManifestSignature,
    ManifestAddressMismatch,
    ManifestError,
    UntrustedManifestKey,
)
from fleet_ledger.fleet.log.note import signer_from_seed

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


KEYS = st.sampled_from([*ALLOWED, "privileged", "postCreateCommand", "cpus", "memory", "gpu",
                        "cores", "version", "X", "LD_PRELOAD", "db:80", "${x}"]) | st.text(
    max_size=8)
LEAVES = (st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1)
          | st.sampled_from(["", "optional", "4gb", "/w", "node", "db:80", "x${y}", "a;b",
                             "ghcr.io/a/b@sha256:" + "0" * 64, "python:3", "stopContainer"])
          | st.text(max_size=12))
ANY = st.recursive(LEAVES, lambda inner: st.lists(inner, max_size=3)
                   | st.dictionaries(KEYS, inner, max_size=4), max_leaves=16)
NAMES = st.sampled_from(["A", "B_2", "_x", "C", "version", "VERSION", "PATH", "ld_preload",
                         "1X", "A-B", "${v}"])
TEXTS = st.sampled_from(["1", "lts", "a b", "x=y", "", "20", "20.1", "latest", "$(id)",
                         "${localEnv:X}", "a\nb"])
# Each allowed property with values that are often right and sometimes subtly wrong.
LIKELY = {
    "name": TEXTS,
    "features": st.dictionaries(
        st.sampled_from(["ghcr.io/f/node@sha256:" + "2" * 64, "ghcr.io/f/go@sha256:" + "3" * 64,
                         "ghcr.io/f/node:1", "./local"]),
        TEXTS | st.dictionaries(NAMES, TEXTS | st.booleans() | LEAVES, max_size=3),
        max_size=2),
    "containerEnv": st.dictionaries(NAMES, TEXTS, max_size=3),
    "remoteEnv": st.dictionaries(NAMES, TEXTS | st.none(), max_size=3),
    "containerUser": st.sampled_from(["vscode", "1000:1000", "a b", "root"]),
    "remoteUser": st.sampled_from(["node", "0", "x:y:z"]),
    "workspaceFolder": st.sampled_from(["/w", "/w/x", "/", "w", "/w/../x", "/w/"]),
    "forwardPorts": st.lists(st.integers(0, 70000) | st.sampled_from(["db:5432", "x:0"]),
                             max_size=3),
    "hostRequirements": st.fixed_dictionaries({}, optional={
        "cpus": st.integers(0, 8), "memory": st.sampled_from(["4gb", "4GB", "512"]),
        "storage": st.sampled_from(["32gb", "x"]),
        "gpu": st.booleans() | st.sampled_from(["optional", "yes"])
        | st.fixed_dictionaries({"cores": st.integers(0, 4)})}),
    "shutdownAction": st.sampled_from(["none", "stopContainer", "stopCompose"]),
}
DECLARATIONS = st.fixed_dictionaries({}, optional=LIKELY)


@settings(max_examples=500, deadline=None)
@given(DECLARATIONS | st.dictionaries(KEYS, ANY, max_size=6), st.booleans())
def test_any_declaration_is_a_manifest_or_a_named_refusal(decl: dict, with_image: bool) -> None:
    """Arbitrary JSON around the allowlist's names never escapes as anything but a named
    ManifestError; what is accepted is its own normal form (normalising twice changes
    nothing)."""
    if with_image:
        decl["image"] = "ghcr.io/a/b@sha256:" + "1" * 64
    try:
        m = manifest_of(decl)
    except ManifestError as exc:
        assert exc.rule != "ManifestError" and str(exc)
        return
    assert manifest_of(m.devcontainer) == m
