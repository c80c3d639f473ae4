"""The ledger's request/reply API: a ``nats.micro`` service in a queue group, so ledger
replicas share the load. Requests and replies are JSON; a failure replies with a micro
error header (code and one-line description) that the CLI prints as is.

    fleet.api.status       {}                          -> status JSON
    fleet.api.checkpoint   {"min_size"?}               -> {"size", "root", "checkpoint"}
    fleet.api.prove        {"run", "index"?}           -> proof bundle
    fleet.api.consistency  {"old", "new"?}             -> {"old", "new", "proof", ...}
    fleet.api.run          {"run"}                     -> run status (with its "grant")
    fleet.api.grant        {"grant"}                   -> a folded grant (ledger.grant_views)
    fleet.api.grant_evidence {"run"}                   -> the run's grant evidence
                                                          (fleet.fold.grant_verify)
    fleet.api.runs         {}                          -> {"runs": [...]}
    fleet.api.export       {"run"}                     -> the run's record file
    fleet.api.rejections   {"limit"?, "host"?, "run"?, "stream_seq"?} -> {"rejections": [...]}
    fleet.api.audit        {"since"?, "cheap_factor"?} -> the audit (fleet.audit)
    fleet.api.jobs         {}                          -> {"jobs": [...]}
    fleet.api.job          {"job", "items"?, "from"?}  -> a job's progress, totals, receipt
                                                          (ledger.job_views)
    fleet.api.job_prove    {"job", "item"?}            -> a job item's proof bundle
                                                          (fleet.jobs.job_bundle)

Every request may carry ``"min_seq"``: a replica answers only once it has folded the
stream up to that sequence (waiting up to 2 s), else replies 503 saying how far it is.

A checkpoint request gets the newest checkpoint this replica knows: its own last one or the
largest the lease holder published (ledger.replica), whichever is larger. With
``"min_size"`` it answers one of at least that size, its checkpoint step signing its own
tree if that has grown so far, else waiting up to 2 s for one, else 503. No request signs:
a proof or checkpoint that needs a new checkpoint waits for the ledger's checkpoint step.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from nats.aio.client import Client
from nats.micro import add_service
from nats.micro.request import Request
from nats.micro.service import Service

from fleet_ledger.fleet.errors import FleetError
from fleet_ledger.fleet.fold.grant_events import GrantBook
from fleet_ledger.fleet.subjects import FleetNames
from fleet_ledger.ledger import job_views, views
from fleet_ledger.ledger.audit_rows import audit_store
from fleet_ledger.ledger.grant_views import GrantNotFound, grant_evidence, grant_status
from fleet_ledger.ledger.store import LedgerStore, ReadOnlyStore
from fleet_ledger.plumbing.anchoring import ReceiptStore

Handler = Callable[[dict[str, Any]], Awaitable[Any]]

# Endpoints that take the store lock themselves (or need none): they wait or ask NATS first.
_UNLOCKED = ("status", "audit", "checkpoint", "prove", "job_prove")


class BadRequest(Exception):
    pass


class Behind(Exception):
    """This replica has nothing as new as the request asks (503: another may have)."""


@dataclass(frozen=True)
class ServiceFacts:
    """What the status reports of the service beside its store."""

    name: str
    vkey: str
    healthy: bool
    detail: str
    puller: dict[str, Any]
    grants_mode: str
    leading: bool
    signing: bool


class ApiLedger(Protocol):
    """What the API reads of its ledger (:class:`ledger.service.Ledger` is one): the store
    under the pipeline's lock, the committed position, and a wait for a signed checkpoint
    (the API never signs one)."""

    names: FleetNames
    origin: str
    store: LedgerStore
    receipts: ReceiptStore | None
    grants: GrantBook
    committed_seq: int

    @property
    def data_dir(self) -> Path: ...

    def reading(self) -> AbstractAsyncContextManager[None]: ...

    async def wait_for_checkpoint(self, size: int, timeout: float = 2.0
                                  ) -> tuple[int, bytes, str] | None: ...

    async def refresh_stream_end(self) -> int: ...

    async def replicas_seen(self) -> tuple[str | None, list[dict[str, Any]]] | None: ...

    def facts(self) -> ServiceFacts: ...

    def newest_published(self) -> tuple[int, bytes, str] | None:
        """The largest checkpoint published under this log's key (ledger.replica), if any."""
        ...


def _field(body: dict[str, Any], name: str, kind: type, required: bool = True) -> Any:
    value = body.get(name)
    if value is None:
        if required:
            raise BadRequest(f"the request needs {name!r}")
        return None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise BadRequest(f"{name!r} must be a {kind.__name__}")
    return value


class LedgerApi:
    def __init__(self, ledger: ApiLedger) -> None:
        self.ledger = ledger
        self.service: Service | None = None
        self.job_trees = job_views.JobTrees()  # sealed jobs' sum trees, for item proofs

    async def start(self, nc: Client) -> None:
        names = self.ledger.names
        self.service = await add_service(
            nc, name=names.api_service, version="0.1.0", queue_group=names.api_queue,
            description="fleet ledger: checkpoints, proofs, run status",
            metadata={"origin": self.ledger.origin, "ledger": self.ledger.facts().name},
        )
        endpoints: dict[str, Handler] = {
            "status": self.status, "checkpoint": self.checkpoint, "prove": self.prove,
            "consistency": self.consistency, "run": self.run, "runs": self.runs,
            "export": self.export, "rejections": self.rejections, "audit": self.audit,
            "grant": self.grant,
            "grant_evidence": self.grant_evidence,
            "jobs": self.jobs, "job": self.job, "job_prove": self.job_prove,
        }
        for name, handler in endpoints.items():
            await self.service.add_endpoint(name=name, subject=names.api_subject(name),
                                            handler=self._wrap(handler,
                                                               name not in _UNLOCKED))

    async def stop(self) -> None:
        if self.service is not None:
            await self.service.stop()

    def _wrap(self, handler: Handler, locked: bool) -> Callable[[Request], Awaitable[None]]:
        """A micro handler around ``handler``; ``locked``: it runs under the ledger's store
        lock, so it reads only committed batches."""
        async def respond(req: Request) -> None:
            try:
                body = json.loads(req.data or b"{}")
                if not isinstance(body, dict):
                    raise BadRequest("the request must be a JSON object")
                if not await self._folded_to(_field(body, "min_seq", int, required=False)):
                    await req.respond_error("503", f"behind: folded to stream sequence "
                                            f"{self.ledger.committed_seq}, asked min_seq "
                                            f"{body['min_seq']}")
                    return
                if locked:
                    async with self.ledger.reading():
                        result = await handler(body)
                else:
                    result = await handler(body)
            except (BadRequest, json.JSONDecodeError) as exc:
                await req.respond_error("400", f"bad request: {exc}")
                return
            except Behind as exc:
                await req.respond_error("503", str(exc))
                return
            except (views.NotFound, GrantNotFound) as exc:
                await req.respond_error("404", str(exc))
                return
            except FleetError as exc:
                await req.respond_error("422", f"{exc.rule}: {exc}")
                return
            except Exception as exc:
                await req.respond_error("500", f"{type(exc).__name__}: {exc}")
                return
            await req.respond(result if isinstance(result, bytes) else views.encode(result))
        return respond

    async def _folded_to(self, min_seq: int | None, wait_s: float = 2.0) -> bool:
        """Whether this replica has folded and committed up to ``min_seq`` (waiting up to
        ``wait_s``)."""
        if min_seq is None:
            return True
        deadline = asyncio.get_running_loop().time() + wait_s
        while self.ledger.committed_seq < min_seq:
            if asyncio.get_running_loop().time() > deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    async def status(self, body: dict[str, Any]) -> Any:
        led = self.ledger
        end = await led.refresh_stream_end()  # a NATS request: not under the store lock
        replicas = await led.replicas_seen()
        async with led.reading():
            facts = led.facts()
            doc = views.status(led.store, origin=led.origin, vkey=facts.vkey,
                               lag=max(0, end - led.store.watermark()),
                               healthy=facts.healthy, detail=facts.detail,
                               receipts=led.receipts, puller=facts.puller)
        doc["grants"] = {"mode": facts.grants_mode, "folded": len(led.grants.entries)}
        doc["replica"] = {"name": facts.name, "leading": facts.leading,
                          "signing": facts.signing}
        if replicas is not None:
            doc["lease_holder"], doc["replicas"] = replicas
        return doc

    async def checkpoint(self, body: dict[str, Any]) -> Any:
        """The newest checkpoint this replica knows (its own last or the largest published,
        whichever is larger); with ``min_size``, one of at least that size, waiting up to
        2 s (the checkpoint step signs this replica's tree for it once the tree holds
        ``min_size`` leaves; a read never signs), else 503."""
        min_size = _field(body, "min_size", int, required=False) or 0
        led = self.ledger
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 2.0
        while True:
            async with led.reading():
                own, size = led.store.last_checkpoint(), led.store.tree.size()
            if own is None or own[0] < min_size <= size:
                # This tree holds what is asked: the checkpoint step signs it for us.
                await led.wait_for_checkpoint(size if own is None else min_size,
                                              max(0.0, deadline - loop.time()))
                async with led.reading():
                    own = led.store.last_checkpoint()
            found = max((c for c in (own, led.newest_published()) if c is not None),
                        key=lambda c: c[0], default=None)
            if found is not None and found[0] >= min_size:
                return views.checkpoint_json(found)
            if loop.time() > deadline:
                raise Behind(f"behind: the newest checkpoint here has size "
                             f"{0 if found is None else found[0]}, asked min_size {min_size}")
            await asyncio.sleep(0.05)

    async def prove(self, body: dict[str, Any]) -> Any:
        """A proof against a signed checkpoint holding the leaf; waits for the checkpoint
        step to sign one if none does yet (a read never signs)."""
        run = _field(body, "run", str)
        index = _field(body, "index", int, required=False)
        led = self.ledger
        return await self._proving(
            lambda: views.prove(led.store, run, index, receipts=led.receipts))

    async def job_prove(self, body: dict[str, Any]) -> Any:
        """An item's proof against a signed checkpoint holding the job's receipt; waits
        for the checkpoint step as :meth:`prove` does."""
        job = _field(body, "job", str)
        item = _field(body, "item", int, required=False) or 0
        led = self.ledger
        return await self._proving(
            lambda: job_views.job_prove(led.store, job, item, receipts=led.receipts,
                                        trees=self.job_trees))

    async def _proving(self, read: Callable[[], Any]) -> Any:
        """``read()`` under the store lock; when it wants a checkpoint no one signed yet
        (:class:`views.CheckpointWanted`), wait once for the checkpoint step, then again."""
        led = self.ledger
        for _attempt in range(2):
            async with led.reading():
                try:
                    return read()
                except views.CheckpointWanted as exc:
                    wanted = exc.size
            if await led.wait_for_checkpoint(wanted) is None:
                break
        raise Behind(f"behind: no signed checkpoint holds leaf {wanted - 1} yet")

    async def jobs(self, body: dict[str, Any]) -> Any:
        return {"jobs": job_views.jobs(self.ledger.store)}

    async def job(self, body: dict[str, Any]) -> Any:
        items = body.get("items") is True
        first = _field(body, "from", int, required=False) or 0
        return job_views.job_status(self.ledger.store, _field(body, "job", str), items, first)

    async def consistency(self, body: dict[str, Any]) -> Any:
        store = self.ledger.store
        old = _field(body, "old", int)
        new = _field(body, "new", int, required=False)
        return views.consistency(store, old, store.tree.size() if new is None else new)

    async def run(self, body: dict[str, Any]) -> Any:
        return views.run_status(self.ledger.store, _field(body, "run", str),
                                self.ledger.grants)

    async def grant(self, body: dict[str, Any]) -> Any:
        return grant_status(self.ledger.store, self.ledger.grants, _field(body, "grant", str))

    async def grant_evidence(self, body: dict[str, Any]) -> Any:
        return grant_evidence(self.ledger.store, self.ledger.grants, _field(body, "run", str))

    async def runs(self, body: dict[str, Any]) -> Any:
        return {"runs": self.ledger.store.list_runs()}

    async def export(self, body: dict[str, Any]) -> Any:
        run = _field(body, "run", str)
        first = _field(body, "from", int, required=False)
        if first is None:
            return views.export_record(self.ledger.store, run)
        limit = _field(body, "limit", int, required=False) or 500
        return views.export_page(self.ledger.store, run, first, min(limit, 1000))

    async def rejections(self, body: dict[str, Any]) -> Any:
        limit = _field(body, "limit", int, required=False) or 100
        host = _field(body, "host", str, required=False)
        run = _field(body, "run", str, required=False)
        seq = _field(body, "stream_seq", int, required=False)
        return {"rejections": self.ledger.store.rejections(limit, host, run, seq)}

    async def audit(self, body: dict[str, Any]) -> Any:
        since = body.get("since")
        factor = body.get("cheap_factor", 0.1)
        for name, value in (("since", since), ("cheap_factor", factor)):
            if value is not None and (not isinstance(value, int | float)
                                      or isinstance(value, bool)):
                raise BadRequest(f"{name!r} must be a number")
        return await asyncio.to_thread(self._audit, since, factor)

    def _audit(self, since: float | None, factor: float) -> Any:
        """In a thread, on a read-only connection of its own: the fold never waits for it."""
        store = ReadOnlyStore(self.ledger.data_dir)
        try:
            return audit_store(store, since, factor)
        finally:
            store.close()
