"""Host commands: ``host enroll``, ``host revoke``, ``host rekey`` (operator actions: signed
control events published to the stream, or, offline, on a ledger's data folder) and ``host
simulate`` (the traffic generator)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from fleet_ledger.cli._app import FLEET, CheckFailed, UserError, cli
from fleet_ledger.cli._common import emit_json, progress, progress_done, split_servers, text_or_file
from fleet_ledger.fleet.jobs.job_id import MAX_JOB_ITEMS


@cli.group()
def host() -> None:
    """Hosts: enrollment and simulation."""


def _store(data: Path):  # noqa: ANN202 - a LedgerStore, imported lazily
    from fleet_ledger.ledger.store import LedgerStore

    if not data.is_dir():
        raise UserError(f"{data}: not a ledger data folder")
    return LedgerStore(data)


def _on_store(data: Path, action: Callable[[Any], None]) -> None:
    """Run an operator action on a ledger's store; a refused one is a one-line error."""
    from fleet_ledger.ledger.store import StoreError

    store = _store(data)
    try:
        action(store)
    except StoreError as exc:
        raise UserError(str(exc)) from None
    finally:
        store.close()


def _control(fn: Any) -> Any:
    """The options of the published form (``--nats`` with ``--operator-key``)."""
    for option in reversed([
        click.option("--data", type=click.Path(file_okay=False, path_type=Path),
                     help="Offline bootstrap: write into this ledger data folder instead."),
        click.option("--nats", "url", help="Publish a signed control event to this NATS."),
        click.option("--nkey", type=click.Path(dir_okay=False, path_type=Path),
                     help="NATS nkey seed file."),
        click.option("--operator-key", "key_file",
                     type=click.Path(dir_okay=False, exists=True, path_type=Path),
                     help="The operator key file (fleet operator keygen) to sign with."),
        click.option("--seq", type=click.IntRange(1, 2**64 - 1),
                     help="Event sequence number (default: the time in microseconds)."),
        click.option("--json", "as_json", is_flag=True, help="Print JSON."),
    ]):
        fn = option(fn)
    return fn


def _publish(kind: int, name: str, pubkey: str | None, url: str | None, nkey: Path | None,
             key_file: Path | None, seq: int | None, as_json: bool) -> None:
    """Publish a control event of ``kind`` (a :mod:`fleet.fold.control` kind constant)."""
    from fleet_ledger.cli.operator_cmds import _report, parse_vkey, publish_event

    if url is None or key_file is None:
        raise UserError("give --data (offline) or --nats with --operator-key (published)")
    key = None if pubkey is None else parse_vkey(pubkey)
    _report(publish_event(url, nkey, key_file, kind, name, key, seq), as_json)


def _keyed(kind: int, name: str, pubkey: str, data: Path | None, url: str | None,
           nkey: Path | None, key_file: Path | None, seq: int | None, as_json: bool) -> None:
    """An enrollment or a re-key: published, or (an enrollment only) written offline into
    the store in ``data``. ``pubkey``: the key's text or a file holding it."""
    from fleet_ledger.fleet.fold.control import REKEY

    if data is None:
        return _publish(kind, name, pubkey, url, nkey, key_file, seq, as_json)
    if kind == REKEY:
        raise UserError("a re-key is published (--nats, --operator-key); offline, enroll again")
    try:
        key = text_or_file(pubkey)
    except OSError as exc:
        raise UserError(f"cannot read the public key {pubkey}: {exc}") from None
    _on_store(data, lambda store: store.enroll(name, key))
    click.echo(f"enrolled {name}")
    return None


@host.command("enroll")
@click.argument("name")
@click.option("--pubkey", required=True,
              help="The host's Ed25519 public key (base64), or a file holding it.")
@_control
def host_enroll(name: str, pubkey: str, data: Path | None, url: str | None,
                nkey: Path | None, key_file: Path | None, seq: int | None,
                as_json: bool) -> None:
    """Let ledgers fold segments sealed by this host key (after the event's position)."""
    from fleet_ledger.fleet.fold.control import ENROLL

    _keyed(ENROLL, name, pubkey, data, url, nkey, key_file, seq, as_json)


@host.command("revoke")
@click.argument("name")
@_control
def host_revoke(name: str, data: Path | None, url: str | None, nkey: Path | None,
                key_file: Path | None, seq: int | None, as_json: bool) -> None:
    """Refuse the host's later segments; its earlier ones stay in the log."""
    from fleet_ledger.fleet.fold.control import REVOKE

    if data is None:
        return _publish(REVOKE, name, None, url, nkey, key_file, seq, as_json)
    _on_store(data, lambda store: store.revoke(name))
    click.echo(f"revoked {name}")
    return None


@host.command("rekey")
@click.argument("name")
@click.option("--pubkey", required=True,
              help="The host's new Ed25519 public key (base64), or a file holding it.")
@_control
def host_rekey(name: str, pubkey: str, data: Path | None, url: str | None,
               nkey: Path | None, key_file: Path | None, seq: int | None,
               as_json: bool) -> None:
    """Replace the host's key for later segments (earlier ones stay, under the old key)."""
    from fleet_ledger.fleet.fold.control import REKEY

    _keyed(REKEY, name, pubkey, data, url, nkey, key_file, seq, as_json)


@host.command("simulate")
@click.option("--hosts", type=click.IntRange(1), default=1, show_default=True,
              help="Simulated hosts (more than one: one process each).")
@click.option("--runs", type=click.IntRange(1), default=5, show_default=True,
              help="Runs on each host.")
@click.option("--nats", "url", envvar="FLEET_NATS", default="nats://127.0.0.1:4222",
              show_default=True, help="NATS server URL(s), comma separated.")
@click.option("--data", type=click.Path(file_okay=False, path_type=Path),
              default=Path("fleet-hosts"), show_default=True,
              help="Host folder (one host) or parent of host folders (several).")
@click.option("--name", help="Host name (one host) or name prefix (several). Default 'host'.")
@click.option("--nkey", type=click.Path(dir_okay=False, path_type=Path),
              help="NATS nkey seed file of this host's user.")
@click.option("--enroll-into", type=click.Path(file_okay=False, path_type=Path),
              help="Enroll the simulated hosts into this ledger data folder first.")
@click.option("--migrate", type=click.FloatRange(0, 1), default=0.0, show_default=True,
              help="Fraction of runs parked on one host and resumed on another (a different "
                   "process), after it verifies the record and its proof.")
@click.option("--vkey", help="The ledger's verifier key, or a file holding it (needed to "
              "move runs: adoptions check the ledger's proofs under it).")
@click.option("--handoff", type=click.Path(file_okay=False, path_type=Path), hidden=True,
              help="The folder simulated hosts hand runs over in (one host per process).")
@click.option("--peers", type=click.IntRange(2), hidden=True,
              help="How many simulated hosts share --handoff.")
@click.option("--seed", default="fleet-sim", show_default=True,
              help="Seed of the simulated fleet's grant issuer and agent keys.")
@click.option("--grant-hosts", hidden=True,
              help="The hosts each run's grant allows, comma separated (default: all the "
                   "simulated hosts).")
@click.option("--job", "job_items", type=click.IntRange(1, MAX_JOB_ITEMS),
              help="Open a job of N items first and fan its items out over the hosts "
                   "(item i on host i mod --hosts; --runs is then ignored).")
@click.option("--job-id", hidden=True, help="The job this host records items of.")
@click.option("--job-share", hidden=True,
              help="OFFSET/STRIDE/ITEMS: this host's items of --job-id.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary.")
def host_simulate(hosts: int, runs: int, url: str, data: Path, name: str | None,
                  nkey: Path | None, enroll_into: Path | None, migrate: float,
                  vkey: str | None, handoff: Path | None, peers: int | None, seed: str,
                  grant_hosts: str | None, job_items: int | None, job_id: str | None,
                  job_share: str | None, as_json: bool) -> None:
    """Record and stream simulated runs; a killed simulator resumes where it stopped.

    Each run is opened under a grant of its own, issued (on the fleet's grant subject)
    before its first segment by the simulated fleet's issuer (keys from --seed). Under
    --nkey a host's NATS user may not publish grant events (the issuer is another
    principal), so runs then carry a placeholder grant id and no grant."""
    servers = split_servers(url)
    job = None
    if job_items is not None:
        if nkey is not None:
            raise UserError("--job opens a job on the job subject, which a host's NATS user "
                            "may not publish to: run it without --nkey")
        from fleet_ledger.cli.job_cmds import open_sim_job

        job_id, _report = open_sim_job(url, seed, job_items)
        job = {"job": job_id, "items": job_items}
        job_share = f"0/1/{job_items}"
    if migrate > 0 and vkey is None:
        raise UserError("--migrate needs --vkey: the ledger's verifier key (ledger.vkey)")
    if migrate > 0 and hosts == 1 and (handoff is None or peers is None):
        raise UserError("--migrate needs at least two hosts (--hosts 2 or more)")
    if hosts == 1:
        moving = None
        if migrate > 0:
            assert handoff is not None and peers is not None and vkey is not None
            moving = (migrate, vkey, handoff, peers)
        host_name = name or "host"
        allowed = grant_hosts.split(",") if grant_hosts else [host_name]
        summary = _one_host(host_name, data, runs, servers, nkey, enroll_into, moving,
                            url, (seed, allowed), _items(job_id, job_share))
        if job is not None:
            summary["job"] = job
        if as_json:
            emit_json(summary)
        else:
            click.echo(f"{summary['host']}: {summary['segments_written']} segments in "
                       f"{summary['runs']} runs, {summary['remaining']} unsent")
        if summary["remaining"]:
            raise CheckFailed(f"{summary['remaining']} segments could not be sent")
        return
    from fleet_ledger.cli._sim_procs import spawn_simulators

    procs = spawn_simulators(hosts, runs, url, data, enroll_into, name or "host", nkey=nkey,
                             migrate=migrate, vkey=vkey, seed=seed,
                             job=None if job is None else (str(job["job"]), job_items or 0))
    import signal
    import sys
    from concurrent.futures import ThreadPoolExecutor, wait

    # SIGTERM stops the children too (as Ctrl-C does, reaching the whole process group);
    # each picks up where it stopped when run again.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    with ThreadPoolExecutor(len(procs)) as pool:
        waits = [pool.submit(p.communicate) for p in procs]
        try:
            while not all(w.done() for w in waits):
                progress(f"simulated hosts: {sum(w.done() for w in waits)} of {hosts} done")
                wait(waits, timeout=0.2)
        finally:
            progress_done()
            for p in procs:
                if p.poll() is None:
                    p.terminate()
    results, failed = [], []
    for p, w in zip(procs, waits, strict=True):
        out, err = w.result()
        if p.returncode == 0:
            results.append(json.loads(out.strip().splitlines()[-1]))
        else:
            failed.append((err.strip().splitlines() or ["?"])[-1])
    if as_json:
        emit_json({"hosts": results, "failed": failed, **({} if job is None else {"job": job})})
    else:
        if job is not None:
            click.echo(f"job {job['job']}: {job['items']} items over {hosts} hosts")
        for r in results:
            click.echo(f"{r['host']}: {r['segments_written']} segments in {r['runs']} runs")
            for run_id, reason in sorted(r.get("stopped_runs", {}).items()):
                click.echo(f"  stopped {run_id}: {reason}")
    if failed:
        raise CheckFailed(f"{len(failed)} simulated hosts failed: {failed[0]}")


def _items(job_id: str | None, share: str | None) -> list[tuple[bytes, int]] | None:
    """The (job, index) items of ``--job-id`` and ``--job-share OFFSET/STRIDE/ITEMS``."""
    if job_id is None or share is None:
        return None
    from fleet_ledger.fleet.address import parse_address
    from fleet_ledger.fleet.errors import FleetError

    try:
        job = parse_address(job_id)
        offset, stride, items = (int(p) for p in share.split("/"))
    except (FleetError, ValueError):
        raise UserError(f"--job-id {job_id!r} --job-share {share!r}: a job id and "
                        "OFFSET/STRIDE/ITEMS") from None
    return [(job, i) for i in range(offset, items, stride)]


def _one_host(name: str, host_dir: Path, runs: int, servers: list[str], nkey: Path | None,
              enroll_into: Path | None,
              moving: tuple[float, str, Path, int] | None = None, url: str = "",
              grants: tuple[str, list[str]] | None = None,
              items: list[tuple[bytes, int]] | None = None) -> dict:
    from fleet_ledger.agents.host import HostKeyError, load_or_create_key
    from fleet_ledger.agents.simulate import simulate_host
    from fleet_ledger.fleet.record.seal import encode_key
    from fleet_ledger.fleet.subjects import check_host_name

    try:
        check_host_name(name)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    from fleet_ledger.cli._samples import use_samples

    use_samples()  # the runs park in them: a missing folder is named before NATS is tried
    host_dir.mkdir(parents=True, exist_ok=True)
    if enroll_into is not None:
        from fleet_ledger.ledger.store import StoreError

        try:
            key = load_or_create_key(host_dir)
        except HostKeyError as exc:
            raise UserError(str(exc)) from None
        store = _store(enroll_into)
        try:
            known = {h["name"]: h for h in store.host_rows()}
            pub = encode_key(bytes(key.verify_key))
            h = known.get(name)
            if h is None or h["public_key"] != pub:  # never un-revokes a revoked host
                store.enroll(name, pub)
        except StoreError as exc:
            raise UserError(str(exc)) from None
        finally:
            store.close()
    def show(acked: int, pending: int) -> None:
        progress(f"{name}: {acked} segments sent, {pending} pending")

    from fleet_ledger.plumbing.nats_connect import NatsUnreachable

    migration = None
    if moving is not None:
        from fleet_ledger.agents.simulate import Migration
        from fleet_ledger.cli._wiring import LedgerRecordSource, ledger_keys
        from fleet_ledger.fleet.log.log_errors import LogError

        fraction, vkey, folder, peers = moving
        try:
            keys = ledger_keys(vkey)
        except (LogError, OSError) as exc:
            raise UserError(f"--vkey: not a ledger verifier key: {exc}") from None
        source = LedgerRecordSource(url, nkey, host=name if nkey is not None else None)
        migration = Migration(fraction, folder, peers, source, keys)
    sim_grants = None
    if grants is not None and nkey is None:
        from fleet_ledger.agents.sim_grants import SimGrants

        seed, allowed = grants
        try:
            sim_grants = SimGrants(name, host_dir, [check_host_name(h) for h in allowed], seed)
        except ValueError as exc:
            raise UserError(f"--grant-hosts: {exc}") from None
    try:
        return asyncio.run(simulate_host(name, host_dir, runs if items is None else len(items),
                                         servers, nkey, on_progress=show,
                                         migration=migration, fleet=FLEET["name"],
                                         grants=sim_grants, items=items))
    except (NatsUnreachable, HostKeyError) as exc:
        raise UserError(str(exc)) from None
    except OSError as exc:
        raise UserError(f"cannot reach NATS at {','.join(servers)}: {exc}") from None
    finally:
        progress_done()
