"""The ledger's HTTP servers (aiohttp, in the ledger's own event loop).

The log port, read-only, following c2sp.org/tlog-tiles (:mod:`ledger.log_reader`)::

    GET /checkpoint                  text/plain; the newest signed checkpoint and the witness
                                     cosignatures gathered for it; Cache-Control: no-store
    GET /tile/<L>/<N>[.p/<W>]        application/octet-stream; 32-byte hashes; immutable
    GET /tile/entries/<N>[.p/<W>]    uint16-length-prefixed fleet leaves; gzip when asked
    GET /proof/<run>[/<index>]       text/plain; c2sp.org/tlog-proof of a segment (default:
                                     the run's latest) against the newest checkpoint
    GET /ui/...                      the run explorer (:mod:`ledger.explorer`)

A malformed tile path is 400, anything not there (beyond the latest signed size, a partial
tile no checkpoint had, an unknown run) 404. Every answer comes from the reader's own
read-only SQLite connection: the server never takes the fold's store lock, and never sees
a batch before its commit.

The operations port (separate, so the log can be public and the operations private)::

    GET /metrics    Prometheus text (:mod:`ledger.metrics`)
    GET /healthz    200 while the process answers
    GET /readyz     200 when connected to NATS, the fold is healthy, the store is readable
                    and no committed leaf has waited longer than ``max_unsigned_s`` for a
                    signed checkpoint; else 503 with the reasons (JSON either way)

Why aiohttp: it is maintained, asyncio-native (its server runs as tasks in the ledger's
loop beside the NATS client, no thread or second process), serves HEAD and keep-alive, and
is the library nats-py users already meet; the standard library's ``http.server`` is
threaded and blocking.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from fleet_ledger.fleet.log.log_errors import MalformedTilePath
from fleet_ledger.fleet.log.tiles import Tile, parse_tile_path
from fleet_ledger.ledger.log_reader import LogReader, decimal
from fleet_ledger.ledger.metrics import CONTENT_TYPE, FoldMetrics, render

log = logging.getLogger(__name__)

IMMUTABLE = "public, max-age=31536000, immutable"
NO_STORE = "no-store"
TEXT = "text/plain"
OCTETS = "application/octet-stream"
_GZIPPED = 1024  # entry bundles kept compressed (~6 KiB each)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def request_kind(path: str) -> str:
    """The kind a request is counted under in ``fleet_http_requests``."""
    if path.startswith("/tile/entries/"):
        return "entries"
    head = path.strip("/").split("/", 1)[0]
    known = {"checkpoint", "tile", "proof", "ui", "metrics", "healthz", "readyz"}
    return head if head in known else "other"


def counting(metrics: FoldMetrics | None) -> Any:
    """Middleware counting requests by kind and status code."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        code = 500
        try:
            response = await handler(request)
            code = response.status
            return response
        except web.HTTPException as exc:
            code = exc.status
            raise
        finally:
            if metrics is not None:
                metrics.http_requests.labels(request_kind(request.path), str(code)).inc()

    return middleware


class Throttle:
    """While ``busy()`` (the fold has a backlog), admit at most ``rate`` log requests a
    second, the rest waiting their turn: the server shares the ledger's loop and its
    interpreter, so without this 64 followers would take a third of the fold's rate. When
    the fold keeps up, requests are not held back."""

    def __init__(self, rate: float, busy: Callable[[], bool]) -> None:
        self.rate = rate
        self.busy = busy
        self._tokens = rate / 10
        self._last = time.monotonic()

    async def admit(self) -> None:
        if not self.busy():
            return
        now = time.monotonic()
        self._tokens = min(self.rate / 10, self._tokens + (now - self._last) * self.rate) - 1
        self._last = now
        if self._tokens < 0:  # reserved: wait for the turn this request took
            await asyncio.sleep(-self._tokens / self.rate)


def throttling(throttle: Throttle) -> Any:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        await throttle.admit()
        return await handler(request)

    return middleware


class LogRoutes:
    """The log port's handlers over a :class:`LogReader`."""

    def __init__(self, reader: LogReader) -> None:
        self.reader = reader
        self._gzipped: OrderedDict[Tile, bytes] = OrderedDict()

    def add_to(self, app: web.Application) -> None:
        app.router.add_get("/checkpoint", self.checkpoint)
        app.router.add_get("/tile/{path:.+}", self.tile)
        app.router.add_get("/proof/{run}", self.proof)
        app.router.add_get("/proof/{run}/{index}", self.proof)

    async def checkpoint(self, request: web.Request) -> web.Response:
        latest = self.reader.latest()
        if latest is None:
            raise web.HTTPNotFound(text="no checkpoint signed yet\n")
        return web.Response(text=latest[1], content_type=TEXT, charset="utf-8",
                            headers={"Cache-Control": NO_STORE})

    async def tile(self, request: web.Request) -> web.Response:
        try:
            tile = parse_tile_path("tile/" + request.match_info["path"])
        except MalformedTilePath as exc:
            raise web.HTTPBadRequest(text=f"{exc}\n") from None
        data = self.reader.tile(tile)
        if data is None:
            raise web.HTTPNotFound(text=f"{tile.path()} is not in the log (yet)\n")
        headers = {"Cache-Control": IMMUTABLE}
        if tile.entries:
            headers["Vary"] = "Accept-Encoding"
            if "gzip" in request.headers.get("Accept-Encoding", ""):
                headers["Content-Encoding"] = "gzip"
                data = self._gzip(tile, data)
        return web.Response(body=data, content_type=OCTETS, headers=headers)

    def _gzip(self, tile: Tile, data: bytes) -> bytes:
        held = self._gzipped.get(tile)
        if held is None:
            held = self._gzipped[tile] = gzip.compress(data, compresslevel=6, mtime=0)
            if len(self._gzipped) > _GZIPPED:
                self._gzipped.popitem(last=False)
        return held

    async def proof(self, request: web.Request) -> web.Response:
        index_text = request.match_info.get("index")
        if index_text is not None and not (decimal(index_text) and int(index_text) >= 1):
            raise web.HTTPBadRequest(text="a segment index is a decimal from 1\n")
        text = self.reader.tlog_proof(request.match_info["run"],
                                      None if index_text is None else int(index_text))
        if text is None:
            raise web.HTTPNotFound(text="no such run or segment in the latest checkpoint\n")
        return web.Response(text=text, content_type=TEXT, charset="utf-8",
                            headers={"Cache-Control": NO_STORE})


@dataclass
class Readiness:
    """What ``/readyz`` checks beyond the store: callables so the ledger is read live."""

    connected: Callable[[], bool] = lambda: True
    healthy: Callable[[], tuple[bool, str]] = lambda: (True, "ok")
    unsigned_age: Callable[[int], float] = lambda signed: 0.0
    signs: Callable[[], bool] = lambda: True
    max_unsigned_s: float = 30.0
    extra: dict[str, Any] = field(default_factory=dict)


class OpsRoutes:
    """The operations port: metrics, liveness, readiness."""

    def __init__(self, reader: LogReader, registry: Any, readiness: Readiness) -> None:
        self.reader = reader
        self.registry = registry
        self.readiness = readiness

    def add_to(self, app: web.Application) -> None:
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)

    async def metrics(self, request: web.Request) -> web.Response:
        body = render(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE,
                                                "Cache-Control": NO_STORE})

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True}, headers={"Cache-Control": NO_STORE})

    async def readyz(self, request: web.Request) -> web.Response:
        checks = ready_checks(self.reader, self.readiness)
        ok = all(c["ok"] for c in checks.values())
        return web.json_response({"ready": ok, "checks": checks}, status=200 if ok else 503,
                                 headers={"Cache-Control": NO_STORE})


def ready_checks(reader: LogReader, readiness: Readiness) -> dict[str, dict[str, Any]]:
    """Each readiness check with its verdict and detail."""
    checks: dict[str, dict[str, Any]] = {}
    connected = readiness.connected()
    checks["nats"] = {"ok": connected, "detail": "connected" if connected else "not connected"}
    healthy, detail = readiness.healthy()
    checks["fold"] = {"ok": healthy, "detail": detail}
    try:
        signed = reader.refresh_signed()
        checks["store"] = {"ok": True, "detail": f"signed size {signed}"}
    except Exception as exc:  # any failure to read is the answer, not a crash
        signed = 0
        checks["store"] = {"ok": False, "detail": f"{type(exc).__name__}: {exc}"}
    if not readiness.signs():
        checks["unsigned_leaf_age"] = {"ok": True, "detail": "standby (does not sign)"}
        return checks
    age = readiness.unsigned_age(signed)
    checks["unsigned_leaf_age"] = {
        "ok": age <= readiness.max_unsigned_s,
        "detail": f"{age:.1f}s (bound {readiness.max_unsigned_s:g}s)"}
    return checks


@dataclass
class HttpServers:
    """The running servers (:func:`start_servers`); :meth:`close` stops them."""

    runners: list[web.AppRunner]
    addresses: dict[str, tuple[str, int]]
    reader: LogReader

    async def close(self) -> None:
        for runner in self.runners:
            await runner.cleanup()
        self.reader.close()


async def _serve(app: web.Application, host: str, port: int) -> tuple[web.AppRunner,
                                                                       tuple[str, int]]:
    runner = web.AppRunner(app, access_log=logging.getLogger("ledger.http.access"),
                           handle_signals=False)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, reuse_address=True)
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    server = site._server  # aiohttp exposes the bound port only here
    sockets = getattr(server, "sockets", None) or []
    bound = sockets[0].getsockname()[:2] if sockets else (host, port)
    return runner, (str(bound[0]), int(bound[1]))


async def start_servers(reader: LogReader, log_address: tuple[str, int] | None,
                        ops_address: tuple[str, int] | None = None, *,
                        registry: Any = None,
                        fold: FoldMetrics | None = None,
                        readiness: Readiness | None = None,
                        throttle: Throttle | None = None,
                        extra_routes: Callable[[web.Application], None] | None = None,
                        ) -> HttpServers:
    """Start the log server (and the operations server when ``ops_address`` is given);
    port 0 picks a free one (see :attr:`HttpServers.addresses`). ``throttle``: the log
    port yields to a busy fold (the operations port never waits)."""
    servers = HttpServers([], {}, reader)
    try:
        if log_address is not None:
            middlewares = [counting(fold)]
            if throttle is not None:
                middlewares.append(throttling(throttle))
            app = web.Application(middlewares=middlewares)
            LogRoutes(reader).add_to(app)
            if extra_routes is not None:
                extra_routes(app)
            runner, bound = await _serve(app, *log_address)
            servers.runners.append(runner)
            servers.addresses["log"] = bound
        if ops_address is not None:
            app = web.Application(middlewares=[counting(fold)])
            OpsRoutes(reader, registry, readiness or Readiness()).add_to(app)
            runner, bound = await _serve(app, *ops_address)
            servers.runners.append(runner)
            servers.addresses["ops"] = bound
    except BaseException:
        await servers.close()
        raise
    return servers
