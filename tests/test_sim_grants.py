"""The simulator opens every run under a real grant of its own, issued in the stream before
the run's first segment, so a ledger requiring grants folds a simulated fleet whole."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path

from fleet_ledger.agents.sim_grants import SIM_BUDGET_UJ, sim_keys
from fleet_ledger.fleet.address import format_address
from fleet_ledger.fleet.fold.grant_events import decode_event
from fleet_ledger.fleet.grants.grant import decode_grant, grant_address
from fleet_ledger.fleet.record.seal import decode_key
from fleet_ledger.fleet.subjects import DEFAULT_FLEET
from fleet_ledger.plumbing.natsd import NatsServer

from pipeline_helpers import FLEET_BIN


def _simulate(url: str, hosts: Path, ledger: Path) -> list[dict]:
    out = subprocess.run([FLEET_BIN, "host", "simulate", "--hosts", "2", "--runs", "3",
                          "--nats", url, "--data", str(hosts), "--enroll-into", str(ledger),
                          "--seed", "grant-test", "--json"],
                         capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                         check=True)
    return json.loads(out.stdout)["hosts"]  # type: ignore[no-any-return]


async def _fold_simulation(url: str, tmp: Path) -> tuple[list[dict], list[dict], dict]:
    """Simulate twice (the second picks up the same runs) into a ledger that requires
    grants; both simulators' summaries and what the ledger holds."""
    from fleet_ledger.ledger.service import Ledger, LedgerConfig

    ledger = Ledger(LedgerConfig(data_dir=tmp / "ledger", servers=[url], grants="require"))
    stop = asyncio.Event()
    task = asyncio.create_task(ledger.run(stop))
    try:
        first = await asyncio.to_thread(_simulate, url, tmp / "hosts", tmp / "ledger")
        again = await asyncio.to_thread(_simulate, url, tmp / "hosts", tmp / "ledger")
        assert ledger.js is not None
        deadline = time.monotonic() + 30
        while ledger.store.watermark() < (await ledger.js.stream_info(
                DEFAULT_FLEET.stream)).state.last_seq:
            assert time.monotonic() < deadline, "the ledger did not fold the simulation"
            await asyncio.sleep(0.05)
        store = ledger.store
        held = {
            "counts": store.counts(),
            "runs": [(r["run"], json.loads(store.payloads(r["run"])[0])["grants_id"])
                     for r in store.list_runs()],
            "events": [bytes(p) for (p,) in store.conn.execute(
                "SELECT payload FROM grant_events ORDER BY stream_seq")],
            "host_keys": [decode_key(h["public_key"]) for h in store.host_rows()],
        }
    finally:
        stop.set()
        await task
        await ledger.close()
    return first, again, held


def test_simulated_runs_fold_under_their_own_grants(nats_server: NatsServer,
                                                    tmp_path: Path) -> None:
    """Two simulated hosts' runs are all folded by a ledger requiring grants, each under its
    own grant (issued by the seed's issuer to its agent, allowing both hosts and the run's
    manifest), and a simulator run again issues no grant twice."""
    first, again, held = asyncio.run(_fold_simulation(nats_server.url, tmp_path))
    assert sum(h["grants_issued"] for h in first) == 6
    assert sum(h["grants_issued"] for h in again) == 0
    assert held["counts"]["rejected"] == {} and held["counts"]["runs"] == 6
    issuer, agent = sim_keys("grant-test")
    grants = {}
    for data in held["events"]:
        ev = decode_event(data)
        assert ev.kind_name == "issue" and ev.signer == bytes(issuer.verify_key)
        grants[format_address(grant_address(ev.fields.grant))] = decode_grant(  # type: ignore[union-attr]
            ev.fields.grant)  # type: ignore[union-attr]
    assert len(grants) == 6
    assert bytes(issuer.verify_key) not in held["host_keys"] + [bytes(agent.verify_key)]
    for _run, grants_id in held["runs"]:
        g = grants[grants_id]
        assert g.subject == bytes(agent.verify_key)
        assert g.terms.hosts == ("host1", "host2") and len(g.terms.manifests or ()) == 1
        assert g.terms.budget_uj == SIM_BUDGET_UJ
