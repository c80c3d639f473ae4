"""``fleet pool``: a host's warm pool (docs/warm-pools.md).

    fleet pool warm --manifest b3:... --fs-root b3:... --volume-bytes 8589934592 -- ./prepare
    fleet pool list
    fleet pool claim SLOT --run b3:...
    fleet pool evict SLOT
    fleet pool claim SLOT --host NAME --unit b3:... --grants b3:...   # and seal the record
    fleet pool evict SLOT --host NAME                                 # into the pool's run
    fleet pool record --host NAME        # seal evictions a crash left off the pool's run

With ``--host`` the claim seals the run's first segment (``claimed``) and the eviction a
segment of the pool's own run (``evicted``) with the host's key in ``--data`` (its outbox,
drained to the ledger by the host's publisher): agents.pool_records.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, overload

import click

from fleet_ledger.cli._app import CheckFailed, UserError, cli
from fleet_ledger.cli._common import emit_json, emit_result
from fleet_ledger.fleet.address import format_address, parse_address
from fleet_ledger.fleet.errors import FleetError, MalformedAddress


def _data(fn: Any) -> Any:
    fn = click.option("--pool", "name", default="default", show_default=True,
                      help="The pool's name (a host may keep several).")(fn)
    return click.option("--data", type=click.Path(file_okay=False, path_type=Path),
                        default=Path("."), show_default=True,
                        help="The host folder holding pool.db.")(fn)


def _open(data: Path, name: str) -> Any:
    from fleet_ledger.agents.warm_pool import WarmPool

    data.mkdir(parents=True, exist_ok=True)
    try:
        return WarmPool(data / "pool.db", name)
    except FleetError as exc:
        raise UserError(f"{exc.rule}: {exc}") from None


@overload
def _address(text: str, what: str) -> bytes: ...


@overload
def _address(text: None, what: str) -> None: ...


@overload
def _address(text: str | None, what: str) -> bytes | None: ...


def _address(text: str | None, what: str) -> bytes | None:
    if text is None:
        return None
    try:
        return parse_address(text)
    except MalformedAddress:
        raise UserError(f"{what}: not a b3: content address: {text}") from None


@cli.group("pool")
def pool_group() -> None:
    """A host's warm pool: slots warmed ahead of demand, their energy claimed or evicted."""


@pool_group.command("warm", context_settings={"ignore_unknown_options": True})
@_data
@click.option("--manifest", required=True, help="The environment manifest's address.")
@click.option("--fs-root", required=True, help="The warmed filesystem root's address.")
@click.option("--mem-image", help="A resident memory image's address, if one is kept.")
@click.option("--volume-bytes", type=click.IntRange(1), required=True,
              help="The retained volume's provisioned size.")
@click.option("--memory-bytes", type=click.IntRange(0), default=0,
              help="The resident memory image's size.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.argument("warmup", nargs=-1, type=click.UNPROCESSED)
def pool_warm(data: Path, name: str, manifest: str, fs_root: str, mem_image: str | None,
              volume_bytes: int, memory_bytes: int, as_json: bool,
              warmup: tuple[str, ...]) -> None:
    """Warm a slot, metering the WARMUP command (after --) if one is given."""
    pool = _open(data, name)

    def run() -> None:
        done = subprocess.run(list(warmup), check=False)
        if done.returncode != 0:
            raise CheckFailed(f"the warm-up command exited with {done.returncode}")

    try:
        slot = pool.warm(_address(manifest, "--manifest"),
                         fs_root=_address(fs_root, "--fs-root"),
                         mem_image=_address(mem_image, "--mem-image"),
                         volume_bytes=volume_bytes, memory_bytes=memory_bytes,
                         warmup=run if warmup else None)
    except (FleetError, ValueError) as exc:
        raise UserError(str(exc)) from None
    finally:
        pool.close()
    emit_result(slot.to_json(), as_json)


@pool_group.command("list")
@_data
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def pool_list(data: Path, name: str, as_json: bool) -> None:
    """Every slot of the pool with its energy so far, and the pool's overhead."""
    pool = _open(data, name)
    try:
        slots = [{**s.to_json(), "accrued_uj": pool.accrued(s.id).total_uj}
                 for s in pool.slots()]
        doc = {"pool": name, "slots": slots, "overhead": pool.overhead()}
    finally:
        pool.close()
    if as_json:
        emit_json(doc)
        return
    for s in slots:
        click.echo(f"{s['slot']}  {s['state']:<8} {s['accrued_uj']:>14} uJ"
                   + (f"  run {s['run']}" if s["run"] else ""))
    o = doc["overhead"]
    click.echo(f"overhead: {o['evicted']} evicted, {o['total_uj']} uJ")


def _end(data: Path, name: str, slot: str, as_json: bool, run: str | None,
         host_name: str | None = None, identity: tuple[bytes, bytes] | None = None) -> None:
    from fleet_ledger.agents import pool_records

    pool = _open(data, name)
    host = None
    try:
        extra: dict[str, Any] = {}
        if host_name is not None:
            from fleet_ledger.agents.host import Host

            host = Host(host_name, data)
            if identity is not None:
                hr, got = pool_records.start_from_slot(host, pool, slot, *identity)
                sealed = None
            else:
                sealed, got = pool_records.evict_to_record(host, pool, slot)
                hr = pool_records.pool_run(host, name)
            extra = {"record": {"run": hr.run, "segment": hr.state.index,
                                "kind": "claimed" if sealed is None else "evicted",
                                "energy": hr.state.energy.as_json()}}
        else:
            got = pool.claim(slot, run) if run is not None else pool.evict(slot)
    except MalformedAddress as exc:
        raise UserError(str(exc)) from None
    except FleetError as exc:
        raise CheckFailed(f"{exc.rule}: {exc}") from None
    except ValueError as exc:  # a host name that cannot name a host
        raise UserError(str(exc)) from None
    finally:
        pool.close()
        if host is not None:
            host.close()
    emit_result({**got.to_json(), **extra}, as_json)


_HOST_HELP = ("Seal the record too, as this host (its key and outbox in --data): the claim "
              "as the run's first segment, the eviction in the pool's own run.")


@pool_group.command("claim")
@click.argument("slot")
@_data
@click.option("--run", "run_id", help="The run that starts from the slot.")
@click.option("--host", "host_name", help=_HOST_HELP)
@click.option("--unit", help="With --host: the run's unit id.")
@click.option("--grants", help="With --host: the run's grant set id.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def pool_claim(slot: str, data: Path, name: str, run_id: str | None, host_name: str | None,
               unit: str | None, grants: str | None, as_json: bool) -> None:
    """Claim a warm slot for a run: prints the energy its record carries (with --host,
    sealed as the run's first segment)."""
    if host_name is None:
        if run_id is None:
            raise UserError("give --run, or --host with --unit and --grants")
        _end(data, name, slot, as_json, run_id)
        return
    if unit is None or grants is None:
        raise UserError("--host needs --unit and --grants (the run's identity)")
    ids = (_address(unit, "--unit"), _address(grants, "--grants"))
    from fleet_ledger.fleet.record.kernel import genesis

    run = format_address(genesis(*ids))
    if run_id is not None and _address(run_id, "--run") != parse_address(run):
        raise UserError(f"--run {run_id} is not the run of --unit and --grants ({run})")
    _end(data, name, slot, as_json, run, host_name, ids)


@pool_group.command("evict")
@click.argument("slot")
@_data
@click.option("--host", "host_name", help=_HOST_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def pool_evict(slot: str, data: Path, name: str, host_name: str | None, as_json: bool) -> None:
    """Evict a warm slot: prints its energy, the pool's overhead (with --host, sealed in
    the pool's own run)."""
    _end(data, name, slot, as_json, None, host_name)


@pool_group.command("record")
@_data
@click.option("--host", "host_name", required=True, help="The host whose pool run it is.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def pool_record(data: Path, name: str, host_name: str, as_json: bool) -> None:
    """Seal every eviction not yet in the pool's own run (one a crash left between the pool
    and the record); prints the pool run and the segments sealed."""
    from fleet_ledger.agents import pool_records
    from fleet_ledger.agents.host import Host

    pool = _open(data, name)
    host = None
    try:
        host = Host(host_name, data)
        sealed = pool_records.record_evictions(host, pool)
        run = pool_records.pool_run(host, name)
        doc = {"run": run.run, "segments": run.state.index,
               "sealed": [s.index for s in sealed], "energy": run.state.energy.as_json()}
    except ValueError as exc:  # a host name that cannot name a host
        raise UserError(str(exc)) from None
    except FleetError as exc:
        raise CheckFailed(f"{exc.rule}: {exc}") from None
    finally:
        pool.close()
        if host is not None:
            host.close()
    if as_json:
        emit_json(doc)
        return
    click.echo(f"pool run {doc['run']}: {doc['segments']} segments, sealed now "
               f"{doc['sealed'] or 'none'}")
