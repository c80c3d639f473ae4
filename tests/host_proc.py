"""A host process for the moving-run tests: ``python tests/host_proc.py ACTION ...``.

    park NAME DIR URL UNIT FORM            open a run, execute, park (image|transcript),
                                           publish, print {"run"}, then wait to be killed
    adopt NAME DIR URL RUN VKEY NEXT       adopt RUN, resume it with the recorded park,
                                           execute, then NEXT (park-image|park-transcript|
                                           close), publish, print {"run", "segments"}
    resume-own NAME DIR URL UNIT           resume this host's own parked run, publish, and
                                           report whether the ledger's refusal stopped it

Each prints one JSON line; a refusal is printed as {"refused": rule} with exit code 3.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from fleet_ledger.agents.adoption import ResumeRefused
from fleet_ledger.agents.host import Host, HostRun
from fleet_ledger.agents.outbox import RunStopped
from fleet_ledger.agents.publisher import Publisher
from fleet_ledger.agents.refusals import RefusalWatcher
from fleet_ledger.cli._wiring import LedgerRecordSource, ledger_keys
from fleet_ledger.fleet.address import digest
from fleet_ledger.fleet.errors import FleetError
from fleet_ledger.fleet.record.segment import make_snapshot
from fleet_ledger.plumbing.nats_connect import connect

MANIFEST = digest(b"moving-runs/manifest")
GRANTS = digest(b"moving-runs/grants")


def park(run: HostRun, form: str) -> None:
    tag = b"%d" % run.state.index
    snapshot = (make_snapshot(transcript=digest(b"t" + tag)) if form == "transcript" else
                make_snapshot(fs_root=digest(b"fs" + tag), mem_image=digest(b"mem" + tag)))
    run.suspend(snapshot, MANIFEST)


def execute(run: HostRun) -> None:
    run.execute(uj=1000 + run.state.index, provenance="measured", meter="test",
                journal_root=digest(b"j%d" % run.state.index))


def resume(run: HostRun) -> None:
    # Each host meters its own park: two hosts' resumes of one park differ (identical bytes
    # would be one segment, deduplicated by the broker as one message).
    assert run.state.parked is not None
    run.resume(run.state.parked, MANIFEST, idle_uj=500 + run.state.index + ord(run.host.name[0]),
               provenance="estimated", meter="estimate:test")


async def publish(host: Host, url: str) -> tuple[object, Publisher]:
    nc = await connect([url], name=f"test-host-{host.name}")
    publisher = Publisher(host.outbox, nc.jetstream(timeout=5.0))
    report = await publisher.drain(timeout=30.0)
    assert report.remaining == 0, report
    return nc, publisher


async def main(argv: list[str]) -> int:
    action, name, data, url = argv[:4]
    host = Host(name, Path(data))
    try:
        if action == "park":
            unit, form = argv[4], argv[5]
            run = host.open_run(digest(unit.encode()), GRANTS)
            execute(run)
            park(run, form)
            nc, _ = await publish(host, url)
            print(json.dumps({"run": run.run}), flush=True)
            await asyncio.sleep(3600)  # until the test kills this host
            return 0
        if action == "adopt":
            run_id, vkey, nxt = argv[4], argv[5], argv[6]
            try:
                # The source is synchronous (one API call each): off the event loop.
                run = await asyncio.to_thread(host.adopt_run, run_id, LedgerRecordSource(url),
                                              ledger_keys(vkey))
                resume(run)
            except (ResumeRefused, FleetError) as exc:
                print(json.dumps({"refused": exc.rule, "detail": str(exc)}), flush=True)
                return 3
            execute(run)
            if nxt == "close":
                run.close()
            else:
                park(run, nxt.removeprefix("park-"))
            nc, _ = await publish(host, url)
            await nc.close()  # type: ignore[attr-defined]
            print(json.dumps({"run": run.run, "segments": run.state.index}), flush=True)
            return 0
        if action == "resume-own":
            run = host.open_run(digest(argv[4].encode()), GRANTS)
            nc = await connect([url], name=f"test-host-{name}")
            watcher = await RefusalWatcher(nc, name, host.outbox).start()
            resume(run)
            await Publisher(host.outbox, nc.jetstream(timeout=5.0)).drain(timeout=30.0)
            deadline = time.monotonic() + 20
            while run.run not in watcher.stopped and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            try:
                execute(run)
                after = "queued"
            except RunStopped:
                after = "RunStopped"
            await watcher.stop()
            await nc.close()
            print(json.dumps({"run": run.run, "stopped": watcher.stopped.get(run.run),
                              "next_segment": after,
                              "pending": host.outbox.stats().pending_count}), flush=True)
            return 0
        raise SystemExit(f"unknown action {action!r}")
    finally:
        host.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
