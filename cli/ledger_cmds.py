"""Commands for running a ledger and asking it things: ``ledger serve``, ``up``,
``status``, ``prove``, ``consistency``, ``run ...``, ``rejections``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from pathlib import Path
from typing import Any

import click

from fleet_ledger.cli._app import FLEET, CheckFailed, UserError, cli
from fleet_ledger.cli._common import api, emit_json, nats_options, split_servers
from fleet_ledger.cli._http import HttpSettings, http_options, http_settings
from fleet_ledger.plumbing.files import write_atomically


def _ledger_config(data: Path, servers: list[str], **kw: Any) -> Any:
    from fleet_ledger.ledger.service import LedgerConfig

    return LedgerConfig(data_dir=data, servers=servers, **kw)


async def serve_until_signal(config: Any, on_ready: Any = None, anchors: Any = (),
                             http: HttpSettings | None = None) -> None:
    """Run a ledger (anchoring with ``anchors``, serving ``http``) until SIGINT/SIGTERM,
    then stop it cleanly."""
    from fleet_ledger.cli._wiring import make_ledger, start_ledger_http

    ledger = make_ledger(config, anchors)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    servers = None
    try:
        await ledger.start()
        if http is not None:
            servers = await start_ledger_http(ledger, http.log, http.ops, http.max_unsigned_s,
                                              http.busy_rate)
            for kind, (host, port) in (servers.addresses if servers else {}).items():
                click.echo(f"{kind} http: http://{host}:{port}/", err=True)
        if on_ready is not None:
            on_ready(ledger)
        await ledger.run(stop)
    finally:
        if servers is not None:
            await servers.close()
        await ledger.close()


def ledger_options(fn: Any) -> Any:
    for option in reversed([
        click.option("--name", default="ledger", show_default=True,
                     help="Ledger name; its durable consumer is ledger-NAME."),
        click.option("--origin", help="Checkpoint origin (default fleet-ledger.local/NAME); "
                     "fixed by the key once created."),
        click.option("--replicas", type=click.IntRange(1, 5), default=1, show_default=True,
                     help="Stream replicas (3 in a cluster)."),
        click.option("--checkpoint-every", type=click.IntRange(1), default=1000,
                     show_default=True, help="Sign a checkpoint every N new leaves..."),
        click.option("--checkpoint-ms", type=click.IntRange(1), default=1000,
                     show_default=True, help="...or every T milliseconds with new leaves."),
        click.option("--dedup-window", type=float, default=120.0, show_default=True,
                     help="Broker duplicate window in seconds."),
        click.option("--anchors", "anchors_file",
                     type=click.Path(dir_okay=False, exists=True, path_type=Path),
                     help="TOML file of anchors (witnesses, TSAs, NATS) for the checkpoints; "
                          "see docs/anchoring.md."),
        click.option("--grants", type=click.Choice(["enforce", "require"]), default="enforce",
                     show_default=True,
                     help="enforce: a run whose grant was presented is held to it, others "
                          "fold under no grant; require: a run whose grant was not presented "
                          "first is refused (UnknownGrant). See docs/grants.md."),
    ]):
        fn = option(fn)
    return fn


@cli.group()
def ledger() -> None:
    """Run the ledger service."""


@ledger.command("serve")
@click.option("--nats", "url", required=True, help="NATS server URL(s), comma separated.")
@click.option("--data", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="The ledger's data folder (store and signing key).")
@click.option("--nkey", type=click.Path(dir_okay=False, path_type=Path),
              help="NATS nkey seed file of the ledger user.")
@click.option("--operator-vkey", "operator_vkey", multiple=True,
              help="An operator verifier key (base64 or file) control events are checked "
                   "under; repeatable.")
@click.option("--replica", "replica_ttl", type=click.FloatRange(0.5, 60), default=None,
              help="Run as one of several replicas sharing this origin and key: sign and "
                   "anchor only while holding the lease, whose time to live is this many "
                   "seconds (e.g. 2).")
@ledger_options
@http_options(None, None)
def ledger_serve(url: str, data: Path, nkey: Path | None, name: str, origin: str | None,
                 replicas: int, checkpoint_every: int, checkpoint_ms: int,
                 dedup_window: float, http_address: str | None, ops_address: str | None,
                 ready_max_unsigned: float, http_busy_rate: float, log_format: str,
                 anchors_file: Path | None = None, operator_vkey: tuple[str, ...] = (),
                 replica_ttl: float | None = None, grants: str = "enforce") -> None:
    """The ledger and its API, against an existing NATS server or cluster."""
    from fleet_ledger.cli.anchor_cmds import load_anchors_option
    from fleet_ledger.cli.operator_cmds import operator_vkeys
    from fleet_ledger.plumbing import logs

    logs.configure(log_format)
    http = http_settings(http_address, ops_address, ready_max_unsigned, http_busy_rate)
    servers = split_servers(url)
    config = _ledger_config(data, servers, name=name, origin=origin, nkey=nkey,
                            replicas=replicas, checkpoint_every=checkpoint_every,
                            checkpoint_ms=checkpoint_ms, dedup_window_s=dedup_window,
                            operator_vkeys=operator_vkeys(operator_vkey),
                            replica_ttl=replica_ttl, fleet=FLEET["name"], grants=grants)
    anchors = load_anchors_option(anchors_file)

    def ready(led: Any) -> None:
        click.echo(f"ledger {name} serving: origin {led.origin}, data {data}", err=True)

    from fleet_ledger.ledger.replica import OfflineHosts
    from fleet_ledger.plumbing.nats_connect import NatsUnreachable

    try:
        asyncio.run(serve_until_signal(config, ready, anchors, http))
    except (NatsUnreachable, OfflineHosts) as exc:
        raise UserError(str(exc)) from None
    except OSError as exc:
        raise UserError(f"cannot start the ledger: {exc}") from None
    except Exception as exc:
        if "nats" in type(exc).__module__:
            raise UserError(f"cannot reach NATS at {url}: {exc}") from None
        raise


@cli.command()
@click.option("--data", type=click.Path(file_okay=False, path_type=Path),
              default=Path("fleet-data"), show_default=True, help="Data folder.")
@click.option("--nats", "url", help="Use this NATS server or cluster instead of starting one.")
@click.option("--nats-port", type=click.IntRange(0, 65535), default=4222, show_default=True,
              help="Port of the local nats-server started when no --nats is given.")
@click.option("--simulate", "sim_hosts", type=click.IntRange(0), default=0,
              help="Also run this many simulated hosts (enrolled for convenience).")
@click.option("--runs", type=click.IntRange(1), default=5, show_default=True,
              help="Runs per simulated host.")
@ledger_options
@http_options("127.0.0.1:8200", "127.0.0.1:8201")
def up(data: Path, url: str | None, nats_port: int, sim_hosts: int, runs: int, name: str,
       origin: str | None, replicas: int, checkpoint_every: int, checkpoint_ms: int,
       dedup_window: float, http_address: str | None, ops_address: str | None,
       ready_max_unsigned: float, http_busy_rate: float, log_format: str,
       anchors_file: Path | None = None, grants: str = "enforce") -> None:
    """Start a local nats-server (JetStream, in DATA/nats), the ledger, its API and its
    HTTP servers (the log and explorer on --http, metrics on --ops)."""
    from fleet_ledger.cli.anchor_cmds import load_anchors_option
    from fleet_ledger.plumbing import logs

    if log_format == "json":
        logs.configure(log_format)
    http = http_settings(http_address, ops_address, ready_max_unsigned, http_busy_rate)
    from fleet_ledger.plumbing.nats_connect import NatsUnreachable
    from fleet_ledger.plumbing.natsd import NatsServer, NatsServerError

    anchors = load_anchors_option(anchors_file)
    data.mkdir(parents=True, exist_ok=True)
    server = None
    try:
        if url is None:
            server = NatsServer(store_dir=data / "nats", port=nats_port,
                                die_with_parent=True).start()
            url = server.url
        click.echo(f"nats: {url}", err=True)
        config = _ledger_config(data / "ledger", split_servers(url), name=name, origin=origin,
                                replicas=replicas, checkpoint_every=checkpoint_every,
                                checkpoint_ms=checkpoint_ms, dedup_window_s=dedup_window,
                                grants=grants)
        sims: list[Any] = []

        def ready(led: Any) -> None:
            click.echo(f"ledger: origin {led.origin}; vkey in {data / 'ledger' / 'ledger.vkey'}",
                       err=True)
            if sim_hosts:
                from fleet_ledger.cli._sim_procs import spawn_simulators
                sims.extend(spawn_simulators(sim_hosts, runs, url, data / "hosts",
                                             enroll_into=data / "ledger",
                                             log_dir=data / "hosts"))
            click.echo("up; Ctrl-C stops everything", err=True)

        try:
            asyncio.run(serve_until_signal(config, ready, anchors, http))
        finally:
            for proc in sims:
                with contextlib.suppress(Exception):
                    proc.terminate()
                    proc.wait(10)
    except NatsServerError as exc:
        raise UserError(f"cannot start nats-server: {_server_failure(str(exc))}") from None
    except NatsUnreachable as exc:
        raise UserError(str(exc)) from None
    except OSError as exc:  # an HTTP address in use, an unwritable data folder
        raise UserError(f"cannot start the ledger: {exc}") from None
    finally:
        if server is not None:
            server.close()


def _offline_identity(data: Path) -> tuple[str | None, str | None]:
    """(origin, verifier key text) of a ledger folder, from ``ledger.key`` (checked: the
    ledger cannot start with a broken one), else from the public ``ledger.vkey`` (e.g. an
    auditor's copy without the secret); (None, None) when the folder has neither."""
    from fleet_ledger.fleet.log.log_errors import LogError
    from fleet_ledger.fleet.log.note import parse_signer_key, parse_verifier_key
    from fleet_ledger.ledger.keys import KEY_FILE, VKEY_FILE

    try:
        if (data / KEY_FILE).exists():
            verifier = parse_signer_key((data / KEY_FILE).read_text()).verifier()
        elif (data / VKEY_FILE).exists():
            verifier = parse_verifier_key((data / VKEY_FILE).read_text().strip())
        else:
            return None, None
    except (OSError, LogError) as exc:
        raise UserError(f"{data}: cannot read the ledger's key: {exc}") from None
    return verifier.name, verifier.text()


def _server_failure(text: str) -> str:
    """One line out of a nats-server failure: its last fatal or error log line if any."""
    lines = text.splitlines() or ["unknown error"]
    for line in reversed(lines):
        for tag in ("[FTL] ", "[ERR] "):
            if tag in line:
                return line.split(tag, 1)[1].strip()
    return lines[0].rstrip(":; ")


def _offline_store(data: Path) -> Any:
    """The ledger store in ``data``, opened read-only (an offline read never writes)."""
    from fleet_ledger.ledger.store import ReadOnlyStore, StoreError

    try:
        return ReadOnlyStore(data)
    except StoreError as exc:
        raise UserError(str(exc)) from None


def _offline_receipts(data: Path) -> Any:
    """The anchors' receipts in the ledger's database in ``data``, read-only."""
    from fleet_ledger.anchors.store import AnchorStore
    from fleet_ledger.ledger.store import DB_NAME
    from fleet_ledger.plumbing import sqlite

    return AnchorStore(sqlite.connect(data / DB_NAME, read_only=True))


@cli.command()
@nats_options
@click.option("--data", type=click.Path(file_okay=False, path_type=Path),
              help="Read a ledger's data folder offline instead of asking it over NATS.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def status(url: str, nkey: Path | None, data: Path | None, as_json: bool) -> None:
    """The ledger's origin, key, tree size, root, runs, refusals and lag."""
    if data is not None:
        from fleet_ledger.ledger import views

        origin, vkey = _offline_identity(data)
        store = _offline_store(data)
        receipts = None
        try:
            receipts = _offline_receipts(data)
            doc = views.status(store, origin=origin, vkey=vkey,
                               lag=None, healthy=True, detail="offline", receipts=receipts)
            # The mode is the serving ledger's option, not stored: unknown offline.
            doc["grants"] = {"mode": None, "folded": store.grant_count()}
        finally:
            if receipts is not None:
                receipts.close()
            store.close()
    else:
        doc = api(url, "status", nkey=nkey)
    if as_json:
        emit_json(doc)
        return
    click.echo(f"origin      {doc['origin']}")
    click.echo(f"vkey        {doc['vkey']}")
    click.echo(f"tree size   {doc['tree_size']}   root {doc['root']}")
    click.echo(f"runs        {doc['runs']}   segments folded {doc['segments_folded']}")
    rejected = ", ".join(f"{k} {v}" for k, v in sorted(doc["rejected"].items())) or "none"
    click.echo(f"rejected    {rejected}")
    click.echo(f"stream seq  {doc['stream_seq']}   lag {doc['lag']}   health {doc['health']}")
    puller = doc.get("puller")
    if puller:
        why = f"   ({puller['reason']})" if puller["reason"] else ""
        click.echo(f"puller      {puller['kind'] or 'not started'}   fallbacks "
                   f"{puller['fallbacks']}{why}")
    for a in doc.get("anchors", []):
        error = f"   error ({a['failures']}x) {a['error']}" if a["error"] else ""
        click.echo(f"anchor      {a['name']} ({a['kind']}): anchored size {a['anchored_size']}"
                   f"   lag {a['lag']} leaves, {a['lag_s'] or 0:.1f}s{error}")
    if "replicas" in doc:
        click.echo(f"lease       held by {doc['lease_holder'] or 'nobody'}")
    for r in doc.get("replicas", []):
        click.echo(f"replica     {r['name']}: stream seq {r['stream_seq']}   tree size "
                   f"{r['tree_size']}   lag {r['lag']}"
                   + ("   (lease holder)" if r["leading"] else ""))


@cli.command()
@click.argument("run")
@click.option("--index", type=click.IntRange(1), help="Segment index (default: the latest).")
@click.option("--json", "as_json", is_flag=True, help="Print the bundle as JSON (default).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the bundle to FILE.")
@nats_options
def prove(run: str, index: int | None, as_json: bool, out: Path | None, url: str,
          nkey: Path | None) -> None:
    """The membership proof bundle of a run's head (or of one segment)."""
    body: dict[str, Any] = {"run": run}
    if index is not None:
        body["index"] = index
    bundle = api(url, "prove", body, nkey=nkey)
    import json

    text = json.dumps(bundle, indent=2) + "\n"
    if out is not None:
        out.write_text(text)
        if not as_json:
            click.echo(f"wrote {out}: leaf {bundle['leaf_index']} of {bundle['tree_size']}",
                       err=True)
            return
    click.echo(text, nl=False)


@cli.command()
@click.argument("old", type=click.IntRange(0))
@click.argument("new", type=click.IntRange(0))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@nats_options
def consistency(old: int, new: int, as_json: bool, url: str, nkey: Path | None) -> None:
    """The RFC 9162 consistency proof between two tree sizes."""
    doc = api(url, "consistency", {"old": old, "new": new}, nkey=nkey)
    if as_json:
        emit_json(doc)
        return
    click.echo(f"{doc['old']} -> {doc['new']}: {len(doc['proof'])} hashes")
    for h in doc["proof"]:
        click.echo(f"  {h}")


@cli.group()
def run() -> None:
    """Runs the ledger holds."""


@run.command("show")
@click.argument("run_id", metavar="RUN")
@click.option("--exec-journal", "exec_journal", type=click.Path(dir_okay=False, path_type=Path),
              help="A host's exec journal (fleet exec run --journal): verify the run's record "
                   "and show the exec decisions each executed segment's journal root commits to.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@nats_options
def run_show(run_id: str, exec_journal: Path | None, as_json: bool, url: str,
             nkey: Path | None) -> None:
    """Phase, segments, energy totals, wait-proof verdict and holders of a run."""
    doc = api(url, "run", {"run": run_id}, nkey=nkey)
    # What the ledger refused of this run (any host's), so a stopped run says why.
    doc["refusals"] = api(url, "rejections", {"run": doc["run"]}, nkey=nkey)["rejections"]
    if exec_journal is not None:
        doc["exec"] = _exec_evidence(run_id, exec_journal, url, nkey)
    if as_json:
        emit_json(doc)
        return
    e = doc["energy"]
    click.echo(f"run {doc['run']} on {doc['host']}")
    click.echo(f"  {doc['segments']} segments, phase {doc['phase']}, head {doc['head']}")
    pools = "".join(f"; {name} {sum(e[f'{name}_uj'].values())}" for name in ("claim", "overhead")
                    if any(e.get(f"{name}_uj", {}).values()))
    click.echo(f"  energy {e['total_uj']} uJ (measured {e['by_provenance_uj']['measured']}, "
               f"estimated {e['by_provenance_uj']['estimated']}; idle "
               f"{sum(e['idle_uj'].values())}{pools})")
    wp = doc["wait_proof"]
    click.echo(f"  wait proof {wp['verdict']}"
               + (f" (segment {wp['segment']})" if "segment" in wp else ""))
    item = doc.get("job")
    if item is not None:
        click.echo(f"  item {item['index']} of " + _item_state(item))
    spans = [f"{h['host']} {h['first']}-{h['last']}" if h["first"] != h["last"]
             else f"{h['host']} {h['first']}" for h in doc.get("holders", [])]
    if spans:
        click.echo("  held by " + ", ".join(spans))
    for fx in doc.get("effects", []):
        what = ("possible duplicate effect" if fx["possible_duplicate"]
                else "effectful step without an idempotency key")
        click.echo(f"  {what}: segment {fx['segment']} call {fx['call']}")
    for r in reversed(doc["refusals"]):
        click.echo(f"  refused: {r['host']} segment {r['index']} {r['rule']} at stream "
                   f"sequence {r['stream_seq']}: {r['detail']}")
    from fleet_ledger.cli.grant_cmds import show_run_grant

    show_run_grant(doc)
    for m in doc.get("exec", []):
        if m["interval"] is None:
            click.echo(f"  segment {m['segment']}: no interval of the exec journal")
            continue
        click.echo(f"  segment {m['segment']}: exec journal interval {m['interval']}, "
                   f"{m['entries']} decisions, {len(m['denials'])} denied")
        for d in m["denials"]:
            click.echo(f"    denied {d['access']} {d['bytes']} {d['label']}  {d['path']}")


def _item_state(item: dict[str, Any]) -> str:
    """The job an item run's unit names, and where the run stands in it."""
    if item["job"] is None:
        return ("a job this ledger never opened (folded before the ledger held item runs "
                "to their job)")
    sealed = "sealed" if item["sealed"] else "open"
    if not item["holds"]:
        return (f"job {item['job']} ({sealed}), held by another run: this one (folded "
                "before the job opened) is not its item")
    if item["closed"]:
        return f"job {item['job']} ({sealed}): closed, its leaf in the job's tree"
    return (f"job {item['job']} ({sealed}): "
            + ("sealed before the run closed, listed missing" if item["sealed"]
               else "running"))


def _exec_evidence(run_id: str, journal_file: Path, url: str, nkey: Path | None
                   ) -> list[dict[str, Any]]:
    """Each executed segment of the run's verified record, with the exec decisions its
    journal root commits to (the denials listed)."""
    from fleet_ledger.agents.exec_journal_store import read_journal
    from fleet_ledger.cli._wiring import LedgerRecordSource
    from fleet_ledger.cli.exec_cmds import audit_journal, check_roots

    if not journal_file.is_file():
        raise UserError(f"{journal_file}: no such file")
    journal = read_journal(journal_file)
    check_roots(journal, journal_file)
    data = _CliSource(LedgerRecordSource(url, nkey)).record(run_id)
    matched = audit_journal(journal, data, f"run {run_id}: its record does not verify")
    decisions = {i["interval"]: i["decisions"] for i in journal["intervals"]}
    return [{**m, "denials": [d for d in decisions.get(m["interval"], [])
                              if d["verdict"] == "deny"]}
            for m in matched]


@run.command("grant-evidence")
@click.argument("run_id", metavar="RUN")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the evidence here (default: print it).")
@nats_options
def run_grant_evidence(run_id: str, out: Path | None, url: str, nkey: Path | None) -> None:
    """What an auditor needs beside the run's record file to recompute every grant
    decision the ledger made about it (`fleet verify RECORD --grants EVIDENCE`)."""
    doc = api(url, "grant_evidence", {"run": run_id}, nkey=nkey)
    if out is None:
        emit_json(doc)
        return
    write_atomically(out, (json.dumps(doc, indent=1) + "\n").encode())
    click.echo(f"{out}: {len(doc['events'])} events, {len(doc['segments'])} segments")


@run.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@nats_options
def run_list(as_json: bool, url: str, nkey: Path | None) -> None:
    """Every run the ledger holds."""
    doc = api(url, "runs", nkey=nkey)
    if as_json:
        emit_json(doc["runs"])
        return
    for r in doc["runs"]:
        click.echo(f"{r['run']}  {r['host']:<16} {r['segments']:>4}  {r['phase']}")


@run.command("export")
@click.argument("run_id", metavar="RUN")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Where to write the record file.")
@nats_options
def run_export(run_id: str, out: Path, url: str, nkey: Path | None) -> None:
    """Write a run's record file (what ``fleet verify`` reads), fetched in pages."""
    from fleet_ledger.cli._wiring import LedgerRecordSource

    out.write_bytes(_CliSource(LedgerRecordSource(url, nkey)).record(run_id))
    click.echo(f"wrote {out}", err=True)


@run.command("adopt")
@click.argument("run_id", metavar="RUN")
@click.option("--data", "host_dir", type=click.Path(file_okay=False, path_type=Path),
              required=True, help="The adopting host's folder (its key, outbox, runs).")
@click.option("--name", help="The adopting host's name (default: the folder's name).")
@click.option("--vkey", help="The ledger's verifier key, or a file holding it (default: "
              "ledger.vkey in the host's folder).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@nats_options
def run_adopt(run_id: str, host_dir: Path, name: str | None, vkey: str | None, as_json: bool,
              url: str, nkey: Path | None) -> None:
    """Take over a run parked on another host, after verifying its record from genesis and
    its head against a proof under the ledger's key; the host then resumes it."""
    from fleet_ledger.agents.adoption import ResumeRefused
    from fleet_ledger.agents.host import Host
    from fleet_ledger.cli._wiring import LedgerRecordSource, host_ledger_keys
    from fleet_ledger.fleet.address import format_address
    from fleet_ledger.fleet.record.run_codec import snapshot_json

    keys = host_ledger_keys(host_dir, vkey)
    host = Host(name or host_dir.resolve().name, host_dir)
    try:
        source = LedgerRecordSource(url, nkey, host=host.name if nkey is not None else None)
        held = host.adopt_run(run_id, _CliSource(source), keys)
    except ResumeRefused as exc:
        raise CheckFailed(f"adoption refused: {exc.rule}: {exc}") from None
    finally:
        host.close()
    st = held.state
    doc = {"run": held.run, "host": host.name, "segments": st.index,
           "head": format_address(st.head), "phase": st.phase,
           "parked": snapshot_json(st.parked), "manifest": format_address(st.manifest)}
    if as_json:
        emit_json(doc)
        return
    click.echo(f"adopted {doc['run']} at segment {doc['segments']} (parked) on {host.name}; "
               f"resume it with snapshot {doc['parked']} and manifest {doc['manifest']}")


class _CliSource:
    """The ledger's API, with its failures as one-line CLI errors."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def record(self, run: str) -> bytes:
        return _api_call(lambda: self.inner.record(run))

    def proof(self, run: str, index: int) -> dict[str, Any]:
        return _api_call(lambda: self.inner.proof(run, index))


def _api_call(fn: Any) -> Any:
    from fleet_ledger.ledger.client import ApiError, LedgerUnreachable

    try:
        return fn()
    except LedgerUnreachable as exc:
        raise UserError(str(exc)) from None
    except ApiError as exc:
        raise CheckFailed(f"the ledger refused: {exc}") from None


@cli.command()
@click.option("--limit", type=click.IntRange(1), default=100, show_default=True)
@click.option("--host", help="Only this host's refusals.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@nats_options
def rejections(limit: int, host: str | None, as_json: bool, url: str, nkey: Path | None
               ) -> None:
    """Segments the ledger refused, newest first, with the rule each broke."""
    body: dict[str, Any] = {"limit": limit}
    if host:
        body["host"] = host
    doc = api(url, "rejections", body, nkey=nkey)
    if as_json:
        emit_json(doc["rejections"])
        return
    for r in doc["rejections"]:
        where = f"{r['run']} #{r['index']}" if r["run"] else r["subject"]
        click.echo(f"seq {r['stream_seq']:>8}  {r['host'] or '-':<16} {r['rule']:<20} {where}")
