"""Ledger replicas with one identity: a lease in a NATS KV bucket says which replica signs
checkpoints on the timer, publishes them and drives the anchors; every replica folds and
serves the API. Heartbeats in a second bucket say where each replica is (``fleet status``).

Safety does not rest on the lease. Replicas share the origin and signing key, fold one
stream into the same log (control events make the host table part of the stream), and
Ed25519 signatures are deterministic: the checkpoint of size ``n`` is byte for byte the same
whichever replica signs it, so no two checkpoints can conflict. The lease only keeps one
replica publishing and anchoring (the witness then sees one growing sequence), and a new
holder signs only once it has folded up to the stream's end as it was when it took the
lease, so it never publishes a checkpoint smaller than one its predecessor published.

The lease is the KV key ``leader`` in a bucket whose entries live ``ttl`` seconds: the
holder renews it every ``ttl/4`` by a compare-and-set on its revision (``update``), others
try ``create`` as often; when the holder dies its entry ages out and the next ``create``
wins. A holder acts only while its last renewal is younger than ``ttl/2`` (a paused process
resumes not leading), and stops at the first failed renewal. Failover takes at most
``ttl + ttl/4`` (the entry ages out ``ttl`` after the last renewal, at most ``ttl/4``
before the death; the next ``create`` comes within ``ttl/4``) plus the server's expiry
scheduling (we allow 0.5 s), then the new holder's catch-up before it signs.

The host table must come from the stream alone: a host enrolled offline (``fleet host
enroll --data``) is in one replica's store and not the others', so the replicas would decide
that host's segments differently and fork under one key. A replica whose store holds hosts
enrolled offline refuses to start (:class:`OfflineHosts`); enroll hosts with control events
(``fleet host enroll --nats``) instead.

A replica that does not lead has signed only what it was asked for, so its own last
checkpoint may be old. It keeps the largest checkpoint published on ``<fleet>.checkpoint``
under the log's key (:meth:`Replica.newest`), and the API answers a checkpoint request with
whichever is larger.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import Any, NamedTuple, Protocol

from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig
from nats.js.errors import BucketNotFoundError
from nats.js.kv import KeyValue

from fleet_ledger.fleet.log.checkpoint import parse_checkpoint
from fleet_ledger.fleet.log.note import Signer, open_note
from fleet_ledger.fleet.subjects import DEFAULT_FLEET, FleetNames
from fleet_ledger.plumbing.nats_connect import bucket_keys

log = logging.getLogger(__name__)

LEASE_KEY = "leader"


class Progress(NamedTuple):
    """Where a replica is, for its heartbeat."""

    committed_seq: int  # the stream sequence folded and committed
    tree_size: int
    stream_last_seq: int  # the stream's end as last known
    healthy: bool


class Lead(Protocol):
    """What the lease task needs of its ledger (:class:`ledger.service.Ledger` is one):
    its connection and key (to keep the checkpoints published under it), its progress, and
    the lead to take and drop."""

    nc: Client | None
    origin: str
    signer: Signer

    @property
    def lead_floor(self) -> int | None: ...

    async def take_lead(self) -> None: ...

    async def drop_lead(self) -> None: ...

    async def refresh_stream_end(self) -> int: ...

    def progress(self) -> Progress: ...


class OfflineHosts(Exception):
    """A replica's store holds hosts enrolled offline, which the other replicas lack."""

    def __init__(self, names: list[str]) -> None:
        super().__init__(
            f"cannot run as a replica: hosts enrolled offline ({', '.join(names)}) are in "
            f"this store only, so replicas would fork; enroll them by control events "
            f"(fleet host enroll --nats) into a fresh store")
        self.names = names


def check_no_offline_hosts(offline: list[dict[str, Any]]) -> None:
    """:class:`OfflineHosts` unless ``offline`` (the store's offline host rows) is empty."""
    if offline:
        raise OfflineHosts([h["name"] for h in offline])


async def open_bucket(js: JetStreamContext, bucket: str, ttl: float, replicas: int
                      ) -> KeyValue:
    """The KV bucket, created (history 1, entries living ``ttl`` s) if it is missing."""
    try:
        return await js.key_value(bucket)
    except BucketNotFoundError:
        return await js.create_key_value(KeyValueConfig(bucket=bucket, history=1, ttl=ttl,
                                                        replicas=replicas))


class Replica:
    """The lease and heartbeat task of one ledger replica (``ledger.leading`` follows it)."""

    def __init__(self, ledger: Lead, name: str, ttl: float = 2.0,
                 names: FleetNames = DEFAULT_FLEET, replicas: int = 1) -> None:
        self.ledger = ledger
        self.ttl = ttl
        self.names = names
        self.name = name
        self.replicas = replicas  # of the buckets, as of the stream
        self.revision: int | None = None
        self.renewed_at = 0.0
        self.lease: KeyValue | None = None
        self.js: JetStreamContext | None = None
        self.beats: KeyValue | None = None
        self.newest: tuple[int, bytes, str] | None = None  # (size, root, note) published

    @property
    def holds(self) -> bool:
        """Holding a lease renewed less than ttl/2 ago."""
        return self.revision is not None and time.monotonic() - self.renewed_at < self.ttl / 2

    async def start(self, js: JetStreamContext) -> None:
        """Open (or create) the buckets; replicas starting together may time out on a busy
        cluster, so a failure here is retried by each :meth:`tick` instead."""
        self.js = js
        if self.ledger.nc is not None:
            await self.ledger.nc.subscribe(self.names.checkpoints, cb=self._published)
        with contextlib.suppress(Exception):
            await self._open()

    async def _published(self, msg: Any) -> None:
        """Keep the largest checkpoint published under this log's key (another replica's, or
        this one's own); anything else on the subject is ignored."""
        try:
            note = msg.data.decode()
            opened = open_note(note, [self.ledger.signer.verifier()])
            cp = parse_checkpoint(opened.text)
        except Exception:  # not ours, or not a checkpoint: nothing to keep
            return
        if opened.verified and cp.origin == self.ledger.origin and (
                self.newest is None or cp.size > self.newest[0]):
            self.newest = (cp.size, cp.root, note)

    async def _open(self) -> None:
        assert self.js is not None  # start() gave it
        replicas = self.replicas
        if self.lease is None:
            self.lease = await open_bucket(self.js, self.names.lease_bucket, self.ttl,
                                           replicas)
        if self.beats is None:
            self.beats = await open_bucket(self.js, self.names.replicas_bucket,
                                           max(10.0, self.ttl * 5), replicas)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(Exception):
                await self.tick()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), self.ttl / 4)
        await self.release()

    async def tick(self) -> None:
        """Renew or try to take the lease, then publish this replica's heartbeat."""
        if self.lease is None or self.beats is None:
            await self._open()
        assert self.lease is not None and self.beats is not None
        value = json.dumps({"holder": self.name, "at": time.time()}).encode()
        try:
            if self.revision is not None and self.holds:
                sent = time.monotonic()  # the lease ages from the request, not the reply
                self.revision = await self.lease.update(LEASE_KEY, value, last=self.revision)
                self.renewed_at = sent
            else:
                if self.revision is not None:
                    await self._lose("renewal too late")
                sent = time.monotonic()
                self.revision = await self.lease.create(LEASE_KEY, value)
                self.renewed_at = sent
                await self.ledger.take_lead()
                log.warning("replica %s took the lease (revision %d)", self.name,
                            self.revision)
            if self.ledger.lead_floor is None:  # the stream's end was not read at takeover
                await self.ledger.take_lead()
        except Exception as exc:
            if self.revision is not None:
                await self._lose(f"{type(exc).__name__}: {exc}")
        await self.ledger.refresh_stream_end()  # the lag is behind the stream, not our acks
        await self.beats.put(self.name, json.dumps(self.heartbeat()).encode())

    def heartbeat(self) -> dict[str, Any]:
        p = self.ledger.progress()
        return {"name": self.name, "stream_seq": p.committed_seq, "tree_size": p.tree_size,
                "lag": max(0, p.stream_last_seq - p.committed_seq), "leading": self.holds,
                "healthy": p.healthy, "at": time.time()}

    async def _lose(self, why: str) -> None:
        log.warning("replica %s lost the lease: %s", self.name, why)
        self.revision = None
        await self.ledger.drop_lead()

    async def release(self) -> None:
        """Give the lease up on a clean stop, so the next replica need not wait it out."""
        if self.revision is not None and self.lease is not None:
            with contextlib.suppress(Exception):
                await self.lease.delete(LEASE_KEY, last=self.revision)
            self.revision = None
        if self.beats is not None:
            with contextlib.suppress(Exception):
                await self.beats.delete(self.name)


async def read_replicas(js: JetStreamContext, names: FleetNames = DEFAULT_FLEET
                        ) -> tuple[str | None, list[dict[str, Any]]]:
    """(the lease holder, every replica's last heartbeat) as the buckets hold them."""
    holder = None
    beats: list[dict[str, Any]] = []
    with contextlib.suppress(Exception):
        entry = await (await js.key_value(names.lease_bucket)).get(LEASE_KEY)
        if entry.value:
            holder = json.loads(entry.value)["holder"]
    with contextlib.suppress(Exception):
        kv = await js.key_value(names.replicas_bucket)
        for key in await bucket_keys(js, names.replicas_bucket):
            with contextlib.suppress(Exception):
                e = await kv.get(key)
                if e.value:
                    beats.append(json.loads(e.value))
    return holder, sorted(beats, key=lambda b: b["name"])
