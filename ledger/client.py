"""Calling a ledger's request/reply API, for the CLI and for users' scripts."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import nats
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from fleet_ledger.fleet.subjects import fleet_names
from fleet_ledger.ledger.nats_config import READER
from fleet_ledger.ledger.nats_config import inbox_prefix as user_inbox

DEFAULT_URL = "nats://127.0.0.1:4222"


class LedgerUnreachable(Exception):
    """No NATS server at the URL, or no ledger answering on it."""


class ApiError(Exception):
    """The ledger answered with an error (code and one-line description)."""

    def __init__(self, code: str, description: str) -> None:
        super().__init__(description)
        self.code = code


def default_url() -> str:
    return os.environ.get("FLEET_NATS", DEFAULT_URL)


async def call(url: str, endpoint: str, body: dict[str, Any] | None = None, *,
               nkey: Path | None = None, timeout: float = 10.0,
               inbox_prefix: str = user_inbox(READER), fleet: str = "fleet",
               min_seq: int | None = None) -> bytes:
    """One API request; its raw JSON reply, or :class:`ApiError` / :class:`LedgerUnreachable`.
    With ``nkey``, replies come to ``inbox_prefix`` (the user's own: the reader's, or a
    host's, ``ledger.nats_config.inbox_prefix``). ``min_seq``: answered only once the ledger
    has folded the stream up to that sequence (else ApiError 503, "behind: ...")."""
    if min_seq is not None:
        body = {**(body or {}), "min_seq": min_seq}
    servers = [u.strip() for u in url.split(",") if u.strip()]
    # max_reconnect_attempts=0 would retry the first connect forever (nats-py 2.16 drops a
    # server only once its attempts pass a positive limit): one retry, then give up.
    opts: dict[str, Any] = dict(servers=servers, connect_timeout=2.0, reconnect_time_wait=0.2,
                                max_reconnect_attempts=1, allow_reconnect=False)
    if nkey is not None:
        opts["nkeys_seed"] = str(nkey)
        opts["inbox_prefix"] = inbox_prefix

    async def no_log(_e: Exception) -> None:
        return None

    try:
        nc = await asyncio.wait_for(nats.connect(**opts, error_cb=no_log),
                                    2 * 2.0 * len(servers) + 1.0)
    except TimeoutError:
        raise LedgerUnreachable(f"cannot reach NATS at {url}: no answer") from None
    except Exception as exc:
        raise LedgerUnreachable(f"cannot reach NATS at {url}: {_reason(exc)}") from None
    try:
        msg = await nc.request(fleet_names(fleet).api_subject(endpoint),
                               json.dumps(body or {}).encode(),
                               timeout=timeout)
    except NoRespondersError:
        raise LedgerUnreachable(f"no ledger is serving its API on {url}") from None
    except (TimeoutError, NatsTimeout):
        raise LedgerUnreachable(f"the ledger on {url} did not answer within {timeout:g}s"
                                ) from None
    finally:
        await nc.close()
    headers = msg.headers or {}
    if "Nats-Service-Error-Code" in headers:
        raise ApiError(headers["Nats-Service-Error-Code"], headers.get("Nats-Service-Error", ""))
    return msg.data


def call_sync(url: str, endpoint: str, body: dict[str, Any] | None = None, **kw: Any) -> Any:
    """:func:`call` from synchronous code, decoding the JSON reply."""
    return json.loads(asyncio.run(call(url, endpoint, body, **kw)))


def _reason(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    if "nats: no servers available" in text or isinstance(exc, nats.errors.NoServersError):
        return "connection refused"
    return text.splitlines()[0]
