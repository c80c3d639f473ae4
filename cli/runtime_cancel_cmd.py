"""``fleet runtime cancel``: close a runtime run for good, leaving an auditable stub (a parked
run's close carries its park's idle energy: docs/spec/run-record.md §4)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import click

from fleet_ledger.cli._app import FLEET, CheckFailed, UserError
from fleet_ledger.cli._common import emit_json, nats_options
from fleet_ledger.cli.runtime_cmds import _drain, _no_adopt, _store, on_host, runtime


@runtime.command("cancel")
@click.argument("run_id", metavar="RUN")
@click.option("--reason", help="Why (kept with the run's state in JetStream and on this host;"
              " the record itself holds no text).")
@click.option("--data", "host_dir", type=click.Path(file_okay=False, path_type=Path),
              required=True, help="This host's folder.")
@click.option("--name", help="The host's name (default: the folder's name).")
@click.option("--vkey", help="The ledger's verifier key, or a file holding it (default: "
              "ledger.vkey in the host's folder): to close a run parked on another host.")
@click.option("--force", is_flag=True, help="Close a run this host's journal shows running "
              "with no claim in JetStream: only once its process is known to be gone.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@nats_options
def runtime_cancel(run_id: str, reason: str | None, host_dir: Path, name: str | None,
                   vkey: str | None, force: bool, as_json: bool, url: str,
                   nkey: Path | None) -> None:
    """Close RUN, parked or running: a parked run's close carries the idle energy its park
    drew until now; an interval cut off by a crash is sealed as lost first (a run whose
    process may still be running needs --force once it is gone). A run this host
    does not hold is closed only while parked, after verifying its record and its head
    under the ledger's key (as an adoption). Workers never continue it again; a run a
    worker is continuing right now is refused (cancel it once it parks)."""
    from fleet_ledger.agents.host import Host
    from fleet_ledger.agents.runtime import Runtime
    from fleet_ledger.agents.runtime.fleet_store import claim_stale
    from fleet_ledger.agents.runtime.worker import Worker
    from fleet_ledger.fleet.subjects import run_token

    host = Host(name or host_dir.resolve().name, host_dir, fleet=FLEET["name"])
    rt = Runtime(host_dir, host=host)

    async def go() -> dict[str, Any]:
        local = rt.journal.run_row(run_id)
        nc, store = await _store(url, nkey, f"fleet-runtime-{host.name}")
        try:
            got = await store.get(run_token(run_id))
            if got is None and local is None:
                raise UserError(f"no run {run_id} on this host or in the runtime's runs")
            here = local is not None and (got is None or (
                got[0].get("host") in (None, host.name)
                and got[0].get("head") == local[3].get("head")))
            if here and not force and local is not None and local[2] == "running" and (
                    got is None or got[0].get("status") != "claimed"):
                # No lease says whether the process running this interval is alive (a
                # worker's claim would): closing under a live one would fork the record.
                raise UserError(f"run {run_id} is running on this host with no claim to say"
                                " its process is gone: --force once it is")
            claimed = None
            if got is not None:
                doc, revision = got
                if doc.get("status") == "claimed" and not claim_stale(doc, time.time()):
                    raise UserError(f"a worker on {doc.get('by')} is continuing run {run_id}:"
                                    " cancel it once it parks")
                if not here and doc.get("status") != "parked":
                    raise UserError(f"run {run_id} is {doc.get('status')} on host"
                                    f" {doc.get('host')}: cancel it there")
                # Taken from the workers first (compare-and-set), so none continues it
                # while it is closed here.
                claimed = await store.update({**doc, "status": "claimed", "by": host.name,
                                              "claimed_at": time.time()}, revision)
                if claimed is None:
                    raise UserError(f"run {run_id} changed meanwhile: try again")
            drain = _drain(host, nc)
            try:
                if here:
                    outcome = rt.cancel(run_id, reason)
                else:
                    assert got is not None
                    return await _cancel_elsewhere(host, store, drain, got[0], reason,
                                                   host_dir, vkey, url, nkey)
            except Exception:
                if got is not None and claimed is not None:  # give the run back as it was
                    await store.update(got[0], claimed[1])
                raise
            return await Worker(rt, store, _no_adopt, drain).publish(outcome)
        finally:
            await nc.close()

    doc = on_host(go, rt, host)
    if as_json:
        emit_json(doc)
    else:
        click.echo(f"{doc['run']} cancelled after {doc['segments']} segments"
                   + (f": {reason}" if reason else ""))


async def _cancel_elsewhere(host: Any, store: Any, drain: Any, doc: dict[str, Any],
                            reason: str | None, host_dir: Path, vkey: str | None, url: str,
                            nkey: Path | None) -> dict[str, Any]:
    """Close a run parked on another host: adopt it (record verified from genesis, head
    proved under the ledger's key), then close it with its park's idle energy, priced on
    the parked journal's stored bytes (``RUNTIME_JOURNALS``) since it parked."""
    from fleet_ledger.agents.adoption import ResumeRefused
    from fleet_ledger.agents.runtime.runtime import park_transcript, transcript_idle
    from fleet_ledger.cli._wiring import LedgerRecordSource, host_ledger_keys
    from fleet_ledger.fleet.address import format_address
    from fleet_ledger.fleet.record.wait_proof import verdict_json
    from fleet_ledger.fleet.runtime.runtime_errors import JournalTampered

    keys = host_ledger_keys(host_dir, vkey)
    source = LedgerRecordSource(url, nkey, host=host.name if nkey is not None else None)
    try:
        hr = await asyncio.to_thread(host.adopt_run, doc["run"], source, keys)
    except ResumeRefused as exc:
        raise CheckFailed(f"adoption refused: {exc.rule}: {exc}") from None
    head = format_address(park_transcript(hr).transcript)
    export = await store.journal(head)
    if export is None:
        raise JournalTampered(f"no journal stored for the park of {doc['run']} at {head}")
    idle = transcript_idle([e[3] for e in export["entries"]], doc.get("parked_at"),
                           time.time())
    hr.close(idle_uj=idle.uj, provenance=idle.provenance, meter=idle.meter)
    await drain()
    out = {**doc, "status": "cancelled", "host": host.name, "segments": hr.state.index,
           "verdict": verdict_json(hr.state.wait.verdict()), "error": reason}
    out.pop("by", None)
    out.pop("claimed_at", None)
    await store.put(out)
    return out
