"""Fleet-log commands: ``keygen``, ``note verify``, ``checkpoint verify``, ``verify-proof``.

Each verifying command exits 0 only when everything checked holds; otherwise exit 1 with
one line ``<RuleName>: <what failed>``. A missing or unreadable file or key is a user error
(exit 2), also one line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import click

from fleet_ledger.cli._app import CheckFailed, UserError, cli
from fleet_ledger.cli._common import api, nats_options
from fleet_ledger.fleet.log.checkpoint import parse_checkpoint
from fleet_ledger.fleet.log.log_errors import LogError, MalformedKey
from fleet_ledger.fleet.log.note import (
    Verifier,
    generate_signer,
    open_note,
    parse_verifier_key,
    valid_name,
)
from fleet_ledger.fleet.log.proof_bundle import verify_bundle
from fleet_ledger.plumbing.files import write_secret

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")

vkey_option = click.option(
    "--vkey",
    "vkeys",
    multiple=True,
    required=True,
    metavar="VKEY",
    help="Verifier key: a file holding name+keyid+base64, or that text itself (repeatable).",
)


def _read_text(path: str, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else None
        raise UserError(f"cannot read {what} {path}: {why or exc}") from exc


def load_verifiers(values: tuple[str, ...]) -> list[Verifier]:
    """Verifier keys from files (or literal key text when no such file exists)."""
    verifiers = []
    for value in values:
        if Path(value).exists() or "+" not in value:
            text = _read_text(value, "verifier key file")
        else:
            text = value
        try:
            verifiers.append(parse_verifier_key(text.strip()))
        except MalformedKey as exc:
            raise UserError(f"MalformedKey: {value}: {exc}") from exc
    return verifiers


def _failed(exc: LogError) -> CheckFailed:
    return CheckFailed(f"{exc.rule}: {exc}")


def _emit(as_json: bool, doc: dict[str, Any], line: str) -> None:
    click.echo(json.dumps(doc, sort_keys=True) if as_json else line)


@cli.command()
@click.argument("name")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Directory to write NAME.key (mode 0600) and NAME.vkey into.")  # fmt: skip
def keygen(name: str, out_dir: str) -> None:
    """Generate an Ed25519 note key pair for NAME (e.g. the log's origin)."""
    if not valid_name(name):
        raise UserError(f"invalid key name {name!r}: it must be non-empty, without spaces or '+'")
    stem = _UNSAFE.sub("_", name)
    folder = Path(out_dir)
    key_path, vkey_path = folder / f"{stem}.key", folder / f"{stem}.vkey"
    for path in (key_path, vkey_path):
        if path.exists():
            raise UserError(f"{path} exists; refusing to overwrite a key")
    signer = generate_signer(name)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_secret(key_path, signer.text() + "\n")
        vkey_path.write_text(signer.verifier().text() + "\n")
    except OSError as exc:
        raise UserError(f"cannot write keys to {folder}: {exc.strerror or exc}") from exc
    click.echo(f"wrote {key_path} (secret) and {vkey_path}: {signer.verifier().text()}")


@cli.group()
def note() -> None:
    """C2SP signed notes."""


@note.command("verify")
@click.argument("file")
@vkey_option
def note_verify(file: str, vkeys: tuple[str, ...]) -> None:
    """Verify any signed note FILE against the verifier key(s)."""
    verifiers = load_verifiers(vkeys)
    try:
        opened = open_note(_read_text(file, "note"), verifiers)
    except LogError as exc:
        raise _failed(exc) from exc
    names = ", ".join(f"{s.name}+{s.key_id:08x}" for s in opened.verified)
    click.echo(f"note verified: signed by {names}")


@cli.group(invoke_without_command=True)
@nats_options
@click.option("--json", "as_json", is_flag=True, help="Print {size, root, checkpoint} as JSON.")
@click.option("--min-size", type=click.IntRange(min=0), default=None, metavar="N",
              help="Fail (exit 1) unless the ledger has a checkpoint of at least N leaves "
                   "(it waits up to 2 s for one).")
@click.pass_context
def checkpoint(ctx: click.Context, url: str, nkey: Path | None, as_json: bool,
               min_size: int | None) -> None:
    """Signed checkpoints of the fleet log (bare: fetch the newest from a ledger; any
    replica answers with the newest any of them published)."""
    if ctx.invoked_subcommand is None:
        body = None if min_size is None else {"min_size": min_size}
        doc = api(url, "checkpoint", body, nkey=nkey)
        if as_json:
            click.echo(json.dumps({key: doc[key] for key in ("size", "root", "checkpoint")}))
        else:
            click.echo(doc["checkpoint"], nl=not doc["checkpoint"].endswith("\n"))


@checkpoint.command("verify")
@click.argument("file")
@vkey_option
@click.option("--json", "as_json", is_flag=True, help="Print {origin, size, root} as JSON.")
def checkpoint_verify(file: str, vkeys: tuple[str, ...], as_json: bool) -> None:
    """Verify a signed checkpoint FILE and print its origin, size and (base64) root."""
    verifiers = load_verifiers(vkeys)
    try:
        parsed = parse_checkpoint(open_note(_read_text(file, "checkpoint"), verifiers).text)
    except LogError as exc:
        raise _failed(exc) from exc
    doc = {"origin": parsed.origin, "size": parsed.size, "root": parsed.root_base64()}
    _emit(as_json, doc, f"checkpoint verified: {parsed.origin} size {parsed.size} root "
                        f"{parsed.root_base64()}")  # fmt: skip


@cli.command("verify-proof")
@click.argument("file")
@vkey_option
@click.option("--json", "as_json", is_flag=True, help="Print what the bundle proves as JSON.")
@click.option("--witness-vkey", "witness_vkeys", multiple=True, metavar="VKEY",
              help="A witness's cosignature/v1 verifier key (file or text); repeatable.")
@click.option("--require-witnesses", type=click.IntRange(0), default=0, metavar="K",
              help="Fail unless K of the given witnesses cosigned the checkpoint (or a later "
                   "one it is consistent with).")
@click.option("--tsa-ca", "tsa_cas", multiple=True, metavar="PEM",
              help="Trust anchor(s) of RFC 3161 receipts; checks the bundle's TSA receipts.")
def verify_proof(file: str, vkeys: tuple[str, ...], as_json: bool,
                 witness_vkeys: tuple[str, ...] = (), require_witnesses: int = 0,
                 tsa_cas: tuple[str, ...] = ()) -> None:
    """Verify a proof bundle FILE (as printed by `fleet prove`) offline, and its anchors."""
    verifiers = load_verifiers(vkeys)
    try:
        bundle = json.loads(_read_text(file, "proof bundle"))
    except json.JSONDecodeError as exc:
        raise CheckFailed(f"MalformedBundle: {file} is not JSON: {exc.msg}") from exc
    try:
        proved = verify_bundle(bundle, verifiers)
    except LogError as exc:
        raise _failed(exc) from exc
    keys = ("origin", "tree_size", "leaf_index", "run", "index", "head")
    doc = {key: bundle[key] for key in keys}
    line = (
        f"proof verified: {bundle['run']} segment {proved.leaf.index} head {bundle['head']}"
        f" is leaf {proved.leaf_index} of {proved.checkpoint.origin} size {proved.checkpoint.size}"
    )
    if "anchors" in bundle or witness_vkeys or require_witnesses or tsa_cas:
        from fleet_ledger.cli.anchor_cmds import check_anchors

        report = check_anchors(bundle, proved.checkpoint, verifiers, witness_vkeys,
                               require_witnesses, tsa_cas)
        doc["anchors"] = [c.as_json() for c in report.checks]
        doc["witnesses"] = list(report.witnesses)
        line += "".join(f"\n  {'verified' if c.verified else 'unchecked'} {c.kind} {c.anchor}"
                        f" (size {c.size}): {c.detail}" for c in report.checks)
    _emit(as_json, doc, line)
