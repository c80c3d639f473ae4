"""Witness commands: ``fleet witness keygen`` and ``fleet witness serve`` (C2SP tlog-witness)."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from typing import Any

import click

from fleet_ledger.cli._app import UserError, cli
from fleet_ledger.cli.log_cmds import load_verifiers
from fleet_ledger.fleet.log.log_errors import MalformedKey


@cli.group()
def witness() -> None:
    """Cosign the ledger's checkpoints as a C2SP tlog-witness."""


@witness.command("keygen")
@click.argument("name")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory for NAME.key (mode 0600) and NAME.vkey.")
def witness_keygen(name: str, out_dir: Path) -> None:
    """Generate a cosignature/v1 (type 0x04) Ed25519 witness key pair named NAME."""
    from fleet_ledger.fleet.log.cosignature import generate_witness_signer
    from fleet_ledger.plumbing.files import write_secret

    try:
        signer = generate_witness_signer(name)
    except MalformedKey as exc:
        raise UserError(str(exc)) from None
    stem = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in name)
    key_path, vkey_path = out_dir / f"{stem}.key", out_dir / f"{stem}.vkey"
    if key_path.exists() or vkey_path.exists():
        raise UserError(f"{key_path} or {vkey_path} exists; refusing to overwrite a key")
    out_dir.mkdir(parents=True, exist_ok=True)
    write_secret(key_path, signer.text() + "\n")
    vkey_path.write_text(signer.key().text() + "\n")
    click.echo(f"wrote {key_path} (secret) and {vkey_path}: {signer.key().text()}")


def _listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise UserError(f"--listen {text!r} is not HOST:PORT")
    return host or "127.0.0.1", int(port)


@witness.command("serve")
@click.option("--key", "key_file", required=True,
              type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="The witness's signer key file (from `fleet witness keygen`).")
@click.option("--log-vkey", "log_vkeys", multiple=True, required=True, metavar="VKEY",
              help="Verifier key of a log to witness (its name is the origin); repeatable.")
@click.option("--state", "state_dir", required=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="Folder of the witness's state file (last cosigned checkpoint per log).")
@click.option("--listen", default="127.0.0.1:7380", show_default=True,
              help="HOST:PORT to listen on (port 0: any free port, printed on start).")
@click.option("--prefix", default="", help="Submission URL prefix, e.g. /witness.")
def witness_serve(key_file: Path, log_vkeys: tuple[str, ...], state_dir: Path, listen: str,
                  prefix: str) -> None:
    """Serve POST <prefix>/add-checkpoint until SIGINT/SIGTERM."""
    from fleet_ledger.anchors.witness_server import Witness, WitnessHTTPServer
    from fleet_ledger.fleet.log.cosignature import parse_witness_signer

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        signer = parse_witness_signer(key_file.read_text())
    except (OSError, MalformedKey) as exc:
        raise UserError(f"cannot load witness key {key_file}: {exc}") from None
    logs = load_verifiers(log_vkeys)
    address = _listen(listen)
    try:
        state = Witness(signer, logs, state_dir)
    except (OSError, ValueError, KeyError) as exc:
        raise UserError(f"cannot load witness state in {state_dir}: {exc}") from None
    try:
        httpd = WitnessHTTPServer(address, state, prefix=prefix)
    except OSError as exc:
        raise UserError(f"cannot listen on {listen}: {exc.strerror or exc}") from None

    def stop(*_: Any) -> None:
        threading.Thread(target=httpd.shutdown, daemon=True).start()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)
    click.echo(f"witness {signer.name} listening on {httpd.url} (vkey {signer.key().text()})",
               err=True)
    try:
        httpd.serve_forever()
    finally:
        httpd.server_close()
