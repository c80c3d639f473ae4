"""``fleet job``: jobs of many item runs, sealed as one Merkle-sum receipt (``docs/jobs.md``).

``open`` and ``seal`` sign a job event with a key file and publish it to ``<fleet>.ctl.job``
(the ledgers decide it in stream order, :mod:`fleet.fold.job_events`); ``list``, ``show`` and
``prove`` ask a ledger; ``verify-proof`` and ``verify`` work offline, with nothing but the
ledger's verifier key or the exported item records.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import click

from fleet_ledger.cli._app import FLEET, CheckFailed, UserError, cli
from fleet_ledger.cli._common import api, emit_json, load_key, nats_options
from fleet_ledger.fleet.jobs.job_id import MAX_JOB_ITEMS


@cli.group()
def job() -> None:
    """Jobs: many item runs on many hosts, sealed as one receipt that proves each item."""


def _job_text(value: str) -> str:
    """A job id as given (``b3:...`` or its 43 characters), checked, as ``b3:`` text."""
    from fleet_ledger.fleet.address import format_address, parse_address
    from fleet_ledger.fleet.errors import FleetError

    text = value if value.startswith("b3:") else "b3:" + value
    try:
        return format_address(parse_address(text))
    except FleetError:
        raise UserError(f"not a job id: {value!r} (b3: and 43 base64url characters)") from None


def _publish(url: str, nkey: Path | None, data: bytes, retry: bool) -> dict[str, Any]:
    from fleet_ledger.cli.grant_cmds import publish_signed
    from fleet_ledger.fleet.fold.job_events import decode_job_event, event_id
    from fleet_ledger.fleet.subjects import fleet_names

    return publish_signed(url, nkey, fleet_names(FLEET["name"]).job_subject, data,
                          event_id(data), decode_job_event(data).kind_name, retry)


def _publish_options(fn: Any) -> Any:
    fn = click.option("--nkey", type=click.Path(dir_okay=False, path_type=Path),
                      help="NATS nkey seed file (the 'issuer' user).")(fn)
    fn = click.option("--retry", is_flag=True, help="A deliberate retry of an event the "
                      "ledger refused: sent under a fresh id, so it is decided again.")(fn)
    fn = click.option("--nats", "url", envvar="FLEET_NATS", default="nats://127.0.0.1:4222",
                      show_default=True, help="NATS server URL(s), comma separated.")(fn)
    return click.option("--key", "key_file", type=click.Path(dir_okay=False, path_type=Path),
                        required=True, help="The job issuer's key file (fleet grant "
                        "keygen); a seal also takes an operator's.")(fn)


def _finish(doc: dict[str, Any], report: dict[str, Any], as_json: bool, what: str) -> None:
    from fleet_ledger.cli.operator_cmds import check_decided, decision_text

    if as_json:
        emit_json(doc)
    else:
        click.echo(decision_text(report, what))
    check_decided(report)


@job.command("open")
@click.argument("name")
@click.option("--items", type=click.IntRange(1, MAX_JOB_ITEMS), required=True,
              help="How many items the job has (item runs 0 .. N-1); a ledger folds jobs of "
                   f"up to {MAX_JOB_ITEMS} items.")
@click.option("--grant", help="Every item runs under this grant (its b3: address); the key "
              "must be the grant's issuer.")
@click.option("--nonce", help="16 bytes in hex making the job id unique (default: random).")
@_publish_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def job_open(name: str, items: int, grant: str | None, nonce: str | None, key_file: Path,
             url: str, nkey: Path | None, retry: bool, as_json: bool) -> None:
    """Open job NAME of N items; prints its id (what item runs and every other command
    name it by)."""
    from fleet_ledger.fleet.address import format_address, parse_address
    from fleet_ledger.fleet.errors import FleetError
    from fleet_ledger.fleet.fold.job_events import open_event
    from fleet_ledger.fleet.jobs.job_id import NONCE_SIZE, JobTerms, encode_terms, job_id

    key = load_key(key_file)
    try:
        raw_nonce = secrets.token_bytes(NONCE_SIZE) if nonce is None else bytes.fromhex(nonce)
        grant_id = None if grant is None else parse_address(grant)
        terms = JobTerms(name, items, bytes(key.verify_key), raw_nonce, grant_id)
        data = open_event(key, encode_terms(terms))
    except ValueError:
        raise UserError(f"--nonce {nonce!r}: {NONCE_SIZE} bytes in hex") from None
    except FleetError as exc:
        raise UserError(f"{exc.rule}: {exc}") from None
    job_text = format_address(job_id(terms))
    report = _publish(url, nkey, data, retry)
    doc = {"job": job_text, "name": name, "items": items, "grant": grant,
           "nonce": raw_nonce.hex(), "published": report}
    if not as_json and report["decision"]["decision"] != "refused":
        click.echo(job_text)
    _finish(doc, report, as_json, f"job {name!r} ({items} items)")


@job.command("seal")
@click.argument("job_id", metavar="JOB")
@_publish_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def job_seal(job_id: str, key_file: Path, url: str, nkey: Path | None, retry: bool,
             as_json: bool) -> None:
    """Seal JOB now: its receipt lists the items not closed as missing."""
    from fleet_ledger.fleet.address import parse_address
    from fleet_ledger.fleet.fold.job_events import seal_event

    text = _job_text(job_id)
    report = _publish(url, nkey, seal_event(load_key(key_file), parse_address(text)), retry)
    _finish({"job": text, "published": report}, report, as_json, f"of job {text}")


@job.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@nats_options
def job_list(as_json: bool, url: str, nkey: Path | None) -> None:
    """The jobs the ledger holds, newest first."""
    doc = api(url, "jobs", {}, nkey=nkey)
    if as_json:
        emit_json(doc)
        return
    for j in doc["jobs"]:
        state = "sealed" if j["sealed"] else "open"
        click.echo(f"{j['job']}  {j['name']}: {j['closed']}/{j['items']} closed, {state}")


def _energy_line(energy: dict[str, Any]) -> str:
    parts = " + ".join(f"{source} {sum(energy[f'{source}_uj'].values())}"
                       for source in ("receipts", "idle", "claim", "overhead"))
    p = energy["by_provenance_uj"]
    return (f"energy {energy['total_uj']} uJ = {parts} (measured {p['measured']}, "
            f"estimated {p['estimated']})")


def show_text(doc: dict[str, Any]) -> list[str]:
    """``fleet job show`` for a person (the demo prints it too)."""
    p = doc["progress"]
    lines = [f"job {doc['job']}  {doc['name']!r}",
             f"  items {p['items']}: {p['closed']} closed, {p['bound']} started, "
             f"{p['unstarted']} not started" + ("; sealed" if doc["sealed"] else "; open"),
             "  " + _energy_line(doc["energy"]),
             "  wait proofs: " + ", ".join(f"{k} {v}" for k, v in doc["verdicts"].items())]
    missing = doc["missing"]
    if missing:
        shown = ", ".join(str(i) for i in missing[:20])
        lines.append(f"  missing {len(missing)}: {shown}" + (" ..." if len(missing) > 20
                                                             else ""))
    r = doc["receipt"]
    if r is not None:
        lines.append(f"  receipt: root {r['root']}, log size {r['log_size']}, leaf "
                     f"{r['leaf_index']}")
    return lines


@job.command("show")
@click.argument("job_id", metavar="JOB")
@click.option("--items", "with_items", is_flag=True, help="Also list the item runs (the "
              "first 200).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@nats_options
def job_show(job_id: str, with_items: bool, as_json: bool, url: str, nkey: Path | None
             ) -> None:
    """A job's progress, energy totals, wait-proof verdicts and missing items (its
    receipt's, once sealed)."""
    doc = api(url, "job", {"job": _job_text(job_id), "items": with_items}, nkey=nkey)
    if as_json:
        emit_json(doc)
        return
    for line in show_text(doc):
        click.echo(line)
    for item in doc.get("item_runs", []):
        click.echo(f"  item {item['index']}: {item['run']}"
                   + ("  closed" if item["closed"] else ""))


@job.command("export")
@click.argument("job_id", metavar="JOB")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="The folder to write item-<index>.json record files into.")
@nats_options
def job_export(job_id: str, out: Path, url: str, nkey: Path | None) -> None:
    """Write the record file of every item run of JOB (what ``fleet job verify --records``
    reads; each as ``fleet run export`` writes it)."""
    from fleet_ledger.cli._wiring import LedgerRecordSource
    from fleet_ledger.cli.ledger_cmds import _CliSource

    text = _job_text(job_id)
    source = _CliSource(LedgerRecordSource(url, nkey))  # as `fleet run export` reads one
    out.mkdir(parents=True, exist_ok=True)
    written, first = 0, 0
    while True:
        doc = api(url, "job", {"job": text, "items": True, "from": first}, nkey=nkey)
        for item in doc["item_runs"]:
            (out / f"item-{item['index']}.json").write_bytes(source.record(item["run"]))
            written += 1
        first += len(doc["item_runs"])
        if not doc["item_runs_more"] or not doc["item_runs"]:
            break
    click.echo(f"wrote {written} item records of job {text} into {out}", err=True)


@job.command("prove")
@click.argument("job_id", metavar="JOB")
@click.option("--item", type=click.IntRange(0), default=0, show_default=True,
              help="The item to prove.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the bundle to FILE.")
@nats_options
def job_prove(job_id: str, item: int, out: Path | None, url: str, nkey: Path | None) -> None:
    """The proof bundle of an item of a sealed JOB: its sum-tree path to the job's receipt
    and the receipt's inclusion in a signed checkpoint."""
    bundle = api(url, "job_prove", {"job": _job_text(job_id), "item": item}, nkey=nkey)
    text = json.dumps(bundle, indent=2) + "\n"
    if out is not None:
        out.write_text(text)
        click.echo(f"wrote {out}: item {item} of job {bundle['job']}, receipt leaf "
                   f"{bundle['leaf_index']} of {bundle['tree_size']}", err=True)
        return
    click.echo(text, nl=False)


def _load_json(path: str, what: str) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UserError(f"{path}: no such {what}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read {what} {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise CheckFailed(f"MalformedBundle: {path} is not JSON: {exc.msg}") from None


@job.command("verify-proof")
@click.argument("bundle_file", metavar="BUNDLE")
@click.option("--vkey", "vkeys", multiple=True, required=True, metavar="VKEY",
              help="The ledger's verifier key: a file holding it, or its text (repeatable).")
@click.option("--witness-vkey", "witness_vkeys", multiple=True, metavar="VKEY",
              help="A witness's cosignature/v1 verifier key; repeatable.")
@click.option("--require-witnesses", type=click.IntRange(0), default=0, metavar="K",
              help="Fail unless K of the given witnesses cosigned the checkpoint.")
@click.option("--json", "as_json", is_flag=True, help="Print what the bundle proves as JSON.")
def job_verify_proof(bundle_file: str, vkeys: tuple[str, ...], witness_vkeys: tuple[str, ...],
                     require_witnesses: int, as_json: bool) -> None:
    """Verify a job proof bundle (fleet job prove) offline: the item in the receipt, the
    receipt in a signed checkpoint (and its anchors)."""
    from fleet_ledger.cli.log_cmds import load_verifiers
    from fleet_ledger.fleet.errors import FleetError
    from fleet_ledger.fleet.jobs.job_bundle import verify_job_bundle
    from fleet_ledger.fleet.jobs.receipt import receipt_json
    from fleet_ledger.fleet.jobs.sum_tree import VERDICTS

    verifiers = load_verifiers(vkeys)
    bundle = _load_json(bundle_file, "job proof bundle")
    try:
        proved = verify_job_bundle(bundle, verifiers)
    except FleetError as exc:
        raise CheckFailed(f"{exc.rule}: {exc}") from None
    item = proved.item
    stated: dict[str, Any] = ({"index": item, "missing": True} if isinstance(item, int) else
                              {"index": item.index, "missing": False,
                               "run": _b3(item.run), "head": _b3(item.head),
                               "energy_uj": sum(item.energy),
                               "verdict": VERDICTS[item.verdict]})
    doc = {"job": bundle["job"], "item": stated, "receipt": receipt_json(proved.receipt),
           "origin": proved.checkpoint.origin, "tree_size": proved.checkpoint.size,
           "leaf_index": proved.leaf_index}
    line = (f"proof verified: item {stated['index']} of job {bundle['job']} "
            + ("is listed missing" if stated["missing"] else
               f"is run {stated['run']} ({stated['energy_uj']} uJ, {stated['verdict']})")
            + f"; the receipt is leaf {proved.leaf_index} of {proved.checkpoint.origin} size "
              f"{proved.checkpoint.size}")
    if "anchors" in bundle or witness_vkeys or require_witnesses:
        from fleet_ledger.cli.anchor_cmds import check_anchors

        report = check_anchors(bundle, proved.checkpoint, verifiers, witness_vkeys,
                               require_witnesses, ())
        doc["anchors"] = [c.as_json() for c in report.checks]
        line += "".join(f"\n  {'verified' if c.verified else 'unchecked'} {c.kind} {c.anchor}"
                        f" (size {c.size}): {c.detail}" for c in report.checks)
    click.echo(json.dumps(doc) if as_json else line)


def _b3(raw: bytes) -> str:
    from fleet_ledger.fleet.address import format_address

    return format_address(raw)


def read_receipt(path: str) -> bytes:
    """A receipt from a file: its bytes, their hex, or a job proof bundle holding it."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise UserError(f"{path}: no such receipt file") from None
    except OSError as exc:
        raise UserError(f"cannot read the receipt {path}: {exc.strerror or exc}") from None
    text = raw.strip()
    if text.startswith(b"{"):
        try:
            return bytes.fromhex(json.loads(text)["receipt"])
        except (ValueError, KeyError, TypeError):
            raise CheckFailed(f"MalformedReceipt: {path}: a JSON file holding a receipt has "
                              "its hex under \"receipt\"") from None
    try:
        return bytes.fromhex(text.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return raw


@job.command("verify")
@click.argument("receipt_file", metavar="RECEIPT")
@click.option("--records", type=click.Path(file_okay=False, exists=True, path_type=Path),
              required=True, help="A folder of the job's item records (fleet export RUN).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def job_verify(receipt_file: str, records: Path, as_json: bool) -> None:
    """Recompute a job's whole receipt from its exported item records, offline: every
    record verified from genesis, each item in its place, nothing left out or counted
    twice, the totals, verdicts and root as the receipt states. RECEIPT: a file with the
    receipt's bytes or hex, or a job proof bundle."""
    from fleet_ledger.fleet.address import format_address
    from fleet_ledger.fleet.errors import FleetError
    from fleet_ledger.fleet.jobs.job_records import items_from_states
    from fleet_ledger.fleet.jobs.receipt import decode_receipt, receipt_json, verify_receipt
    from fleet_ledger.fleet.record.verify import verify_state
    from fleet_ledger.fleet.record.wire import decode_record

    try:
        receipt = decode_receipt(read_receipt(receipt_file))
    except FleetError as exc:
        raise CheckFailed(f"{exc.rule}: {receipt_file}: {exc}") from None
    files = sorted(p for p in records.iterdir() if p.is_file())
    states = []
    for path in files:
        try:
            states.append(verify_state(decode_record(path.read_bytes()))[0])
        except FleetError as exc:
            raise CheckFailed(f"{path}: {exc.rule}: {exc}") from None
        except OSError as exc:
            raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        verify_receipt(receipt, items_from_states(receipt.terms, states))
    except FleetError as exc:
        raise CheckFailed(f"{exc.rule}: {exc}") from None
    doc = {"verdict": "valid", "records": len(files), **receipt_json(receipt)}
    if as_json:
        emit_json(doc)
        return
    click.echo(f"valid: job {format_address(receipt.job)} {receipt.terms.name!r}: "
               f"{receipt.items} items from {len(files)} records, "
               f"{len(receipt.missing)} missing; root {format_address(receipt.root)}")


def open_sim_job(url: str, seed: str, items: int, name: str = "sim") -> tuple[str, dict[str, Any]]:
    """Open a job of ``items`` items for a simulation (``fleet host simulate --job``,
    ``fleet demo``) under the simulated fleet's job issuer (a key derived from ``seed``,
    as the simulation's grant keys are): its id and the publish report; a refusal is one
    line and exit 1."""
    from nacl.signing import SigningKey

    from fleet_ledger.cli.operator_cmds import check_decided
    from fleet_ledger.fleet.address import digest, format_address
    from fleet_ledger.fleet.fold.job_events import open_event
    from fleet_ledger.fleet.jobs.job_id import NONCE_SIZE, JobTerms, encode_terms, job_id

    key = SigningKey(digest(b"fleet-sim/" + seed.encode() + b"/job-issuer"))
    terms = JobTerms(name, items, bytes(key.verify_key), secrets.token_bytes(NONCE_SIZE))
    report = _publish(url, None, open_event(key, encode_terms(terms)), False)
    check_decided(report)
    return format_address(job_id(terms)), report
