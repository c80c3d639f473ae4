"""``fleet demo``: the whole pipeline on the embedded default, in one command."""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import click

from fleet_ledger.cli._app import CheckFailed, UserError, cli
from fleet_ledger.cli._common import progress, progress_done
from fleet_ledger.plumbing.natsd import NatsServerError


async def _demo(workdir: Path, hosts: int, runs: int) -> dict[str, Any]:
    from fleet_ledger.cli._embedded import embedded_ledger, wait_folded
    from fleet_ledger.cli._env_demo import refused_resume
    from fleet_ledger.cli._grant_demo import overspending_run
    from fleet_ledger.cli._job_demo import job_demo
    from fleet_ledger.cli._sim_procs import spawn_simulators
    from fleet_ledger.fleet.log.checkpoint import open_checkpoint
    from fleet_ledger.fleet.log.note import parse_verifier_key
    from fleet_ledger.fleet.log.proof_bundle import verify_bundle
    from fleet_ledger.fleet.record.verify import verify_record
    from fleet_ledger.fleet.record.wire import decode_envelope, decode_record
    from fleet_ledger.fleet.subjects import segment_subject
    from fleet_ledger.ledger import views
    from fleet_ledger.ledger.client import call

    started = time.monotonic()
    # Every run must present its grant before its first segment (the simulator issues one
    # per run).
    async with embedded_ledger(workdir, grants="require") as (server, ledger):
        # A third of the runs move to another host process at a park (with two or more
        # hosts): the adopting host verifies the record and its proof first.
        procs = spawn_simulators(hosts, runs, server.url, workdir / "hosts",
                                 enroll_into=workdir / "ledger",
                                 migrate=0.34 if hosts > 1 else 0.0,
                                 vkey=str(workdir / "ledger" / "ledger.vkey"))
        loop = asyncio.get_running_loop()
        waits = [loop.run_in_executor(None, p.communicate) for p in procs]
        while not all(w.done() for w in waits):
            progress(f"hosts streaming: {sum(w.done() for w in waits)} of {len(waits)} "
                     f"done, {ledger.store.watermark()} messages folded")
            await asyncio.wait(waits, timeout=0.2)
        for p, w in zip(procs, waits, strict=True):
            _out, err = w.result()
            if p.returncode != 0:
                raise CheckFailed(f"a simulated host failed: {err.strip()[-300:]}")
        assert ledger.js is not None and ledger.nc is not None
        await wait_folded(ledger, ledger.js, 60.0)
        # An issuer tightens a running run's budget: its next segment is refused by name.
        overspent = await overspending_run(ledger, workdir, int(time.time() * 1000))
        # One hostile message: a real segment with its energy edited in flight, of the
        # longest run (any run has one executed segment to edit; a short plan may have
        # no more).
        # (A run that never moved: its first host still holds it, so the edit is what
        # the ledger refuses, not who sent it.)
        victim = max((r for r in ledger.store.list_runs() if r["run"] != overspent["run"]),
                     key=lambda r: (len(views.holders(ledger.store, r["run"])) == 1,
                                    r["segments"]))
        payload = ledger.store.payloads(victim["run"])[0]
        tampered = json.loads(payload)
        tampered["segment"]["attestation_object"]["receipt"]["uj"] += 1
        env = decode_envelope(payload)
        await ledger.js.publish(segment_subject(env.host, victim["run"]),
                                json.dumps(tampered).encode())
        await wait_folded(ledger, ledger.js, 60.0)
        await ledger.sign_checkpoint_now()
        # Prove a run through the API, as any client would, and check it offline.
        run_id = victim["run"]
        bundle = json.loads(await call(server.url, "prove", {"run": run_id}))
        vkey = parse_verifier_key((workdir / "ledger" / "ledger.vkey").read_text().strip())
        verify_bundle(bundle, [vkey])
        record = decode_record(views.export_record(ledger.store, run_id))
        report = verify_record(record)
        status = views.status(ledger.store, origin=ledger.origin, vkey=vkey.text())
        verdicts: dict[str, int] = {}
        for r in ledger.store.list_runs():
            name = views.run_status(ledger.store, r["run"],
                                    ledger.grants)["wait_proof"]["verdict"]
            verdicts[name] = verdicts.get(name, 0) + 1
        ledger_verdict = views.run_status(ledger.store, run_id,
                                          ledger.grants)["wait_proof"]["verdict"]
        if ledger_verdict != report.wait_proof.name:
            raise CheckFailed(f"the ledger says {ledger_verdict} for run {run_id}, its "
                              f"record verifies to {report.wait_proof.name}")
        moved = [r["run"] for r in ledger.store.list_runs()
                 if len(views.holders(ledger.store, r["run"])) > 1]
        moved_proof: dict[str, Any] = {}
        if moved:
            # Prove a moved run too, and verify its record sealed by several hosts.
            mbundle = json.loads(await call(server.url, "prove", {"run": moved[0]}))
            verify_bundle(mbundle, [vkey])
            mreport = verify_record(decode_record(views.export_record(ledger.store,
                                                                      moved[0])))
            moved_proof = {"moved_proved_run": moved[0],
                           "moved_holders": views.holders(ledger.store, moved[0]),
                           "moved_record_segments": mreport.segments}
        last = ledger.store.last_checkpoint()
        assert last is not None  # the bundles above were proved against one
        cp = open_checkpoint(last[2], [vkey])
        environment = refused_resume(workdir / "environment-check")
        # Last (the figures above are the simulated fleet's): a job of six items under a
        # grant, sealed by its last close, one item proved.
        job = await job_demo(ledger, workdir, int(time.time() * 1000), vkey)
    return {
        "hosts": hosts, "runs": status["runs"], "segments": status["segments_folded"],
        "tree_size": status["tree_size"], "root": status["root"],
        "checkpoint_size": cp.size, "rejected": status["rejected"],
        "proved_run": run_id, "proved_index": bundle["index"],
        "proof_hashes": len(bundle["inclusion"]), "record_verdict": report.wait_proof.name,
        "record_segments": report.segments, "origin": ledger.origin,
        "wait_proofs": dict(sorted(verdicts.items())),
        "moved_runs": len(moved), **moved_proof,
        "environment_refusal": environment, "grant_refusal": overspent, "job": job,
        "seconds": round(time.monotonic() - started, 2),
    }


def _in_folder(keep: Path | None, fn: Any) -> Any:
    try:
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            return asyncio.run(fn(keep))
        with tempfile.TemporaryDirectory(prefix="fleet-demo-") as tmp:
            return asyncio.run(fn(Path(tmp)))
    except NatsServerError as exc:
        raise UserError(f"cannot start nats-server: {exc}") from None
    finally:
        progress_done()


@cli.command()
@click.option("--hosts", type=click.IntRange(1, 32), default=3, show_default=True)
@click.option("--runs", type=click.IntRange(1), default=4, show_default=True,
              help="Runs per host.")
@click.option("--keep", type=click.Path(file_okay=False, path_type=Path),
              help="Keep the demo's data in this folder (default: a temp folder, removed).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--runtime", "durable", is_flag=True, help="Instead: the durable triage agent "
              "(examples/triage.py) waiting with no process and finishing on another host.")
def demo(hosts: int, runs: int, keep: Path | None, as_json: bool, durable: bool) -> None:
    """Start the embedded stack, stream simulated hosts, prove and verify a run."""
    if durable:
        from fleet_ledger.cli._runtime_demo import runtime_demo, show

        show(_in_folder(keep, runtime_demo), as_json)
        return
    from fleet_ledger.cli._samples import use_samples

    use_samples(2)  # the hosts' runs park in them; the environment check needs two
    summary = _in_folder(keep, lambda folder: _demo(folder, hosts, runs))
    if as_json:
        click.echo(json.dumps(summary))
        return
    rejected = ", ".join(f"{v} {k}" for k, v in summary["rejected"].items()) or "none"
    click.echo(f"fleet demo: {summary['hosts']} hosts streamed {summary['runs'] - 1} runs, one "
               f"more ran under an amended grant; {summary['segments']} segments folded in "
               f"{summary['seconds']} s")
    click.echo(f"  fleet log: {summary['tree_size']} leaves, root {summary['root']}")
    click.echo(f"  checkpoint signed by {summary['origin']} at size {summary['checkpoint_size']}")
    click.echo(f"  rejected: {rejected}")
    click.echo(f"  proved run {summary['proved_run']} segment {summary['proved_index']} with "
               f"{summary['proof_hashes']} hashes: verified offline")
    click.echo(f"  its record verifies from genesis: {summary['record_segments']} segments, "
               f"wait proof {summary['record_verdict']}")
    if summary["moved_runs"]:
        spans = ", ".join(f"{h['host']} {h['first']}-{h['last']}"
                          for h in summary["moved_holders"])
        click.echo(f"  {summary['moved_runs']} runs moved to another host at a park; proved "
                   f"{summary['moved_proved_run']} ({spans}): verified offline")
    proofs = ", ".join(f"{n} {v}" for v, n in summary["wait_proofs"].items())
    click.echo(f"  wait proofs across the fleet's runs: {proofs}")
    g = summary["grant_refusal"]
    click.echo(f"  run {g['run']} spent {g['spent_uj']} of its grant's {g['budget_uj']} µJ; "
               f"the issuer amended the budget to {g['amended_budget_uj']} µJ:")
    click.echo(f"    segment {g['refused_index']} refused: {g['rule']}: {g['reason']}; its "
               f"{g['segments_standing']} earlier segments stand")
    j = summary["job"]
    click.echo(f"  job {j['job']}: {j['items']} items on {', '.join(j['hosts'])} under one "
               f"grant; a second run of item 2 refused: {j['duplicate_rule']}")
    click.echo(f"    sealed by its last close: receipt root {j['receipt_root']}, "
               f"{j['energy_uj']} uJ, missing {len(j['missing'])}; item {j['proved_item']} "
               f"proved ({j['proof_bytes']} bytes) to the receipt, leaf {j['receipt_leaf']} "
               f"of checkpoint size {j['checkpoint_size']}: verified offline")
    env = summary["environment_refusal"]
    click.echo(f"  a run parked in the {env['parked_in']} environment, offered "
               f"{env['offered_in']} to resume in: {env['rule']} on the host, nothing sealed")
