"""Operator commands: ``operator keygen`` and ``operator rotate``, and the publishing of
control events (``fleet host enroll|revoke|rekey --nats``; :mod:`fleet.fold.control`).

The operator's signing key never reaches a ledger: ledgers are given its verifier key
(``fleet ledger serve --operator-vkey``) and fold the signed events from the stream.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import click

from fleet_ledger.cli._app import FLEET, UserError, cli
from fleet_ledger.cli._common import emit_json, load_key, split_servers

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

    from fleet_ledger.fleet.record.seal import encode_key
    from fleet_ledger.plumbing.files import write_atomically, write_key_file

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
    from fleet_ledger.fleet.fold.control import OPERATOR

    report = publish_event(url, nkey, key_file, OPERATOR, "", parse_vkey(new_vkey), seq)
    _report(report, as_json)


def parse_vkey(value: str) -> bytes:
    """32 key bytes from base64 text or a file holding it; a bad one is a one-line error."""
    from fleet_ledger.cli._common import text_or_file
    from fleet_ledger.fleet.record.seal import decode_key

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
    from fleet_ledger.fleet.fold.control import KINDS, encode_event, event_id, sign_event
    from fleet_ledger.fleet.fold.control_errors import MalformedControl
    from fleet_ledger.fleet.subjects import fleet_names

    signer = load_key(key_file)
    try:
        ev = sign_event(signer, kind, seq or time.time_ns() // 1000, host, key)
    except MalformedControl as exc:
        raise UserError(str(exc)) from None
    data = encode_event(ev)
    subject = fleet_names(FLEET["name"]).control_subject(KINDS[kind])
    try:
        stream_seq, duplicate = asyncio.run(_publish(split_servers(url), nkey, subject, data))
    except Exception as exc:
        raise UserError(f"cannot publish the event to {url}: {exc}") from None
    return {"event": KINDS[kind], "host": host or None, "seq": ev.seq,
            "id": event_id(data), "stream_seq": stream_seq, "subject": subject,
            "duplicate": duplicate, "decision": ledger_decision(url, nkey, stream_seq)}


async def _publish(servers: list[str], nkey: Path | None, subject: str, data: bytes,
                   msg_id: str | None = None, inbox: str | None = None) -> tuple[int, bool]:
    """Publish one signed event to the stream (deduplicated by ``msg_id``, default the
    control event's id); its stream sequence, and whether the broker took it for a duplicate
    (then the sequence is the earlier copy's). ``inbox``: the NATS user's own prefix."""
    from fleet_ledger.fleet.fold.control import event_id
    from fleet_ledger.plumbing.nats_connect import connect

    nc = await connect(servers, nkey, name="fleet-operator", inbox_prefix=inbox)
    try:
        ack = await nc.jetstream(timeout=10.0).publish(
            subject, data, headers={"Nats-Msg-Id": msg_id or event_id(data)})
        return int(ack.seq), bool(ack.duplicate)
    finally:
        await nc.close()


def ledger_decision(url: str, nkey: Path | None, stream_seq: int,
                    inbox: str | None = None) -> dict[str, Any]:
    """What the ledger decided at ``stream_seq`` (asked with ``min_seq``, so it answers
    once it has folded that far): ``{"decision": "accepted"}``, ``{"decision": "refused",
    "rule", "detail"}``, or ``{"decision": "unknown", "why"}`` when no ledger says."""
    from fleet_ledger.ledger.client import call_sync

    try:
        doc = call_sync(url, "rejections", {"stream_seq": stream_seq, "min_seq": stream_seq,
                                            "limit": 1},
                        nkey=nkey, timeout=5.0, fleet=FLEET["name"], inbox_prefix=inbox)
    except Exception as exc:  # unreachable, behind, no such endpoint: no answer
        return {"decision": "unknown", "why": str(exc).splitlines()[0] if str(exc) else
                type(exc).__name__}
    refused = doc.get("rejections") or []
    if refused:
        return {"decision": "refused", "rule": refused[0]["rule"],
                "detail": refused[0]["detail"]}
    return {"decision": "accepted"}


def decision_text(report: dict[str, Any], what: str) -> str:
    """How a published event (``what``: it, for a person) fared: published, or not (the same
    event is already in the stream), and the ledger's decision at its sequence."""
    d = report["decision"]
    said = {"accepted": "the ledger accepted it",
            "refused": f"the ledger refused it: {d.get('rule')}: {d.get('detail')}",
            "unknown": f"ledgers decide it there (no decision read: {d.get('why')})",
            }[d["decision"]]
    if report.get("duplicate"):
        return (f"not published again: {report['event']} {what} is already at stream "
                f"sequence {report['stream_seq']} (the broker's duplicate window); {said}"
                + ("; to have it decided again, publish it with --retry"
                   if d["decision"] == "refused" else ""))
    return f"published {report['event']} {what} at stream sequence {report['stream_seq']}; {said}"


def check_decided(report: dict[str, Any]) -> None:
    """Exit 1 with one line when the ledger refused the event (after its report)."""
    from fleet_ledger.cli._app import CheckFailed

    d = report["decision"]
    if d["decision"] == "refused":
        raise CheckFailed(f"the ledger refused the {report['event']} event at stream sequence"
                          f" {report['stream_seq']}: {d['rule']}: {d['detail']}")


def _report(report: dict[str, Any], as_json: bool) -> None:
    if as_json:
        emit_json(report)
    else:
        click.echo(decision_text(report, f"{report['host'] or ''} (seq {report['seq']})"))
    check_decided(report)
