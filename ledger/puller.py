"""A lean pull of a durable JetStream consumer, for the ledger's fold loop.

nats-py's ``fetch`` waits for every message of a batch with its own timer
(``asyncio.wait_for`` per message), which on a small machine costs more than folding the
message. This puller sends one pull request (``$JS.API.CONSUMER.MSG.NEXT``) for up to
``batch`` messages with an ``expires``, collects deliveries from a callback into a list,
and returns when the batch is full, when the server ends the request with a status
(404 no messages, 408 expired, 409 ...), or when the client-side deadline passes.
Messages that arrive for a request after it was given up are kept, in delivery order, for
the next call; none is dropped.
"""

from __future__ import annotations

import asyncio
import json
import time

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

STATUS = "Status"


class Puller:
    def __init__(self, nc: Client, stream: str, durable: str) -> None:
        self.nc = nc
        self.subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}"
        self.inbox = nc.new_inbox()
        self._buf: list[Msg] = []
        self._want = 0
        self._ended = False
        self._wake = asyncio.Event()
        self._sub: Subscription | None = None

    async def start(self) -> Puller:
        self._sub = await self.nc.subscribe(self.inbox, cb=self._on_msg)
        return self

    async def _on_msg(self, msg: Msg) -> None:
        headers = msg.headers
        if headers is not None and STATUS in headers:
            if headers[STATUS] != "100":  # 100 is an idle heartbeat; anything else ends it
                self._ended = True
                self._wake.set()
            return
        self._buf.append(msg)
        if len(self._buf) >= self._want:
            self._wake.set()

    async def fetch(self, batch: int, timeout: float) -> list[Msg]:
        """Up to ``batch`` messages: what the consumer has now, or else the first to arrive
        within about ``timeout`` seconds (an empty list when none does)."""
        if len(self._buf) < batch:
            # What is there now: the server answers a no_wait request at once, ending it
            # with a 404 status when it has fewer than asked.
            await self._request({"batch": batch - len(self._buf), "no_wait": True}, batch,
                                timeout)
        if not self._buf:
            # Nothing now: one lingering request, returned as soon as a message arrives
            # (the rest of its batch lands in the buffer for the next call).
            await self._request({"batch": batch, "expires": int(timeout * 1e9)}, 1, timeout)
        out, self._buf = self._buf[:batch], self._buf[batch:]
        return out

    async def _request(self, body: dict[str, object], want: int, timeout: float) -> None:
        self._want = want
        self._ended = False
        self._wake.clear()
        await self.nc.publish(self.subject, json.dumps(body).encode(), reply=self.inbox)
        deadline = time.monotonic() + timeout + 0.5
        while len(self._buf) < want and not self._ended:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), left)
            except TimeoutError:
                return

    async def stop(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()
