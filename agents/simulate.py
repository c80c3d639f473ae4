"""A traffic generator: simulated hosts recording runs and streaming them to JetStream.

Each simulated host has its own folder (key, outbox, run states, and a signed manifest of
each sample environment in examples/devcontainers). A run follows a plan fixed by the host's
salt and the run's number: accounted executes, parks of both forms with their idle energy,
resumes (each checked against the park's environment, precondition 2), and a close.
Because each plan step is one segment and the host keeps its state, a simulator killed at
any point picks up every run at the step it reached.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.energy import IntervalMeter, image_park_idle, transcript_park_idle
from agents.environment import environment_manifest
from agents.host import Host, HostRun
from agents.publisher import Publisher
from fleet.address import digest
from fleet.manifest import manifest_of_text, sign
from fleet.note import signer_from_seed
from fleet.segment import CallAccount, Snapshot, make_snapshot
from plumbing.files import write_atomically
from plumbing.nats_connect import connect

# The sample declarations a simulated host's runs park and resume in: a source checkout's
# examples/ (not part of an installed wheel), or the folder FLEET_DEVCONTAINERS names.
SAMPLES = Path(__file__).resolve().parent.parent / "examples" / "devcontainers"


@dataclass(frozen=True)
class Step:
    kind: str
    form: str = ""  # "image" or "transcript" for a park
    # How the run's executes account for calls: "handoff" (dispatch, end the interval,
    # resolve in a later one: NonBlocking), "waits" (one interval resolves its own call:
    # Blocked) or "silent" (the first interval keeps no account: Unproved).
    style: str = "handoff"


def plan(rng: random.Random) -> list[Step]:
    """A run's steps: 1-3 executes, then 0-2 park/resume cycles each followed by executes.

    About one run in ten waits inside an interval and one in ten leaves an interval
    unaccounted, so the fleet's wait proofs are not all the same verdict."""
    kinds = [("executed", "") for _ in range(rng.randint(1, 3))]
    for _ in range(rng.randint(0, 2)):
        form = rng.choice(["image", "transcript"])
        kinds += [("suspended", form), ("resumed", form)]
        kinds += [("executed", "") for _ in range(rng.randint(1, 2))]
    if rng.random() < 0.9:
        kinds.append(("closed", ""))
    style = rng.choices(["handoff", "waits", "silent"], weights=[8, 1, 1])[0]
    return [Step(kind, form, style) for kind, form in kinds]


def salt(host_dir: Path) -> bytes:
    path = host_dir / "sim.salt"
    if not path.exists():
        path.write_text(os.urandom(16).hex())
    return bytes.fromhex(path.read_text().strip())


def snapshot_for(run: HostRun, form: str) -> Snapshot:
    tag = run.run.encode() + b"%d" % run.state.index
    if form == "transcript":
        return make_snapshot(transcript=digest(b"transcript" + tag))
    return make_snapshot(fs_root=digest(b"fs" + tag), mem_image=digest(b"mem" + tag))


def host_environments(host: Host) -> list[Path]:
    """One manifest file per sample declaration, built once into the host's folder and
    signed with the host's key under its name: the environments its runs live in."""
    samples = Path(os.environ.get("FLEET_DEVCONTAINERS") or SAMPLES)
    declarations = sorted(samples.glob("*/devcontainer.json"))
    if not declarations:
        raise FileNotFoundError(f"no */devcontainer.json under {samples} (set "
                                "FLEET_DEVCONTAINERS to a folder of sample environments)")
    folder = host.dir / "environments"
    folder.mkdir(exist_ok=True)
    signer = signer_from_seed(host.name, bytes(host.key))
    out = []
    for declaration in declarations:
        path = folder / f"{declaration.parent.name}.manifest.json"
        if not path.exists():
            signed = sign(manifest_of_text(declaration.read_bytes()), signer)
            write_atomically(path, signed.file_text().encode("utf-8"))
        out.append(path)
    return out


def work(rounds: int) -> bytes:
    h = b""
    for i in range(rounds):
        h = hashlib.sha256(h + i.to_bytes(4, "big")).digest()
    return h


def advance(run: HostRun, steps: list[Step], number: int, environment: Path) -> bool:
    """Record the run's next planned step (parks and resumes in ``environment``, a manifest
    file: the resume checks it against the park); False when the plan is done."""
    i = run.state.index
    if i >= len(steps):
        return False
    step = steps[i]
    if step.kind == "executed":
        meter = IntervalMeter().start()
        journal = work(200 + 50 * (i % 5))
        r = meter.stop()
        # Dispatch a call in this interval; resolve the previous interval's call later on,
        # so a well-behaved run proves NonBlocking.
        executes = [j for j, s in enumerate(steps) if s.kind == "executed"]
        earlier = [j for j in executes if j < i]
        waits_at = executes[1] if step.style == "waits" and len(executes) > 1 else None
        dispatched = (f"call-{number}-{i}",)
        resolved: tuple[str, ...] = ()
        if earlier and earlier[-1] != waits_at:  # that one already took its own result
            resolved = (f"call-{number}-{earlier[-1]}",)
        if i == waits_at:
            resolved += dispatched  # it sat until its own call came back
        calls: CallAccount | None = CallAccount(dispatched, resolved)
        if step.style == "silent" and not earlier:
            calls = None
        run.execute(uj=r.uj, provenance=r.provenance, meter=r.meter,
                    journal_root=digest(journal), calls=calls)
    elif step.kind == "suspended":
        run.suspend(snapshot_for(run, step.form), environment_manifest(environment).digest)
    elif step.kind == "resumed":
        snap = run.state.parked
        assert snap is not None
        seconds = 3600.0 * (1 + i % 5)
        idle = (transcript_park_idle(64_000, seconds) if step.form == "transcript"
                else image_park_idle(20 * 10**9, seconds, memory_bytes=2 * 10**9))
        run.resume(snap, environment=environment, idle_uj=idle.uj, provenance=idle.provenance,
                   meter=idle.meter)
    else:
        run.close()
    return True


def record_runs(host: Host, runs: int) -> int:
    """Record every planned step of ``runs`` runs on ``host``; returns segments written."""
    s = salt(host.dir)
    environments = host_environments(host)
    active: list[tuple[HostRun, list[Step], int]] = []
    for number in range(runs):
        unit = digest(b"unit/" + s + b"/%d" % number)
        grants = digest(b"grants/fleet-sim/v1")
        rng = random.Random(s + b"%d" % number)
        active.append((host.open_run(unit, grants), plan(rng), number))
    written = 0
    while active:
        still = []
        for run, steps, number in active:
            if advance(run, steps, number, environments[number % len(environments)]):
                written += 1
                still.append((run, steps, number))
        active = still
    return written


async def simulate_host(name: str, host_dir: Path, runs: int, servers: list[str],
                        nkey: Path | None = None, drain_timeout: float = 120.0,
                        on_progress: Callable[[int, int], None] | None = None) -> dict:
    """Record ``runs`` runs and publish everything; returns counts. ``on_progress`` is
    called now and then with (segments acked so far, segments still pending)."""
    host = Host(name, host_dir)
    started = time.monotonic()
    try:
        nc = await connect(servers, nkey, name=f"fleet-host-{name}",
                           inbox_prefix=f"_INBOX.{name}" if nkey else None)
        try:
            publisher = Publisher(host.outbox, nc.jetstream(timeout=5.0))
            recorder = asyncio.get_running_loop().run_in_executor(None, record_runs, host, runs)
            acked = 0
            while not recorder.done():
                acked += (await publisher.drain(timeout=1.0)).acked
                if on_progress is not None:
                    on_progress(acked, host.outbox.stats().pending_count)
                await asyncio.sleep(0.05)
            written = await recorder
            report = await publisher.drain(timeout=drain_timeout)
            return {"host": name, "runs": runs, "segments_written": written,
                    "remaining": report.remaining, "public_key": host.public_key,
                    "seconds": round(time.monotonic() - started, 3)}
        finally:
            await close_quietly(nc)
    finally:
        host.close()


async def close_quietly(nc: Any) -> None:
    """Drain, or close if the connection is mid-reconnect: whatever was not acked is in the
    outbox, so a failed goodbye to the server loses nothing."""
    try:
        await nc.drain()
    except Exception:
        with contextlib.suppress(Exception):
            await nc.close()
