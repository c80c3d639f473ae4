"""Commands on run records: ``fleet verify`` and ``fleet demo``."""

from __future__ import annotations

import json
from pathlib import Path

import click

from fleet_ledger.cli._app import CheckFailed, UserError, cli
from fleet_ledger.fleet.errors import FleetError
from fleet_ledger.fleet.fold.grant_verify import GrantCheck, verify_grant_evidence
from fleet_ledger.fleet.grants.grant import terms_json
from fleet_ledger.fleet.record.verify import RecordReport, verify_record
from fleet_ledger.fleet.record.wait_proof import verdict_json
from fleet_ledger.fleet.record.wire import decode_record


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
    segment = getattr(exc, "segment", None)
    if segment is not None:
        where = f" at segment {segment}"
    return f"invalid{where}: {exc.rule}: {exc}"


@cli.command()
@click.argument("record_file", metavar="RECORD.json")
@click.option("--host-key", help="Base64 Ed25519 key the record must be sealed with.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--reference", is_flag=True,
              help="Decide by the object path only (the reference decoder), skipping the wire "
                   "fast path: to cross-check the two on your own files.")
@click.option("--grants", "evidence_file", metavar="EVIDENCE.json",
              help="The run's grant evidence (fleet run grant-evidence): also judge every "
                   "segment under the run's grant at its ledger time, as the ledger did.")
def verify(record_file: str, host_key: str | None, as_json: bool, reference: bool,
           evidence_file: str | None) -> None:
    """Verify a run record file offline, from genesis."""
    data = read_input(record_file)
    evidence = None if evidence_file is None else read_input(evidence_file)
    granted: GrantCheck | None = None
    try:
        record = decode_record(data)
        report = verify_record(record, host_key=host_key, fast=not reference)
        if evidence is not None:
            granted = verify_grant_evidence(record, evidence)
    except FleetError as exc:
        if as_json:
            out: dict[str, object] = {"verdict": "invalid", "rule": exc.rule, "error": str(exc)}
            if (segment := getattr(exc, "segment", None)) is not None:
                out["segment"] = segment
            click.echo(json.dumps(out))
        raise CheckFailed(f"{record_file}: {describe_failure(exc)}") from None
    if as_json:
        doc = report_json(report)
        if granted is not None:
            doc["grant"] = {"effective": terms_json(granted.effective),
                            "events": granted.events, "used_uj": granted.energy_uj}
        click.echo(json.dumps(doc))
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
    if granted is not None:
        click.echo(f"  grant: every segment allowed ({granted.events} events replayed; used "
                   f"{granted.energy_uj} of {granted.effective.budget_uj} uJ)")
