"""Shared pieces of the fault-injection and fuzz suites: real processes, streams, folds.

- :class:`LedgerProc` runs ``fleet ledger serve`` as a child process (its log in a file),
  so a test can SIGKILL it by pid, restart it on the same data folder, or limit its writes.
- :func:`stream_messages` reads every message of the FLEET stream, in stream order.
- :func:`reference_fold` folds those messages, fault-free, into a fresh store, and
  :func:`store_summary` reads what a ledger's store holds, so two folds compare byte for byte.
- :class:`PureFold` is the fold with in-memory state, for the refusal table and the fuzzers.
- :func:`sealed_run` builds a host's genuine messages; :func:`forge` seals a segment the
  builder would refuse (to make the fold, not the host, name the rule).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats
import nats.errors
import nats.js.errors
from merkle_reference import mth
from nacl.signing import SigningKey
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from fleet_ledger.fleet import errors
from fleet_ledger.fleet.address import digest, format_address
from fleet_ledger.fleet.fold import (
    Accepted,
    Admission,
    BatchRuns,
    HostEntry,
    Message,
    Refused,
    RunSlot,
    decide,
)
from fleet_ledger.fleet.log.leaf import encode_leaf
from fleet_ledger.fleet.record.builder import RecordBuilder
from fleet_ledger.fleet.record.record import RunState, chain
from fleet_ledger.fleet.record.run_codec import state_to_json
from fleet_ledger.fleet.record.seal import seal
from fleet_ledger.fleet.record.segment import (
    CallAccount,
    Claimed,
    Evicted,
    ImageSnapshot,
    Segment,
    make_snapshot,
)
from fleet_ledger.fleet.record.wire import SealedSegment, decode_envelope, encode_envelope
from fleet_ledger.fleet.subjects import STREAM, segment_subject

FLEET = [sys.executable, "-m", "fleet_ledger.cli"]

# Every rule the fold can name: the classes of fleet.errors below FleetError.
RULES = frozenset(
    name for name, obj in vars(errors).items()
    if isinstance(obj, type) and issubclass(obj, errors.FleetError)
    and obj not in (errors.FleetError, errors.RecordError, errors.WireError, errors.RuleError,
                    errors.AdmissionError)
)


def fleet(*args: str, timeout: float = 60.0, check: bool = True
          ) -> subprocess.CompletedProcess[str]:
    """Run the ``fleet`` CLI in a child process and return its result."""
    result = subprocess.run([*FLEET, *args], capture_output=True, text=True, timeout=timeout,
                            stdin=subprocess.DEVNULL, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"fleet {' '.join(args)} failed ({result.returncode}):\n"
                             f"{result.stdout}\n{result.stderr}")
    return result


# -- a ledger as a child process ------------------------------------------------------------


class LedgerProc:
    """``fleet ledger serve`` in a child process; stopped (by pid) when the context exits."""

    def __init__(self, url: str, data: Path, *extra: str, log: Path | None = None,
                 fleet_name: str | None = None) -> None:
        self.fleet_name = fleet_name  # ``fleet --fleet NAME ledger serve``
        self.url = url
        self.data = data
        self.extra = list(extra)
        self.log = log or data.parent / f"{data.name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self, wait: bool = True, preexec: Any = None) -> LedgerProc:
        assert self.proc is None or self.proc.poll() is not None
        self.log.parent.mkdir(parents=True, exist_ok=True)
        mark = self.log.stat().st_size if self.log.exists() else 0
        # Output goes through a pipe (copied to the log file by a thread here), so a child
        # whose file writes are made to fail still logs.
        self.proc = subprocess.Popen(
            [*FLEET, *(["--fleet", self.fleet_name] if self.fleet_name else []),
             "ledger", "serve", "--nats", self.url, "--data", str(self.data),
             "--checkpoint-ms", "200", *self.extra],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=preexec,
        )
        threading.Thread(target=_copy, args=(self.proc.stdout, self.log), daemon=True).start()
        self.starts += 1
        if wait:
            self.wait_ready(mark)
        return self

    def wait_ready(self, mark: int = 0, timeout: float = 30.0) -> None:
        self.log.touch()
        deadline = time.monotonic() + timeout
        while b"serving" not in self.log.read_bytes()[mark:]:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"the ledger exited ({self.proc.returncode}):\n"
                                     + self.log_text()[-3000:])
            if time.monotonic() > deadline:
                raise AssertionError("the ledger did not start:\n" + self.log_text()[-3000:])
            time.sleep(0.02)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL by pid: a crash, nothing flushed."""
        if self.alive():
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> int | None:
        """SIGTERM by pid (SIGKILL after 15 s); the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        return self.proc.returncode

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def status(self, timeout: float = 10.0) -> dict[str, Any]:
        """``fleet status --json`` against this ledger's API."""
        out = fleet("status", "--json", "--nats", self.url, timeout=timeout + 20)
        return json.loads(out.stdout)

    def __enter__(self) -> LedgerProc:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


def _copy(pipe: Any, path: Path) -> None:
    with path.open("ab") as out:
        for line in iter(pipe.readline, b""):
            out.write(line)
            out.flush()
    pipe.close()


class HostTraffic:
    """Simulated hosts streaming until stopped: each host runs ``fleet host simulate`` again
    and again on its own folder with more runs each round (so each round adds new runs and
    a killed or failed round's runs are picked up by the next)."""

    def __init__(self, url: str, base: Path, ledger_data: Path, hosts: int = 2,
                 step: int = 8) -> None:
        self.url, self.base, self.ledger_data = url, base, ledger_data
        self.names = [f"host{i}" for i in range(1, hosts + 1)]
        self.step = step
        self.stop_event = threading.Event()
        self.results: list[tuple[str, int, str]] = []
        self.threads = [threading.Thread(target=self._loop, args=(n,), daemon=True)
                        for n in self.names]
        self.procs: dict[str, subprocess.Popen[str]] = {}
        self.rounds = 0

    def _loop(self, name: str) -> None:
        runs = 0
        while not self.stop_event.is_set():
            runs += self.step
            proc = subprocess.Popen(
                [*FLEET, "host", "simulate", "--name", name, "--runs", str(runs),
                 "--nats", self.url, "--data", str(self.base / name),
                 "--enroll-into", str(self.ledger_data), "--json"],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True, start_new_session=True)
            self.procs[name] = proc
            try:
                out, err = proc.communicate(timeout=150)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                out, err = proc.communicate()
            self.results.append((name, proc.returncode, (out + err)[-2000:]))
            self.rounds += 1

    def start(self) -> HostTraffic:
        for t in self.threads:
            t.start()
        return self

    def stop(self, timeout: float = 160.0) -> None:
        """Let each host finish its current round, then stop."""
        self.stop_event.set()
        for t in self.threads:
            t.join(timeout)
        for proc in self.procs.values():
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)

    def failures(self, refused_start_ok: bool = False) -> list[tuple[str, int, str]]:
        """Rounds that failed; with ``refused_start_ok``, not those that could not connect at
        start (the simulator needs the broker to start; a running host reconnects)."""
        return [r for r in self.results if r[1] != 0
                and not (refused_start_ok and "cannot reach NATS" in r[2])]

    def outbox_segments(self) -> set[tuple[str, int, str]]:
        """(run, idx, head) of every segment the hosts wrote; all must be acked."""
        out: set[tuple[str, int, str]] = set()
        for name in self.names:
            db = sqlite3.connect(f"file:{self.base / name / 'outbox.db'}?mode=ro", uri=True)
            try:
                rows = db.execute("SELECT run, idx, payload, state FROM segments").fetchall()
            finally:
                db.close()
            assert all(r[3] == "acked" for r in rows), f"{name} has unacked segments"
            out |= {(r[0], r[1], format_address(decode_envelope(r[2]).sealed.head))
                    for r in rows}
        return out

    def __enter__(self) -> HostTraffic:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- reading the stream and the stores ---------------------------------------------------


# What a cluster that just re-formed answers while its stream or consumer has no leader yet
# (a timeout, or JetStream's 503): asked again, it answers once the election is over.
_NOT_YET = (TimeoutError, nats.errors.TimeoutError, nats.js.errors.ServiceUnavailableError)


async def _retry(make: Any, attempts: int = 20) -> Any:
    for attempt in range(attempts):
        try:
            return await make()
        except _NOT_YET:
            if attempt == attempts - 1:
                raise
            await asyncio.sleep(0.5)
    return None


async def _stream_messages(url: str | list[str]) -> list[tuple[int, str, bytes]]:
    nc = await nats.connect(url, connect_timeout=5, max_reconnect_attempts=20,
                            reconnect_time_wait=0.2)
    try:
        js = nc.jetstream(timeout=10.0)
        info = await _retry(lambda: js.stream_info(STREAM))
        last = info.state.last_seq
        out: list[tuple[int, str, bytes]] = []
        if info.state.messages == 0:
            return out
        # Every message is read (the stream also holds control and grant events, and may
        # end with one); the segments are kept.
        sub = await _retry(lambda: js.pull_subscribe(
            "fleet.>", stream=STREAM,
            config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL, ack_policy=AckPolicy.NONE,
                                  inactive_threshold=30.0),
        ))
        deadline_at = time.monotonic() + 60
        seen = 0
        try:
            while seen < last:
                try:
                    got = await sub.fetch(1000, timeout=5.0)
                except _NOT_YET:
                    assert time.monotonic() < deadline_at, "the stream did not deliver"
                    await asyncio.sleep(0.2)  # a cluster that just re-formed: ask again
                    continue
                for m in got:
                    seen = m.metadata.sequence.stream
                    if m.subject.startswith("fleet.seg."):
                        out.append((seen, m.subject, m.data))
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        return out
    finally:
        await nc.close()


def stream_messages(url: str | list[str]) -> list[tuple[int, str, bytes]]:
    """Every segment of FLEET as (stream seq, subject, data), in stream order."""
    return asyncio.run(_stream_messages(url))


async def stream_state(url: str | list[str]) -> tuple[int, int]:
    """(messages, last seq) of the FLEET stream."""
    nc = await nats.connect(url, connect_timeout=5)
    try:
        info = await nc.jetstream(timeout=10.0).stream_info(STREAM)
        return info.state.messages, info.state.last_seq
    finally:
        await nc.close()


@dataclass
class Summary:
    """What a ledger store holds, in comparable form."""

    size: int
    root: bytes
    watermark: int
    segments: list[tuple[str, int, str, int, int]]  # run, idx, head, leaf index, stream seq
    rejections: list[tuple[int, str]]  # stream seq, rule
    runs: list[tuple[str, str, int, str, str]] = field(default_factory=list)

    def check_leaves(self) -> None:
        """Every folded segment is exactly one leaf: leaf indexes 0..size-1 once each, and
        the tree's root is the root of exactly those leaves in that order."""
        by_leaf = sorted(self.segments, key=lambda s: s[3])
        assert [s[3] for s in by_leaf] == list(range(self.size)), "leaf indexes not 0..n-1"
        assert len({(s[0], s[1]) for s in self.segments}) == len(self.segments)
        from fleet_ledger.fleet.address import parse_address

        leaves = [encode_leaf(parse_address(r), i, parse_address(h)) for r, i, h, _, _ in by_leaf]
        assert mth(leaves) == self.root, "the tree is not the tree of the folded segments"


def store_summary(data: Path) -> Summary:
    """Read a (stopped or running) ledger's store without writing to it."""
    db = sqlite3.connect(f"file:{data / 'ledger.db'}?mode=ro", uri=True, timeout=30)
    try:
        from fleet_ledger.ledger.tree_store import TreeStore

        tree = TreeStore(db)
        size = tree.size()
        root = tree.root(size)
        wm = db.execute("SELECT value FROM meta WHERE key = 'watermark'").fetchone()
        segments = [tuple(r) for r in db.execute(
            "SELECT run, idx, head, leaf_index, stream_seq FROM segments ORDER BY leaf_index")]
        rejections = [tuple(r) for r in db.execute(
            "SELECT stream_seq, rule FROM rejections ORDER BY stream_seq")]
        runs = [tuple(r) for r in db.execute(
            "SELECT run, host, segments, head, phase FROM runs ORDER BY run")]
    finally:
        db.close()
    return Summary(size, root, int(wm[0]) if wm else 0, segments, rejections, runs)  # type: ignore[arg-type]


def host_rows(data: Path) -> list[tuple[str, str, int, int | None]]:
    db = sqlite3.connect(f"file:{data / 'ledger.db'}?mode=ro", uri=True, timeout=30)
    try:
        return [tuple(r) for r in db.execute(  # type: ignore[misc]
            "SELECT name, public_key, enrolled_after, revoked_after FROM hosts ORDER BY name")]
    finally:
        db.close()


def seed_hosts(data: Path, hosts: list[tuple[str, str, int, int | None]]) -> None:
    """A new store in ``data`` holding exactly these enrollments."""
    from fleet_ledger.ledger.store import LedgerStore

    store = LedgerStore(data)
    with store.transaction():
        store.conn.executemany(
            "INSERT INTO hosts (name, public_key, enrolled_after, revoked_after, enrolled_at)"
            " VALUES (?, ?, ?, ?, 0)", hosts)
    store.close()


def fold_in_random_batches(stream: list[tuple[int, str, bytes]], data: Path,
                           rng: random.Random, largest: int, **config: Any) -> None:
    """Fold ``stream`` into the store in ``data`` by a ledger's own ``fold_messages``, in
    batches of random sizes up to ``largest``, then close the store."""
    from fleet_ledger.ledger.service import Ledger, LedgerConfig

    ledger = Ledger(LedgerConfig(data_dir=data, servers=[], **config))
    try:
        i = 0
        while i < len(stream):
            n = rng.randint(1, largest)
            ledger.fold_messages(stream[i:i + n])
            i += n
    finally:
        ledger.store.close()


def reference_fold(messages: list[tuple[int, str, bytes]],
                   hosts: list[tuple[str, str, int, int | None]], data: Path,
                   batch: int = 500) -> Summary:
    """Fold ``messages`` fault-free into a new store in ``data`` with the same enrollments."""
    from fleet_ledger.ledger.service import Ledger, LedgerConfig

    seed_hosts(data, hosts)
    ledger = Ledger(LedgerConfig(data_dir=data, servers=[]))
    try:
        for i in range(0, len(messages), batch):
            ledger.fold_messages(messages[i:i + batch])
    finally:
        ledger.store.close()
    return store_summary(data)


@contextlib.asynccontextmanager
async def running_ledger(url: str, data: Path, hosts: list[tuple[str, str, int, int | None]],
                          before: list[tuple[int, str, bytes]] = (),  # type: ignore[assignment]
                          **config: Any) -> AsyncIterator[tuple[Any, Any]]:
    """(ledger, jetstream) with the ledger folding in a task; stopped on exit. ``before``
    is published before the ledger starts (a backlog it then folds in full batches)."""
    from fleet_ledger.ledger.service import Ledger, LedgerConfig
    from fleet_ledger.ledger.stream import ensure_stream
    from fleet_ledger.plumbing.nats_connect import connect

    nc = await connect([url], name="batching-test")
    js = nc.jetstream(timeout=10.0)
    await ensure_stream(js)
    for _seq, subject, payload in before:
        await js.publish(subject, payload)
    seed_hosts(data, hosts)
    ledger = Ledger(LedgerConfig(data_dir=data, servers=[url], **config))
    stop = asyncio.Event()
    task = asyncio.create_task(ledger.run(stop))
    try:
        yield ledger, js
    finally:
        stop.set()
        await task
        await ledger.close()
        await nc.drain()


# -- a pure fold with in-memory state --------------------------------------------------


class PureFold:
    """The ledger's fold over dicts: hosts, run slots and stored heads, no I/O."""

    def __init__(self, hosts: dict[str, HostEntry]) -> None:
        self.hosts = hosts
        self.batch = BatchRuns(lambda _run: None)  # one batch that never commits
        self.runs: dict[bytes, RunSlot] = self.batch.changed
        self.heads: dict[tuple[bytes, int], bytes] = {}
        self.leaves: list[bytes] = []
        self.seq = 0
        self.ctx = Admission(hosts, self.batch, self.head_at)

    def get_run(self, run: bytes) -> RunSlot | None:
        return self.runs.get(run)

    def head_at(self, run: bytes, index: int) -> bytes | None:
        return self.heads.get((run, index))

    def decide(self, subject: str, data: bytes) -> Accepted | Refused:
        """The next message's decision, changing nothing (not even the stream position)."""
        return decide(self.ctx, Message(subject, data, self.seq + 1))

    def feed(self, subject: str, data: bytes) -> Accepted | Refused:
        self.seq += 1
        d = decide(self.ctx, Message(subject, data, self.seq))
        if isinstance(d, Accepted):
            self.batch.take(d)
            self.heads[(d.run, d.index)] = d.head
            self.leaves.append(d.leaf)
        return d

    def snapshot(self) -> Any:
        """Everything the fold's state holds, as plain comparable data."""
        return (
            sorted((run, slot.host, json.dumps(state_to_json(slot.state), sort_keys=True))
                   for run, slot in self.runs.items()),
            sorted(self.heads.items()),
            list(self.leaves),
        )


# -- genuine and forged messages ---------------------------------------------------------

MANIFEST = digest(b"fleet-test/manifest")
GRANTS = digest(b"fleet-test/grants")


def host_key(name: str) -> SigningKey:
    return SigningKey(digest(b"fleet-test/host-key/" + name.encode()))


def entry(name: str, enrolled_after: int = 0, revoked_after: int | None = None) -> HostEntry:
    return HostEntry(name, host_key(name).verify_key, enrolled_after, revoked_after)


@dataclass
class SealedRun:
    """A host's run: its builder and the (subject, envelope bytes) of each segment."""

    host: str
    builder: RecordBuilder
    messages: list[tuple[str, bytes]] = field(default_factory=list)

    @property
    def run(self) -> bytes:
        return self.builder.run

    @property
    def subject(self) -> str:
        return segment_subject(self.host, format_address(self.builder.run))

    def envelope(self, sealed: SealedSegment) -> bytes:
        s = self.builder.state
        return encode_envelope(self.host, s.run, s.unit_id, s.grants_id, sealed)

    def add(self, sealed: SealedSegment) -> bytes:
        data = self.envelope(sealed)
        self.messages.append((self.subject, data))
        return data

    def execute(self, n: int = 0, **kw: Any) -> bytes:
        args = dict(uj=1000 + n, provenance="measured", meter="rapl:package-0",
                    journal_root=digest(b"journal%d" % n),
                    calls=CallAccount((f"c{n}",), ()))
        args.update(kw)
        return self.add(self.builder.execute(**args))

    def park(self, n: int = 0, transcript: bool = False) -> bytes:
        snap = (make_snapshot(transcript=digest(b"t%d" % n)) if transcript
                else make_snapshot(fs_root=digest(b"fs%d" % n), mem_image=digest(b"m%d" % n)))
        return self.add(self.builder.suspend(snap, MANIFEST))

    def resume(self, idle_uj: int = 5000) -> bytes:
        snap = self.builder.state.parked
        assert snap is not None
        return self.add(self.builder.resume(snap, MANIFEST, idle_uj, "estimated",
                                            "estimate:storage"))

    def close(self) -> bytes:
        return self.add(self.builder.close())

    def claim(self, n: int = 0) -> bytes:
        return self.add(self.builder.claim(Claimed(
            slot=digest(b"slot%d" % n), snapshot=ImageSnapshot(digest(b"fs%d" % n)),
            manifest=MANIFEST, **_slot_energy(n))))

    def evict(self, n: int = 0) -> bytes:
        return self.add(self.builder.evict(Evicted(slot=digest(b"slot%d" % n),
                                                   **_slot_energy(n))))


def _slot_energy(n: int) -> dict[str, Any]:
    return {"warm_uj": 300 + n, "warm_provenance": "measured", "warm_meter": "rapl:package-0",
            "idle_uj": 700 + n, "idle_provenance": "estimated",
            "idle_meter": "estimate:volume@6W/TB"}


def sealed_run(host: str, unit: bytes | str, plan: str = "eprec") -> SealedRun:
    """A genuine run of ``host``: ``plan`` letters e(xecute) p(ark) r(esume) c(lose), and
    a warm pool's k (a claim, first only) and v (an eviction, in a run of evictions)."""
    unit_id = digest(unit.encode() if isinstance(unit, str) else unit)
    r = SealedRun(host, RecordBuilder(host_key(host), unit_id, GRANTS))
    for n, step in enumerate(plan):
        {"e": lambda n=n: r.execute(n), "p": lambda n=n: r.park(n, transcript=n % 2 == 1),
         "r": lambda: r.resume(), "c": r.close, "k": lambda n=n: r.claim(n),
         "v": lambda n=n: r.evict(n)}[step]()
    return r


def forge(key: SigningKey, state: RunState, segment: Segment, attestation: Any = None,
          *, index: int | None = None, head: bytes | None = None) -> SealedSegment:
    """A validly sealed segment the builder would refuse: the host signs whatever it likes."""
    idx = state.index + 1 if index is None else index
    h = chain(state.head, segment) if head is None else head
    return SealedSegment(idx, segment, h, seal(key, state.run, idx, h), attestation)


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Fail (not hang) a block that takes longer than ``seconds``."""
    start = time.monotonic()
    yield
    took = time.monotonic() - start
    assert took <= seconds, f"took {took:.1f}s, bound {seconds}s"


def wait_until(pred: Any, timeout: float, what: str, interval: float = 0.1) -> Any:
    deadline_at = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline_at:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
