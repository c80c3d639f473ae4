"""Builds ``docs/spec/vectors/manifest.json``: accepted declarations with their canonical
bytes, addresses and signed files; every declaration refusal; refused manifest files.

Run ``python tests/manifest_vectors.py`` to rewrite the file; tests/test_manifest_vectors.py
checks that the checked-in file equals what this builds and that each input behaves as
stated.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from fleet_ledger.fleet.address import digest
from fleet_ledger.fleet.env.manifest import (
    FORMAT,
    SIGNATURE_DOMAIN,
    Manifest,
    canonical_bytes,
    manifest_of_text,
    read_manifest_file,
    sign,
    signature_message,
)
from fleet_ledger.fleet.env.manifest_errors import ManifestError
from fleet_ledger.fleet.log.note import signer_from_seed

ROOT = Path(__file__).resolve().parent.parent
PATH = ROOT / "docs" / "spec" / "vectors" / "manifest.json"
EXAMPLES = ROOT / "examples" / "devcontainers"
SIGNER = signer_from_seed("fleet-example", bytes(range(32)))


def pin(label: str) -> str:
    """A stand-in digest of the right form (not a published image's)."""
    return "@sha256:" + hashlib.sha256(f"fleet vector digest: {label}".encode()).hexdigest()


IMAGE = "ghcr.io/example/python" + pin("image")
FEATURE = "ghcr.io/devcontainers/features/node" + pin("feature")

ACCEPTED: list[tuple[str, str]] = [
    ("minimal", json.dumps({"image": IMAGE})),
    ("minimal-reordered-with-comments", f'/* same manifest */ {{ "image" : "{IMAGE}", }} // end'),
    ("feature-shorthand", json.dumps({"image": IMAGE, "features": {FEATURE: "20"}})),
    ("feature-version-option", json.dumps({"features": {FEATURE: {"version": "20"}},
                                           "image": IMAGE})),
    ("remote-env-unset-and-text", json.dumps({
        "image": IMAGE, "name": "caf\u00e9 \U0001f600 \"quoted\" \\ back",
        "remoteEnv": {"UNSET_ME": None, "GREETING": "hello world; $HOME is not expanded"},
        "forwardPorts": [8080, "db:5432"], "shutdownAction": "none",
        "hostRequirements": {"gpu": {"cores": 2, "memory": "8gb"}, "cpus": 4}})),
] + [(f"example-{p.parent.name}", p.read_text(encoding="utf-8"))
     for p in sorted(EXAMPLES.glob("*/devcontainer.json"))]


def with_(**props: Any) -> str:
    return json.dumps({"image": IMAGE, **props})


REFUSED: list[tuple[str, str, str, str]] = [
    # (name, rule, where, input)
    *[(f"lifecycle-{k}", "LifecycleCommand", f"$.{k}", with_(**{k: "make setup"}))
      for k in ("initializeCommand", "onCreateCommand", "updateContentCommand",
                "postCreateCommand", "postStartCommand", "postAttachCommand")],
    ("lifecycle-waitFor", "LifecycleCommand", "$.waitFor", with_(waitFor="postCreateCommand")),
    ("lifecycle-command-object", "LifecycleCommand", "$.postCreateCommand",
     with_(postCreateCommand={"a": ["echo", "x"]})),
    ("widening-privileged", "Widening", "$.privileged", with_(privileged=True)),
    ("widening-capAdd", "Widening", "$.capAdd", with_(capAdd=["SYS_PTRACE"])),
    ("widening-securityOpt", "Widening", "$.securityOpt",
     with_(securityOpt=["seccomp=unconfined"])),
    ("widening-runArgs", "Widening", "$.runArgs", with_(runArgs=["--network=host"])),
    ("widening-mounts", "Widening", "$.mounts",
     with_(mounts=["source=/,target=/host,type=bind"])),
    ("widening-workspaceMount", "Widening", "$.workspaceMount",
     with_(workspaceMount="source=/,target=/w,type=bind")),
    ("widening-appPort", "Widening", "$.appPort", with_(appPort=[22])),
    ("widening-init", "Widening", "$.init", with_(init=True)),
    ("widening-build", "Widening", "$.build",
     json.dumps({"build": {"dockerfile": "Dockerfile", "args": {"X": "1"}}})),
    ("widening-legacy-dockerFile", "Widening", "$.dockerFile", with_(dockerFile="Dockerfile")),
    ("widening-compose", "Widening", "$.dockerComposeFile",
     json.dumps({"dockerComposeFile": "compose.yml", "service": "app"})),
    ("widening-runServices", "Widening", "$.runServices", with_(runServices=["db"])),
    ("widening-beats-unknown-and-unpinned", "Widening", "$.privileged",
     json.dumps({"zzz": 1, "image": "python:3.11", "privileged": False})),
    ("unknown-additionalProperties", "UnknownProperty", "$.additionalProperties",
     with_(additionalProperties=True)),
    ("unknown-customizations", "UnknownProperty", "$.customizations",
     with_(customizations={"vscode": {"extensions": ["ms-python.python"]}})),
    ("unknown-$schema", "UnknownProperty", '$["$schema"]', with_(**{"$schema": "x"})),
    ("unknown-overrideCommand", "UnknownProperty", "$.overrideCommand",
     with_(overrideCommand=False)),
    ("unknown-nested-host-requirements", "UnknownProperty",
     "$.hostRequirements.additionalProperties",
     with_(hostRequirements={"cpus": 2, "additionalProperties": True})),
    ("unknown-nested-gpu", "UnknownProperty", "$.hostRequirements.gpu.vendor",
     with_(hostRequirements={"gpu": {"cores": 1, "vendor": "x"}})),
    ("image-by-tag", "UnpinnedImage", "$.image", with_(image="python:3.11")),
    ("image-bare-name", "UnpinnedImage", "$.image", with_(image="python")),
    ("image-short-digest", "UnpinnedImage", "$.image", with_(image="python@sha256:abc")),
    ("image-uppercase-digest", "UnpinnedImage", "$.image",
     with_(image="python@sha256:" + "AB" * 32)),
    ("image-sha512", "UnpinnedImage", "$.image", with_(image="python@sha512:" + "ab" * 64)),
    ("image-tag-beside-digest", "MalformedProperty", "$.image",
     with_(image="ghcr.io/example/python:3.11" + pin("image"))),
    ("image-uppercase-name", "MalformedProperty", "$.image",
     with_(image="ghcr.io/Example/python" + pin("image"))),
    ("feature-by-tag", "UnpinnedFeature",
     '$.features["ghcr.io/devcontainers/features/node:1"]',
     with_(features={"ghcr.io/devcontainers/features/node:1": {}})),
    ("feature-local-path", "UnpinnedFeature", '$.features["./local-feature"]',
     with_(features={"./local-feature": {}})),
    ("feature-url", "UnpinnedFeature", '$.features["https://example.com/f.tgz"]',
     with_(features={"https://example.com/f.tgz": {}})),
    ("feature-without-registry", "MalformedProperty", f'$.features["node{pin("feature")}"]',
     with_(features={"node" + pin("feature"): {}})),
    ("substitution-image", "Substitution", "$.image", with_(image="${localEnv:IMAGE}")),
    ("substitution-containerEnv", "Substitution", "$.containerEnv.PATH_EXTRA",
     with_(containerEnv={"PATH_EXTRA": "${containerEnv:PATH}:/opt/bin"})),
    ("substitution-remoteEnv", "Substitution", "$.remoteEnv.TOKEN",
     with_(remoteEnv={"TOKEN": "${localEnv:GITHUB_TOKEN}"})),
    ("substitution-workspaceFolder", "Substitution", "$.workspaceFolder",
     with_(workspaceFolder="${localWorkspaceFolder}")),
    ("substitution-devcontainerId", "Substitution", "$.name", with_(name="w-${devcontainerId}")),
    ("substitution-feature-option", "Substitution", f'$.features["{FEATURE}"].version',
     with_(features={FEATURE: {"version": "${localEnv:NODE}"}})),
    ("substitution-feature-ref", "Substitution", '$.features["${localEnv:FEATURE}"]',
     with_(features={"${localEnv:FEATURE}": {}})),
    ("env-name-dash", "BadEnvironmentName", '$.containerEnv["A-B"]',
     with_(containerEnv={"A-B": "1"})),
    ("env-name-digit-first", "BadEnvironmentName", '$.containerEnv["1X"]',
     with_(containerEnv={"1X": "1"})),
    ("env-name-space", "BadEnvironmentName", '$.remoteEnv["A B"]',
     with_(remoteEnv={"A B": "1"})),
    ("env-name-empty", "BadEnvironmentName", '$.containerEnv[""]', with_(containerEnv={"": "1"})),
    ("env-name-bash-function", "BadEnvironmentName", '$.containerEnv["BASH_FUNC_ls%%"]',
     with_(containerEnv={"BASH_FUNC_ls%%": "() { id; }"})),
    *[(f"loader-{k}", "LoaderEnvironment", f"$.{where}.{k}", with_(**{where: {k: "x"}}))
      for k, where in (("LD_PRELOAD", "containerEnv"), ("LD_LIBRARY_PATH", "remoteEnv"),
                       ("ld_preload", "containerEnv"), ("DYLD_INSERT_LIBRARIES", "containerEnv"),
                       ("BASH_ENV", "containerEnv"), ("ENV", "remoteEnv"),
                       ("PROMPT_COMMAND", "remoteEnv"), ("PS4", "containerEnv"),
                       ("PATH", "containerEnv"), ("PYTHONPATH", "containerEnv"),
                       ("NODE_OPTIONS", "remoteEnv"), ("GIT_SSH_COMMAND", "containerEnv"),
                       ("GIT_CONFIG_COUNT", "containerEnv"), ("JAVA_TOOL_OPTIONS", "remoteEnv"))],
    *[(f"feature-option-{label}", "ShellInFeatureOption", f'$.features["{FEATURE}"].version',
       with_(features={FEATURE: {"version": value}}))
      for label, value in (("command-substitution", "$(id)"), ("backticks", "`id`"),
                           ("semicolon", "20; id"), ("double-quote", '20" ; id ; "'),
                           ("single-quote", "'20'"), ("backslash", "20\\"),
                           ("pipe", "20|id"), ("ampersand", "20&id"), ("redirect", "20>x"),
                           ("newline", "20\nid"), ("dollar", "$HOME"),
                           ("too-long", "1" * 257))],
    ("feature-shorthand-shell", "ShellInFeatureOption", f'$.features["{FEATURE}"].version',
     with_(features={FEATURE: "20; id"})),
    ("not-an-object", "MalformedProperty", "$", json.dumps([IMAGE])),
    ("image-not-text", "MalformedProperty", "$.image", with_(image=["x"])),
    ("port-zero", "MalformedProperty", "$.forwardPorts[0]", with_(forwardPorts=[0])),
    ("port-too-big", "MalformedProperty", "$.forwardPorts[1]", with_(forwardPorts=[1, 65536])),
    ("port-bad-host", "MalformedProperty", "$.forwardPorts[0]",
     with_(forwardPorts=["bad host:80"])),
    ("port-twice", "MalformedProperty", "$.forwardPorts", with_(forwardPorts=[80, 80])),
    ("port-boolean", "MalformedProperty", "$.forwardPorts[0]", with_(forwardPorts=[True])),
    ("cpus-zero", "MalformedProperty", "$.hostRequirements.cpus",
     with_(hostRequirements={"cpus": 0})),
    ("memory-uppercase-unit", "MalformedProperty", "$.hostRequirements.memory",
     with_(hostRequirements={"memory": "4GB"})),
    ("gpu-yes", "MalformedProperty", "$.hostRequirements.gpu",
     with_(hostRequirements={"gpu": "yes"})),
    ("workspace-relative", "MalformedProperty", "$.workspaceFolder",
     with_(workspaceFolder="workspaces/x")),
    ("workspace-dotdot", "MalformedProperty", "$.workspaceFolder",
     with_(workspaceFolder="/workspaces/../etc")),
    ("user-with-space", "MalformedProperty", "$.remoteUser", with_(remoteUser="a user")),
    ("shutdown-stopCompose", "MalformedProperty", "$.shutdownAction",
     with_(shutdownAction="stopCompose")),
    ("containerEnv-null", "MalformedProperty", "$.containerEnv.X", with_(containerEnv={"X": None})),
    ("containerEnv-number", "MalformedProperty", "$.containerEnv.X", with_(containerEnv={"X": 1})),
    ("env-value-control", "MalformedProperty", "$.containerEnv.X",
     with_(containerEnv={"X": "a\u0007b"})),
    ("feature-boolean", "MalformedProperty", f'$.features["{FEATURE}"]',
     with_(features={FEATURE: True})),
    ("option-number", "MalformedProperty", f'$.features["{FEATURE}"].port',
     with_(features={FEATURE: {"port": 80}})),
    ("option-name-dash", "MalformedProperty", f'$.features["{FEATURE}"]["node-version"]',
     with_(features={FEATURE: {"node-version": "20"}})),
    ("option-case-twins", "MalformedProperty", f'$.features["{FEATURE}"].version',
     with_(features={FEATURE: {"VERSION": "20", "version": "20"}})),
    ("missing-image", "MissingImage", "$", json.dumps({"name": "no image"})),
    ("empty-declaration", "MissingImage", "$", "{}"),
    ("duplicate-key-deep", "DuplicateKey", "",
     f'{{"image": "{IMAGE}", "hostRequirements": {{"cpus": 1, "cpus": 64}}}}'),
    ("float", "NonIntegerNumber", "", with_()[:-1] + ', "forwardPorts": [80.0]}'),
    ("nan", "NonFiniteNumber", "", with_()[:-1] + ', "forwardPorts": [NaN]}'),
    ("big-integer", "IntegerOutOfRange", "",
     with_()[:-1] + ', "hostRequirements": {"cpus": 9007199254740992}}'),
    ("lone-surrogate", "LoneSurrogate", "", with_()[:-1] + ', "name": "\\udead"}'),
    ("byte-order-mark", "ByteOrderMark", "", "\ufeff" + with_()),
    ("single-quotes", "JsoncSyntax", "", "{'image': 'x'}"),
]


def refused_files() -> list[tuple[str, str, str]]:
    """(name, rule, file text) of manifest files that must not verify."""
    good = sign(manifest_of_text(ACCEPTED[0][1]), SIGNER).file_json()
    other = signer_from_seed("someone-else", bytes(range(1, 33)))

    def edit(change: Any) -> str:
        doc = json.loads(json.dumps(good))
        change(doc)
        return json.dumps(doc, indent=2, sort_keys=True) + "\n"

    def signed_as_is(devcontainer: dict[str, Any]) -> str:
        # A builder that skipped the allowlist: the address and signature match the document.
        document = {"devcontainer": devcontainer, "format": FORMAT}
        c = canonical_bytes(document)
        return sign(Manifest(document, c, digest(c)), SIGNER).file_text()

    flipped = bytearray(base64.b64decode(good["signature"]["sig"]))
    flipped[0] ^= 1
    return [
        ("declaration-edited", "ManifestAddressMismatch",
         edit(lambda d: d["manifest"]["devcontainer"].update(name="edited"))),
        ("address-of-another-manifest", "ManifestAddressMismatch",
         edit(lambda d: d.update(address=manifest_of_text(ACCEPTED[2][1]).address))),
        ("signature-bit-flipped", "BadManifestSignature",
         edit(lambda d: d["signature"].update(sig=base64.b64encode(flipped).decode()))),
        ("signature-under-another-key", "BadManifestSignature",
         edit(lambda d: d["signature"].update(key=other.verifier().text()))),
        ("not-normalised-shorthand", "NotNormalised",
         signed_as_is({"image": IMAGE, "features": {FEATURE: "20"}})),
        ("widening-signed-anyway", "Widening", signed_as_is({"image": IMAGE, "privileged": True})),
        ("extra-top-level-key", "MalformedManifest", edit(lambda d: d.update(note="hi"))),
        ("missing-signature", "MalformedManifest", edit(lambda d: d.pop("signature"))),
        ("other-format", "MalformedManifest",
         edit(lambda d: d["manifest"].update(format="fleet.manifest/2"))),
        ("malformed-address", "MalformedManifest", edit(lambda d: d.update(address="b3:x"))),
        ("malformed-key", "MalformedManifest",
         edit(lambda d: d["signature"].update(key="fleet-example+00000000+AAAA"))),
        ("short-signature", "MalformedManifest",
         edit(lambda d: d["signature"].update(sig=base64.b64encode(b"x" * 63).decode()))),
        ("comment-in-file", "JsoncSyntax", "// a comment\n" + edit(lambda d: None)),
    ]


def build() -> dict[str, Any]:
    accepted = []
    for name, text in ACCEPTED:
        m = manifest_of_text(text)
        signed = sign(m, SIGNER)
        accepted.append({
            "name": name, "input": text,
            "canonical": m.canonical.decode("utf-8"), "canonical_hex": m.canonical.hex(),
            "address": m.address,
            "signature_message_hex": signature_message(m.digest).hex(),
            "file": signed.file_text(),
        })
    return {
        "format": FORMAT,
        "signature_domain": SIGNATURE_DOMAIN.decode("ascii"),
        "signer": {"seed_hex": SIGNER.seed.hex(), "signer_key": SIGNER.text(),
                   "verifier_key": SIGNER.verifier().text()},
        "accepted": accepted,
        "refused": [{"name": n, "input": text, "rule": rule, "where": where or None}
                    for n, rule, where, text in REFUSED],
        "refused_files": [{"name": n, "file": text, "rule": rule}
                          for n, rule, text in refused_files()],
    }


def outcome(text: str) -> dict[str, Any]:
    """What the core does with a declaration: its address, or the rule and where."""
    try:
        return {"address": manifest_of_text(text).address}
    except ManifestError as exc:
        return {"rule": exc.rule, "where": exc.where}


def file_outcome(text: str) -> str:
    try:
        read_manifest_file(text, [SIGNER.verifier()])
    except ManifestError as exc:
        return exc.rule
    return "valid"


def render() -> str:
    return json.dumps(build(), indent=1, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    PATH.write_text(render(), encoding="utf-8")
    sys.stdout.write(f"wrote {PATH}\n")
