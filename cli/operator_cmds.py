"""Operator commands: ``operator keygen`` and ``operator rotate``, and the publishing of
control events (``fleet host enroll|revoke|rekey --nats``; :mod:`fleet.control`).

The operator's signing key never reaches a ledger: ledgers are given its verifier key
(``fleet ledger serve --operator-vkey``) and fold the signed events from the stream.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import click

from cli._app import FLEET, UserError, cli
from cli._common import emit_json, load_key, split_servers

KEY_FILE = "operator.key"
VKEY_FILE = "operator.vkey"


@cli.group()
def operator() -> None:
    """The operator key that signs control events (enroll, revoke, re-key, rotate)."""


@operator.command("keygen")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder to write operator.key (secret) and operator.vkey into.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def operator_keygen(out: Path, as_json: bool) -> None:
    """Make an operator key; prints its verifier key (give it to every ledger)."""
    from nacl.signing import SigningKey

    from fleet.seal import encode_key
    from plumbing.files import write_atomically, write_key_file

    out.mkdir(parents=True, exist_ok=True)
    if (out / KEY_FILE).exists():
        raise UserError(f"{out / KEY_FILE} exists; an operator key is never overwritten")
    key = SigningKey.generate()
    vkey = encode_key(bytes(key.verify_key))
    write_key_file(out / KEY_FILE, key)
    write_atomically(out / VKEY_FILE, (vkey + "\n").encode())
    if as_json:
        emit_json({"vkey": vkey, "key_file": str(out / KEY_FILE)})
    else:
        click.echo(vkey)


@operator.command("rotate")
@click.option("--new-vkey", required=True, help="The next operator's verifier key (base64 "
              "or a file holding it).")
@click.option("--operator-key", "key_file", required=True,
              type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="The current operator's key file (operator.key).")
@click.option("--nats", "url", envvar="FLEET_NATS", required=True,
              help="NATS server URL(s), comma separated.")
@click.option("--nkey", type=click.Path(dir_okay=False, path_type=Path),
              help="NATS nkey seed file.")
@click.option("--seq", type=click.IntRange(1, 2**64 - 1),
              help="Event sequence number (default: the time in microseconds).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def operator_rotate(new_vkey: str, key_file: Path, url: str, nkey: Path | None,
                    seq: int | None, as_json: bool) -> None:
    """Hand control over to a new operator key: later events by this key are refused."""
    from fleet.control import OPERATOR

    report = publish_event(url, nkey, key_file, OPERATOR, "", parse_vkey(new_vkey), seq)
    _report(report, as_json)


def parse_vkey(value: str) -> bytes:
    """32 key bytes from base64 text or a file holding it; a bad one is a one-line error."""
    from cli._common import text_or_file
    from fleet.seal import decode_key

    try:
        return bytes(decode_key(text_or_file(value)))
    except OSError as exc:
        raise UserError(f"cannot read the verifier key {value}: {exc}") from None
    except ValueError as exc:
        raise UserError(f"not a verifier key: {exc}") from None


def operator_vkeys(values: tuple[str, ...]) -> tuple[bytes, ...]:
    return tuple(parse_vkey(v) for v in values)




def publish_event(url: str, nkey: Path | None, key_file: Path, kind: int, host: str,
                  key: bytes | None, seq: int | None) -> dict[str, Any]:
    """Sign and publish one control event; returns its stream position and id."""
    from fleet.control import KINDS, encode_event, event_id, sign_event
    from fleet.control_errors import MalformedControl
    from fleet.subjects import fleet_names

    signer = load_key(key_file)
    try:
        ev = sign_event(signer, kind, seq or time.time_ns() // 1000, host, key)
    except MalformedControl as exc:
        raise UserError(str(exc)) from None
    data = encode_event(ev)
    subject = fleet_names(FLEET["name"]).control_subject(KINDS[kind])
    try:
        stream_seq = asyncio.run(_publish(split_servers(url), nkey, subject, data))
    except Exception as exc:
        raise UserError(f"cannot publish the event to {url}: {exc}") from None
    return {"event": KINDS[kind], "host": host or None, "seq": ev.seq,
            "id": event_id(data), "stream_seq": stream_seq, "subject": subject}


async def _publish(servers: list[str], nkey: Path | None, subject: str, data: bytes,
                   msg_id: str | None = None, inbox: str | None = None) -> int:
    """Publish one signed event to the stream (deduplicated by ``msg_id``, default the
    control event's id); its stream sequence. ``inbox``: the NATS user's own prefix."""
    from fleet.control import event_id
    from plumbing.nats_connect import connect

    nc = await connect(servers, nkey, name="fleet-operator", inbox_prefix=inbox)
    try:
        ack = await nc.jetstream(timeout=10.0).publish(
            subject, data, headers={"Nats-Msg-Id": msg_id or event_id(data)})
        return int(ack.seq)
    finally:
        await nc.close()


def _report(report: dict[str, Any], as_json: bool) -> None:
    if as_json:
        emit_json(report)
    else:
        click.echo(f"published {report['event']} {report['host'] or ''} at stream sequence"
                   f" {report['stream_seq']} (seq {report['seq']}); ledgers decide it there")
