"""``fleet manifest check|build|verify|show`` through the installed program: the contract's
commands and keys, exit 1 with one named line for a refusal or a mismatch, exit 2 for a
user's mistake."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from pipeline_helpers import cli

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "devcontainers"
PYTHON = EXAMPLES / "python" / "devcontainer.json"


def _failed(*args: str, code: int = 1) -> tuple[str, str]:
    """(stdout, the one stderr line) of a command that must exit ``code`` without a trace."""
    result = cli(*args, check=False)
    assert result.returncode == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return result.stdout, lines[0]


def test_build_verify_show_round_trip(tmp_path: Path) -> None:
    """A key from `fleet keygen`, then build, verify (with and without --vkey) and show all
    agree on one address, the one `check` gives, also for a reordered, commented copy."""
    cli("keygen", "builder", "--out", str(tmp_path / "keys"))
    key, vkey = tmp_path / "keys" / "builder.key", tmp_path / "keys" / "builder.vkey"
    out = tmp_path / "m.json"
    built = json.loads(cli("manifest", "build", str(PYTHON), "--key", str(key),
                           "--out", str(out), "--json").stdout)
    checked = json.loads(cli("manifest", "check", str(PYTHON), "--json").stdout)
    verified = json.loads(cli("manifest", "verify", str(out), "--vkey", str(vkey),
                              "--json").stdout)
    shown = json.loads(cli("manifest", "show", str(out), "--json").stdout)
    assert built["address"] == checked["address"] == verified["address"] == shown["address"]
    assert verified["trusted"] is True and verified["signer"] == vkey.read_text().strip()
    assert shown["devcontainer"]["image"].startswith("mcr.microsoft.com/devcontainers/python@")
    assert json.loads(out.read_text())["address"] == shown["address"]
    text = cli("manifest", "verify", str(out)).stdout
    assert text.startswith(f"valid: manifest {shown['address']}") and "--vkey" in text
    assert f"manifest {shown['address']}" in cli("manifest", "show", str(out)).stdout
    value = json.loads(json.dumps(checked["devcontainer"]))
    copy = tmp_path / "devcontainer.json"
    copy.write_text("// reordered\n" + json.dumps(dict(reversed(list(value.items()))), indent=3)
                    .replace("\n}", ",\n  /* trailing comma above */\n}"))
    assert f"is manifest {shown['address']}" in cli("manifest", "check", str(copy)).stdout


def test_tampered_or_untrusted_files_exit_1_with_the_rule(tmp_path: Path) -> None:
    """An edited declaration, a flipped signature bit and a signer not among --vkey each
    exit 1 with one line naming the rule; show refuses a tampered file too."""
    cli("keygen", "a", "--out", str(tmp_path))
    cli("keygen", "b", "--out", str(tmp_path))
    good = tmp_path / "m.json"
    cli("manifest", "build", str(PYTHON), "--key", str(tmp_path / "a.key"), "--out", str(good))
    doc = json.loads(good.read_text())
    edited = tmp_path / "edited.json"
    doc["manifest"]["devcontainer"]["remoteUser"] = "root"
    edited.write_text(json.dumps(doc))
    stdout, line = _failed("manifest", "verify", str(edited), "--json")
    assert json.loads(stdout)["rule"] == "ManifestAddressMismatch"
    assert line.startswith(f"{edited}: ManifestAddressMismatch: ")
    assert "ManifestAddressMismatch" in _failed("manifest", "show", str(edited))[1]
    doc = json.loads(good.read_text())
    sig = bytearray(base64.b64decode(doc["signature"]["sig"]))
    sig[10] ^= 0x40
    doc["signature"]["sig"] = base64.b64encode(sig).decode()
    flipped = tmp_path / "flipped.json"
    flipped.write_text(json.dumps(doc))
    assert "BadManifestSignature" in _failed("manifest", "verify", str(flipped))[1]
    assert "UntrustedManifestKey" in _failed("manifest", "verify", str(good), "--vkey",
                                             str(tmp_path / "b.vkey"))[1]


def test_a_refused_declaration_exits_1_and_writes_nothing(tmp_path: Path) -> None:
    """build and check of a declaration with a lifecycle command exit 1 naming the rule and
    where; build leaves no file."""
    cli("keygen", "a", "--out", str(tmp_path))
    bad = tmp_path / "devcontainer.json"
    bad.write_text(PYTHON.read_text().replace('"remoteUser"',
                                              '"postCreateCommand": "curl x | sh",\n "remoteUser"'))
    out = tmp_path / "m.json"
    _stdout, line = _failed("manifest", "build", str(bad), "--key", str(tmp_path / "a.key"),
                            "--out", str(out))
    assert line == (f"{bad}: LifecycleCommand: $.postCreateCommand: postCreateCommand runs a "
                    "command the manifest cannot pin")
    assert not out.exists()
    stdout, _line = _failed("manifest", "check", str(bad), "--json")
    assert json.loads(stdout) == {"verdict": "refused", "rule": "LifecycleCommand",
                                  "where": "$.postCreateCommand",
                                  "error": "$.postCreateCommand: postCreateCommand runs a "
                                           "command the manifest cannot pin"}


def test_user_mistakes_exit_2_with_one_line(tmp_path: Path) -> None:
    """A missing declaration, a key file that is a verifier key or no key, and an output
    path in a missing folder each exit 2 with one line."""
    cli("keygen", "a", "--out", str(tmp_path))
    key = str(tmp_path / "a.key")
    assert "no such file" in _failed("manifest", "check", str(tmp_path / "none.json"),
                                     code=2)[1]
    assert "MalformedKey" in _failed("manifest", "build", str(PYTHON), "--key",
                                     str(tmp_path / "a.vkey"), "--out", str(tmp_path / "m"),
                                     code=2)[1]
    assert "cannot read the key" in _failed("manifest", "build", str(PYTHON), "--key",
                                            str(tmp_path / "nokey"), "--out",
                                            str(tmp_path / "m"), code=2)[1]
    assert "cannot write" in _failed("manifest", "build", str(PYTHON), "--key", key, "--out",
                                     str(tmp_path / "no" / "such" / "m.json"), code=2)[1]
