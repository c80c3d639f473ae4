"""Environment manifests: ``manifest check``, ``build``, ``verify`` and ``show``.

A declaration the allowlist refuses, or a manifest file that does not verify, ends the
command with exit 1 and one line ``<file>: <RuleName>: <what>`` (with ``--json``, a JSON
object with ``verdict``, ``rule`` and ``error`` first); a missing or unreadable file or
key is a user error (exit 2). docs/manifests.md says what a manifest proves.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from fleet_ledger.cli._app import CheckFailed, UserError, cli
from fleet_ledger.cli.log_cmds import load_verifiers
from fleet_ledger.cli.record_cmds import read_input
from fleet_ledger.fleet.env.manifest import (
    Manifest,
    SignedManifest,
    manifest_of_text,
    read_manifest_file,
    sign,
)
from fleet_ledger.fleet.env.manifest_errors import ManifestError
from fleet_ledger.fleet.log.log_errors import MalformedKey
from fleet_ledger.fleet.log.note import Signer, parse_signer_key
from fleet_ledger.plumbing.files import write_atomically

json_option = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")


@cli.group()
def manifest() -> None:
    """Environment manifests: devcontainer.json in, a canonical signed manifest out."""


def _refused(path: str, exc: ManifestError, as_json: bool, verdict: str) -> CheckFailed:
    if as_json:
        click.echo(json.dumps({"verdict": verdict, "rule": exc.rule, "error": str(exc),
                               "where": exc.where}))
    return CheckFailed(f"{path}: {exc.rule}: {exc}")


def _built(path: str, as_json: bool) -> Manifest:
    try:
        return manifest_of_text(read_input(path))
    except ManifestError as exc:
        raise _refused(path, exc, as_json, "refused") from None


def _opened(path: str, as_json: bool, vkeys: tuple[str, ...] = ()) -> SignedManifest:
    trusted = load_verifiers(vkeys) if vkeys else None
    try:
        return read_manifest_file(read_input(path), trusted)
    except ManifestError as exc:
        raise _refused(path, exc, as_json, "invalid") from None


def _signer(path: Path) -> Signer:
    try:
        return parse_signer_key(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read the key {path}: {getattr(exc, 'strerror', exc)}") from None
    except MalformedKey as exc:
        raise UserError(f"MalformedKey: {path}: {exc} (fleet keygen NAME --out DIR writes "
                        "DIR/NAME.key)") from None


def _summary(m: Manifest) -> dict[str, Any]:
    return {"address": m.address, "canonical": m.canonical.decode("utf-8"),
            "devcontainer": m.devcontainer}


@manifest.command("check")
@click.argument("devcontainer", metavar="DEVCONTAINER.json")
@json_option
def manifest_check(devcontainer: str, as_json: bool) -> None:
    """Check a declaration against the allowlist and print its manifest address."""
    m = _built(devcontainer, as_json)
    if as_json:
        click.echo(json.dumps({"verdict": "accepted", **_summary(m)}))
    else:
        click.echo(f"accepted: {devcontainer} is manifest {m.address}")


@manifest.command("build")
@click.argument("devcontainer", metavar="DEVCONTAINER.json")
@click.option("--key", "key_path", required=True,
              type=click.Path(dir_okay=False, path_type=Path),
              help="The signing key, DIR/NAME.key from `fleet keygen NAME --out DIR`.")
@click.option("--out", "out_path", required=True,
              type=click.Path(dir_okay=False, path_type=Path), help="The manifest file to write.")
@json_option
def manifest_build(devcontainer: str, key_path: Path, out_path: Path, as_json: bool) -> None:
    """Build the canonical, signed manifest of a devcontainer.json."""
    signer = _signer(key_path)
    signed = sign(_built(devcontainer, as_json), signer)
    try:
        write_atomically(out_path, signed.file_text().encode("utf-8"))
    except OSError as exc:
        raise UserError(f"cannot write {out_path}: {exc.strerror or exc}") from None
    if as_json:
        click.echo(json.dumps({"verdict": "built", "out": str(out_path),
                               "signer": signed.signer.text(), **_summary(signed.manifest)}))
    else:
        click.echo(f"wrote {out_path}: manifest {signed.manifest.address}, signed by "
                   f"{signed.signer.name}+{signed.signer.key_id:08x}")


@manifest.command("verify")
@click.argument("manifest_file", metavar="MANIFEST.json")
@click.option("--vkey", "vkeys", multiple=True, metavar="VKEY",
              help="A verifier key the signer must be (a file holding name+keyid+base64, or "
                   "that text; repeatable). Without one, only the file's own key is checked.")
@json_option
def manifest_verify(manifest_file: str, vkeys: tuple[str, ...], as_json: bool) -> None:
    """Verify a manifest file: normal form, address, signature (and signer, with --vkey)."""
    signed = _opened(manifest_file, as_json, vkeys)
    if as_json:
        click.echo(json.dumps({"verdict": "valid", "address": signed.manifest.address,
                               "signer": signed.signer.text(), "trusted": bool(vkeys)}))
        return
    trust = ("one of the keys given" if vkeys
             else "the key the file names; give --vkey to require a key you trust")
    click.echo(f"valid: manifest {signed.manifest.address}")
    click.echo(f"  signed by {signed.signer.text()} ({trust})")


@manifest.command("show")
@click.argument("manifest_file", metavar="MANIFEST.json")
@json_option
def manifest_show(manifest_file: str, as_json: bool) -> None:
    """Show a manifest file (verified against the key it names, as verify does)."""
    signed = _opened(manifest_file, as_json)
    m = signed.manifest
    if as_json:
        click.echo(json.dumps({"signer": signed.signer.text(),
                               "format": m.document["format"], **_summary(m)}))
        return
    d = m.devcontainer
    click.echo(f"manifest {m.address} ({m.document['format']})")
    click.echo(f"  signed by {signed.signer.text()}")
    click.echo(f"  image {d['image']}")
    for ref, options in d.get("features", {}).items():
        shown = ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(options.items()))
        click.echo(f"  feature {ref}" + (f" ({shown})" if shown else ""))
    for key in sorted(set(d) - {"image", "features"}):
        click.echo(f"  {key} {json.dumps(d[key], sort_keys=True)}")
