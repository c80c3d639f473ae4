"""``fleet runtime start|worker|list`` and ``fleet signal``: durable workflows over NATS.

The runtime (``agents.runtime``) journals a workflow and records each live interval on the
host's run record; these commands wire it to JetStream (signals, the runs bucket, parked
journals: ``agents.runtime.fleet_store``), to the ledger (adoption through
:class:`cli._wiring.LedgerRecordSource`) and to the host's publisher.
"""

from __future__ import annotations

import asyncio
import json
import signal as signals
import sys
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import click

from fleet_ledger.cli._app import FLEET, CheckFailed, UserError, cli
from fleet_ledger.cli._common import emit_json, nats_options, split_servers


@cli.group()
def runtime() -> None:
    """Durable workflows whose journal is the run record (docs/runtime.md)."""


def _json_arg(text: str | None, what: str) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{what}: not JSON: {exc}") from None


def _import_path(paths: tuple[Path, ...]) -> None:
    for p in paths:
        sys.path.insert(0, str(p.resolve()))


async def _store(url: str, nkey: Path | None, name: str) -> tuple[Any, Any]:
    from fleet_ledger.agents.runtime.fleet_store import FleetStore
    from fleet_ledger.fleet.subjects import fleet_names
    from fleet_ledger.plumbing.nats_connect import NatsUnreachable, connect

    try:
        nc = await connect(split_servers(url), nkey=nkey, name=name, wait_s=10.0)
    except NatsUnreachable as exc:
        raise UserError(str(exc)) from None
    store = FleetStore(nc.jetstream(timeout=10.0), fleet_names(FLEET["name"]))
    return nc, await store.open()


def _drain(host: Any, nc: Any) -> Any:
    from fleet_ledger.agents.publisher import Publisher

    async def drain() -> None:
        report = await Publisher(host.outbox, nc.jetstream(timeout=10.0),
                                 stream=host.names.stream).drain(timeout=60.0)
        if report.remaining:
            raise CheckFailed(f"{report.remaining} segment(s) not published")
    return drain


host_options = [
    click.option("--data", "host_dir", type=click.Path(file_okay=False, path_type=Path),
                 required=True, help="The host's folder (key, outbox, runs, runtime.db)."),
    click.option("--name", help="The host's name (default: the folder's name)."),
    click.option("--path", "paths", multiple=True, type=click.Path(path_type=Path),
                 help="A folder to import workflow modules from (repeatable)."),
]


def _host_opts(fn: Any) -> Any:
    for opt in reversed(host_options):
        fn = opt(fn)
    return click.option(
        "--environment", "environment", type=click.Path(dir_okay=False, path_type=Path),
        help="The devcontainer.json or manifest file the workflows run in: part of each "
        "run's manifest (default: the workflow's code alone).")(fn)


def _environment(path: Path | None) -> Any:
    """The manifest of ``--environment`` (None without it); a bad one is one line."""
    if path is None:
        return None
    from fleet_ledger.agents.environment import environment_manifest
    from fleet_ledger.fleet.errors import FleetError

    try:
        return environment_manifest(path)
    except OSError as exc:
        raise UserError(f"--environment {path}: {exc.strerror or exc}") from None
    except FleetError as exc:
        raise CheckFailed(f"{path}: {exc.rule}: {exc}") from None


def _item(job_id: str | None, index: int | None) -> tuple[str, int] | None:
    """``--job`` and ``--item`` together, as (job address, index)."""
    if job_id is None and index is None:
        return None
    if job_id is None or index is None:
        raise UserError("--job and --item go together: the job's id and the item's index")
    from fleet_ledger.cli.job_cmds import _job_text

    return _job_text(job_id), index


def _grant(value: str | None) -> str | None:
    """``--grant``: a grant's address, or a grant file (its address)."""
    if value is None:
        return None
    from fleet_ledger.fleet.address import format_address, parse_address
    from fleet_ledger.fleet.errors import FleetError
    from fleet_ledger.fleet.grants.grant import grant_address

    if value.startswith("b3:"):
        try:
            return format_address(parse_address(value))
        except FleetError as exc:
            raise UserError(f"--grant: {exc}") from None
    from fleet_ledger.cli.grant_cmds import read_grant_file

    data, _grant = read_grant_file(Path(value))
    return format_address(grant_address(data))


@runtime.command("start")
@click.argument("workflow")
@click.argument("run_name", metavar="NAME")
@click.option("--input", "input_json", help="The workflow's input (JSON).")
@click.option("--grant", "grant", help="Run under this issued grant: its address (b3:) or "
              "its grant file (default: the workflow's own grant set id).")
@click.option("--job", "job_id", help="Start the run as an item of this job (its b3: id; "
              "with --item): the ledger holds it to the job (docs/jobs.md).")
@click.option("--item", "item_index", type=click.IntRange(0, 2**32 - 2),
              help="The item's index in --job.")
@_host_opts
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@nats_options
def runtime_start(workflow: str, run_name: str, input_json: str | None, grant: str | None,
                  job_id: str | None, item_index: int | None,
                  environment: Path | None, host_dir: Path, name: str | None,
                  paths: tuple[Path, ...], as_json: bool, url: str, nkey: Path | None) -> None:
    """Start run NAME of WORKFLOW (``module:function``) on this host and run its first
    interval: it ends, or parks at its first wait and this process exits. With --job and
    --item, the run is that item of the job."""
    from fleet_ledger.agents.host import Host
    from fleet_ledger.agents.runtime import Runtime
    from fleet_ledger.agents.runtime.runtime import load_workflow
    from fleet_ledger.fleet.errors import FleetError

    _import_path(paths)
    inp = _json_arg(input_json, "--input")
    try:
        fn = load_workflow(workflow)
    except FleetError as exc:
        raise UserError(f"WORKFLOW: {exc}") from None
    grant = _grant(grant)
    item = _item(job_id, item_index)
    env = _environment(environment)
    host = Host(name or host_dir.resolve().name, host_dir, fleet=FLEET["name"])
    rt = Runtime(host_dir, host=host, environment=env)

    async def go() -> dict[str, Any]:
        nc, store = await _store(url, nkey, f"fleet-runtime-{host.name}")
        try:
            return await start_run(rt, host, store, nc, fn, workflow, run_name, inp, grant,
                                   item)
        finally:
            await nc.close()

    doc = on_host(go, rt, host)
    if as_json:
        emit_json(doc)
    else:
        click.echo(f"{doc['run']} {doc['status']}" + (f" waiting on {doc['wait']}"
                                                       if doc["wait"] else ""))


class RunExists(UserError):
    """A start of a run that exists (here or on another host)."""


async def start_run(rt: Any, host: Any, store: Any, nc: Any, fn: Any, workflow: str,
                    run_name: str, inp: Any, grant: str | None,
                    item: tuple[str, int] | None = None) -> dict[str, Any]:
    """Start run ``run_name`` of ``fn`` and run its first interval (``fleet runtime
    start`` and ``POST /runs`` of ``fleet runtime serve``): the runs bucket's document."""
    from fleet_ledger.agents.runtime.runtime import run_address, workflow_name
    from fleet_ledger.agents.runtime.worker import Worker, describe_local, running_doc
    from fleet_ledger.fleet.subjects import run_token

    wf = workflow_name(fn)
    address = run_address(run_name, wf, grant, item)
    local = rt.journal.run_row(address)
    if local is not None:
        got = await store.get(run_token(address))
        truth = (f"it is {got[0]['status']} on host {got[0].get('host')} now"
                 if got is not None and got[0].get("host") != host.name
                 else describe_local(local[2], local[3], rt.busy(address)))
        raise RunExists(f"run {run_name!r} of {workflow} exists on this host: {truth}")
    # The run is in the runs bucket (`fleet runtime list`) before its first step.
    held = await store.announce(running_doc(address, run_name, wf, host.name))
    if held is not None:
        raise RunExists(f"run {run_name!r} of {workflow} exists: {held['status']} on"
                        f" host {held.get('host')}")
    run = rt.start(fn, run_name, inp, grant, item)
    worker = Worker(rt, store, _no_adopt, _drain(host, nc))
    return await worker.publish(await rt.advance(run))


def on_host(go: Callable[[], Coroutine[Any, Any, dict[str, Any]]], rt: Any, host: Any
            ) -> dict[str, Any]:
    """Run ``go`` with ``rt`` and ``host`` open, closing both after; a named refusal exits
    1 with its rule."""
    from fleet_ledger.fleet.errors import FleetError

    try:
        return asyncio.run(go())
    except FleetError as exc:
        raise CheckFailed(f"{exc.rule}: {exc}") from None
    finally:
        rt.close()
        host.close()


async def _no_adopt(run: str) -> Any:
    raise UserError(f"run {run} is not held here")


@runtime.command("worker")
@_host_opts
@click.option("--vkey", help="The ledger's verifier key, or a file holding it (default: "
              "ledger.vkey in the host's folder).")
@click.option("--once", is_flag=True, help="One pass over the runs, then exit.")
@click.option("--poll", type=float, default=1.0, show_default=True,
              help="Seconds between full passes (timers, deadlines, orphans); a stored"
              " signal wakes the worker for its run at once.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON line per run continued.")
@nats_options
def runtime_worker(environment: Path | None, host_dir: Path, name: str | None,
                   paths: tuple[Path, ...], vkey: str | None, once: bool, poll: float,
                   as_json: bool, url: str, nkey: Path | None) -> None:
    """Continue runs whose wait has ended (a signal, a due timer, a handed-off result),
    adopting runs parked elsewhere after verifying their record and journal."""
    from fleet_ledger.agents.host import Host
    from fleet_ledger.agents.runtime import Runtime
    from fleet_ledger.agents.runtime.worker import Worker
    from fleet_ledger.cli._wiring import LedgerRecordSource, host_ledger_keys

    _import_path(paths)
    keys = host_ledger_keys(host_dir, vkey)
    env = _environment(environment)
    host = Host(name or host_dir.resolve().name, host_dir, fleet=FLEET["name"])
    rt = Runtime(host_dir, host=host, environment=env)
    source = LedgerRecordSource(url, nkey, host=host.name if nkey is not None else None)
    host.ledger = (source, keys)  # a run whose outbox was pruned verifies from the ledger

    async def adopt(run: str) -> Any:
        return await asyncio.to_thread(host.adopt_run, run, source, keys)

    async def go() -> None:
        nc, store = await _store(url, nkey, f"fleet-runtime-{host.name}")
        worker = Worker(rt, store, adopt, _drain(host, nc))
        try:
            if once:
                for report in await worker.pass_once():
                    _report(report, as_json)
                return
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signals.SIGTERM, signals.SIGINT):
                loop.add_signal_handler(sig, stop.set)
            await worker.run_forever(stop, lambda r: _report(r, as_json), poll)
        finally:
            await nc.close()

    try:
        asyncio.run(go())
    finally:
        rt.close()
        host.close()


def _report(report: dict[str, Any], as_json: bool) -> None:
    if as_json:
        emit_json(report)
    elif "refused" in report:
        click.echo(f"{report['run']} refused: {report['refused']}: {report.get('detail')}")
    elif "lost" in report:
        click.echo(f"{report['run']} {report['lost']}")
    else:
        click.echo(f"{report['run']} {report['status']} on {report['host']}")


@runtime.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@nats_options
def runtime_list(as_json: bool, url: str, nkey: Path | None) -> None:
    """Every run the runtime knows, with its status and the wait it is parked on."""
    async def go() -> list[dict[str, Any]]:
        nc, store = await _store(url, nkey, "fleet-runtime-list")
        try:
            return sorted((d for d, _rev in await store.runs()), key=lambda d: d["name"])
        finally:
            await nc.close()

    docs = asyncio.run(go())
    if as_json:
        emit_json({"runs": docs})
        return
    for d in docs:
        click.echo(f"{d['name']}\t{d['status']}\t{d['host']}\t{d['run']}\t"
                   f"{json.dumps(d.get('wait'))}")


@cli.command("signal")
@click.argument("run_id", metavar="RUN")
@click.argument("signal_name", metavar="NAME")
@click.option("--data", "data_json", help="The signal's data (JSON).")
@click.option("--id", "signal_id", help="The signal's id: a resend with the same id is "
              "delivered once (default: a fresh id).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@nats_options
def signal_cmd(run_id: str, signal_name: str, data_json: str | None, signal_id: str | None,
               as_json: bool, url: str, nkey: Path | None) -> None:
    """Send signal NAME to RUN (its address, or its name), kept until the run reads it."""
    from fleet_ledger.fleet.address import parse_address
    from fleet_ledger.fleet.errors import FleetError

    data = _json_arg(data_json, "--data")
    sid = signal_id or uuid.uuid4().hex
    if run_id.startswith("b3:"):
        try:
            parse_address(run_id)
        except FleetError as exc:
            raise UserError(f"RUN: {exc}") from None

    async def go() -> dict[str, Any]:
        nc, store = await _store(url, nkey, "fleet-signal")
        try:
            return await send_signal(store, run_id, signal_name, data, sid)
        finally:
            await nc.close()

    try:
        doc = asyncio.run(go())
    except FleetError as exc:  # SignalConflict: the id was used with other data
        raise CheckFailed(f"{exc.rule}: {exc}") from None
    if as_json:
        emit_json(doc)
    else:
        click.echo(f"signal {signal_name} ({sid}) -> {doc['run']}"
                   + (" (duplicate: already stored)" if doc["duplicate"] else ""))


class NoSuchRun(UserError):
    """A run name that names no run (or several) in the runs bucket."""


async def resolve_run(store: Any, run_id: str) -> str:
    """A run's address from its address or its name (the runs bucket's)."""
    if run_id.startswith("b3:"):
        return run_id
    named = [d["run"] for d, _r in await store.runs() if d["name"] == run_id]
    if len(named) != 1:
        raise NoSuchRun(f"no single run named {run_id!r}")
    return named[0]


async def send_signal(store: Any, run_id: str, name: str, data: Any, sid: str
                      ) -> dict[str, Any]:
    """Store signal ``name`` for a run (``fleet signal`` and ``POST
    /runs/{run}/signals/{name}``): a resend under ``sid`` with the same data is a
    duplicate, with other data SignalConflict (nothing stored)."""
    run = await resolve_run(store, run_id)
    fresh = await store.send_signal(run, name, data, sid)
    return {"run": run, "name": name, "id": sid, "duplicate": not fresh}


@runtime.command("journal")
@click.argument("run_id", metavar="RUN")
@click.option("--data", "host_dir", type=click.Path(file_okay=False, path_type=Path),
              required=True, help="The host's folder.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def runtime_journal(run_id: str, host_dir: Path, as_json: bool) -> None:
    """The journal of RUN as this host holds it, after checking its chain."""
    from fleet_ledger.agents.runtime.journal import Journal, verify_chain
    from fleet_ledger.fleet.address import format_address
    from fleet_ledger.fleet.errors import FleetError

    journal = Journal(host_dir)
    try:
        row = journal.run_row(run_id)
        if row is None:
            raise UserError(f"no run {run_id} in {host_dir}")
        entries = journal.entries(run_id)
        try:
            head = verify_chain(run_id, row[1], entries)
        except FleetError as exc:
            raise CheckFailed(f"{exc.rule}: {exc}") from None
    finally:
        journal.close()
    doc: dict[str, Any] = {"run": run_id, "name": row[0], "workflow": row[1], "status": row[2],
           "head": format_address(head),
           "entries": [{"seq": e.seq, "kind": e.kind, "call": e.call, "body": e.data(),
                        "hash": format_address(e.hash)} for e in entries]}
    if as_json:
        emit_json(doc)
        return
    for e in doc["entries"]:
        click.echo(f"{e['seq']:>5} {e['kind']:<9} {e['call']:<5} {json.dumps(e['body'])}")


@runtime.command("shred")
@click.argument("address")
@click.option("--data", "host_dir", type=click.Path(file_okay=False, path_type=Path),
              required=True, help="The host's folder.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@nats_options
def runtime_shred(address: str, host_dir: Path, as_json: bool, url: str,
                  nkey: Path | None) -> None:
    """Crypto-shred the journaled value at ADDRESS: delete its key here and in JetStream.
    Every hash, seal, journal root and proof stays valid; a replay that needs the value
    fails with ValueShredded."""
    from fleet_ledger.agents.runtime.journal import Journal
    from fleet_ledger.fleet.address import parse_address
    from fleet_ledger.fleet.errors import FleetError

    try:
        parse_address(address)
    except FleetError as exc:
        raise UserError(f"ADDRESS: {exc}") from None
    journal = Journal(host_dir)
    try:
        local = journal.shred(address)
    finally:
        journal.close()

    async def go() -> None:
        nc, store = await _store(url, nkey, "fleet-runtime-shred")
        try:
            await store.shred(address)
        finally:
            await nc.close()

    asyncio.run(go())
    doc = {"address": address, "shredded_here": local, "shredded_in_jetstream": True}
    if as_json:
        emit_json(doc)
    else:
        click.echo(f"shredded {address}")
