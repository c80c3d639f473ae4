"""The runtime's key bucket (``RUNTIME_KEYS``) as the shells read it: a value's key lives
there under its blob address's token (``fleet.subjects.run_token``) as the JSON
``[base64 key, base64 salt]``; a shredded key is purged. The host's runtime
(``agents.runtime.fleet_store``) and the ledger's explorer (``ledger.runtime_journals``)
both read it through :func:`held_keys`, so the layout is read in one place."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from typing import Any

from nats.js.errors import NotFoundError

from fleet_ledger.fleet.subjects import run_token

__all__ = ["IN_FLIGHT", "held_keys"]


async def held_keys(kv: Any, addresses: Iterable[str]) -> dict[str, list[str]]:
    """The keys the bucket ``kv`` still holds for ``addresses`` (a shredded one is
    absent), as ``{address: [base64 key, base64 salt]}``; read ``IN_FLIGHT`` at a time
    (one round trip for a batch, not one per key)."""
    wanted = list(addresses)
    got: list[Any] = []
    for i in range(0, len(wanted), IN_FLIGHT):
        got += await asyncio.gather(*(_get(kv, a) for a in wanted[i:i + IN_FLIGHT]))
    return {address: json.loads(value) for address, value in zip(wanted, got, strict=True)
            if value}


async def _get(kv: Any, address: str) -> bytes | None:
    try:
        entry = await kv.get(run_token(address))
    except NotFoundError:
        return None
    value: bytes | None = entry.value  # kv is Any: the bucket of nats-py
    return value


IN_FLIGHT = 64
