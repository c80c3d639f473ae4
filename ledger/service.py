"""The ledger service: consume the FLEET stream, fold in batches, sign checkpoints, serve.

The shell around the pure fold core (:mod:`fleet.fold`). One batch is: fetch up to
``batch`` messages from the ledger's durable pull consumer, decode them and hand their seals
to the seal worker, decide the batch with :func:`fleet.fold.batch.decide_batch`, commit the
batch's leaves, runs, refusals and the highest stream sequence decided in one SQLite
transaction (:class:`ledger.commit_pipeline.CommitPipeline`), and only then ack (AckAll on
the last message). Messages at or below the stored watermark are skipped, so
a crash anywhere folds nothing twice. A batch the store cannot commit (full or read-only
disk) is not acked: the ledger marks itself unhealthy, naks the batch and retries with
backoff until the disk is back, losing nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.errors import FetchTimeoutError

from fleet_ledger.fleet.fold import HostEntry, batch_addresses
from fleet_ledger.fleet.fold.batch import (
    BatchChanges,
    Decided,
    Incoming,
    decide_batch,
    decide_written,
    first_gap,
    merge_seals,
    refusal_notices,
    seal_items,
)
from fleet_ledger.fleet.fold.cache import RunCache
from fleet_ledger.fleet.fold.policy import LeadState, checkpoint_due
from fleet_ledger.fleet.fold.route import Route, Router
from fleet_ledger.fleet.log.checkpoint import (
    check_consistent_then_sign,
    make_checkpoint,
    parse_checkpoint,
)
from fleet_ledger.fleet.log.note import Signer, parse_note
from fleet_ledger.fleet.record.wire import EnvelopeWire, envelope_wire
from fleet_ledger.fleet.subjects import fleet_names
from fleet_ledger.ledger.api import LedgerApi, ServiceFacts
from fleet_ledger.ledger.commit_pipeline import CommitPipeline
from fleet_ledger.ledger.keys import load_or_create_signer
from fleet_ledger.ledger.metrics import FoldMetrics, new_registry
from fleet_ledger.ledger.pull import Delivery, PullerState, ack_all, nak, open_puller
from fleet_ledger.ledger.replica import Progress, Replica, check_no_offline_hosts, read_replicas
from fleet_ledger.ledger.seal_worker import MAX_ITEM_MESSAGE, SealTicket, SealWorker
from fleet_ledger.ledger.store import CheckpointReader, HostsChanged, LedgerStore
from fleet_ledger.ledger.stream import ensure_consumer, ensure_stream
from fleet_ledger.plumbing.anchoring import AnchorTaskFactory, ReceiptStore
from fleet_ledger.plumbing.gc_pause import gc_paused
from fleet_ledger.plumbing.nats_connect import connect

log = logging.getLogger(__name__)


class DeliveryGap(Exception):
    """The consumer skipped messages of the stream: the fold must not go past them."""


@dataclass
class LedgerConfig:
    data_dir: Path
    servers: list[str]
    name: str = "ledger"
    origin: str | None = None
    nkey: Path | None = None
    replicas: int = 1
    dedup_window_s: float = 120.0
    # Messages per fetch and per commit: large enough that per-batch costs (the commit's
    # fsync, the pull request, the seal worker round trip) vanish per message.
    batch: int = 2048
    checkpoint_every: int = 1000
    checkpoint_ms: int = 1000
    run_cache: int = 50_000
    # A second process verifying half of each large batch's seals (0: all in line).
    seal_workers: int = 1
    # Decide the common message by fleet.fold.fast (False: every one by the reference path;
    # the tests fold with both and compare the stores).
    fast_path: bool = True
    # The puller (ledger.pull): "auto" runs the lean one where the installed nats-py is a
    # version it is tested against, else nats-py's fetch; "lean" or "fetch" forces one
    # ("auto" defers to the FLEET_PULLER environment variable).
    puller: str = "auto"
    # The operator verifier keys (32 bytes each) control events are checked under
    # (fleet.fold.control); rotations in the stream hand over to later keys.
    operator_vkeys: tuple[bytes, ...] = ()
    # One of several replicas sharing origin and key (ledger.replica): the lease's time to
    # live in seconds; None, a single ledger that always signs and anchors.
    replica_ttl: float | None = None
    # The fleet this ledger belongs to: the prefix of its stream, subjects, API and buckets
    # (fleet.subjects.fleet_names; "fleet" is today's names).
    fleet: str = "fleet"
    # How runs are held to their grants (fleet.fold.grant_events): "enforce" holds every run
    # whose grant was presented to it and folds the others under no grant; "require"
    # refuses a run whose grant was not presented (UnknownGrant).
    grants: str = "enforce"


@dataclass
class Prepared:
    """A decoded batch whose seals are being checked (see :meth:`Ledger.prepare`)."""

    msgs: list[tuple[int, str, bytes]]
    routes: list[Route]  # each message's fold, by its subject (fleet.fold.route)
    times: list[int]  # each message's ledger time: its stream timestamp, ms since the epoch
    wires: list[EnvelopeWire | None]  # None: refused at decoding (the reference path says how)
    hosts: Mapping[str, HostEntry]
    hosts_version: int
    sealed: list[int]  # positions in ``msgs`` whose seals are in ``seals``, in order
    seals: SealTicket
    runs: set[bytes]  # the runs of the messages with seals
    addresses: list[list[bytes] | None]  # each message's addresses, parsed (batch_addresses)


class Ledger:
    """The ledger of ``config``. Anchoring is handed in (the CLI wires it,
    :mod:`plumbing.anchoring`): ``receipts`` are read into proof bundles and the status
    (and closed with the ledger); ``anchoring``, called once connected with the ledger's
    checkpoints, gives the task that anchors them beside the fold."""

    def __init__(self, config: LedgerConfig, *, receipts: ReceiptStore | None = None,
                 anchoring: AnchorTaskFactory | None = None) -> None:
        self.config = config
        self.receipts = receipts
        self._anchoring = anchoring
        self.pulling = PullerState.from_config(config.puller)  # fleet status shows it
        self.names = fleet_names(config.fleet)
        self.store = LedgerStore(config.data_dir)
        self.store.trust_operators(config.operator_vkeys)
        origin = config.origin or f"fleet-ledger.local/{config.name}"
        self.signer: Signer = load_or_create_signer(config.data_dir, origin)
        self.origin = self.signer.name
        self.healthy = True
        self.health_detail = "ok"
        self.stream_last_seq = 0
        self._runs = RunCache(config.run_cache, self.store.load_run, self.store.load_runs)
        self._route = Router(self.names)
        # The stream sequence folded and durably committed: the store's watermark read on
        # the fold's connection may be a batch written but not yet committed.
        self.committed_seq = self.store.watermark()
        self._hosts_version = self.store.hosts_version()
        self._hosts = self.store.hosts()
        if config.grants not in ("enforce", "require"):
            raise ValueError(f"grants must be 'enforce' or 'require', not {config.grants!r}")
        self.grants = self.store.grant_book()
        self.jobs = self.store.job_book()
        self._last_checkpoint_at = time.monotonic()
        self._wanted: int | None = None  # a checkpoint size a reader waits for
        self._sealer = SealWorker()
        self._pending: tuple[list[Delivery], Prepared] | None = None
        # The batch being committed and the store lock over it (API reads take it too, so
        # they never see a batch that is not committed).
        self.pipeline: CommitPipeline[list[Delivery], Prepared] = CommitPipeline(
            self.decide_and_write, self.store.commit, self.store.rollback, self._install)
        self.metrics = FoldMetrics(new_registry())  # /metrics (ledger.http) reads them
        self.backlogged = False  # the last fetch was a full batch: the HTTP log yields to it
        self.nc: Client | None = None
        self.js: JetStreamContext | None = None
        self.api: LedgerApi | None = None
        self._anchor_task: asyncio.Task[None] | None = None
        self._anchor_stop = asyncio.Event()
        self._anchor_source: CheckpointReader | None = None
        # Signing on the timer, publishing and anchoring (fleet.fold.policy.LeadState):
        # always for a single ledger; for a replica, while it holds the lease and has folded
        # up to the stream's end when it took the lease.
        self.lead = LeadState(config.replica_ttl is not None)
        self.replica: Replica | None = None
        self._replica_task: asyncio.Task[None] | None = None
        self._replica_stop = asyncio.Event()

    # -- what the API and the replica read (their protocols: ledger.api.ApiLedger,
    # ledger.replica.Lead) -------------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        return self.config.data_dir

    def reading(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Hold the store while reading: no batch is written but uncommitted meanwhile."""
        return self.pipeline.reading()

    def facts(self) -> ServiceFacts:
        return ServiceFacts(self.config.name, self.signer.verifier().text(), self.healthy,
                            self.health_detail, self.pulling.as_json(), self.config.grants,
                            self.leading, self.signs())

    def newest_published(self) -> tuple[int, bytes, str] | None:
        return None if self.replica is None else self.replica.newest

    async def replicas_seen(self) -> tuple[str | None, list[dict[str, Any]]] | None:
        """(the lease holder, the replicas' heartbeats), for a replica; ``None`` otherwise."""
        if self.replica is None or self.js is None:
            return None
        return await read_replicas(self.js, self.names)

    def progress(self) -> Progress:
        return Progress(self.committed_seq, self.store.tree.size(), self.stream_last_seq,
                        self.healthy)

    # -- state helpers --------------------------------------------------------------------

    def _refresh_hosts(self) -> None:
        # The version first: a change between the two reads is then caught at the write.
        version = self.store.hosts_version()
        if version != self._hosts_version:
            self._hosts = self.store.hosts()
            self._hosts_version = version

    # -- folding --------------------------------------------------------------------------

    def fold_messages(self, msgs: list[tuple[int, str, bytes]], times: list[int] | None = None
                      ) -> tuple[list[Incoming], int]:
        """Decide messages (stream seq, subject, data) above the watermark and commit them
        (``times``: their stream timestamps in ms; 0 where not given)."""
        return self.finish(self.prepare(msgs, share_in_line=0.5, times=times))

    def prepare(self, msgs: list[tuple[int, str, bytes]],
                share_in_line: float | None = None, refresh_hosts: bool = True,
                times: list[int] | None = None) -> Prepared:
        """Decode a batch and hand its seals to the seal worker; :meth:`finish` folds it.

        The fold loop prepares batch k+1 before it finishes batch k, so the worker checks
        k+1's seals while this process decides and commits k. Decisions use the host table
        as it was when the batch was prepared (its seals were looked up in that table);
        ``refresh_hosts=False`` (while a commit holds the store) uses the table last read,
        and a change since is caught when the batch is written.
        """
        if refresh_hosts:
            self._refresh_hosts()
        hosts = self._hosts
        with gc_paused():  # as decide_and_write: the batch's decoding is its allocation
            wires = [envelope_wire(data) for _seq, _subject, data in msgs]
            addresses = batch_addresses(wires)
            routes = self._route.routes([subject for _seq, subject, _data in msgs])
            checks = seal_items(msgs, wires, addresses, hosts, routes, MAX_ITEM_MESSAGE)
        ticket = self._sealer.submit(checks.items, share_in_line)
        return Prepared(msgs, routes, [0] * len(msgs) if times is None else times, wires,
                        hosts, self._hosts_version, checks.positions, ticket, checks.runs,
                        addresses)

    def finish(self, prepared: Prepared) -> tuple[list[Incoming], int]:
        """Decide a prepared batch's messages above the watermark and commit them."""
        batch, top, changed = self.decide_and_write(prepared)
        if batch:
            self.store.commit()
            self._install(changed, top)
        return batch, top

    def decide_and_write(self, prepared: Prepared) -> Decided:
        """Decide a prepared batch and write it in a transaction left open for the store's
        ``commit`` (:func:`fleet.fold.batch.decide_written`: decided again where the host
        table changed meanwhile). Returns the batch, its watermark and what it changed, to
        :meth:`_install` once the commit is durable (the cache holds only committed state,
        so a failure anywhere needs nothing undone). The cyclic collector is held off
        meanwhile (:func:`plumbing.gc_pause.gc_paused`: a batch is a bounded burst of
        short-lived objects)."""
        with gc_paused():
            return decide_written(prepared, self._decide, self._write, self._prepare_again)

    def _write(self, decided: Decided, prepared: Prepared) -> bool:
        """Write a decided batch; ``False`` (nothing written) if the host table it was
        decided against has changed."""
        try:
            self.store.write_batch(decided.items, decided.top, prepared.hosts_version,
                                   decided.changes.runs, decided.changes.control.state,
                                   decided.changes.jobs)
        except HostsChanged:
            return False
        return True

    def _prepare_again(self, prepared: Prepared) -> Prepared:
        return self.prepare(prepared.msgs, share_in_line=0.5, times=prepared.times)

    def _install(self, changed: BatchChanges, top: int) -> None:
        """Make a committed batch's run states the cache's, its grant events the book's, and
        its watermark ``top`` the committed position."""
        self.committed_seq = max(self.committed_seq, top)
        for run, slot in changed.runs.items():
            self._runs.remember(run, slot)
        if changed.grants.accepted:
            changed.grants.install()
        if changed.jobs.changed:
            changed.jobs.install()

    def _decide(self, prepared: Prepared) -> Decided:
        """The core's decision (:func:`fleet.fold.batch.decide_batch`) over what the store
        and the seal worker hold now."""
        self._runs.trim()
        seals = merge_seals(len(prepared.msgs), prepared.sealed,
                            self._sealer.collect(prepared.seals))
        return decide_batch(
            prepared.msgs, prepared.routes, prepared.times, prepared.wires,
            prepared.addresses, seals, self.store.watermark(), names=self.names,
            committed_runs=self._runs.preload(prepared.runs),
            stored_head_at=self.store.head_at, hosts=prepared.hosts,
            operators=self.store.operators(), grants=self.grants,
            require_grants=self.config.grants == "require", fast=self.config.fast_path,
            jobs=self.jobs, tree_size=self.store.tree.size())

    # -- checkpoints ----------------------------------------------------------------------

    def checkpoint_due(self) -> bool:
        """Whether the checkpoint step signs now (:func:`fleet.fold.policy.checkpoint_due`):
        on count and time while this ledger signs, for a waiting reader always."""
        last = self.store.last_checkpoint()
        return checkpoint_due(self.store.tree.size(), None if last is None else last[0],
                              (time.monotonic() - self._last_checkpoint_at) * 1000,
                              self.config.checkpoint_every, self.config.checkpoint_ms,
                              self._wanted, self.signs())

    async def sign_checkpoint_now(self) -> str | None:
        """:meth:`sign_checkpoint` from outside the fold loop: under the store lock, so never
        inside a batch's transaction while its commit runs."""
        async with self.pipeline.reading():
            return self.sign_checkpoint()

    def sign_checkpoint(self) -> str | None:
        """Sign the current tree if it grew, after checking it extends the last one signed.
        The caller holds the store: the fold loop between commits, or the store lock
        (:meth:`sign_checkpoint_now`)."""
        size = self.store.tree.size()
        last = self.store.last_checkpoint()
        if last is not None and last[0] == size:
            return last[2]
        new = make_checkpoint(self.origin, size, self.store.tree.root(size))
        previous = None if last is None else parse_checkpoint(parse_note(last[2])[0])
        proof = [] if last is None or last[0] == 0 else self.store.tree.consistency_proof(
            last[0], size)
        note = check_consistent_then_sign(previous, new, proof, self.signer)
        self.store.add_checkpoint(size, new.root, note)
        self._last_checkpoint_at = time.monotonic()
        if self._wanted is not None and size >= self._wanted:
            self._wanted = None
        self.metrics.signed(size)
        return note

    async def wait_for_checkpoint(self, size: int, timeout: float = 2.0
                                  ) -> tuple[int, bytes, str] | None:
        """The first signed checkpoint of at least ``size`` leaves, waiting up to ``timeout``
        for the checkpoint step to sign one (``None``: none came). A reader never signs: it
        asks the step (:func:`fleet.fold.policy.checkpoint_due`'s ``wanted``)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            async with self.pipeline.reading():
                found = self.store.checkpoint_at_least(size)
            if found is not None or loop.time() > deadline:
                return found
            self._wanted = size if self._wanted is None else max(self._wanted, size)
            await asyncio.sleep(0.02)

    # -- the service loop -----------------------------------------------------------------

    async def start(self) -> None:
        """Connect, provision the stream, start the API (and anchors) and the seal worker;
        :meth:`run` then folds. A replica refuses to start over hosts enrolled offline
        (:class:`ledger.replica.OfflineHosts`)."""
        cfg = self.config
        if cfg.replica_ttl is not None:
            check_no_offline_hosts(self.store.host_rows(offline=True))
        if cfg.seal_workers:
            try:
                await asyncio.get_running_loop().run_in_executor(None, self._sealer.start)
            except Exception as exc:  # in line is slower, never wrong
                log.warning("no seal worker (%s); verifying seals in line", exc)
        self.nc = await connect(cfg.servers, cfg.nkey, name=f"fleet-ledger-{cfg.name}")
        self.js = self.nc.jetstream(timeout=10.0)
        for attempt in range(5):  # replicas starting together can time out on a cluster
            try:
                await ensure_stream(self.js, cfg.replicas, cfg.dedup_window_s, self.names)
                break
            except nats.errors.TimeoutError:
                if attempt == 4:
                    raise
                await asyncio.sleep(0.5 * (attempt + 1))
        self.api = LedgerApi(self)
        await self.api.start(self.nc)
        if cfg.replica_ttl is not None:
            self.replica = replica = Replica(self, cfg.name, cfg.replica_ttl, self.names,
                                             cfg.replicas)
            self.lead.holds = lambda: replica.holds
            await self.replica.start(self.js)
            self._replica_task = asyncio.create_task(self.replica.run(self._replica_stop))
        elif self._anchoring is not None:
            self._start_anchors(self._anchoring)

    async def take_lead(self) -> None:
        """This replica took the lease: it signs once folded to the stream's end as it is
        now, so it never publishes a checkpoint below one its predecessor published."""
        self.lead.took(None)
        assert self.js is not None
        try:  # not the last known end: a lagging replica's would be its own position
            info = await self.js.stream_info(self.names.stream)
        except Exception as exc:  # the replica's next tick asks again
            log.warning("cannot read the stream's end at takeover: %s", exc)
            return
        self.stream_last_seq = max(self.stream_last_seq, info.state.last_seq)
        self.lead.took(info.state.last_seq)

    @property
    def leading(self) -> bool:
        return self.lead.leading

    @property
    def lead_floor(self) -> int | None:
        return self.lead.floor

    async def drop_lead(self) -> None:
        self.lead.dropped()
        await self._stop_anchors()

    def signs(self) -> bool:
        """Whether this ledger signs on the timer, publishes and anchors now."""
        # The committed position: the store's watermark may be a batch still committing.
        return self.lead.signs(self.committed_seq)

    def _start_anchors(self, anchoring: AnchorTaskFactory) -> None:
        """Anchor checkpoints in a task of its own, reading them through its own store
        connection."""
        nc = self.nc
        publish = None if nc is None else nc.publish
        self._anchor_source = CheckpointReader(self.store.path)
        task = anchoring(self._anchor_source, publish)
        self._anchor_stop = asyncio.Event()
        self._anchor_task = asyncio.create_task(task.run(self._anchor_stop))

    async def _stop_anchors(self) -> None:
        if self._anchor_task is not None:
            self._anchor_stop.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._anchor_task, 10)
            self._anchor_task = None
        if self._anchor_source is not None:
            self._anchor_source.close()
            self._anchor_source = None

    async def run(self, stop: asyncio.Event) -> None:
        """Fold until ``stop`` is set.

        While it runs, the collector's first generation is collected every 20,000
        allocations instead of 700: each message makes dozens of short-lived, acyclic
        objects, and with tens of thousands of run states held, frequent collections
        cost the fold about 8%. Cycles are still collected, only less often.
        """
        thresholds = gc.get_threshold()
        gc.set_threshold(max(thresholds[0], 20_000), *thresholds[1:])
        try:
            await self._run(stop)
        finally:
            gc.set_threshold(*thresholds)

    async def _run(self, stop: asyncio.Event) -> None:
        if self.nc is None:
            await self.start()
        assert self.js is not None and self.nc is not None
        backoff = 0.2
        sub = None
        while not stop.is_set():
            try:
                if sub is None:
                    durable = await ensure_consumer(self.js, self.config.name,
                                                    self.store.watermark(), self.names)
                    sub = await open_puller(self.nc, self.js, self.names.stream, durable,
                                            self.pulling)
                await self._one_batch(sub)
                backoff = 0.2
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the ledger keeps running through any single failure
                self.healthy = False
                self.health_detail = f"{type(exc).__name__}: {exc}"
                log.warning("fold loop: %s; retrying in %.1fs", self.health_detail, backoff)
                with contextlib.suppress(Exception):
                    if sub is not None:
                        await sub.stop()
                sub = None
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), backoff)
                backoff = min(backoff * 2, 5.0)
        with contextlib.suppress(Exception):  # what stays unacked is redelivered on restart
            await self._settle()
            if self._pending is not None:
                pending, self._pending = self._pending, None
                await self._start_commit(*pending)
                await self._settle()
        await self._abandon()
        with contextlib.suppress(Exception):
            if sub is not None:
                await sub.stop()

    async def _one_batch(self, sub: Any) -> None:
        """One turn of the fold's pipeline, over three batches in flight:

        - batch k+1 is fetched (the puller asked for it before k was folded) and decoded,
          and its seals go to the worker, while batch k-1's commit (its fsync, SQLite's WAL
          checkpoints) finishes on the commit thread;
        - batch k-1 is then acked (only now durable), and a checkpoint signed if due;
        - batch k is decided (with the verdicts of its seals, checked meanwhile) and
          written, and its commit started.

        A batch smaller than asked means the consumer is caught up: it is folded and
        committed at once, so a quiet stream adds no latency.
        """
        pending, in_flight = self._pending, self.pipeline.unacked()
        self._pending = None
        msgs: list[Delivery] = []
        # The deliveries of the batches in flight (in_flight: its commit running), nak'd on a
        # failure.
        unacked = [m for m in (in_flight, pending and pending[0]) if m is not None]
        try:
            try:
                msgs = await sub.fetch(self.config.batch, timeout=0.25,
                                       linger=pending is None and in_flight is None)
            except (TimeoutError, FetchTimeoutError, nats.errors.TimeoutError):
                msgs = []
            unacked.append(msgs)
            if msgs:
                await self._check_contiguous(msgs, pending and pending[0], in_flight)
            self.backlogged = len(msgs) >= self.config.batch
            new = None
            if msgs:
                new = (msgs, self.prepare([(m.seq, m.subject, m.data) for m in msgs],
                                          refresh_hosts=in_flight is None,
                                          times=[m.at_ms for m in msgs]))
            await self._settle()
            if pending is not None:
                await self._start_commit(*pending)
            if new is not None and len(msgs) >= self.config.batch:
                self._pending = new
            else:
                if new is not None:
                    await self._settle()
                    await self._start_commit(*new)
                await self._settle()
        except Exception:
            for batch_msgs in unacked:
                for m in batch_msgs:
                    with contextlib.suppress(Exception):
                        assert self.nc is not None  # start() connected it
                        await nak(self.nc, m, 1.0)
            await self._abandon()
            raise
        self.healthy = True
        self.health_detail = "ok"
        await self._checkpoint_if_due()  # a timed one, also while the stream is quiet

    async def _check_contiguous(self, msgs: list[Delivery], *earlier: Any) -> None:
        """Refuse to fold past a hole in the stream's order: the consumer delivers every
        message (no subject filter), so a batch must go on from the last one fetched. A
        hole means messages were delivered where this fold never saw them (a pull whose
        reply was lost while a node died, a second reader of the consumer): folded past,
        they would come back, if at all, below the watermark and be skipped, and the ack of
        a later one (AckAll) would ack them unread. Raised, the loop naks what it holds and
        repositions the consumer at the watermark (:func:`ledger.stream.ensure_consumer`).
        A hole the stream itself has (its first message beyond it) is passed over."""
        last = next((max(m.seq for m in b) for b in earlier if b), self.store.watermark())
        seqs = [m.seq for m in msgs]
        expected = last + 1
        while (gap := first_gap(expected, seqs)) is not None:
            seq, expected = gap
            assert self.js is not None
            info = await self.js.stream_info(self.names.stream)
            if info.state.first_seq > expected:
                log.warning("the stream starts at %d: nothing to fold before it",
                            info.state.first_seq)
                expected = seq + 1
                continue
            raise DeliveryGap(f"the consumer delivered stream sequence {seq} where "
                              f"{expected} was next: folding again from the watermark")

    async def _start_commit(self, msgs: list[Delivery], prepared: Prepared) -> None:
        """Decide and write a batch, then start its commit (:class:`CommitPipeline`)."""
        await self.pipeline.start(msgs, prepared)

    async def _settle(self) -> None:
        """Wait for the commit in flight, then ack its batch, publish its refusals, and sign
        a checkpoint if one is due."""
        settled = await self.pipeline.settle()
        if settled is None:
            return
        msgs = settled.msgs
        if settled.committed:
            self.metrics.batch_committed(settled.started, self.store.tree.size(),
                                         msgs[0].reply, signing=self.signs())
        assert self.nc is not None
        await ack_all(self.nc, msgs[-1])
        self.stream_last_seq = max(self.stream_last_seq, msgs[-1].seq)
        await self._publish_refusals(settled.batch)
        await self._checkpoint_if_due()

    async def _checkpoint_if_due(self) -> None:
        """The checkpoint step: sign when due (:meth:`checkpoint_due`), and publish what the
        leader signs (only between commits: the store then holds exactly what was
        committed). A follower signs only what a reader waits for, and publishes nothing."""
        if self.pipeline.busy:
            return
        leading = self.signs()
        # Anchoring starts with the signing (never as a side effect of asking).
        if leading and self._anchoring is not None and self._anchor_task is None:
            self._start_anchors(self._anchoring)
        if not self.checkpoint_due():
            return
        note = self.sign_checkpoint()
        if leading and note is not None and self.nc is not None:
            await self.nc.publish(self.names.checkpoints, note.encode())

    async def _abandon(self) -> None:
        """Drop the batches in flight after a failure (they were nak'd): wait out a commit
        still running, so the store is not left mid-transaction."""
        self._pending = None
        await self.pipeline.abandon()

    async def _publish_refusals(self, batch: list[Incoming]) -> None:
        assert self.nc is not None
        for host, notice in refusal_notices(batch):
            with contextlib.suppress(Exception):
                await self.nc.publish(self.names.rejection_subject(host), notice)

    async def refresh_stream_end(self) -> int:
        """The stream's last sequence, asked of the server (the last known if it does not
        answer); the lag is that minus the watermark, read under the store lock."""
        if self.js is not None:
            with contextlib.suppress(Exception):
                info = await self.js.stream_info(self.names.stream)
                self.stream_last_seq = info.state.last_seq
        return self.stream_last_seq

    async def close(self) -> None:
        if self._replica_task is not None:
            self._replica_stop.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._replica_task, 5)
        await self._stop_anchors()
        if self.api is not None:
            with contextlib.suppress(Exception):
                await self.api.stop()
        if self.nc is not None:
            with contextlib.suppress(Exception):
                await self.nc.drain()
        await asyncio.get_running_loop().run_in_executor(None, self._sealer.close)
        self.pipeline.close()
        if self.receipts is not None:
            self.receipts.close()
        self.store.close()
