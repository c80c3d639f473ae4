"""Publish each checkpoint to another NATS system (an account or cluster auditors control).

What leaves: the signed checkpoint note, verbatim, on ``subject``; nothing else (the
``Nats-Msg-Id`` header is ``<origin>/<size>``, both already in the note). With ``stream``
set the publish goes through JetStream and the receipt holds the auditors' stream
sequence; without it, a plain publish flushed to the server. The receipt is a pointer to
the auditors' copy, not a proof: what it buys is that the copy is out of the ledger
operator's reach.
"""

from __future__ import annotations

import json
from typing import Any

import nats
from nats.aio.client import Client

from fleet_ledger.anchors.base import Anchor, AnchorError, ProofSource, Receipt
from fleet_ledger.fleet.log.checkpoint import parse_checkpoint
from fleet_ledger.fleet.log.note import parse_note


class NatsAnchor(Anchor):
    kind = "nats"

    def __init__(self, name: str, url: str, subject: str, *, stream: str | None = None,
                 nkey: str | None = None, creds: str | None = None,
                 timeout: float = 5.0) -> None:
        super().__init__(name)
        self.servers = [u.strip() for u in url.split(",") if u.strip()]
        self.subject = subject
        self.stream = stream
        self.nkey = nkey
        self.creds = creds
        self.timeout = timeout
        self.nc: Client | None = None

    async def _connect(self) -> Client:
        if self.nc is not None and self.nc.is_connected:
            return self.nc
        opts: dict[str, Any] = dict(servers=self.servers, name=f"fleet-anchor-{self.name}",
                                    connect_timeout=self.timeout, max_reconnect_attempts=3,
                                    reconnect_time_wait=0.5)
        if self.nkey:
            opts["nkeys_seed"] = self.nkey
        if self.creds:
            opts["user_credentials"] = self.creds
        if self.nc is not None:
            await self.close()
        try:
            self.nc = await nats.connect(**opts)
        except Exception as exc:
            raise AnchorError(f"cannot reach the auditors' NATS at {self.servers}: {exc}") \
                from exc
        return self.nc

    async def anchor(self, note: str, size: int, proofs: ProofSource) -> Receipt:
        nc = await self._connect()
        origin = parse_checkpoint(parse_note(note)[0]).origin
        receipt: dict[str, Any] = {"url": ",".join(self.servers), "subject": self.subject}
        try:
            if self.stream:
                ack = await nc.jetstream(timeout=self.timeout).publish(
                    self.subject, note.encode(), stream=self.stream,
                    headers={"Nats-Msg-Id": f"{origin}/{size}"})
                receipt.update(stream=ack.stream, seq=ack.seq)
            else:
                await nc.publish(self.subject, note.encode())
                # nats-py annotates flush's timeout as an int; it passes it to asyncio.wait_for.
                await nc.flush(timeout=self.timeout)  # type: ignore[arg-type]  # nats-py says int
        except Exception as exc:
            raise AnchorError(f"publishing to {self.subject} failed: {exc}") from exc
        return Receipt(self.name, self.kind, size, json.dumps(receipt, sort_keys=True))

    async def close(self) -> None:
        if self.nc is not None:
            nc, self.nc = self.nc, None
            try:
                await nc.drain()
            except Exception:  # already closed or unreachable: nothing to release
                await nc.close()
