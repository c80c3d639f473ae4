"""``fleet runtime serve --http HOST:PORT``: start runs and send signals over HTTP, webhook
style, through the code paths of ``fleet runtime start`` and ``fleet signal``.

    POST /runs                          {"workflow": "mod:fn", "name": N, "input": ...,
                                         "grant": G?}  -> the runs bucket's document (201)
    POST /runs/{run}/signals/{name}     {"id": ID, "data": ...}  -> {"run", "name", "id",
                                         "duplicate"}; a used id with other data: 409
    GET  /runs/{run}                    -> status, wait, verdict, head (and the rest of
                                         the runs bucket's document)

Every request carries ``Authorization: Bearer TOKEN`` (the token from ``--token-file`` or
``$FLEET_RUNTIME_TOKEN``, compared in constant time); any other gets 401 before anything
is read or changed. ``{run}`` is a run's address or its name. Errors are JSON ``{"error":
RULE, "detail": TEXT}``: 400 bad input, 401 no or wrong token, 404 no such run, 409 a run
that exists or a signal conflict (``SignalConflict``), 422 a named refusal. Starts run one
at a time (each runs its first interval here, as ``fleet runtime start`` does); a worker
continues parked runs. With ``--tls-cert`` and ``--tls-key`` it speaks HTTPS only (the
token never crosses the wire in the clear); without them plain HTTP: keep it on loopback.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import os
import signal as signals
import ssl
from pathlib import Path
from typing import Any

import click
from aiohttp import web

from fleet_ledger.cli._app import FLEET, UserError
from fleet_ledger.cli._common import nats_options
from fleet_ledger.cli.runtime_cmds import (
    _environment,
    _host_opts,
    _import_path,
    _store,
    resolve_run,
    runtime,
    send_signal,
    start_run,
)

TOKEN_ENV = "FLEET_RUNTIME_TOKEN"


def _token(path: Path | None) -> bytes:
    """The bearer token: ``--token-file``'s first line, else ``$FLEET_RUNTIME_TOKEN``."""
    if path is not None:
        try:
            text = path.read_text().strip()
        except OSError as exc:
            raise UserError(f"--token-file {path}: {exc.strerror or exc}") from None
    else:
        text = os.environ.get(TOKEN_ENV, "").strip()
    if len(text) < 16:
        raise UserError(f"a bearer token of at least 16 characters is required (--token-file"
                        f" or ${TOKEN_ENV})")
    return text.encode()


def _error(status: int, rule: str, detail: str) -> web.Response:
    return web.json_response({"error": rule, "detail": detail}, status=status)


def authorized(request: web.Request, token: bytes) -> bool:
    """Constant-time check of ``Authorization: Bearer TOKEN``."""
    got = request.headers.get("Authorization", "")
    scheme, _, value = got.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), token)


def make_app(token: bytes, rt: Any, host: Any, store: Any, nc: Any) -> web.Application:
    """The HTTP app over an open runtime, host and JetStream store."""
    from fleet_ledger.agents.runtime.runtime import load_workflow
    from fleet_ledger.cli.runtime_cmds import NoSuchRun, RunExists
    from fleet_ledger.fleet.errors import FleetError
    from fleet_ledger.fleet.runtime.runtime_errors import SignalConflict
    from fleet_ledger.fleet.subjects import run_token

    starts = asyncio.Lock()

    @web.middleware
    async def auth(request: web.Request, handler: Any) -> web.StreamResponse:
        if not authorized(request, token):
            resp = _error(401, "Unauthorized", "a valid bearer token is required")
            resp.headers["WWW-Authenticate"] = 'Bearer realm="fleet-runtime"'
            return resp
        try:
            return await handler(request)
        except RunExists as exc:
            return _error(409, "RunExists", exc.message)
        except NoSuchRun as exc:
            return _error(404, "NoSuchRun", exc.message)
        except SignalConflict as exc:
            return _error(409, exc.rule, str(exc))
        except UserError as exc:
            return _error(400, "BadRequest", exc.message)
        except FleetError as exc:
            return _error(422, exc.rule, str(exc))

    async def body(request: web.Request) -> dict[str, Any]:
        try:
            doc = json.loads(await request.text() or "{}")
        except json.JSONDecodeError as exc:
            raise UserError(f"the body is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise UserError("the body is a JSON object")
        return doc

    async def start(request: web.Request) -> web.Response:
        doc = await body(request)
        workflow, name = doc.get("workflow"), doc.get("name")
        if not isinstance(workflow, str) or not isinstance(name, str) or not name:
            raise UserError("a start names its workflow (module:function) and name")
        grant = doc.get("grant")
        if grant is not None and not isinstance(grant, str):
            raise UserError("grant is a grant's address")
        try:
            fn = load_workflow(workflow)
        except FleetError as exc:
            raise UserError(f"workflow: {exc}") from None
        async with starts:
            out = await start_run(rt, host, store, nc, fn, workflow, name, doc.get("input"),
                                  grant)
        return web.json_response(out, status=201)

    async def signal(request: web.Request) -> web.Response:
        doc = await body(request)
        sid = doc.get("id")
        if not isinstance(sid, str) or not sid:
            raise UserError("a signal carries its id (a resend with it is delivered once)")
        out = await send_signal(store, request.match_info["run"], request.match_info["name"],
                                doc.get("data"), sid)
        return web.json_response(out)

    async def status(request: web.Request) -> web.Response:
        run = await resolve_run(store, request.match_info["run"])
        got = await store.get(run_token(run))
        if got is None:
            raise NoSuchRun(f"no run {run} in the runs bucket")
        return web.json_response(got[0])

    app = web.Application(middlewares=[auth], client_max_size=1 << 20)
    app.router.add_post("/runs", start)
    app.router.add_post("/runs/{run}/signals/{name}", signal)
    app.router.add_get("/runs/{run}", status)
    return app


def _tls(cert: Path | None, key: Path | None) -> ssl.SSLContext | None:
    """A server TLS context from ``--tls-cert`` and ``--tls-key`` (both or neither; TLS 1.2
    at least), None for plain HTTP."""
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        raise UserError("--tls-cert and --tls-key go together")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except OSError as exc:  # ssl.SSLError is an OSError: unreadable, unparsable, mismatched
        raise UserError(f"--tls-cert {cert} / --tls-key {key}: {exc.strerror or exc}"
                        ) from None
    return context


def _listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise UserError(f"--http takes HOST:PORT, not {value!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


@runtime.command("serve")
@click.option("--http", "listen", required=True, help="HOST:PORT to listen on (port 0: any"
              " free port; the address is printed as one line).")
@click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path),
              help=f"A file holding the bearer token (default: ${TOKEN_ENV}).")
@click.option("--tls-cert", type=click.Path(dir_okay=False, path_type=Path),
              help="Serve HTTPS with this PEM certificate chain (with --tls-key).")
@click.option("--tls-key", type=click.Path(dir_okay=False, path_type=Path),
              help="The PEM private key of --tls-cert.")
@_host_opts
@nats_options
def runtime_serve(listen: str, token_file: Path | None, tls_cert: Path | None,
                  tls_key: Path | None, environment: Path | None, host_dir: Path,
                  name: str | None, paths: tuple[Path, ...], url: str,
                  nkey: Path | None) -> None:
    """Serve POST /runs, POST /runs/{run}/signals/{name} and GET /runs/{run} until
    SIGTERM or SIGINT (docs/runtime.md)."""
    from fleet_ledger.agents.host import Host
    from fleet_ledger.agents.runtime import Runtime

    token = _token(token_file)
    tls = _tls(tls_cert, tls_key)
    where, port = _listen(listen)
    _import_path(paths)
    env = _environment(environment)
    host = Host(name or host_dir.resolve().name, host_dir, fleet=FLEET["name"])
    rt = Runtime(host_dir, host=host, environment=env)

    async def go() -> None:
        nc, store = await _store(url, nkey, f"fleet-runtime-serve-{host.name}")
        runner = web.AppRunner(make_app(token, rt, host, store, nc))
        await runner.setup()
        try:
            site = web.TCPSite(runner, where, port, ssl_context=tls)
            await site.start()
            bound = runner.addresses[0]  # the one site's socket name
            click.echo(f"serving {'https' if tls else 'http'}://{bound[0]}:{bound[1]}")
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signals.SIGTERM, signals.SIGINT):
                loop.add_signal_handler(sig, stop.set)
            await stop.wait()
        finally:
            await runner.cleanup()
            await nc.close()

    try:
        asyncio.run(go())
    finally:
        rt.close()
        host.close()


__all__ = ["authorized", "make_app"]
