"""The ledger service: consume the FLEET stream, fold in batches, sign checkpoints, serve.

One batch is: fetch up to ``batch`` messages from the ledger's durable pull consumer, decide
each with the pure fold (:func:`fleet.fold_fast.fold_message`), commit the batch's leaves, runs,
refusals and the highest stream sequence decided in one SQLite transaction, and only then
ack (AckAll on the last message). Messages at or below the stored watermark are skipped, so
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
from collections import OrderedDict
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
import nats
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.errors import FetchTimeoutError

from fleet.checkpoint import check_consistent_then_sign, make_checkpoint, parse_checkpoint
from fleet.control import BatchControl, ControlAccepted
from fleet.fold import Accepted, Admission, BatchRuns, HostEntry, Message, Refused, RunSlot
from fleet.fold_fast import batch_addresses, fold_message, wire_seal_item
from fleet.grant_events import GrantAccepted, signature_items
from fleet.grant_fold import BatchGrants
from fleet.note import Signer, parse_note
from fleet.subjects import fleet_names
from fleet.wire import EnvelopeWire, envelope_wire, identity
from ledger.api import LedgerApi
from ledger.keys import load_or_create_signer
from ledger.metrics import FoldMetrics, new_registry
from ledger.pull import Delivery, PullerState, ack_all, nak, open_puller
from ledger.replica import Replica, check_no_offline_hosts
from ledger.seal_worker import MAX_ITEM_MESSAGE, SealTicket, SealWorker
from ledger.store import CheckpointReader, HostsChanged, Incoming, LedgerStore
from ledger.stream import ensure_consumer, ensure_stream
from plumbing.anchoring import AnchorTaskFactory, ReceiptStore
from plumbing.nats_connect import connect

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
    # Decide the common message by fleet.fold_fast (False: every one by the reference path;
    # the tests fold with both and compare the stores).
    fast_path: bool = True
    # The puller (ledger.pull): "auto" runs the lean one where the installed nats-py is a
    # version it is tested against, else nats-py's fetch; "lean" or "fetch" forces one
    # ("auto" defers to the FLEET_PULLER environment variable).
    puller: str = "auto"
    # The operator verifier keys (32 bytes each) control events are checked under
    # (fleet.control); rotations in the stream hand over to later keys.
    operator_vkeys: tuple[bytes, ...] = ()
    # One of several replicas sharing origin and key (ledger.replica): the lease's time to
    # live in seconds; None, a single ledger that always signs and anchors.
    replica_ttl: float | None = None
    # The fleet this ledger belongs to: the prefix of its stream, subjects, API and buckets
    # (fleet.subjects.fleet_names; "fleet" is today's names).
    fleet: str = "fleet"
    # How runs are held to their grants (fleet.grant_events): "enforce" holds every run
    # whose grant was presented to it and folds the others under no grant; "require"
    # refuses a run whose grant was not presented (UnknownGrant).
    grants: str = "enforce"


class BatchChanges(NamedTuple):
    """What a decided batch changes, installed once its commit is durable: the runs it
    changed (copies) and its grant events (an overlay on the committed book)."""

    runs: dict[bytes, RunSlot]
    grants: BatchGrants
    control: BatchControl


@dataclass
class Prepared:
    """A decoded batch whose seals are being checked (see :meth:`Ledger.prepare`)."""

    msgs: list[tuple[int, str, bytes]]
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
        self._runs: OrderedDict[bytes, RunSlot] = OrderedDict()
        # The stream sequence folded and durably committed: the store's watermark read on
        # the fold's connection may be a batch written but not yet committed.
        self.committed_seq = self.store.watermark()
        self._hosts_version = self.store.hosts_version()
        self._hosts = self.store.hosts()
        if config.grants not in ("enforce", "require"):
            raise ValueError(f"grants must be 'enforce' or 'require', not {config.grants!r}")
        self.grants = self.store.grant_book()
        self._last_checkpoint_at = time.monotonic()
        self._sealer = SealWorker()
        self._pending: tuple[list[Delivery], Prepared] | None = None
        self._committing: tuple[list[Delivery], list[Incoming], asyncio.Future[None] | None,
                                BatchChanges, int] | None = None
        # Held while a batch is written and committed; API reads take it too, so they never
        # see a batch that is not committed (nor sign a checkpoint over one).
        self.store_lock = asyncio.Lock()
        self._committer = ThreadPoolExecutor(1, thread_name_prefix="ledger-commit")
        self.metrics = FoldMetrics(new_registry())  # /metrics (ledger.http) reads them
        self.backlogged = False  # the last fetch was a full batch: the HTTP log yields to it
        self._batch_started = 0.0
        self.nc: Client | None = None
        self.js: JetStreamContext | None = None
        self.api: LedgerApi | None = None
        self._anchor_task: asyncio.Task[None] | None = None
        self._anchor_stop = asyncio.Event()
        self._anchor_source: CheckpointReader | None = None
        # Signing on the timer, publishing and anchoring: always for a single ledger; for a
        # replica, while it holds the lease and has folded up to ``_lead_floor`` (the
        # stream's end when it took the lease).
        self._lead_floor: int | None = None if config.replica_ttl is not None else 0
        self.replica: Replica | None = None
        self._replica_task: asyncio.Task[None] | None = None
        self._replica_stop = asyncio.Event()

    # -- state helpers --------------------------------------------------------------------

    def _get_run(self, run: bytes) -> RunSlot | None:
        slot = self._runs.get(run)
        if slot is None:
            slot = self.store.load_run(run)
            if slot is not None:
                self._remember(run, slot)
        else:
            self._runs.move_to_end(run)
        return slot

    def _remember(self, run: bytes, slot: RunSlot) -> None:
        self._runs[run] = slot
        self._runs.move_to_end(run)

    def _trim_runs(self) -> None:
        """Forget the least recently used runs beyond ``run_cache``: only between batches,
        never inside one, where a run's advanced or new state is held nowhere else."""
        while len(self._runs) > self.config.run_cache:
            self._runs.popitem(last=False)

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
        wires = [envelope_wire(data) for _seq, _subject, data in msgs]
        addresses = batch_addresses(wires)
        found = [(n, item) for n, item in (
            (n, None if w is None else wire_seal_item(w, hosts, a and a[0]))
            for n, (w, a) in enumerate(zip(wires, addresses, strict=True)))
            if item is not None]
        runs = {identity(wires[n].run) for n, _ in found}  # type: ignore[union-attr]
        # A grant event's signatures (its own, an issued or minted grant's) are checked
        # beside the fold too: the event's verdict is the conjunction of its items'.
        grant_subject = self.names.grant_subject
        for n, (_seq, subject, data) in enumerate(msgs):
            if subject == grant_subject:
                items = signature_items(data)
                if items is not None and all(len(m) <= MAX_ITEM_MESSAGE for _, m, _ in items):
                    found += [(n, item) for item in items]
        ticket = self._sealer.submit([item for _, item in found], share_in_line)
        return Prepared(msgs, [0] * len(msgs) if times is None else times, wires, hosts,
                        self._hosts_version, [n for n, _ in found], ticket,
                        runs, addresses)

    def finish(self, prepared: Prepared) -> tuple[list[Incoming], int]:
        """Decide a prepared batch's messages above the watermark and commit them."""
        batch, top, changed = self.decide_and_write(prepared)
        if batch:
            self.store.commit()
            self._install(changed, top)
        return batch, top

    def decide_and_write(self, prepared: Prepared
                         ) -> tuple[list[Incoming], int, BatchChanges]:
        """Decide a prepared batch and write it in a transaction left open for the store's
        ``commit``; a batch decided with a host table that has since changed is decided
        again with the current one. Returns the batch, its watermark and the runs it
        changed, to :meth:`_install` once the commit is durable (the cache holds only
        committed state, so a failure anywhere needs nothing undone)."""
        while True:
            batch, top, changed = self._decide(prepared)
            if not batch:
                return batch, top, changed
            try:
                self.store.write_batch(batch, top, prepared.hosts_version, changed.runs,
                                       changed.control.state)
            except HostsChanged:
                prepared = self.prepare(prepared.msgs, share_in_line=0.5, times=prepared.times)
                continue
            return batch, top, changed

    def _install(self, changed: BatchChanges, top: int) -> None:
        """Make a committed batch's run states the cache's, its grant events the book's, and
        its watermark ``top`` the committed position."""
        self.committed_seq = max(self.committed_seq, top)
        for run, slot in changed.runs.items():
            self._remember(run, slot)
        if changed.grants.accepted:
            changed.grants.install()

    def _decide(self, prepared: Prepared) -> tuple[list[Incoming], int, BatchChanges]:
        self._trim_runs()
        seals: list[bool | None] = [None] * len(prepared.msgs)
        for n, ok in zip(prepared.sealed, self._sealer.collect(prepared.seals), strict=True):
            held = seals[n]
            seals[n] = ok if held is None else held and ok
        hosts = prepared.hosts
        fast = self.config.fast_path
        watermark = self.store.watermark()
        batch: list[Incoming] = []
        top = watermark
        # Heads folded earlier in this batch are not in the store yet; without them a replay
        # of one would be judged by where the batch happened to end (Fork vs Replay). Only
        # the reference path asks, so they are gathered from the batch when it does.
        batch_heads: dict[tuple[bytes, int], bytes] = {}
        gathered = 0

        def head_at(run: bytes, index: int) -> bytes | None:
            nonlocal gathered
            for item in batch[gathered:]:
                d = item.decision
                if isinstance(d, Accepted):
                    batch_heads[(d.run, d.index)] = d.head
            gathered = len(batch)
            held = batch_heads.get((run, index))
            return held if held is not None else self.store.head_at(run, index)

        # The batch's runs that are not cached, read in one query; those the store lacks
        # are new runs, not looked up again one by one.
        runs = self._runs
        unseen = prepared.runs - runs.keys()
        for run, slot in self.store.load_runs(unseen).items():
            self._remember(run, slot)
        absent = unseen - runs.keys()

        def committed(run: bytes) -> RunSlot | None:
            if run in absent and run not in runs:
                return None
            return self._get_run(run)

        # Control events change the host table in stream order: the batch decides against
        # its own copy, and once one is accepted, the seals checked before (with the table
        # the batch was prepared with) are checked again in line.
        trusted, retired = self.store.operators()
        control = BatchControl(trusted, hosts, retired)
        grants = BatchGrants(self.grants)
        ctx = Admission(control.hosts, BatchRuns(committed), head_at, self.names, grants,
                        self.config.grants == "require")

        def run_at(run: bytes, index: int) -> tuple[bytes, int, bytes | None] | None:
            slot = ctx.runs.get(run)
            if slot is None:
                return None
            st = slot.state
            head = (st.head if index == st.index
                    else head_at(run, index) if 1 <= index < st.index else None)
            return st.grants_id, st.index, head

        is_control = self.names.is_control
        grant_subject = self.names.grant_subject
        host_keys: set[bytes] | None = None
        keys_at = 0
        for (seq, subject, data), at_ms, wire, seal_ok, addresses in zip(
                prepared.msgs, prepared.times, prepared.wires, seals, prepared.addresses,
                strict=True):
            if seq <= watermark:
                continue
            decision: Accepted | Refused | ControlAccepted | GrantAccepted
            if subject == grant_subject:
                # The enrolled keys, taken once per batch (again after a control event).
                if host_keys is None or keys_at != len(control.accepted):
                    host_keys = {e.public_key for e in control.hosts.values()}
                    keys_at = len(control.accepted)
                decision = grants.fold(seq, at_ms, data, host_keys, run_at, seal_ok)
            elif is_control(subject):
                decision = control.fold(seq, data)
            else:
                decision = fold_message(
                    ctx, Message(subject, data, seq, wire, None if control.changed else seal_ok,
                                 addresses, at_ms), fast)
            batch.append(Incoming(seq, subject, data, decision, at_ms))
            if seq > top:
                top = seq
        return batch, top, BatchChanges(ctx.runs.changed, grants, control)

    # -- checkpoints ----------------------------------------------------------------------

    def checkpoint_due(self) -> bool:
        size = self.store.tree.size()
        last = self.store.last_checkpoint()
        signed = 0 if last is None else last[0]
        if size <= signed:
            return False
        if size - signed >= self.config.checkpoint_every:
            return True
        elapsed_ms = (time.monotonic() - self._last_checkpoint_at) * 1000
        return elapsed_ms >= self.config.checkpoint_ms

    async def sign_checkpoint_now(self) -> str | None:
        """:meth:`sign_checkpoint` from outside the fold loop: under the store lock, so never
        inside a batch's transaction while its commit runs."""
        async with self.store_lock:
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
        self.metrics.signed(size)
        return note

    def checkpoint_covering(self, leaf_index: int) -> tuple[int, bytes, str]:
        """A signed checkpoint whose tree holds ``leaf_index``, signing one if none does."""
        found = self.store.checkpoint_at_least(leaf_index + 1)
        if found is None:
            self.sign_checkpoint()
            found = self.store.checkpoint_at_least(leaf_index + 1)
        assert found is not None
        return found

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
            self.replica = Replica(self, cfg.replica_ttl, self.names)
            await self.replica.start(self.js)
            self._replica_task = asyncio.create_task(self.replica.run(self._replica_stop))
        elif self._anchoring is not None:
            self._start_anchors(self._anchoring)

    async def take_lead(self) -> None:
        """This replica took the lease: it signs once folded to the stream's end as it is
        now, so it never publishes a checkpoint below one its predecessor published."""
        self._lead_floor = None
        assert self.js is not None
        try:  # not the last known end: a lagging replica's would be its own position
            info = await self.js.stream_info(self.names.stream)
        except Exception as exc:  # the replica's next tick asks again
            log.warning("cannot read the stream's end at takeover: %s", exc)
            return
        self.stream_last_seq = max(self.stream_last_seq, info.state.last_seq)
        self._lead_floor = info.state.last_seq

    @property
    def leading(self) -> bool:
        """A single ledger always leads; a replica while it holds the lease."""
        if self.replica is None:
            return self.config.replica_ttl is None
        return self.replica.holds

    @property
    def lead_floor(self) -> int | None:
        return self._lead_floor

    async def drop_lead(self) -> None:
        self._lead_floor = None
        await self._stop_anchors()

    def signs(self) -> bool:
        """Whether this ledger signs on the timer, publishes and anchors now."""
        if not self.leading or self._lead_floor is None:
            return False  # for a replica: no lease, or a renewal too old (a paused process)
        # The committed position: the store's watermark may be a batch still committing.
        return self.committed_seq >= self._lead_floor

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
        pending, committing = self._pending, self._committing
        self._pending = None
        msgs: list[Delivery] = []
        unacked = [b[0] for b in (committing, pending) if b is not None]
        try:
            try:
                msgs = await sub.fetch(self.config.batch, timeout=0.25,
                                       linger=pending is None and committing is None)
            except (TimeoutError, FetchTimeoutError, nats.errors.TimeoutError):
                msgs = []
            unacked.append(msgs)
            if msgs:
                await self._check_contiguous(msgs, pending, committing)
            self.backlogged = len(msgs) >= self.config.batch
            new = None
            if msgs:
                new = (msgs, self.prepare([(m.seq, m.subject, m.data) for m in msgs],
                                          refresh_hosts=committing is None,
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
        last = next((max(m.seq for m in b[0]) for b in earlier if b is not None and b[0]),
                    self.store.watermark())
        expected = last + 1
        for m in msgs:
            if m.seq < expected:
                continue  # a redelivery of something already fetched
            if m.seq > expected:
                assert self.js is not None
                info = await self.js.stream_info(self.names.stream)
                if info.state.first_seq > expected:
                    log.warning("the stream starts at %d: nothing to fold before it",
                                info.state.first_seq)
                    expected = m.seq + 1
                    continue
                raise DeliveryGap(f"the consumer delivered stream sequence {m.seq} where "
                                  f"{expected} was next: folding again from the watermark")
            expected = m.seq + 1

    async def _start_commit(self, msgs: list[Delivery], prepared: Prepared) -> None:
        """Decide and write a batch, then start its commit on the commit thread. The store
        lock is held until :meth:`_settle`, so API reads never see an uncommitted batch."""
        await self.store_lock.acquire()
        self._batch_started = time.monotonic()
        try:
            batch, top, changed = self.decide_and_write(prepared)
            done: asyncio.Future[None] | None = None
            if batch:
                try:
                    done = asyncio.get_running_loop().run_in_executor(self._committer,
                                                                      self.store.commit)
                except BaseException:
                    self.store.rollback()
                    raise
        except BaseException:
            self.store_lock.release()
            raise
        self._committing = (msgs, batch, done, changed, top if batch else 0)

    async def _settle(self) -> None:
        """Wait for the commit in flight, then ack its batch, publish its refusals, and sign
        a checkpoint if one is due."""
        committing, self._committing = self._committing, None
        if committing is None:
            return
        msgs, batch, done, changed, top = committing
        try:
            if done is not None:
                # Shielded: a cancelled wait must not release the lock mid-commit.
                await asyncio.shield(done)
                self.metrics.batch_committed(self._batch_started, self.store.tree.size(),
                                             msgs[0].reply, signing=self.signs())
            self._install(changed, top)
        finally:
            self.store_lock.release()
        assert self.nc is not None
        await ack_all(self.nc, msgs[-1])
        self.stream_last_seq = max(self.stream_last_seq, msgs[-1].seq)
        await self._publish_refusals(batch)
        await self._checkpoint_if_due()

    async def _checkpoint_if_due(self) -> None:
        """Sign and publish a checkpoint when N leaves or T ms have passed since the last
        (only between commits: the store then holds exactly what was committed)."""
        if self._committing is None and self.signs():
            # Anchoring starts with the signing (never as a side effect of asking).
            if self._anchoring is not None and self._anchor_task is None:
                self._start_anchors(self._anchoring)
            if not self.checkpoint_due():
                return
            note = self.sign_checkpoint()
            if note is not None and self.nc is not None:
                await self.nc.publish(self.names.checkpoints, note.encode())

    async def _abandon(self) -> None:
        """Drop the batches in flight after a failure (they were nak'd): wait out a commit
        still running, so the store is not left mid-transaction."""
        self._pending = None
        committing, self._committing = self._committing, None
        if committing is None:
            return
        _msgs, _batch, done, changed, top = committing
        try:
            if done is not None:
                try:
                    await done
                except Exception:  # not stored: the cache keeps what was committed
                    pass
                else:
                    self._install(changed, top)
        finally:
            self.store_lock.release()

    async def _publish_refusals(self, batch: list[Incoming]) -> None:
        assert self.nc is not None
        for item in batch:
            d = item.decision
            if not isinstance(d, Refused) or d.host is None:
                continue
            body = {"stream_seq": item.stream_seq, "subject": item.subject, "rule": d.rule,
                    "detail": d.detail, "index": d.index}
            with contextlib.suppress(Exception):
                await self.nc.publish(self.names.rejection_subject(d.host),
                                      msgspec.json.encode(body))

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
        self._committer.shutdown(wait=True)
        if self.receipts is not None:
            self.receipts.close()
        self.store.close()
