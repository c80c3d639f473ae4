"""``fleet demo --runtime``: the triage agent (examples/triage.py) across three hosts.

An embedded nats-server and a ledger that requires grants (``--grants require``); an
issuer issues the run's grant (hosts A, B, C, the workflow's manifest only); host A starts
the agent under it, which calls its tool and parks
at the approval wait; the approval is sent twice with one id (stored once); host B adopts
the run, delivers the approval and parks at the cool-down timer; the timer falls due with
no host running it; host C adopts and finishes. Then the run is proved and its record
verified offline.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from fleet_ledger.cli._app import CheckFailed
from fleet_ledger.cli._common import progress


async def runtime_demo(workdir: Path) -> dict[str, Any]:
    from fleet_ledger.agents.host import Host
    from fleet_ledger.agents.publisher import Publisher
    from fleet_ledger.agents.runtime import Runtime
    from fleet_ledger.agents.runtime.fleet_store import FleetStore
    from fleet_ledger.agents.runtime.runtime import load_workflow
    from fleet_ledger.agents.runtime.worker import Worker
    from fleet_ledger.agents.sim_grants import sim_keys
    from fleet_ledger.cli._embedded import embedded_ledger, wait_folded
    from fleet_ledger.cli._samples import example_file
    from fleet_ledger.cli._wiring import LedgerRecordSource, ledger_keys
    from fleet_ledger.fleet.address import format_address
    from fleet_ledger.fleet.fold.grant_events import event_id, issue_event
    from fleet_ledger.fleet.grants.grant import grant_address, make_terms, sign_grant
    from fleet_ledger.fleet.log.proof_bundle import verify_bundle
    from fleet_ledger.fleet.record.verify import verify_record
    from fleet_ledger.fleet.record.wire import decode_record
    from fleet_ledger.ledger import views
    from fleet_ledger.ledger.client import call
    from fleet_ledger.plumbing.nats_connect import connect

    sys.path.insert(0, str(example_file("triage.py").parent))
    os.environ["TRIAGE_TRACKER"] = str(workdir / "tracker.jsonl")
    started = time.monotonic()
    async with embedded_ledger(workdir, grants="require") as (server, ledger):
        nc = await connect([server.url], name="fleet-demo-runtime")
        hosts = {n: Host(n, workdir / "hosts" / n) for n in ("A", "B", "C")}
        runtimes: list[Runtime] = []
        try:
            for host in hosts.values():
                ledger.store.enroll(host.name, host.public_key)
            store = await FleetStore(nc.jetstream(timeout=10.0)).open()
            keys = ledger_keys(str(workdir / "ledger" / "ledger.vkey"))
            source = LedgerRecordSource(server.url)

            def worker(name: str) -> Worker:
                host = hosts[name]

                async def adopt(run: str) -> Any:
                    return await asyncio.to_thread(host.adopt_run, run, source, keys)

                async def drain() -> None:
                    await Publisher(host.outbox, nc.jetstream(timeout=10.0)).drain(30.0)
                    await wait_folded(ledger, nc.jetstream(), 60.0)

                runtime = Runtime(host.dir, host=host)
                runtimes.append(runtime)
                return Worker(runtime, store, adopt, drain)

            a = worker("A")
            triage = load_workflow("triage:triage")
            progress("an issuer grants the run: hosts A, B, C, the workflow's manifest")
            issuer, agent = sim_keys("fleet-demo-runtime")
            now_ms = int(time.time() * 1000)
            grant = sign_grant(issuer, bytes(agent.verify_key), make_terms(
                ["/demo/runtime"], 10**15, now_ms - 3_600_000, now_ms + 3_600_000,
                hosts=list(hosts), manifests=[a.runtime.identity(triage, "triage:triage")[1]]))
            event = issue_event(issuer, grant)
            await nc.jetstream().publish(ledger.names.grant_subject, event,
                                         stream=ledger.names.stream,
                                         headers={"Nats-Msg-Id": event_id(event)})
            await wait_folded(ledger, nc.jetstream(), 60.0)
            progress("host A: the agent calls its tool and waits for approval")
            run = a.runtime.start(triage, "ticket-42", {
                "ticket": 42, "text": "The printer is on fire", "cool_down": 1.5},
                grant=format_address(grant_address(grant)))
            parked = await a.publish(await a.runtime.advance(run))
            sent = [await store.send_signal(run, "approve", {"by": "ana"}, "approval-1")
                    for _ in range(2)]
            progress("host B: adopts the run, delivers the approval, parks at the timer")
            (b,) = await worker("B").pass_once()
            await asyncio.sleep(1.6)  # the timer falls due; no host is running the agent
            progress("host C: adopts the run, fires the timer, finishes")
            (c,) = await worker("C").pass_once()
            if c.get("status") != "done":
                raise CheckFailed(f"the agent did not finish: {c}")
            await ledger.sign_checkpoint_now()
            bundle = json.loads(await call(server.url, "prove", {"run": run}))
            verify_bundle(bundle, keys)
            report = verify_record(decode_record(views.export_record(ledger.store, run)))
            holders = views.holders(ledger.store, run)
            refused = ledger.store.rejections()
            if refused:
                raise CheckFailed(f"the ledger refused the run's segments: {refused[0]}")
        finally:
            for runtime in runtimes:
                runtime.close()
            for host in hosts.values():
                host.close()
            await nc.close()
    return {"run": run, "first_wait": parked["wait"], "signal_stored": sent,
            "b": b.get("status"), "result": c["result"], "verdict": c["verdict"],
            "holders": holders, "record_segments": report.segments,
            "grant": format_address(grant_address(grant)), "grants": "require",
            "proved_index": bundle["index"], "seconds": round(time.monotonic() - started, 2)}


def show(summary: dict[str, Any], as_json: bool) -> None:
    import click

    if as_json:
        click.echo(json.dumps(summary))
        return
    spans = ", ".join(f"{h['host']} {h['first']}-{h['last']}" for h in summary["holders"])
    click.echo(f"fleet demo --runtime: the triage agent {summary['run']} in "
               f"{summary['seconds']} s")
    click.echo(f"  under grant {summary['grant']} (the ledger requires grants)")
    click.echo(f"  host A: tool call, then parked waiting on {summary['first_wait']}")
    click.echo(f"  approval sent twice with one id: stored {summary['signal_stored']}")
    click.echo(f"  host B adopted it, delivered the approval: {summary['b']} at the timer")
    click.echo(f"  the timer fell due with no host running; host C finished: "
               f"{summary['result']}")
    click.echo(f"  record ({spans}): {summary['record_segments']} segments, verified "
               f"offline; proved at {summary['proved_index']}; wait proof "
               f"{summary['verdict']['verdict']}")
