"""Commands on run records: ``fleet verify`` and ``fleet demo``."""

from __future__ import annotations

import json
from pathlib import Path

import click

from cli._app import CheckFailed, UserError, cli
from fleet.errors import FleetError, RecordError
from fleet.verify import RecordReport, verify_record
from fleet.wait_proof import verdict_json
from fleet.wire import decode_record


def read_input(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, not a file") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror}") from None


def report_json(report: RecordReport) -> dict[str, object]:
    return {
        "verdict": "valid",
        "run": report.run,
        "segments": report.segments,
        "head": report.head,
        "phase": report.phase,
        "sealed": report.sealed,
        "energy": report.energy.as_json(),
        "wait_proof": verdict_json(report.wait_proof),
        "decoder": report.decoder,
    }


def describe_failure(exc: FleetError) -> str:
    where = ""
    if isinstance(exc, RecordError) and exc.segment is not None:
        where = f" at segment {exc.segment}"
    return f"invalid{where}: {exc.rule}: {exc}"


@cli.command()
@click.argument("record_file", metavar="RECORD.json")
@click.option("--host-key", help="Base64 Ed25519 key the record must be sealed with.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--reference", is_flag=True,
              help="Decide by the object path only (the reference decoder), skipping the wire "
                   "fast path: to cross-check the two on your own files.")
def verify(record_file: str, host_key: str | None, as_json: bool, reference: bool) -> None:
    """Verify a run record file offline, from genesis."""
    data = read_input(record_file)
    try:
        report = verify_record(decode_record(data), host_key=host_key, fast=not reference)
    except FleetError as exc:
        if as_json:
            out: dict[str, object] = {"verdict": "invalid", "rule": exc.rule, "error": str(exc)}
            if isinstance(exc, RecordError):
                out["segment"] = exc.segment
            click.echo(json.dumps(out))
        raise CheckFailed(f"{record_file}: {describe_failure(exc)}") from None
    if as_json:
        click.echo(json.dumps(report_json(report)))
        return
    e = report.energy
    wait = verdict_json(report.wait_proof)
    click.echo(f"valid: run {report.run}")
    click.echo(f"  segments {report.segments}, phase {report.phase}, head {report.head}")
    click.echo(f"  sealed: {'yes' if report.sealed else 'no host key; chain only'}")
    pools = "".join(f" + {name} {sum(split.values())}" for name, split in
                    (("claim", e.claim), ("overhead", e.overhead)) if any(split.values()))
    click.echo(
        f"  energy {e.total_uj} uJ = receipts {sum(e.receipts.values())} + idle "
        f"{sum(e.idle.values())}{pools} (measured {e.by_provenance()['measured']}, "
        f"estimated {e.by_provenance()['estimated']})"
    )
    click.echo(
        "  wait proof: " + str(wait["verdict"])
        + (f" (segment {wait['segment']})" if "segment" in wait else "")
    )
