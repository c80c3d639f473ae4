"""A lean pull of a durable JetStream consumer, for the ledger's fold loop.

nats-py's ``fetch`` waits for every message of a batch with its own timer
(``asyncio.wait_for`` per message), and its subscriptions build a ``Msg`` per delivery,
parse every header block into a dict and hand each message through a queue to a callback
task. On a small machine that costs more than folding the message. The fold needs three
things of a delivery: its subject, its data, and its stream sequence (in the reply subject,
``$JS.ACK...``), plus the reply subject itself to ack or nak.

So this puller sends one pull request (``$JS.API.CONSUMER.MSG.NEXT``) for up to ``batch``
messages with an ``expires``, and takes the deliveries for its inbox straight from the
connection's protocol parser as :class:`Delivery` tuples, before nats-py builds anything.
It returns when the batch is full, when the server ends the request with a status (404 no
messages, 408 expired, 409 ...), or when the client-side deadline passes. Deliveries that
arrive for a request after it was given up are kept, in delivery order, for the next call;
none is dropped.

The hook wraps the client's ``_process_msg`` (the parser's one entry point for a message)
for this puller's subscription id only, and the parser's ``parse``; every other
subscription goes through nats-py unchanged, and :meth:`Puller.stop` unwraps both.

These are private parts of nats-py (``Client._process_msg``, ``Client._ps`` and its
``parse``, ``buf`` and ``state``, ``Subscription._id``, the parser's
``AWAITING_CONTROL_LINE`` and ``MAX_CONTROL_LINE_SIZE``), so the fold loop does not build
this puller itself: :func:`ledger.pull.open_puller` does, only on a nats-py minor version
it is tested against (:data:`ledger.pull.LEAN_NATS_PY`, the pin in ``pyproject.toml``) and
with those parts present; otherwise it runs :class:`ledger.pull.FetchPuller`, on nats-py's
public ``fetch``, and says why (logged once, counted in ``fleet status``). The ledger
imports this module only there: a nats-py without these names costs it the lean puller,
not its start.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import Awaitable, Callable

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.protocol.parser import AWAITING_CONTROL_LINE, MAX_CONTROL_LINE_SIZE, Parser

# Defined beside the fetch puller (a module that needs no private part of nats-py), and
# still importable from here.
from fleet_ledger.ledger.pull import BadDelivery, Delivery, ack_fields

__all__ = ["Puller"]

# A status delivery's header block starts with the version and a space (``NATS/1.0 404``);
# a stored message's headers start with the version and CRLF.
_STATUS_PREFIX = b"NATS/1.0 "
_HEARTBEAT = b"NATS/1.0 100"

ProcessMsg = Callable[[int, bytes, bytes, bytes, bytes | None], Awaitable[None]]


class Puller:
    kind = "lean"

    def __init__(self, nc: Client, stream: str, durable: str) -> None:
        self.nc = nc
        self.subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}"
        self.inbox = nc.new_inbox()
        self._buf: list[Delivery] = []
        self._want = 0
        self._ended = False
        self._wake = asyncio.Event()
        self._sub: Subscription | None = None
        self._sid = -1
        self._inner: ProcessMsg | None = None
        self._error: BadDelivery | None = None
        self._inflight = False
        self._parser: Parser | None = None

    async def start(self) -> Puller:
        self._sub = await self.nc.subscribe(self.inbox, cb=self._on_msg)
        self._sid = self._sub._id
        # nats-py's private hooks, patched (ledger.pull.lean_internals_missing checks them). Its
        # annotations say headers are bytes; its parser passes None for a message without.
        self._inner = self.nc._process_msg  # type: ignore[assignment]  # headers may be None
        self.nc._process_msg = self._process  # type: ignore[method-assign]  # a private hook
        parser = self.nc._ps
        if isinstance(getattr(parser, "buf", None), bytearray) and hasattr(parser, "state"):
            self._parser = parser
            fast = functools.partial(_parse_fast, parser, self)
            parser.parse = fast  # type: ignore[method-assign]  # a private hook
        return self

    async def _process(self, sid: int, subject: bytes, reply: bytes, data: bytes,
                       headers: bytes | None) -> None:
        if sid != self._sid:
            assert self._inner is not None
            await self._inner(sid, subject, reply, data, headers)
            return
        self._take(subject, reply, data, headers)

    def _take(self, subject: bytes | bytearray, reply: bytes | bytearray, data: bytes,
              headers: bytes | None) -> None:
        if headers is not None and not data and headers.startswith(_STATUS_PREFIX):
            if not headers.startswith(_HEARTBEAT):  # anything but a heartbeat ends it
                self._ended = True
                self._wake.set()
            return
        try:
            seq, ts_ns = ack_fields(reply)
        except (BadDelivery, ValueError) as exc:
            # Skipping it would let a later AckAll ack it unfolded: fail the fetch instead.
            self._error = BadDelivery(str(exc))
            self._ended = True
            self._wake.set()
            return
        self._buf.append(Delivery(seq, subject.decode(), data, reply.decode(),
                                  ts_ns // 1_000_000))
        if len(self._buf) >= self._want:
            self._wake.set()

    async def _on_msg(self, msg: Msg) -> None:
        """Deliveries reach :meth:`_process` instead; one that got here (the hook removed
        by someone else) is taken the slow way, so none is lost."""
        await self._process(self._sid, msg.subject.encode(), msg.reply.encode(), msg.data,
                            None if msg.header is None else _rebuild(msg))

    async def fetch(self, batch: int, timeout: float, linger: bool = True) -> list[Delivery]:
        """Up to ``batch`` messages: what the consumer has now, or else (``linger``) the
        first to arrive within about ``timeout`` seconds (an empty list when none does).

        After returning a full batch it asks for the next one at once, without waiting:
        the server reads and sends it while the caller folds this one.
        """
        if self._inflight:
            await self._await(timeout)
        if len(self._buf) < batch:
            # What is there now: the server answers a no_wait request at once, ending it
            # with a 404 status when it has fewer than asked.
            await self._send({"batch": batch - len(self._buf), "no_wait": True}, batch)
            await self._await(timeout)
        if not self._buf and linger:
            # Nothing now: one lingering request, returned as soon as a message arrives
            # (the rest of its batch lands in the buffer for the next call).
            await self._send({"batch": batch, "expires": int(timeout * 1e9)}, 1)
            await self._await(timeout)
        if self._error is not None:
            raise self._error
        out, self._buf = self._buf[:batch], self._buf[batch:]
        if len(out) == batch and len(self._buf) < batch:
            await self._send({"batch": batch - len(self._buf), "no_wait": True}, batch)
            # nats-py writes to the socket from a task of its own: let it run now, or the
            # request would wait in the client until the caller next yields.
            await asyncio.sleep(0)
        return out

    async def _send(self, body: dict[str, object], want: int) -> None:
        """Send one pull request; it is done when the buffer holds ``want`` or it ends."""
        self._want = want
        self._ended = False
        self._inflight = True
        self._wake.clear()
        await self.nc.publish(self.subject, json.dumps(body).encode(), reply=self.inbox)

    async def _await(self, timeout: float) -> None:
        """Wait for the request in flight, at most about ``timeout`` seconds (then it is
        given up; what it still delivers lands in the buffer for a later call)."""
        deadline = time.monotonic() + timeout + 0.5
        while len(self._buf) < self._want and not self._ended:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), left)
            except TimeoutError:
                break
        self._inflight = False

    async def stop(self) -> None:
        parser, self._parser = self._parser, None
        fast = None if parser is None else parser.__dict__.get("parse")
        if (parser is not None and isinstance(fast, functools.partial)
                and fast.args[1:] == (self,)):
            del parser.parse
        if self.nc._process_msg == self._process:
            assert self._inner is not None
            # nats-py's own hook back (typed as taking bytes headers: see start).
            self.nc._process_msg = self._inner  # type: ignore[method-assign, assignment]  # restore
        if self._sub is not None:
            await self._sub.unsubscribe()


async def _parse_fast(parser: Parser, puller: Puller, data: bytes = b"") -> None:
    """The connection parser's ``parse`` while a puller runs.

    Whole ``HMSG`` frames are cut out here and the puller's own handed to it directly (no
    regular expression, no coroutine per message); a frame not yet whole waits for more
    data. Every other protocol line goes to nats-py's parser alone, which shares this
    parser's buffer and state (and finishes a plain ``MSG`` with everything after it).
    Frames are read at an offset and the buffer is cut once per call, not once per frame,
    and a delivery's header block is copied only when it has no data (a status).
    """
    buf = parser.buf
    buf.extend(data)
    pos = 0
    try:
        while pos < len(buf):
            if parser.state != AWAITING_CONTROL_LINE:
                del buf[:pos]
                pos = 0
                await Parser.parse(parser)
                return
            end = buf.find(b"\r\n", pos, pos + MAX_CONTROL_LINE_SIZE)
            if end < 0:
                return
            if not buf.startswith(b"HMSG ", pos):
                rest = bytes(buf[end + 2:])
                del buf[end + 2:]
                del buf[:pos]
                pos = 0
                await Parser.parse(parser)
                buf.extend(rest)
                continue
            args = buf[pos + 5:end].split()
            if len(args) == 5:
                subject, sid, reply, head, total = args
            elif len(args) == 4:
                subject, sid, head, total = args
                reply = bytearray()
            else:
                del buf[:pos]
                pos = 0
                await Parser.parse(parser)  # it says what is wrong with the line
                return
            start = end + 2
            header_len = int(head)
            stop = start + int(total)
            if len(buf) < stop + 2:
                return
            payload = bytes(buf[start + header_len:stop])
            headers = bytes(buf[start:start + header_len]) if not payload else None
            pos = stop + 2
            if int(sid) == puller._sid:
                puller._take(subject, reply, payload, headers)
            else:
                if headers is None and header_len:
                    headers = bytes(buf[start:start + header_len])
                del buf[:pos]
                pos = 0
                await parser.nc._process_msg(int(sid), bytes(subject), bytes(reply), payload,
                                             headers)
    finally:
        if pos:
            del buf[:pos]


def _rebuild(msg: Msg) -> bytes:
    """A header block for a message nats-py already parsed (only its status matters)."""
    status = (msg.header or {}).get("Status")
    return _STATUS_PREFIX + status.encode() if status else b"NATS/1.0\r\n"
