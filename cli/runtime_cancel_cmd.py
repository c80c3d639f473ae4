"""``fleet runtime cancel``: close a runtime run for good, leaving an auditable stub (a parked
run's close carries its park's idle energy: docs/spec/run-record.md §4)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from cli._app import FLEET, UserError
from cli._common import emit_json, nats_options
from cli.runtime_cmds import _drain, _no_adopt, _store, on_host, runtime


@runtime.command("cancel")
@click.argument("run_id", metavar="RUN")
@click.option("--reason", help="Why (kept with the run's state in JetStream and on this host;"
              " the record itself holds no text).")
@click.option("--data", "host_dir", type=click.Path(file_okay=False, path_type=Path),
              required=True, help="The folder of the host holding the run.")
@click.option("--name", help="The host's name (default: the folder's name).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@nats_options
def runtime_cancel(run_id: str, reason: str | None, host_dir: Path, name: str | None,
                   as_json: bool, url: str, nkey: Path | None) -> None:
    """Close RUN (parked or running) on the host holding it: a parked run's close carries
    the idle energy its park drew until now; an interval cut off by a crash is sealed as
    lost first. Workers never continue it again. A run a worker is continuing right now is
    refused (cancel it once it parks)."""
    from agents.host import Host
    from agents.runtime import Runtime
    from agents.runtime.fleet_store import claim_stale
    from agents.runtime.worker import Worker
    from fleet.errors import FleetError
    from fleet.subjects import run_token

    if not (host_dir / "runtime.db").exists():
        raise UserError(f"no runtime journal in {host_dir}")
    host = Host(name or host_dir.resolve().name, host_dir, fleet=FLEET["name"])
    rt = Runtime(host_dir, host=host)

    async def go() -> dict[str, Any]:
        local = rt.journal.run_row(run_id)
        if local is None:
            raise UserError(f"run {run_id} is not on this host ({host_dir})")
        nc, store = await _store(url, nkey, f"fleet-runtime-{host.name}")
        try:
            got = await store.get(run_token(run_id))
            claimed: tuple[dict[str, Any], int] | None = None
            if got is not None:
                doc, revision = got
                if doc.get("host") not in (None, host.name) \
                        or doc.get("head") != local[3].get("head"):
                    raise UserError(f"run {run_id} moved on to host {doc.get('host')}: cancel"
                                    " it there")
                if doc.get("status") == "claimed" and not claim_stale(doc, time.time()):
                    raise UserError(f"a worker on {doc.get('by')} is continuing run {run_id}:"
                                    " cancel it once it parks")
                # Taken from the workers first (compare-and-set), so none continues it
                # while it is closed here.
                claimed = await store.update({**doc, "status": "claimed", "by": host.name,
                                              "claimed_at": time.time()}, revision)
                if claimed is None:
                    raise UserError(f"run {run_id} changed meanwhile: try again")
            try:
                outcome = rt.cancel(run_id, reason)
            except FleetError:
                if got is not None and claimed is not None:  # give the run back as it was
                    await store.update(got[0], claimed[1])
                raise
            return await Worker(rt, store, _no_adopt, _drain(host, nc)).publish(outcome)
        finally:
            await nc.close()

    doc = on_host(go, rt, host)
    if as_json:
        emit_json(doc)
    else:
        click.echo(f"{doc['run']} cancelled after {doc['segments']} segments"
                   + (f": {reason}" if reason else ""))
