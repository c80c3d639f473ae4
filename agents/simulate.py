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
import json
import math
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleet_ledger.agents.adoption import RecordSource
from fleet_ledger.agents.energy import IntervalMeter, image_park_idle, transcript_park_idle
from fleet_ledger.agents.host import Host, HostRun
from fleet_ledger.agents.publisher import Publisher
from fleet_ledger.agents.refusals import RefusalWatcher
from fleet_ledger.agents.sim_grants import SimGrants
from fleet_ledger.fleet.address import digest
from fleet_ledger.fleet.env.manifest import Manifest, manifest_of_text, read_manifest_file, sign
from fleet_ledger.fleet.env.manifest_errors import ManifestError
from fleet_ledger.fleet.log.note import Verifier, signer_from_seed
from fleet_ledger.fleet.record.segment import CallAccount, Snapshot, make_snapshot
from fleet_ledger.fleet.subjects import run_token
from fleet_ledger.plumbing.files import write_atomically
from fleet_ledger.plumbing.nats_connect import connect

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


def plan(rng: random.Random, close: bool = False) -> list[Step]:
    """A run's steps: 1-3 executes, then 0-2 park/resume cycles each followed by executes.

    About one run in ten waits inside an interval and one in ten leaves an interval
    unaccounted, so the fleet's wait proofs are not all the same verdict. About one in ten
    never closes, unless ``close`` (a job's item: its job is sealed by its items' closes)."""
    kinds = [("executed", "") for _ in range(rng.randint(1, 3))]
    for _ in range(rng.randint(0, 2)):
        form = rng.choice(["image", "transcript"])
        kinds += [("suspended", form), ("resumed", form)]
        kinds += [("executed", "") for _ in range(rng.randint(1, 2))]
    closes = rng.random() < 0.9  # drawn either way: an item's plan is its run's otherwise
    if close or closes:
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


def _built_environments(host: Host) -> list[tuple[Path, Manifest]]:
    """Each sample declaration's manifest file in the host's folder, with its manifest. A
    file is (re)built and signed with the host's key under its name when it is missing, does
    not verify, is signed by another key, or holds another address than its declaration has
    now (a sample edited since the host first built it)."""
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
        wanted = manifest_of_text(declaration.read_bytes())
        try:
            stored = read_manifest_file(path.read_bytes())
            current = (stored.manifest.digest == wanted.digest
                       and stored.signer == signer.verifier())
        except (FileNotFoundError, ManifestError):
            current = False
        if not current:
            write_atomically(path, sign(wanted, signer).file_text().encode("utf-8"))
        out.append((path, wanted))
    return out


def host_environments(host: Host) -> list[Path]:
    """One manifest file per sample declaration, built into the host's folder (again when
    its declaration has changed) and signed with the host's key under its name: the
    environments its runs live in."""
    return [path for path, _ in _built_environments(host)]


def host_manifests(host: Host) -> list[Manifest]:
    """The manifests of the host's environments (:func:`host_environments`), each file
    checked once, for a simulation's every park and resume."""
    return [manifest for _, manifest in _built_environments(host)]


def work(rounds: int) -> bytes:
    h = b""
    for i in range(rounds):
        h = hashlib.sha256(h + i.to_bytes(4, "big")).digest()
    return h


def advance(run: HostRun, steps: list[Step], number: int, environment: Manifest) -> bool:
    """Record the run's next planned step (parks and resumes in ``environment``, the manifest
    of one of the host's files: the resume checks it against the park); False when the plan
    is done."""
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
        run.suspend(snapshot_for(run, step.form), environment.digest)
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


@dataclass
class Migration:
    """Simulated hosts handing runs to one another: a ``fraction`` of each host's runs stop
    at their first park and are offered (a file in ``folder``, shared by the ``peers``
    simulated hosts); another host claims the offer, adopts the run from the ledger
    (``source``, checked under ``ledger_keys``) and finishes its plan."""

    fraction: float
    folder: Path
    peers: int
    source: RecordSource
    ledger_keys: list[Verifier]

    def moves(self, parking: int) -> bool:
        """Whether a host's ``parking``-th run that parks (0-based) moves: the first does,
        then one in about ``1 / fraction``, so even a short simulation moves one."""
        return math.ceil((parking + 1) * self.fraction) > math.ceil(parking * self.fraction)

    def offer(self, host: str, run: HostRun, host_salt: bytes, number: int,
              item: bool = False) -> None:
        offers = self.folder / "offered"
        offers.mkdir(parents=True, exist_ok=True)
        name = f"{host}.{run_token(run.run)}.json"
        if any((self.folder / "claimed").glob(f"*.{name}")):
            return  # offered before a restart, and taken already

        doc = {"run": run.run, "from": host, "salt": host_salt.hex(), "number": number,
               "item": item}
        write_atomically(offers / name, json.dumps(doc).encode())

    def done(self, host: str) -> None:
        (self.folder / "done").mkdir(parents=True, exist_ok=True)
        (self.folder / "done" / host).touch()

    def everyone_done(self) -> bool:
        return len(list((self.folder / "done").glob("*"))) >= self.peers

    def claim(self, host: str) -> dict[str, Any] | None:
        """Take one offer of another host (a rename: exactly one claimant gets it)."""
        claimed = self.folder / "claimed"
        claimed.mkdir(parents=True, exist_ok=True)
        for path in sorted((self.folder / "offered").glob("*.json")):
            if path.name.startswith(f"{host}."):
                continue
            try:
                path.rename(claimed / f"{host}.{path.name}")
            except FileNotFoundError:  # another host took it first
                continue
            return json.loads((claimed / f"{host}.{path.name}").read_text())
        return None

    def pending_from_others(self, host: str) -> bool:
        return any(not p.name.startswith(f"{host}.")
                   for p in (self.folder / "offered").glob("*.json"))


def run_environment(environments: list[Manifest], number: int) -> Manifest:
    """The environment run ``number`` parks and resumes in (on every host alike)."""
    return environments[number % len(environments)]


def record_runs(host: Host, runs: int, migration: Migration | None = None,
                grants: SimGrants | None = None,
                items: Sequence[tuple[bytes, int]] | None = None) -> int:
    """Record every planned step of ``runs`` runs on ``host`` (a migrating run only up to its
    first park, then offered to the other hosts); returns segments written. With ``grants``
    each run is opened under its own grant (already issued), else under a placeholder id.
    With ``items`` ((job, index) each), run ``n`` is item ``items[n]`` of its job
    (:meth:`agents.host.Host.open_item_run`) and always closes."""
    s = salt(host.dir)
    environments = host_manifests(host)
    active: list[tuple[HostRun, list[Step], int]] = []
    moving: set[int] = set()
    parking = 0
    for number in range(runs):
        unit = digest(b"unit/" + s + b"/%d" % number)
        if grants is None:
            grants_id = digest(b"grants/fleet-sim/v1")
        else:
            grants_id = grants.grants_id(number, run_environment(environments, number).digest)
        rng = random.Random(s + b"%d" % number)
        steps = plan(rng, close=items is not None)
        if migration is not None and any(st.kind == "suspended" for st in steps):
            if migration.moves(parking):
                moving.add(number)
            parking += 1
        opened = (host.open_run(unit, grants_id) if items is None
                  else host.open_item_run(*items[number], grants_id))
        active.append((opened, steps, number))
    written = 0
    while active:
        still = []
        for run, steps, number in active:
            if number in moving and run.state.phase == "parked":
                assert migration is not None
                migration.offer(host.name, run, s, number, items is not None)
                continue
            if advance(run, steps, number, run_environment(environments, number)):
                written += 1
                still.append((run, steps, number))
        active = still
    return written


def adopt_offers(host: Host, migration: Migration, deadline_s: float = 120.0) -> tuple[int, int]:
    """Claim other hosts' offers until every host is done and none is left; adopt each run
    (retrying while the ledger has not yet logged its park) and finish its plan. Returns
    (runs adopted, segments written)."""
    adopted = written = 0
    environments = host_manifests(host)
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        offer = migration.claim(host.name)
        if offer is None:
            if migration.everyone_done() and not migration.pending_from_others(host.name):
                break
            time.sleep(0.1)
            continue
        run = _adopt(host, migration, offer["run"], end)
        number = offer["number"]
        steps = plan(random.Random(bytes.fromhex(offer["salt"]) + b"%d" % number),
                     close=bool(offer.get("item")))
        # The same declaration the offering host parked in (every host signs the same
        # samples, in the same order: the same manifest addresses).
        environment = run_environment(environments, number)
        while advance(run, steps, number, environment):
            written += 1
        adopted += 1
    return adopted, written


def _adopt(host: Host, migration: Migration, run: str, end: float) -> HostRun:
    while True:
        try:
            return host.adopt_run(run, migration.source, migration.ledger_keys)
        except Exception:
            # The ledger may not have folded (or signed) the park yet: try again shortly.
            if time.monotonic() >= end:
                raise
            time.sleep(0.2)


async def simulate_host(name: str, host_dir: Path, runs: int, servers: list[str],
                        nkey: Path | None = None, drain_timeout: float = 120.0,
                        on_progress: Callable[[int, int], None] | None = None,
                        migration: Migration | None = None, fleet: str = "fleet",
                        grants: SimGrants | None = None,
                        items: Sequence[tuple[bytes, int]] | None = None) -> dict:
    """Record ``runs`` runs and publish everything; returns counts. ``on_progress`` is
    called now and then with (segments acked so far, segments still pending). With
    ``migration``, some runs are handed to the other simulated hosts at a park, and this
    host adopts and finishes theirs. With ``grants``, each run's grant is issued (its event
    acknowledged by the stream) before any segment is written. With ``items``, the runs
    are those job items (``runs`` is their count)."""
    host = Host(name, host_dir, fleet=fleet)
    if migration is not None:
        host.ledger = (migration.source, migration.ledger_keys)
    started = time.monotonic()
    try:
        nc = await connect(servers, nkey, name=f"fleet-host-{name}",
                           inbox_prefix=f"_INBOX.{name}" if nkey else None)
        try:
            publisher = Publisher(host.outbox, nc.jetstream(timeout=5.0),
                                  stream=host.names.stream)
            watcher = await RefusalWatcher(nc, name, host.outbox, names=host.names).start()
            await watcher.catch_up()  # refusals published while this host was away
            loop = asyncio.get_running_loop()
            acked = 0
            issued = 0
            if grants is not None:
                environments = host_manifests(host)
                issued = await grants.publish(
                    nc.jetstream(timeout=5.0), host.names.grant_subject, host.names.stream,
                    [(n, run_environment(environments, n).digest) for n in range(runs)])

            async def publish_while(work: asyncio.Future[Any]) -> Any:
                nonlocal acked
                while not work.done():
                    acked += (await publisher.drain(timeout=1.0)).acked
                    if on_progress is not None:
                        on_progress(acked, host.outbox.stats().pending_count)
                    await asyncio.sleep(0.05)
                return await work

            written = await publish_while(loop.run_in_executor(None, record_runs, host, runs,
                                                               migration, grants, items))
            adopted = 0
            if migration is not None:
                # Everything offered must be sent before another host can adopt it.
                await publisher.drain(timeout=drain_timeout)
                migration.done(name)
                adopted, more = await publish_while(loop.run_in_executor(
                    None, adopt_offers, host, migration))
                written += more
            report = await publisher.drain(timeout=drain_timeout)
            await watcher.stop()
            out = {"host": name, "runs": runs, "segments_written": written,
                   "remaining": report.remaining, "public_key": host.public_key,
                   "seconds": round(time.monotonic() - started, 3)}
            if grants is not None:
                out["grants_issued"] = issued
            if migration is not None:
                out["adopted"] = adopted
                out["stopped"] = sorted(watcher.stopped)
            refused = host.outbox.stopped_runs()
            if refused:  # runs the ledger refused (or the broker did): never silent
                out["stopped_runs"] = refused
            return out
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
