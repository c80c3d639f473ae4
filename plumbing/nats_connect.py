"""Connecting to NATS: a first-connection window, then reconnecting for as long as it runs.

Every process of the fleet (the ledger, a host, a simulator, a benchmark) connects through
:func:`connect`, so all of them wait the same ``FLEET_NATS_WAIT`` seconds for a server that
is not up yet, and fail the same way (:class:`NatsUnreachable`, one line) when none comes.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client

log = logging.getLogger(__name__)

WAIT_ENV = "FLEET_NATS_WAIT"
DEFAULT_WAIT_S = 15.0


class NatsUnreachable(Exception):
    """No NATS server answered at the URL(s) within the first-connection window."""


def first_connect_window() -> float:
    """Seconds to wait for the first NATS connection (``FLEET_NATS_WAIT``, default 15)."""
    try:
        return max(0.1, float(os.environ.get(WAIT_ENV, DEFAULT_WAIT_S)))
    except ValueError:
        return DEFAULT_WAIT_S


def _one_line(err: Exception) -> str:
    text = str(err)
    return text.splitlines()[0] if text else type(err).__name__


async def connect(servers: list[str], nkey: Path | None = None, name: str = "fleet",
                  inbox_prefix: str | None = None, wait_s: float | None = None,
                  **kwargs: Any) -> Client:
    """A NATS connection that keeps reconnecting once up (servers restart, leaders move).

    The first connection is retried for ``wait_s`` seconds (default
    :func:`first_connect_window`), then :class:`NatsUnreachable`: nats-py would retry it
    forever. Connection errors are logged as one line each, without a traceback (while
    waiting for the first connection, only the first error and at INFO).
    """
    window = first_connect_window() if wait_s is None else wait_s
    errors: list[str] = []
    up = False

    async def on_error(err: Exception) -> None:
        if up:
            log.warning("nats: %s", _one_line(err))
            return
        if not errors:
            log.info("nats: cannot connect yet (%s); retrying for up to %gs",
                     _one_line(err), window)
        errors[:] = [_one_line(err)]

    opts: dict[str, Any] = dict(servers=servers, name=name, max_reconnect_attempts=-1,
                                reconnect_time_wait=0.5, connect_timeout=3.0,
                                error_cb=on_error)
    if nkey is not None:
        opts["nkeys_seed"] = str(nkey)
    if inbox_prefix is not None:
        opts["inbox_prefix"] = inbox_prefix
    opts.update(kwargs)
    try:
        nc = await asyncio.wait_for(nats.connect(**opts), window)
    except TimeoutError:
        last = f": {errors[-1]}" if errors else ""
        raise NatsUnreachable(f"cannot reach NATS at {','.join(servers)} "
                              f"(tried for {window:g}s){last}") from None
    up = True
    return nc


async def bucket_keys(js: Any, bucket: str) -> list[str]:
    """The keys a JetStream key-value bucket holds an entry under (deleted keys included:
    their entries read as deleted), sorted; none for a bucket that does not exist.

    Read from the bucket stream's subjects rather than nats-py's ``kv.keys()``: its watcher
    can end before the first entry arrives on a loaded machine and then reports "no keys"
    for a bucket that holds some."""
    from nats.js.errors import NotFoundError

    prefix = f"$KV.{bucket}."
    try:
        info = await js.stream_info(f"KV_{bucket}", subjects_filter=prefix + ">")
    except NotFoundError:
        return []
    return sorted(s[len(prefix):] for s in (info.state.subjects or {}))
