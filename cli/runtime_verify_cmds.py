"""``fleet runtime export`` and ``fleet runtime verify``: a runtime run's journal as a file,
and that journal checked against the run's record offline (:mod:`fleet.runtime.runtime_verify`).
The commands only load files (or ask the ledger for the record); the core decides."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from fleet_ledger.cli._app import CheckFailed, UserError
from fleet_ledger.cli._common import emit_json, nats_options
from fleet_ledger.cli.record_cmds import describe_failure, read_input
from fleet_ledger.cli.runtime_cmds import runtime


def bucket_keys(url: str, nkey: Path | None, addresses: list[str]) -> dict[str, list[str]]:
    """The keys the fleet's key bucket holds for ``addresses``: a worker's host keeps a
    value's key only while an interval needs it, the bucket is the one place it lives
    (docs/runtime.md, "Shredding"), so an export asks it for the keys the host gave up."""
    from fleet_ledger.cli.runtime_cmds import _store

    async def go() -> dict[str, list[str]]:
        nc, store = await _store(url, nkey, "fleet-runtime-export")
        try:
            return await store.blob_keys(addresses)
        finally:
            await nc.close()

    return asyncio.run(go()) if addresses else {}


def journal_file(run: str, host_dir: Path,
                 fetch: Callable[[list[str]], dict[str, list[str]]] | None = None
                 ) -> dict[str, Any]:
    """The export file (:func:`fleet.runtime.runtime_verify.journal_json`) of ``run`` as the host
    folder's ``runtime.db`` holds it: every entry with its hash, each ciphertext, and the
    key and salt of each value not shredded (keys the host no longer holds from ``fetch``,
    the fleet's key bucket; without it such values read as shredded)."""
    from fleet_ledger.agents.runtime.journal import DB_NAME, Journal
    from fleet_ledger.fleet.runtime.runtime_verify import journal_json

    if not (host_dir / DB_NAME).exists():
        raise UserError(f"no runtime journal in {host_dir}")
    journal = Journal(host_dir)
    try:
        if journal.run_row(run) is None:
            raise UserError(f"no run {run} in {host_dir}")
        exported, keys = journal.export(run)
        missing = journal.missing_keys(run)
        if fetch is not None and missing:
            keys = {**fetch(missing), **keys}
        entries = [(e.seq, e.kind, e.call, e.body, e.hash) for e in journal.entries(run)]
    finally:
        journal.close()
    return journal_json(run, exported["name"], exported["workflow"], entries,
                        {a: base64.b64decode(b) for a, b in exported["blobs"].items()},
                        {a: (base64.b64decode(k), base64.b64decode(s))
                         for a, (k, s) in keys.items()})


@runtime.command("export")
@click.argument("run_id", metavar="RUN")
@click.option("--data", "host_dir", type=click.Path(file_okay=False, path_type=Path),
              required=True, help="The host's folder (its runtime.db).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Where to write the journal file.")
@click.option("--no-keys", is_flag=True, help="Leave the values' keys out: the file then "
              "shows every value as shredded (it cannot open them).")
@click.option("--offline", is_flag=True, help="Ask no one: keys the host no longer holds "
              "(given back to the fleet's key bucket after their interval) are left out.")
@nats_options
def runtime_export(run_id: str, host_dir: Path, out: Path, no_keys: bool, offline: bool,
                   url: str, nkey: Path | None) -> None:
    """Write RUN's journal (entries, hashes, encrypted values and their keys) to a file for
    ``fleet runtime verify --journal``. A value's key lives in the fleet's key bucket (the
    host holds it only during an interval), so the keys are asked of it unless --offline
    or --no-keys. The keys open the values: keep the file as you keep the host's folder,
    or pass --no-keys."""
    fetch = None if offline or no_keys else (lambda a: bucket_keys(url, nkey, a))
    doc = journal_file(run_id, host_dir, fetch)
    if no_keys:
        doc["keys"] = {}
    out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    click.echo(f"wrote {out} ({len(doc['entries'])} entries)", err=True)


@runtime.command("verify")
@click.argument("run_id", metavar="RUN")
@click.option("--record", "record_file", metavar="FILE",
              help="The run's record file (fleet run export); default: ask the ledger.")
@click.option("--journal", "journal_path", metavar="FILE",
              help="The run's journal file (fleet runtime export).")
@click.option("--data", "host_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Read the journal from this host folder's runtime.db instead.")
@click.option("--host-key", help="Base64 Ed25519 key the record must be sealed with.")
@click.option("--offline", is_flag=True, help="With --data: ask no one for the keys the "
              "host gave back to the fleet's key bucket (those values read as shredded).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@nats_options
def runtime_verify(run_id: str, record_file: str | None, journal_path: str | None,
                   host_dir: Path | None, host_key: str | None, offline: bool,
                   as_json: bool, url: str, nkey: Path | None) -> None:
    """Check RUN's journal against its record: every entry chains from the run's genesis,
    each executed segment's journal root and call account are its interval's, each park's
    transcript is the journal's head there, the seals verify, and every value with a key
    opens to its address (shredded values are listed, not errors). With --record and
    --journal nothing is asked of anyone. Exit 1 names the first mismatch."""
    from fleet_ledger.fleet.errors import FleetError
    from fleet_ledger.fleet.record.wait_proof import verdict_json
    from fleet_ledger.fleet.record.wire import decode_record
    from fleet_ledger.fleet.runtime.runtime_verify import parse_journal, report_json, verify_runtime

    if journal_path is None and host_dir is None:
        raise UserError("give the journal: --journal FILE or --data HOST_FOLDER")
    if journal_path is not None:
        journal_bytes = read_input(journal_path)
    else:
        assert host_dir is not None
        fetch = None if offline else (lambda a: bucket_keys(url, nkey, a))
        journal_bytes = json.dumps(journal_file(run_id, host_dir, fetch)).encode()
    if record_file is not None:
        record_bytes = read_input(record_file)
    else:
        from fleet_ledger.cli._wiring import LedgerRecordSource
        from fleet_ledger.cli.ledger_cmds import _CliSource

        record_bytes = _CliSource(LedgerRecordSource(url, nkey)).record(run_id)
    try:
        record = decode_record(record_bytes)
        report = verify_runtime(record, parse_journal(journal_bytes), host_key)
    except FleetError as exc:
        if as_json:
            out: dict[str, object] = {"verdict": "invalid", "rule": exc.rule, "error": str(exc)}
            if (segment := getattr(exc, "segment", None)) is not None:
                out["segment"] = segment
            emit_json(out)
        raise CheckFailed(f"{run_id}: {describe_failure(exc)}") from None
    if report.run != run_id:
        raise CheckFailed(f"{run_id}: invalid: RunMismatch: the record and journal are run"
                          f" {report.run}'s")
    if as_json:
        emit_json(report_json(report))
        return
    wait = verdict_json(report.wait_proof)
    click.echo(f"valid: run {report.run}")
    click.echo(f"  journal: {report.entries} entries, head {report.head}; record:"
               f" {report.segments} segments, {report.phase}")
    for i in report.intervals:
        click.echo(f"  segment {i.segment}: entries {i.first}..{i.end - 1} {i.outcome},"
                   f" dispatched {list(i.dispatched)} resolved {list(i.resolved)}")
    if report.unsealed:
        click.echo(f"  {report.unsealed} entries after the last sealed interval (running)")
    click.echo(f"  values: {report.values} open to their address, {len(report.shredded)}"
               " shredded")
    for address in report.shredded:
        click.echo(f"    shredded {address}")
    click.echo("  wait proof: " + str(wait["verdict"])
               + (f" (segment {wait['segment']})" if "segment" in wait else ""))
