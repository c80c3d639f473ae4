"""The ingest benchmark: raw JetStream rates, the ledger's fold rate, and end to end latency.

All three phases run in one process against one fresh nats-server, on the same messages:

(a) raw: publish N messages of the sealed segments' median size with nats-py (a window of
    acks in flight), then pull-consume them in batches with no processing;
(b) fold: the same N sealed segments pre-filled into a fresh stream, then a ledger started
    on it (connected, API and seal worker up, as (a)'s consumer is before its clock starts),
    timed from the start of its fold loop until its watermark reaches the stream's end; three
    fresh ledgers in turn (the median is reported), each signing checkpoints at the ledger's
    default cadence (:class:`LedgerConfig`'s ``checkpoint_every`` and ``checkpoint_ms``),
    then the ledger's own puller alone on the same stream (``lean_pull_per_s``: the
    transport the fold runs on);
(c) end to end: hosts publish sealed segments at a paced rate (with the host protocol's
    Nats-Msg-Id and expected-last-subject-sequence headers) while the ledger folds and signs
    checkpoints; the latency of a segment is the time from its PubAck to the signing of the
    first checkpoint whose tree holds its leaf.

A fold that refused segments would look fast, so after (b) and (c) every segment must be a
leaf of the ledger's tree: otherwise :class:`BenchError` (one line) ends the bench.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nacl.signing import SigningKey
from nats.js.api import AckPolicy, ConsumerConfig

from fleet_ledger.fleet.address import digest, format_address
from fleet_ledger.fleet.fold.grant_events import decode_event, event_id, issue_event
from fleet_ledger.fleet.grants.grant import grant_address, make_terms, sign_grant
from fleet_ledger.fleet.grants.grant_codec import Issue
from fleet_ledger.fleet.record.builder import RecordBuilder
from fleet_ledger.fleet.record.seal import encode_key
from fleet_ledger.fleet.record.segment import CallAccount, make_snapshot
from fleet_ledger.fleet.record.wire import encode_envelope, segment_id
from fleet_ledger.fleet.subjects import DEFAULT_FLEET, STREAM, segment_subject
from fleet_ledger.ledger.pull import ack_all
from fleet_ledger.ledger.puller import Puller
from fleet_ledger.ledger.seal_verifiers import VERIFIER
from fleet_ledger.ledger.service import Ledger, LedgerConfig
from fleet_ledger.ledger.store import LedgerStore
from fleet_ledger.ledger.stream import ensure_consumer, ensure_stream
from fleet_ledger.plumbing.nats_connect import connect
from fleet_ledger.plumbing.natsd import NatsServer

Message = tuple[str, str, bytes, str, int]  # subject, msg id, payload, run, index


def make_segments(count: int, hosts: int = 4, per_run: int = 10,
                  grants: list[bytes] | None = None) -> tuple[list[Message],
                                                              dict[str, SigningKey]]:
    """``count`` sealed segments (runs of ``per_run``) spread over ``hosts`` host keys. With
    ``grants`` (a list to fill), each run is opened under a grant of its own (see
    :func:`bench_grant`), whose ISSUE event is appended to ``grants``."""
    keys = {f"bench{h}": SigningKey(bytes([h + 1]) * 32) for h in range(hosts)}
    names = list(keys)
    out: list[Message] = []
    run_no = 0
    manifest = digest(b"bench-manifest")
    now_ms = int(time.time() * 1000)
    while len(out) < count:
        name = names[run_no % hosts]
        grants_id = digest(b"grants")
        if grants is not None:
            event = bench_grant(run_no, names, manifest, now_ms)
            grants.append(event)
            issued = decode_event(event).fields
            assert isinstance(issued, Issue)  # bench_grant makes an ISSUE
            grants_id = grant_address(issued.grant)
        b = RecordBuilder(keys[name], digest(b"bench-unit-%d" % run_no), grants_id)
        run = format_address(b.run)
        subject = segment_subject(name, run)
        for i in range(per_run):
            if len(out) >= count:
                break
            phase = b.state.phase
            if phase == "parked":
                snap = b.state.parked
                assert snap is not None
                s = b.resume(snap, manifest, 1000 + i, "estimated", "estimate:storage@2W/TB")
            elif phase == "ran" and i % 4 == 3:
                s = b.suspend(make_snapshot(transcript=digest(b"t%d" % i)), manifest)
            else:
                s = b.execute(uj=5000 + i, provenance="estimated", meter="estimate:cpu-time@15W",
                              journal_root=digest(b"j%d-%d" % (run_no, i)),
                              calls=CallAccount((f"c{i}",), (f"c{i - 1}",) if i else ()))
            payload = encode_envelope(name, b.run, b.state.unit_id, b.state.grants_id, s)
            out.append((subject, segment_id(payload), payload, run, s.index))
        run_no += 1
    return out, keys


# The grant mode's issuer and agent: neither a host's key nor each other.
BENCH_ISSUER = SigningKey(digest(b"fleet-bench/issuer"))
BENCH_AGENT = SigningKey(digest(b"fleet-bench/agent"))


def bench_grant(run_no: int, hosts: list[str], manifest: bytes, now_ms: int) -> bytes:
    """The ISSUE event of run ``run_no``'s own grant: its scope, a budget far above what the
    run spends, a day's window around ``now_ms``, the bench's hosts and its one manifest
    (so every rule of :func:`fleet.fold.grant_events.check_segment` is checked and passes)."""
    terms = make_terms([f"/bench/{run_no}"], 10**12, now_ms - 3_600_000, now_ms + 86_400_000,
                       hosts=hosts, manifests=[manifest])
    return issue_event(BENCH_ISSUER, sign_grant(BENCH_ISSUER, bytes(BENCH_AGENT.verify_key),
                                                terms))


def interleave(messages: list[Message]) -> list[Message]:
    """Round-robin over runs (each run's order kept), as many hosts' runs would arrive, so a
    paced tick publishes to many runs at once instead of waiting on one run's acks."""
    runs: dict[str, list[Message]] = {}
    for m in messages:
        runs.setdefault(m[3], []).append(m)
    out: list[Message] = []
    queues = list(runs.values())
    depth = max(len(q) for q in queues)
    for i in range(depth):
        out.extend(q[i] for q in queues if i < len(q))
    return out


class BenchError(RuntimeError):
    """A phase did not do the work it times (e.g. a fold that refused segments)."""


def check_all_folded(store: LedgerStore, expected: int, phase: str) -> int:
    """Every one of the ``expected`` segments became a leaf: the tree's size and the
    folded segments both equal it. Raises :class:`BenchError` (one line, with the refusals
    by rule) if not; returns the size."""
    size = store.tree.size()
    counts = store.counts()
    folded = counts["segments_folded"]
    if size != expected or folded != expected:
        refused = ", ".join(f"{rule} {n}" for rule, n in sorted(counts["rejected"].items()))
        raise BenchError(f"{phase}: {size} of {expected} segments became leaves "
                         f"({folded} folded; refused: {refused or 'none'})")
    return size


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def raw_rates(url: str, count: int, size: int) -> tuple[float, float]:
    nc = await connect([url], name="bench-raw")
    js = nc.jetstream(timeout=10.0)
    await js.add_stream(name="RAW", subjects=["raw.>"])
    body = b"x" * size
    start = time.perf_counter()
    window = 256
    for first in range(0, count, window):
        await asyncio.gather(*(js.publish(f"raw.s{i % 64}", body)
                               for i in range(first, min(count, first + window))))
    publish = count / (time.perf_counter() - start)
    sub = await js.pull_subscribe("raw.>", durable="rawc", stream="RAW", config=ConsumerConfig(
        ack_policy=AckPolicy.ALL, max_ack_pending=20_000))  # as the ledger's consumer
    got = 0
    start = time.perf_counter()
    while got < count:
        msgs = await sub.fetch(512, timeout=5.0)
        got += len(msgs)
        await msgs[-1].ack()
    consume = count / (time.perf_counter() - start)
    await nc.drain()
    return publish, consume


async def publish_all(js: Any, messages: list[Message], window: int = 256,
                      last_seq: dict[str, int] | None = None) -> dict[int, float]:
    """Publish in run order (expected-last-subject-sequence chained per run, carried across
    calls in ``last_seq``); returns the ack time of each message."""
    last_seq = {} if last_seq is None else last_seq
    acked: dict[int, float] = {}
    by_run: dict[str, list[tuple[int, Message]]] = {}
    for n, m in enumerate(messages):
        by_run.setdefault(m[0], []).append((n, m))

    async def one_run(items: list[tuple[int, Message]]) -> None:
        for n, (subject, msg_id, payload, _run, _idx) in items:
            ack = await js.publish(subject, payload, headers={
                "Nats-Msg-Id": msg_id,
                "Nats-Expected-Last-Subject-Sequence": str(last_seq.get(subject, 0))})
            last_seq[subject] = ack.seq
            acked[n] = time.time()

    runs = list(by_run.values())
    for first in range(0, len(runs), window):
        await asyncio.gather(*(one_run(r) for r in runs[first:first + window]))
    return acked


async def wait_folded(ledger: Ledger, js: Any, timeout: float = 600.0,
                      last_seq: int | None = None) -> None:
    """Until the ledger's watermark reaches the stream's end (``last_seq`` where it is known
    beforehand: then the wait asks the server nothing, and costs the ledger's process
    nothing but a local read every 10 ms)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if last_seq is None:
            info = await js.stream_info(STREAM)
            end = info.state.last_seq
        else:
            end = last_seq
        if ledger.store.watermark() >= end:
            return
        await asyncio.sleep(0.01)
    raise TimeoutError("the ledger did not catch up")


async def fold_once(workdir: Path, url: str, name: str, keys: dict[str, SigningKey],
                    leaves: int, last_seq: int, grants: str = "enforce",
                    before: Sequence[bytes] = (), phase: str | None = None
                    ) -> tuple[float, int]:
    """One fresh ledger (its own store and consumer, the default checkpoint cadence) folding
    the pre-filled stream up to ``last_seq``: its rate in leaves a second and the
    checkpoints it signed. Raises :class:`BenchError` unless all ``leaves`` became leaves.
    ``before``: the stream's first messages (grant events), folded by the ledger's own
    :meth:`Ledger.fold_messages` before the clock starts, as the hosts are enrolled."""
    ledger = Ledger(LedgerConfig(data_dir=workdir / f"ledger-{name}", servers=[url],
                                 name=name, grants=grants))
    for host, key in keys.items():
        ledger.store.enroll(host, encode_key(bytes(key.verify_key)))
    now_ms = int(time.time() * 1000)
    subject = DEFAULT_FLEET.grant_subject
    for first in range(0, len(before), 2048):
        chunk = before[first:first + 2048]
        ledger.fold_messages([(first + n + 1, subject, ev) for n, ev in enumerate(chunk)],
                             [now_ms] * len(chunk))
    stop = asyncio.Event()
    # Set up (connection, API, seal worker process) before the clock starts, as the raw
    # baseline's consumer is: this phase times the fold.
    await ledger.start()
    start = time.perf_counter()
    task = asyncio.create_task(ledger.run(stop))
    try:
        await wait_folded(ledger, None, last_seq=last_seq)
        rate = leaves / (time.perf_counter() - start)
    finally:
        stop.set()
        await task
    try:
        # Counted once the loop has settled its last commit (whose checkpoint, if due, is
        # signed then): the watermark the clock waits on is written before the commit.
        checkpoints = ledger.store.checkpoint_count()
        check_all_folded(ledger.store, leaves, phase or f"fold {name}")
    finally:
        await ledger.close()
    return rate, checkpoints


async def prefill(url: str, messages: list[Message], events: Sequence[bytes] = ()
                  ) -> tuple[Any, Any]:
    """A fresh FLEET stream holding ``events`` (grant events) and then ``messages``; the
    connection and its JetStream context."""
    nc = await connect([url], name="bench-fill")
    js = nc.jetstream(timeout=10.0)
    await ensure_stream(js)
    for first in range(0, len(events), 256):
        await asyncio.gather(*(js.publish(DEFAULT_FLEET.grant_subject, ev,
                                          headers={"Nats-Msg-Id": event_id(ev)})
                               for ev in events[first:first + 256]))
    await publish_all(js, messages)
    return nc, js


async def fold_rates(workdir: Path, messages: list[Message], keys: dict[str, SigningKey],
                     repeats: int) -> tuple[list[float], float, list[int]]:
    """The fold rate of ``repeats`` fresh ledgers over one pre-filled stream
    (:func:`fold_once`), the lean puller's rate on that stream with no folding, and the
    checkpoints each ledger signed over the stream."""
    with NatsServer(store_dir=workdir / "nats-fold") as server:
        nc, js = await prefill(server.url, messages)
        rates = []
        checkpoints = []
        try:
            for n in range(repeats):
                rate, signed = await fold_once(workdir, server.url, f"bench{n}", keys,
                                               len(messages), len(messages),
                                               phase=f"fold {n + 1}")
                rates.append(rate)
                checkpoints.append(signed)
            lean = await lean_pull_rate(nc, js, len(messages))
        finally:
            await nc.drain()
    return rates, lean, checkpoints


async def grant_fold_rates(workdir: Path, segments: int, repeats: int) -> dict[str, Any]:
    """The fold with a grant on every run against the same fold without (each run under
    its own issued grant, the ISSUE events in the stream before the runs, the ledger
    requiring grants), fresh ledgers taking turns: without; with, the grant events folded
    before the clock starts (the cost of holding every segment to its run's grant); with,
    the whole stream timed (issuing the grants included)."""
    plain, keys = make_segments(segments)
    events: list[bytes] = []
    granted, _ = make_segments(segments, grants=events)
    without: list[float] = []
    with_grants: list[float] = []
    whole: list[float] = []
    with NatsServer(store_dir=workdir / "nats-plain") as s1, \
            NatsServer(store_dir=workdir / "nats-grants") as s2:
        nc1, _ = await prefill(s1.url, plain)
        nc2, _ = await prefill(s2.url, granted, events)
        try:
            for n in range(repeats):
                rate, _ = await fold_once(workdir, s1.url, f"plain{n}", keys, segments,
                                          segments)
                without.append(rate)
                rate, _ = await fold_once(workdir, s2.url, f"grants{n}", keys, segments,
                                          segments + len(events), "require", events)
                with_grants.append(rate)
                rate, _ = await fold_once(workdir, s2.url, f"whole{n}", keys, segments,
                                          segments + len(events), "require")
                whole.append(rate)
        finally:
            await nc1.drain()
            await nc2.drain()
    a, b, c = (statistics.median(r) for r in (without, with_grants, whole))
    return {
        "segments": segments, "runs": len(events), "grant_events": len(events),
        "repeats": repeats, "seal_verifier": VERIFIER, "grants_mode": "require",
        "fold_per_s_without_grants": round(a), "fold_per_s_with_grants": round(b),
        "fold_per_s_with_grant_events": round(c),
        "fold_runs_per_s_without_grants": [round(r) for r in without],
        "fold_runs_per_s_with_grants": [round(r) for r in with_grants],
        "fold_runs_per_s_with_grant_events": [round(r) for r in whole],
        "fold_ratio_grants_to_without": round(b / a, 3),
        "fold_ratio_grant_events_to_without": round(c / a, 3),
        # The whole stream holds a grant event per run beside the segments: per message,
        # what each of its messages costs against a segment of the stream without.
        "fold_msgs_per_s_with_grant_events": round(c * (segments + len(events)) / segments),
        "fold_msg_ratio_grant_events_to_without": round(
            c * (segments + len(events)) / segments / a, 3),
        "bar": GRANT_BAR, "within_bar": b / a >= GRANT_BAR,
        "statistic": "segments folded a second, median of fresh ledgers taking turns; "
                     "with_grants: the grant events folded before the clock starts; "
                     "with_grant_events: their fold timed too",
    }


# The issue's bar: the fold with grants on every run within 10% of the fold without.
GRANT_BAR = 0.9


async def lean_pull_rate(nc: Any, js: Any, count: int) -> float:
    """The ledger's own pull (:class:`ledger.puller.Puller`, batches of 2048, AckAll) with
    no work: the transport the fold runs on."""
    durable = await ensure_consumer(js, "bench-lean", 0)
    puller = await Puller(nc, STREAM, durable).start()
    got = 0
    start = time.perf_counter()
    while got < count:
        batch = await puller.fetch(2048, timeout=5.0)
        got += len(batch)
        await ack_all(nc, batch[-1])
    elapsed = time.perf_counter() - start
    await puller.stop()
    return count / elapsed


# The end-to-end phase signs a checkpoint every 100 ms (and never by count): its latency is
# PubAck to checkpoint, so the cadence is part of what it measures.
E2E_CHECKPOINT_EVERY = 10**9
E2E_CHECKPOINT_MS = 100


async def end_to_end(workdir: Path, messages: list[Message], keys: dict[str, SigningKey],
                     rate: float) -> tuple[float, list[float]]:
    with NatsServer(store_dir=workdir / "nats-e2e") as server:
        ledger = Ledger(LedgerConfig(data_dir=workdir / "ledger-e2e", servers=[server.url],
                                     name="e2e", checkpoint_every=E2E_CHECKPOINT_EVERY,
                                     checkpoint_ms=E2E_CHECKPOINT_MS))
        for name, key in keys.items():
            ledger.store.enroll(name, encode_key(bytes(key.verify_key)))
        stop = asyncio.Event()
        await ledger.start()
        task = asyncio.create_task(ledger.run(stop))
        nc = await connect([server.url], name="bench-hosts")
        js = nc.jetstream(timeout=10.0)
        start = time.perf_counter()
        tick = 0.05
        per_tick = max(1, int(rate * tick))
        acked: dict[int, float] = {}
        chained: dict[str, int] = {}
        for first in range(0, len(messages), per_tick):
            t0 = time.perf_counter()
            chunk = messages[first:first + per_tick]
            got = await publish_all(js, chunk, last_seq=chained)
            acked.update({first + n: t for n, t in got.items()})
            await asyncio.sleep(max(0.0, tick - (time.perf_counter() - t0)))
        await wait_folded(ledger, js)
        elapsed = time.perf_counter() - start
        await asyncio.sleep(0.3)  # let the last timed checkpoint be signed
        await ledger.sign_checkpoint_now()
        stop.set()
        await task
        store = ledger.store
        try:
            check_all_folded(store, len(messages), "end to end")
        except BenchError:
            await ledger.close()
            await nc.drain()
            raise
        cps = [(cp.size, cp.at) for cp in store.checkpoints()]
        leaf_of = store.leaf_indexes()
        latencies = []
        for n, (_s, _m, _p, run, idx) in enumerate(messages):
            leaf = leaf_of[(run, idx)]
            covered = next(at for size, at in cps if size > leaf)
            latencies.append(max(0.0, covered - acked[n]) * 1000)
        await ledger.close()
        await nc.drain()
    return len(messages) / elapsed, latencies


async def grant_bench(segments: int, repeats: int = 3) -> dict[str, Any]:
    """``fleet bench ingest --grants``: :func:`grant_fold_rates` in a temporary folder."""
    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp:
        return await grant_fold_rates(Path(tmp), segments, repeats)


async def run_bench(segments: int, rate: float, e2e_segments: int,
                    repeats: int = 3) -> dict[str, Any]:
    messages, keys = make_segments(segments)
    size = int(statistics.median(len(m[2]) for m in messages))
    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp:
        workdir = Path(tmp)
        with NatsServer(store_dir=workdir / "nats-raw") as server:
            raw_pub, raw_con = await raw_rates(server.url, segments, size)
        folds, lean, checkpoints = await fold_rates(workdir, messages, keys, repeats)
        fold = statistics.median(folds)
        e2e_msgs, e2e_keys = make_segments(e2e_segments)
        e2e_msgs = interleave(e2e_msgs)
        e2e_rate, lat = await end_to_end(workdir, e2e_msgs, e2e_keys, rate)
    defaults = LedgerConfig(data_dir=Path(), servers=[])
    return {
        "segments": segments,
        "message_bytes_median": size,
        "raw_publish_per_s": round(raw_pub),
        "raw_consume_per_s": round(raw_con),
        "fold_per_s": round(fold),
        "fold_ratio_to_raw_consume": round(fold / raw_con, 3),
        "fold_runs_per_s": [round(f) for f in folds],
        "lean_pull_per_s": round(lean),
        "fold_ratio_to_lean_pull": round(fold / lean, 3),
        "seal_verifier": VERIFIER,
        "fold_leaves": segments,
        "checkpoint_every": defaults.checkpoint_every,
        "checkpoint_ms": defaults.checkpoint_ms,
        "fold_checkpoints_signed": checkpoints,
        "e2e_checkpoint_every": E2E_CHECKPOINT_EVERY,
        "e2e_checkpoint_ms": E2E_CHECKPOINT_MS,
        "e2e_segments": e2e_segments,
        "e2e_target_rate_per_s": rate,
        "e2e_per_s": round(e2e_rate),
        "e2e_latency_p50_ms": round(_pct(lat, 0.50), 1),
        "e2e_latency_p99_ms": round(_pct(lat, 0.99), 1),
        "e2e_latency_max_ms": round(max(lat), 1),
    }
