"""``fleet grant``: keys, grants and grant events (:mod:`fleet.grants.grant`,
:mod:`fleet.fold.grant_events`; the operator's guide is ``docs/grants.md``).

A grant file holds a grant's canonical bytes, nothing else; a grant is named on the
command line by such a file or by its ``b3:`` address (then asked from the ledger). Every
event is signed here with a key file and published to ``<fleet>.ctl.grant`` with its
event id as ``Nats-Msg-Id``; the ledgers decide it in stream order. With ``--nkey`` the
commands connect as the ``issuer`` NATS user (``fleet nats-config``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from fleet_ledger.cli._app import FLEET, CheckFailed, UserError, cli
from fleet_ledger.cli._common import api, emit_json, load_key, span_s, split_servers, text_or_file

_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}\Z")


@cli.group()
def grant() -> None:
    """Grants: what a run may do, signed by its issuer; minting, amending, revoking."""


# -- keys ---------------------------------------------------------------------------------------


def parse_public(value: str, what: str) -> bytes:
    """A public key (32 bytes) from hex, base64, or a file holding either."""
    from fleet_ledger.fleet.record.seal import decode_key

    try:
        text = text_or_file(value)
    except OSError as exc:
        raise UserError(f"cannot read {what} {value}: {exc}") from None
    if re.fullmatch(r"[0-9a-fA-F]{64}", text):
        return bytes.fromhex(text)
    try:
        return bytes(decode_key(text))
    except ValueError:
        raise UserError(f"{what} is not a public key (64 hex digits, base64, or a file "
                        f"holding one): {value}") from None


@grant.command("keygen")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder to write NAME.key (secret) and NAME.vkey (public, hex) into.")
@click.option("--name", default="issuer", show_default=True,
              help="The principal's file name: issuer, agent, trigger, ...")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def grant_keygen(out: Path, name: str, as_json: bool) -> None:
    """Make an Ed25519 key pair for an issuer, an agent or a trigger; prints its public key
    (hex), the form grants and ``--subject`` take."""
    from nacl.signing import SigningKey

    from fleet_ledger.plumbing.files import write_atomically, write_key_file

    if not _NAME.match(name):
        raise UserError(f"--name {name!r}: letters, digits, '_', '.', '-' only")
    key_file, vkey_file = out / f"{name}.key", out / f"{name}.vkey"
    if key_file.exists():
        raise UserError(f"{key_file} exists; a key is never overwritten")
    out.mkdir(parents=True, exist_ok=True)
    key = SigningKey.generate()
    public = bytes(key.verify_key).hex()
    write_key_file(key_file, key)
    write_atomically(vkey_file, (public + "\n").encode())
    if as_json:
        emit_json({"name": name, "public_key": public, "key_file": str(key_file),
                   "vkey_file": str(vkey_file)})
    else:
        click.echo(public)


# -- terms --------------------------------------------------------------------------------------


def terms_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The options that make (or change) terms; each overrides the ``--terms`` file."""
    for option in reversed([
        click.option("--terms", "terms_file", help="Terms as JSON (a file, or - for stdin): "
                     "scopes, budget_uj, not_before_ms, expires_ms, hosts, manifests, mint."),
        click.option("--scope", "scopes", multiple=True, help="A scope (absolute path "
                     "prefix); repeatable."),
        click.option("--budget-uj", type=click.IntRange(0), help="Energy budget (µJ)."),
        click.option("--not-before-ms", type=click.IntRange(0),
                     help="Valid from (Unix ms, ledger time)."),
        click.option("--expires-ms", type=click.IntRange(0), help="Expiry (Unix ms)."),
        click.option("--expires-in", help="Expiry from now: 90s, 30m, 6h, 2d, 1w."),
        click.option("--host", "hosts", multiple=True, help="A host that may hold a run "
                     "under it; repeatable (none: any host)."),
        click.option("--manifest", "manifests", multiple=True,
                     help="An environment manifest address (b3:) allowed; repeatable."),
        click.option("--mint", "mint", help="A mint policy MAX_CHILDREN/MAX_PER_WINDOW/"
                     "WINDOW_MS/TRIGGER_KEY (the key: hex, base64 or a file); 'none' for "
                     "none."),
    ]):
        fn = option(fn)
    return fn


def _read_terms_file(value: str) -> dict[str, Any]:
    try:
        text = click.open_file("-").read() if value == "-" else Path(value).read_text()
    except FileNotFoundError:
        raise UserError(f"{value}: no such terms file") from None
    except OSError as exc:
        raise UserError(f"cannot read the terms {value}: {exc.strerror or exc}") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{value}: the terms are not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise UserError(f"{value}: the terms are a JSON object")
    return obj


def _mint_json(value: str) -> dict[str, Any] | None:
    if value == "none":
        return None
    parts = value.split("/", 3)
    try:
        counts = [int(p) for p in parts[:3]]
    except ValueError:
        counts = []
    if len(parts) != 4 or len(counts) != 3:
        raise UserError(f"--mint {value!r}: give MAX_CHILDREN/MAX_PER_WINDOW/WINDOW_MS/"
                        "TRIGGER_KEY, or 'none'")
    return {"max_children": counts[0], "max_per_window": counts[1], "window_ms": counts[2],
            "trigger_key": parse_public(parts[3], "the trigger key").hex()}


def _duration_ms(value: str) -> int:
    span = span_s(value)
    if span is None:
        raise UserError(f"--expires-in {value!r} is not a duration (90s, 30m, 6h, 2d, 1w)")
    return int(span * 1000)


def build_terms(opts: dict[str, Any], base: Any = None, now_ms: int | None = None) -> Any:
    """Terms from ``--terms`` and the options over it; keys left out keep ``base``'s (a
    :class:`fleet.grants.grant.Terms`, or None: scopes, budget and expiry must be given)."""
    from fleet_ledger.fleet.grants.grant import terms_from_json
    from fleet_ledger.fleet.grants.grant_errors import GrantError

    obj: dict[str, Any] = {}
    if opts.get("terms_file"):
        obj.update(_read_terms_file(opts["terms_file"]))
    if opts.get("scopes"):
        obj["scopes"] = list(opts["scopes"])
    for key in ("budget_uj", "not_before_ms", "expires_ms"):
        if opts.get(key) is not None:
            obj[key] = opts[key]
    if opts.get("expires_in"):
        obj["expires_ms"] = (now_ms or time.time_ns() // 1_000_000) + _duration_ms(
            opts["expires_in"])
    if opts.get("hosts"):
        obj["hosts"] = list(opts["hosts"])
    if opts.get("manifests"):
        obj["manifests"] = list(opts["manifests"])
    if opts.get("mint"):
        obj["mint"] = _mint_json(opts["mint"])
    try:
        return terms_from_json(obj, base)
    except GrantError as exc:
        raise UserError(f"{exc.rule}: {exc}") from None


def _terms_given(opts: dict[str, Any]) -> bool:
    return any(opts.get(k) for k in ("terms_file", "scopes", "budget_uj", "not_before_ms",
                                      "expires_ms", "expires_in", "hosts", "manifests", "mint"))


# -- grants: files and the ledger ---------------------------------------------------------------


def read_grant_file(path: Path) -> tuple[bytes, Any]:
    """A grant file's bytes and the grant in them (canonical; not yet verified)."""
    from fleet_ledger.fleet.grants.grant import decode_grant
    from fleet_ledger.fleet.grants.grant_errors import GrantError

    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{path}: no such grant file") from None
    try:
        return data, decode_grant(data)
    except GrantError as exc:
        raise CheckFailed(f"{path}: {exc.rule}: {exc}") from None


def _is_address(value: str) -> bool:
    return value.startswith("b3:")


def _address(value: str) -> bytes:
    from fleet_ledger.fleet.address import parse_address
    from fleet_ledger.fleet.errors import FleetError

    try:
        return parse_address(value)
    except FleetError as exc:
        raise UserError(str(exc)) from None


# -- publishing ---------------------------------------------------------------------------------


def publish_grant_event(url: str, nkey: Path | None, data: bytes, retry: bool = False
                        ) -> dict[str, Any]:
    """Publish one grant event; its kind, id, address, stream sequence, whether the broker
    took it for a duplicate of the same event (then the sequence is the earlier copy's), and
    the ledger's decision there. ``retry``: a fresh id (:func:`fleet.address.retry_id`), so
    the event is stored and decided again."""
    from fleet_ledger.fleet.fold.grant_events import decode_event, event_id
    from fleet_ledger.fleet.subjects import fleet_names

    return publish_signed(url, nkey, fleet_names(FLEET["name"]).grant_subject, data,
                          event_id(data), decode_event(data).kind_name, retry)


def publish_signed(url: str, nkey: Path | None, subject: str, data: bytes, msg_id: str,
                   kind_name: str, retry: bool = False) -> dict[str, Any]:
    """Publish one signed event (a grant or job event) as the ``issuer`` NATS user (with
    ``nkey``): :func:`publish_grant_event`'s report."""
    import secrets

    from fleet_ledger.cli.operator_cmds import _publish, ledger_decision
    from fleet_ledger.fleet.address import digest, format_address, retry_id
    from fleet_ledger.ledger.nats_config import ISSUER, inbox_prefix

    if retry:
        msg_id = retry_id(msg_id, secrets.token_bytes(8))
    inbox = inbox_prefix(ISSUER) if nkey else None
    try:
        stream_seq, duplicate = asyncio.run(_publish(split_servers(url), nkey, subject, data,
                                                     msg_id, inbox))
    except Exception as exc:
        hint = (f" (no stream takes {subject}: is a ledger of fleet {FLEET['name']!r} "
                "running?)" if "no response from stream" in str(exc) else "")
        raise UserError(f"cannot publish the event to {url}: {exc}{hint}") from None
    return {"event": kind_name, "id": msg_id,
            "address": format_address(digest(data)), "stream_seq": stream_seq,
            "subject": subject, "duplicate": duplicate,
            "decision": ledger_decision(url, nkey, stream_seq, inbox)}


def _finish(doc: dict[str, Any], report: dict[str, Any], as_json: bool, what: str) -> None:
    """``doc`` as JSON, or the report for a person; then exit 1 if the ledger refused the
    event (a retry inside the duplicate window: the earlier copy's decision)."""
    from fleet_ledger.cli.operator_cmds import check_decided, decision_text

    if as_json:
        emit_json(doc)
    else:
        click.echo(decision_text(report, what))
    check_decided(report)


def publish_options(required: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn = click.option("--nkey", type=click.Path(dir_okay=False, path_type=Path),
                          help="NATS nkey seed file (the 'issuer' user).")(fn)
        fn = click.option("--retry", is_flag=True,
                          help="A deliberate retry of an event the ledger refused: sent "
                          "under a fresh id, so the broker does not drop it as a duplicate "
                          "of the refused copy and the ledger decides it again.")(fn)
        return click.option("--nats", "url", envvar="FLEET_NATS" if required else None,
                            required=required,
                            help="NATS server URL(s), comma separated: publish the event."
                            )(fn)
    return wrap


def _key_option(text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return click.option("--key", "key_file", type=click.Path(dir_okay=False, path_type=Path),
                        required=True, help=text)


def _event(build: Callable[[], bytes]) -> bytes:
    from fleet_ledger.fleet.grants.grant_errors import GrantError

    try:
        return build()
    except GrantError as exc:
        raise UserError(f"{exc.rule}: {exc}") from None


def _issuable(data: bytes) -> bytes:
    """``data``, a grant the ledger's ISSUE would take (bar the enrolled host keys, not
    known here), or its refusal."""
    from fleet_ledger.fleet.fold.grant_events import check_issuable
    from fleet_ledger.fleet.grants.grant import decode_grant

    check_issuable(decode_grant(data), ())
    return data


def _write(out: Path, data: bytes) -> None:
    from fleet_ledger.plumbing.files import write_atomically

    write_atomically(out, data)


# -- issue, show, verify ------------------------------------------------------------------------


@grant.command("issue")
@_key_option("The issuer's key file.")
@click.option("--subject", required=True, help="The agent's public key (hex, base64 or a "
              "file): who holds the grant.")
@terms_options
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="The grant file to write.")
@publish_options(False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def grant_issue(key_file: Path, subject: str, out: Path, url: str | None, nkey: Path | None,
                as_json: bool, retry: bool, **opts: Any) -> None:
    """Sign a grant; prints its address (a run's grants_id). With --nats, also publish its
    ISSUE event so ledgers hold runs under it to it."""
    from fleet_ledger.fleet.address import format_address
    from fleet_ledger.fleet.fold.grant_events import issue_event
    from fleet_ledger.fleet.grants.grant import grant_address, sign_grant

    issuer = load_key(key_file)
    subject_key = parse_public(subject, "--subject")
    terms = build_terms(opts)
    # Refused here as the ledger would refuse its ISSUE (no enrolled host keys known here).
    data = _event(lambda: _issuable(sign_grant(issuer, subject_key, terms)))
    _write(out, data)
    address = format_address(grant_address(data))
    doc: dict[str, Any] = {"address": address, "file": str(out), "published": None,
                           "checked": "offline"}
    if not as_json:
        _offline("checked offline only (the grant's own rules); the ledger's enrolled host "
                 "keys and its decision are the ledger's")
    if not url:
        (emit_json if as_json else click.echo)(doc if as_json else address)
        return
    report = publish_grant_event(url, nkey, _event(lambda: issue_event(issuer, data)), retry)
    doc["published"] = report
    if not as_json:
        click.echo(address)
    _finish(doc, report, as_json, address)


@grant.command("show")
@click.argument("what", metavar="GRANT")
@click.option("--nats", "url", envvar="FLEET_NATS", default="nats://127.0.0.1:4222",
              show_default=True, help="NATS server URL(s) (for a b3: address).")
@click.option("--nkey", type=click.Path(dir_okay=False, path_type=Path),
              help="NATS nkey seed file (the read-only 'reader' user).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def grant_show(what: str, url: str, nkey: Path | None, as_json: bool) -> None:
    """A grant file, or a grant the ledger holds (b3: address: with its effective terms,
    amendments, mints and history)."""
    from fleet_ledger.fleet.grants.grant import grant_json, verify_grant
    from fleet_ledger.fleet.grants.grant_errors import GrantError

    if _is_address(what):
        _address(what)
        doc = api(url, "grant", {"grant": what}, nkey=nkey)
    else:
        data, g = read_grant_file(Path(what))
        doc = grant_json(data)
        try:
            verify_grant(g)
            doc["signature"] = "valid"
        except GrantError:
            doc["signature"] = "INVALID"
        doc["grant"] = base64.b64encode(data).decode()
    (emit_json if as_json else _show_grant)(doc)


def _show_grant(doc: dict[str, Any]) -> None:
    click.echo(f"grant {doc['address']}")
    click.echo(f"  issuer  {doc['issuer']}")
    click.echo(f"  subject {doc['subject']}")
    if doc["parent"]:
        click.echo(f"  parent  {doc['parent']}")
    if "signature" in doc:
        click.echo(f"  signature {doc['signature']}")
    for line in terms_lines(doc.get("effective", doc)):
        click.echo(f"  {line}")
    if "amended" in doc:
        click.echo(f"  amended {doc['amended']} times; minted {doc['minted']} children")
        for ev in doc["history"]:
            click.echo("  " + history_line(ev))


def _when_ms(ms: int) -> str:
    from fleet_ledger.fleet.audit import format_when

    return format_when(ms / 1000) + " UTC"


def terms_lines(t: dict[str, Any], used_uj: int | None = None) -> list[str]:
    """Terms (their JSON form) as lines for a person."""
    if t["expires_ms"] <= t["not_before_ms"]:
        return ["REVOKED: allows nothing"]
    budget = f"budget {t['budget_uj']} uJ"
    if used_uj is not None:
        budget = f"budget {used_uj} of {t['budget_uj']} uJ used"
    hosts = "any host" if t["hosts"] is None else "hosts " + (", ".join(t["hosts"]) or "none")
    manifests = ("any manifest" if t["manifests"] is None
                 else f"{len(t['manifests'])} manifests")
    lines = [f"scopes {' '.join(t['scopes']) or '(none)'}; {budget}",
             f"window {_when_ms(t['not_before_ms'])} .. {_when_ms(t['expires_ms'])}",
             f"{hosts}; {manifests}"]
    m = t["mint"]
    if m is not None:
        lines.append(f"mints at most {m['max_children']} children, {m['max_per_window']} per "
                     f"{m['window_ms']} ms, on triggers of {m['trigger_key'][:16]}...")
    return lines


def history_line(ev: dict[str, Any]) -> str:
    """One grant event of a history, for a person."""
    head = f"{_when_ms(ev['at_ms'])} seq {ev['stream_seq']:<6} {ev['kind']:<10}"
    if ev["kind"] == "amend":
        t = ev["terms"]
        what = ("revoked" if t["expires_ms"] <= t["not_before_ms"]
                else f"#{ev['seq']}: budget {t['budget_uj']} uJ, expires "
                     f"{_when_ms(t['expires_ms'])}")
        return f"{head} {what}"
    if ev["kind"] == "mint":
        return f"{head} {ev['child']} from {ev['standing']} on trigger {ev['trigger']!r}"
    if ev["kind"] == "checkpoint":
        return f"{head} index {ev['index']} state {ev['state']}: {ev['note']}"
    return f"{head} {ev.get('grant', '')}"


def show_run_grant(doc: dict[str, Any]) -> None:
    """The ``"grant"`` of ``fleet run show``, as text."""
    g = doc.get("grant")
    if g is None:
        click.echo("  grant: none presented")
        return
    click.echo(f"  grant {g['id']}" + (f" (under {len(g['chain']) - 1} more)"
                                       if len(g["chain"]) > 1 else ""))
    for line in terms_lines(g["effective"], g["used_uj"]):
        click.echo(f"    {line}")
    for ev in sorted([*g["history"], *g["checkpoints"]], key=lambda e: e["stream_seq"]):
        click.echo("    " + history_line(ev))


@grant.command("verify")
@click.argument("grant_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--parent", "parent_file", type=click.Path(dir_okay=False, path_type=Path),
              help="The parent grant: check the child's parent, issuer and narrowing.")
@click.option("--at-ms", type=click.IntRange(0), help="Judge expiry at this time (Unix ms; "
              "default now).")
def grant_verify(grant_file: Path, parent_file: Path | None, at_ms: int | None) -> None:
    """Check a grant file: canonical bytes, its issuer's signature, issuer != subject, an
    expiry not passed; with --parent, that it is that grant's child and only tightens it.
    Exit 1 with one line when a check fails."""
    from fleet_ledger.fleet.address import format_address
    from fleet_ledger.fleet.fold.grant_events import check_child_of, check_issuable
    from fleet_ledger.fleet.grants.grant import check_narrows, grant_address, verify_grant
    from fleet_ledger.fleet.grants.grant_errors import GrantError

    def check(path: Path) -> tuple[bytes, Any]:
        data, g = read_grant_file(path)
        try:
            verify_grant(g)
            check_issuable(g, ())
        except GrantError as exc:
            raise CheckFailed(f"{path}: {exc.rule}: {exc}") from None
        return data, g

    now = time.time_ns() // 1_000_000 if at_ms is None else at_ms
    data, g = check(grant_file)
    if now >= g.terms.expires_ms:
        raise CheckFailed(f"{grant_file}: GrantExpired: it expired at "
                          f"{_when_ms(g.terms.expires_ms)}")
    if parent_file is not None:
        pdata, p = check(parent_file)
        try:
            check_child_of(g, grant_address(pdata), p.subject)
            check_narrows(g.terms, p.terms)
        except GrantError as exc:
            raise CheckFailed(f"{grant_file}: {exc.rule}: {exc}") from None
    click.echo(f"OK {format_address(grant_address(data))}")


# -- events -------------------------------------------------------------------------------------


@grant.command("mint")
@_key_option("The holder's key file (the standing grant's subject).")
@click.option("--standing", required=True, help="The standing grant: its file, or its b3: "
              "address (its effective terms asked from the ledger).")
@click.option("--trigger", required=True, help="The trigger the mint uses (raised with "
              "'fleet grant trigger').")
@click.option("--subject", required=True, help="The child's subject: the agent's public key.")
@terms_options
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="The child grant file to write.")
@publish_options(True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def grant_mint(key_file: Path, standing: str, trigger: str, subject: str, out: Path,
               url: str, nkey: Path | None, as_json: bool, retry: bool, **opts: Any) -> None:
    """Mint a child of a standing grant on a trigger; terms left out are the standing
    grant's (without its mint policy). Publishes the MINT event."""
    from dataclasses import replace

    from fleet_ledger.fleet.address import format_address
    from fleet_ledger.fleet.fold.grant_events import mint_event
    from fleet_ledger.fleet.grants.grant import check_narrows, grant_address, sign_grant
    from fleet_ledger.fleet.grants.grant_errors import GrantError

    holder = load_key(key_file)
    child_subject = parse_public(subject, "--subject")
    # Checked against the standing grant's effective terms as the ledger holds them.
    address, above, _doc, checked = _terms_to_check(url, nkey, standing, "effective")
    if above is None:
        raise UserError(f"{standing}: {checked}: give the standing grant's file")
    terms = build_terms(opts, replace(above, mint=None))
    try:
        check_narrows(terms, above)
    except GrantError as exc:
        raise UserError(f"{exc.rule}: {exc} (checked {checked})") from None
    if checked != "ledger":
        _offline(f"mint checked {checked}; the ledger decides it")
    child = _event(lambda: sign_grant(holder, child_subject, terms, parent=address))
    data = _event(lambda: mint_event(holder, address, trigger, child))
    _write(out, child)
    report = publish_grant_event(url, nkey, data, retry)
    report["checked"] = checked
    child_address = format_address(grant_address(child))
    if not as_json:
        click.echo(child_address)
    _finish({"address": child_address, "file": str(out), "published": report}, report,
            as_json, f"of {child_address} on trigger {trigger!r}")


def ledger_terms(url: str, nkey: Path | None, address: bytes, key: str
                 ) -> tuple[dict[str, Any] | None, str]:
    """The grant as the ledger holds it (``fleet.api.grant``) and ``""``, or ``None`` and
    why the ledger could not say (unreachable, or the grant not folded there)."""
    from fleet_ledger.fleet.address import format_address
    from fleet_ledger.ledger.client import ApiError, LedgerUnreachable, call_sync
    from fleet_ledger.ledger.nats_config import ISSUER, inbox_prefix

    try:
        doc = call_sync(url, "grant", {"grant": format_address(address)}, nkey=nkey,
                        timeout=10.0, fleet=FLEET["name"], inbox_prefix=inbox_prefix(ISSUER))
    except (ApiError, LedgerUnreachable) as exc:
        return None, str(exc)
    if not isinstance(doc, dict) or key not in doc:
        return None, f"its reply has no {key!r}"
    return doc, ""


def _terms_to_check(url: str, nkey: Path | None, what: str, key: str
                    ) -> tuple[bytes, Any, dict[str, Any] | None, str]:
    """A grant named by its file or its address: its address, the terms a pre-check reads
    (the ledger's ``key`` terms; only when no ledger answers, the file's issued terms, or
    None for an address), the ledger's document, and what the check is against."""
    from fleet_ledger.fleet.grants.grant import grant_address, terms_from_json

    if _is_address(what):
        address, terms = _address(what), None
    else:
        data, g = read_grant_file(Path(what))
        address, terms = grant_address(data), g.terms
    doc, why = ledger_terms(url, nkey, address, key)
    if doc is not None:
        return address, terms_from_json(doc[key]), doc, "ledger"
    if terms is not None:
        return (address, terms, None, "offline only, against the grant file's issued terms "
                f"(the ledger did not answer: {why})")
    return address, None, None, f"not checked (the ledger did not answer: {why})"


def _offline(what: str) -> None:
    click.echo(f"note: {what}", err=True)


def _amendment(url: str, nkey: Path | None, what: str, seq: int | None,
               previous: str | None) -> tuple[bytes, Any, int, bytes, str]:
    """The grant's address, its terms as they stand, the next amendment's sequence and
    previous address, and what the terms were checked against. The terms are the ledger's
    (amended, as its AMEND rule reads them); only when no ledger answers, the grant file's
    issued terms (said: checked offline only), or None for an address (said: not checked).
    ``--seq``/``--previous`` override the ledger's numbering."""
    from fleet_ledger.fleet.fold.grant_events import NO_AMENDMENT

    if (seq is None) != (previous is None):
        raise UserError("give both --seq and --previous, or neither (then the ledger is asked)")
    address, own, doc, checked = _terms_to_check(url, nkey, what, "terms")
    if seq is not None and previous is not None:
        prev = NO_AMENDMENT if previous in ("none", "0") else _address(previous)
        return address, own, seq, prev, checked
    if doc is None:
        raise UserError(f"the ledger was not asked the numbering ({checked}): give --seq and"
                        " --previous")
    last = doc["last_amendment"]
    return (address, own, doc["amended"] + 1,
            NO_AMENDMENT if last is None else _address(last), checked)


def _publish_amend(key_file: Path, what: str, url: str, nkey: Path | None, seq: int | None,
                   previous: str | None, make: Callable[[Any], Any], as_json: bool,
                   label: str, retry: bool) -> None:
    from fleet_ledger.fleet.address import format_address
    from fleet_ledger.fleet.fold.grant_events import amend_event
    from fleet_ledger.fleet.grants.grant import check_narrows
    from fleet_ledger.fleet.grants.grant_errors import GrantError

    issuer = load_key(key_file)
    address, own, n, prev, checked = _amendment(url, nkey, what, seq, previous)
    terms = make(own)
    if own is not None:
        try:
            check_narrows(terms, own)
        except GrantError as exc:
            against = ("the terms the ledger holds" if checked == "ledger"
                       else f"the terms checked {checked}")
            raise UserError(f"{exc.rule}: {exc} (an amendment only tightens {against})"
                            ) from None
    if checked != "ledger":
        _offline(f"{label} checked {checked}; the ledger decides it")
    report = publish_grant_event(url, nkey, _event(
        lambda: amend_event(issuer, address, n, prev, terms)), retry)
    report["seq"] = n
    report["checked"] = checked
    _finish({"grant": format_address(address), "published": report}, report, as_json,
            f"{label} #{n} of {format_address(address)}")


def _amend_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """GRANT, the issuer's key, ``--seq``/``--previous``, where to publish, ``--json``."""
    options: list[Callable[[Callable[..., Any]], Callable[..., Any]]] = [
        click.argument("what", metavar="GRANT"),
        _key_option("The issuer's key file."),
        click.option("--seq", type=click.IntRange(1), help="The amendment's number "
                     "(default: the ledger's last + 1)."),
        click.option("--previous", help="The previous amendment's address ('none' for the "
                     "first; default: asked from the ledger)."),
        publish_options(True),
        click.option("--json", "as_json", is_flag=True, help="Print JSON."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


@grant.command("amend")
@_amend_options
@terms_options
def grant_amend(what: str, key_file: Path, seq: int | None, previous: str | None, url: str,
                nkey: Path | None, as_json: bool, retry: bool, **opts: Any) -> None:
    """Tighten a grant (a file or its b3: address): the options change its terms as they
    stand; a widening is refused here and by the ledger. Takes effect from the run's next
    segment the ledger folds."""
    if not _terms_given(opts):
        raise UserError("say what changes (--budget-uj, --expires-ms, --terms, ...)")
    _publish_amend(key_file, what, url, nkey, seq, previous,
                   lambda own: build_terms(opts, own), as_json, "amendment", retry)


@grant.command("revoke")
@_amend_options
def grant_revoke(what: str, key_file: Path, seq: int | None, previous: str | None, url: str,
                 nkey: Path | None, as_json: bool, retry: bool) -> None:
    """Amend a grant to nothing: every later segment of its runs (and of its children's) is
    refused GrantRevoked; a close still folds."""
    from fleet_ledger.fleet.grants.grant import nothing

    def make(own: Any) -> Any:
        if own is None:
            raise UserError("give the grant file (or let the ledger be asked) to revoke it")
        return nothing(own)

    _publish_amend(key_file, what, url, nkey, seq, previous, make, as_json, "revocation",
                   retry)


@grant.command("trigger")
@click.argument("name")
@_key_option("The trigger key file (a mint policy's trigger_key).")
@publish_options(True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def grant_trigger(name: str, key_file: Path, url: str, nkey: Path | None,
                  as_json: bool, retry: bool) -> None:
    """Raise a trigger: one mint of a standing grant whose policy names this key may use it."""
    from fleet_ledger.fleet.fold.grant_events import trigger_event

    key = load_key(key_file)
    report = publish_grant_event(url, nkey, _event(lambda: trigger_event(key, name)), retry)
    _finish({"trigger": name, "published": report}, report, as_json, repr(name))


@grant.command("checkpoint")
@_key_option("The agent's key file (the run's grant's subject).")
@click.option("--run", "run_id", required=True, help="The run (b3:).")
@click.option("--index", type=click.IntRange(1), help="The segment index the checkpoint is "
              "bound to (default: the run's last, asked from the ledger).")
@click.option("--head", help="The run's head at --index (b3:).")
@click.option("--state", required=True, help="The agent's state: a b3: digest, or a file "
              "(its BLAKE3).")
@click.option("--note", required=True, help="A line saying what the checkpoint is.")
@publish_options(True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def grant_checkpoint(key_file: Path, run_id: str, index: int | None, head: str | None,
                     state: str, note: str, url: str, nkey: Path | None,
                     as_json: bool, retry: bool) -> None:
    """Checkpoint the agent's own state, bound to the run's head: kept in the run's grant
    history (fleet run show)."""
    from fleet_ledger.fleet.address import digest
    from fleet_ledger.fleet.fold.grant_events import checkpoint_event
    from fleet_ledger.ledger.nats_config import ISSUER, inbox_prefix

    agent = load_key(key_file)
    run = _address(run_id)
    if (index is None) != (head is None):
        raise UserError("give both --index and --head, or neither (then the ledger is asked)")
    if index is None or head is None:
        doc = api(url, "run", {"run": run_id}, nkey=nkey, inbox_prefix=inbox_prefix(ISSUER))
        index, head = doc["segments"], doc["head"]
    if _is_address(state):
        state_digest = _address(state)
    else:
        try:
            state_digest = digest(Path(state).read_bytes())
        except FileNotFoundError:
            raise UserError(f"{state}: no such state file (or give a b3: digest)") from None
    head_raw = _address(head)
    report = publish_grant_event(url, nkey, _event(
        lambda: checkpoint_event(agent, run, index, head_raw, state_digest, note)), retry)
    _finish({"run": run_id, "index": index, "head": head, "published": report}, report,
            as_json, f"of {run_id} at index {index}")
