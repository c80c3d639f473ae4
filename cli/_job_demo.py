"""The demo's job (C10): a small job opened under the simulated fleet's job issuer, its items
recorded by the demo's hosts (item ``i`` on host ``i mod hosts``) and sealed by its last
item's close; then its receipt shown, one item proved against it in a signed checkpoint and
the whole receipt recomputed from the items' exported records, both checked offline."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from agents.sim_grants import DEFAULT_SEED, SimGrants
from agents.simulate import simulate_host
from cli._app import CheckFailed
from cli._embedded import wait_folded
from cli.job_cmds import open_sim_job
from fleet.address import format_address, parse_address
from fleet.errors import FleetError
from fleet.jobs.item_proof import decode_item_proof
from fleet.jobs.job_bundle import verify_job_bundle
from fleet.jobs.job_records import items_from_states
from fleet.jobs.receipt import decode_receipt, verify_receipt
from fleet.jobs.sum_tree import VERDICTS, Item, energy_of
from fleet.log.note import Verifier
from fleet.record.verify import verify_state
from fleet.record.wire import decode_record
from ledger import job_views, views
from ledger.client import call

ITEMS = 4
NAME = "demo"
PROVED_ITEM = 1  # any item: the second shows a path that is not all left turns


def shares(hosts: list[str], items: int) -> dict[str, list[int]]:
    """The items each host records: item ``i`` on host ``i mod len(hosts)``."""
    return {h: list(range(n, items, len(hosts))) for n, h in enumerate(hosts) if n < items}


async def run_job(ledger: Any, url: str, workdir: Path, hosts: list[str]) -> dict[str, Any]:
    """Open the job, record its items on ``hosts`` (their folders under ``workdir/hosts``,
    their runs' grants issued as the simulator does) and fold them: the job is sealed by the
    last item's close, else a failed check. Returns the job's id and who recorded what."""
    loop = asyncio.get_running_loop()
    # The same path as ``fleet job open``: a signed OPEN event, decided by the ledger.
    job, _report = await loop.run_in_executor(None, open_sim_job, url, DEFAULT_SEED, ITEMS,
                                              NAME)
    raw = parse_address(job)
    split = shares(hosts, ITEMS)
    reports = await asyncio.gather(*(
        simulate_host(h, workdir / "hosts" / h, len(mine), [url], fleet=ledger.names.fleet,
                      grants=SimGrants(h, workdir / "hosts" / h, hosts, DEFAULT_SEED),
                      items=[(raw, i) for i in mine])
        for h, mine in split.items()))
    for r in reports:
        if r["remaining"] or r.get("stopped_runs"):
            raise CheckFailed(f"host {r['host']} did not deliver its job items: "
                              f"{r.get('stopped_runs') or r['remaining']}")
    await wait_folded(ledger, ledger.js, 60.0)
    if not job_views.job_status(ledger.store, job)["sealed"]:
        raise CheckFailed(f"job {job}: every item closed, yet the ledger has no receipt")
    return {"job": job, "hosts": split}


def _records(ledger: Any, runs: list[str]) -> list[Any]:
    """Each item run's state, verified from genesis from the record the ledger exports (the
    file ``fleet export RUN`` writes; ``fleet job verify --records`` reads a folder of them)."""
    return [verify_state(decode_record(views.export_record(ledger.store, run)))[0]
            for run in runs]


async def prove_job(ledger: Any, url: str, vkey: Verifier, opened: dict[str, Any]
                    ) -> dict[str, Any]:
    """The job as ``fleet job show --json`` gives it, its item :data:`PROVED_ITEM` proved
    as ``fleet job prove`` and ``fleet job verify-proof`` do, and its receipt recomputed from
    the items' records as ``fleet job verify`` does; any disagreement is a failed check."""
    job = opened["job"]
    shown = json.loads(await call(url, "job", {"job": job, "items": True}))
    runs = [r["run"] for r in sorted(shown["item_runs"], key=lambda r: r["index"])]
    receipt = decode_receipt(bytes.fromhex(shown["receipt"]["hex"]))
    states = _records(ledger, runs)
    bundle = json.loads(await call(url, "job_prove", {"job": job, "item": PROVED_ITEM}))
    try:
        proved = verify_job_bundle(bundle, [vkey])
        verify_receipt(receipt, items_from_states(receipt.terms, states))
    except FleetError as exc:
        raise CheckFailed(f"job {job}: {exc.rule}: {exc}") from None
    item = proved.item
    if not isinstance(item, Item) or format_address(item.run) != runs[PROVED_ITEM]:
        raise CheckFailed(f"job {job}: the proof of item {PROVED_ITEM} is not of its run")
    items_uj = sum(sum(energy_of(s.energy)) for s in states)
    if items_uj != shown["energy"]["total_uj"]:
        raise CheckFailed(f"job {job}: the receipt states {shown['energy']['total_uj']} µJ, "
                          f"its items' records {items_uj} µJ")
    return {
        "job": job, "name": shown["name"], "items": shown["items"], "hosts": opened["hosts"],
        "item_runs": runs, "segments": sum(s.index for s in states), "status": shown,
        "energy_uj": shown["energy"]["total_uj"], "items_energy_uj": items_uj,
        "receipt_leaf_index": shown["receipt"]["leaf_index"], "proved_item": PROVED_ITEM,
        "proved_item_run": runs[PROVED_ITEM], "proved_item_energy_uj": sum(item.energy),
        "proved_item_verdict": VERDICTS[item.verdict],
        "item_proof_nodes": len(decode_item_proof(bytes.fromhex(bundle["item_proof"])).path),
        "proof_tree_size": bundle["tree_size"], "records_verified": len(states),
    }


def job_lines(job: dict[str, Any]) -> list[str]:
    """The demo's text about its job."""
    from cli.job_cmds import show_text

    spread = "; ".join(f"{h}: {', '.join(map(str, items))}" for h, items in job["hosts"].items())
    lines = [f"  a job of {job['items']} item runs ({spread}), sealed by its last item's "
             "close:"]
    lines += ["  " + line for line in show_text(job["status"])]
    lines.append(f"  proved item {job['proved_item']} (run {job['proved_item_run']}, "
                 f"{job['proved_item_energy_uj']} µJ, {job['proved_item_verdict']}) with "
                 f"{job['item_proof_nodes']} sum-tree nodes to the receipt, the receipt as "
                 f"leaf {job['receipt_leaf_index']} of the checkpoint of size "
                 f"{job['proof_tree_size']}: verified offline")
    lines.append(f"  the receipt recomputed from the {job['records_verified']} items' exported "
                 f"records: valid, {job['items_energy_uj']} µJ in all")
    return lines
