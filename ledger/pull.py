"""How the fold loop pulls its durable consumer: one interface, two pullers, and the choice.

The fold needs of a delivery its subject, its data, its stream sequence and its reply
subject (to ack or nak it): a :class:`Delivery`. A puller (:class:`Pull`) is started,
asked for batches with ``fetch(batch, timeout, linger)`` and stopped; ``kind`` says which
one runs.

- ``lean`` (:class:`ledger.puller.Puller`): sends its own pull requests and takes its
  deliveries from nats-py's protocol parser before nats-py builds a message. It patches
  private parts of nats-py (``Client._process_msg``, the parser's ``parse``, ``buf`` and
  ``state``, ``Subscription._id``, the parser's constants), so it runs only on the nats-py
  minor versions it was written and tested against (:data:`LEAN_NATS_PY`, the same as the
  pin in ``pyproject.toml``) and only when those parts are there.
- ``fetch`` (:class:`FetchPuller`): nats-py's public pull API (``pull_subscribe_bind``,
  ``PullSubscription.fetch``), each ``Msg`` turned into the same :class:`Delivery`. Slower
  (nats-py builds and queues a ``Msg`` per delivery), the same deliveries.

:func:`open_puller` chooses: ``auto`` (the default) runs the lean puller when
:func:`lean_check` finds nothing wrong, else the fetch puller, with a warning logged once
per process naming the nats-py version and the reason. ``LedgerConfig.puller`` or, when
that is ``auto``, the ``FLEET_PULLER`` environment variable (``auto``, ``lean`` or
``fetch``) forces one. Acks and naks (:func:`ack_all`, :func:`nak`) are publishes to the
delivery's reply subject, the same for both.

This module uses nats-py's public API only, so it imports (and the fetch puller runs)
whatever nats-py's internals look like; :mod:`ledger.puller` is imported only when the
lean puller is chosen.
"""

from __future__ import annotations

import functools
import importlib.metadata
import inspect
import json
import logging
import os
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

log = logging.getLogger(__name__)

# The nats-py minor versions the lean puller was written and is tested against (pin
# nats-py in pyproject.toml to the same): another version gets the fetch puller.
LEAN_NATS_PY: frozenset[tuple[int, int]] = frozenset({(2, 16)})

MODES = ("auto", "lean", "fetch")
PULLER_ENV = "FLEET_PULLER"


class Delivery(msgspec.Struct, frozen=True, gc=False):
    """One message of the stream as the consumer delivered it (a struct: one is built per
    message, in a fifth of a named tuple's time)."""

    seq: int  # the stream sequence
    subject: str
    data: bytes
    reply: str  # the ack subject
    # Ledger time: the stream's timestamp of the message in ms since the epoch (read from
    # the ack subject with the sequence), what a grant's window is judged by on every
    # replica alike.
    at_ms: int


class BadDelivery(Exception):
    """A delivery whose reply subject is not a JetStream ack subject."""


class PullerUnavailable(Exception):
    """The lean puller was asked for (``lean``) but cannot run with this nats-py."""


def ack_fields(reply: bytes | bytearray) -> tuple[int, int]:
    """(stream sequence, stream timestamp in ns since the epoch) of a JetStream ack subject,
    in either token layout:
    ``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>`` or, with a
    domain and account hash, ``$JS.ACK.<domain>.<hash>.<stream>.<consumer>.<delivered>.
    <sseq>.<cseq>.<ts>.<pending>[.<token>...]``. :class:`BadDelivery` if it is neither."""
    if not reply.startswith(b"$JS.ACK."):
        raise BadDelivery(f"not an ack subject: {reply[:80]!r}")
    dots = reply.count(b".")
    try:
        if dots == 8:  # the common layout: the sequence is the fourth token from the end
            _, seq, _cseq, ts, _pending = reply.rsplit(b".", 4)
            return int(seq), int(ts)
        if dots >= 10:
            tokens = reply.split(b".", 10)
            return int(tokens[7]), int(tokens[9])
    except ValueError:
        raise BadDelivery(f"not numbers where an ack subject has them: {reply[:80]!r}") \
            from None
    raise BadDelivery(f"unexpected ack subject layout: {reply[:80]!r}")


def stream_seq(reply: bytes | bytearray) -> int:
    """The stream sequence in a JetStream ack subject (:func:`ack_fields`)."""
    return ack_fields(reply)[0]


async def ack_all(nc: Client, last: Delivery) -> None:
    """Acknowledge ``last`` and, under AckAll, everything delivered before it."""
    await nc.publish(last.reply, b"+ACK")


async def nak(nc: Client, delivery: Delivery, delay_s: float) -> None:
    """Ask for ``delivery`` again after ``delay_s`` seconds."""
    body = json.dumps({"delay": int(delay_s * 1e9)}).encode()
    await nc.publish(delivery.reply, b"-NAK " + body)


class Pull(Protocol):
    """What the fold loop asks of a puller."""

    kind: str  # "lean" or "fetch"

    async def start(self) -> Pull: ...

    async def fetch(self, batch: int, timeout: float, linger: bool = True) -> list[Delivery]:
        """Up to ``batch`` deliveries, in stream order: what the consumer has now, or else
        (``linger``) the first to arrive within about ``timeout`` seconds (an empty list
        when none does). None is dropped: what arrives late comes with a later call."""
        ...

    async def stop(self) -> None: ...


class FetchPuller:
    """The durable consumer pulled through nats-py's public API (``PullSubscription.fetch``).

    A batch is fetched only when the consumer has messages (or the subscription's queue
    holds deliveries: bytes, not only the status of a request given up): on an empty
    consumer nats-py's ``fetch`` of a batch waits out its whole timeout, even after a
    message arrives, so the lingering wait asks for one message, returned as it arrives
    (the rest of a burst comes with the next call). nats-py's ``fetch`` first takes every
    message its subscription's queue holds, so it is asked for more than that, and what
    exceeds ``batch`` waits here, in order, for the next call.
    """

    kind = "fetch"

    def __init__(self, js: JetStreamContext, stream: str, durable: str) -> None:
        self.js = js
        self.stream = stream
        self.durable = durable
        self._sub: JetStreamContext.PullSubscription | None = None
        self._buf: list[Delivery] = []

    async def start(self) -> FetchPuller:
        self._sub = await self.js.pull_subscribe_bind(durable=self.durable, stream=self.stream)
        return self

    async def fetch(self, batch: int, timeout: float, linger: bool = True) -> list[Delivery]:
        sub = self._sub
        if sub is None:
            raise RuntimeError("the puller is not started")
        if len(self._buf) < batch:
            want = 0
            if sub.pending_bytes or (await sub.consumer_info()).num_pending:
                want = max(batch - len(self._buf), sub.pending_msgs + 1)
            elif linger:
                want = 1
            if want:
                try:
                    msgs = await sub.fetch(want, timeout=timeout)
                except TimeoutError:  # nats-py's (and FetchTimeoutError) are TimeoutErrors
                    msgs = []
                self._buf.extend([_delivery(m) for m in msgs])
        out, self._buf = self._buf[:batch], self._buf[batch:]
        return out

    async def stop(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            await sub.unsubscribe()


def _delivery(msg: Msg) -> Delivery:
    """A nats-py message as the lean puller delivers it (a reply that is not an ack subject
    fails the fetch, as there: skipping it would let a later AckAll ack it unfolded)."""
    seq, ts_ns = ack_fields(msg.reply.encode())
    return Delivery(seq, msg.subject, msg.data, msg.reply, ts_ns // 1_000_000)


# -- choosing -------------------------------------------------------------------------------


@functools.cache
def nats_py_version() -> str | None:
    """The installed nats-py's version, from its package metadata (None without any)."""
    try:
        return importlib.metadata.version("nats-py")
    except importlib.metadata.PackageNotFoundError:
        return None


def _minor(version: str) -> tuple[int, int] | None:
    parts = version.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def _tested() -> str:
    return ", ".join(f"{a}.{b}.x" for a, b in sorted(LEAN_NATS_PY))


_PROCESS_MSG_ARGS = ["self", "sid", "subject", "reply", "data", "headers"]


def lean_internals_missing(nc: Client | None = None) -> str | None:
    """The first private part of nats-py the lean puller needs that is not there as it
    expects (None: all are), checked explicitly: the parser module's constants, its
    ``Parser.parse`` coroutine, ``Client._process_msg(sid, subject, reply, data,
    headers)``, and on a connection ``nc`` its parser (``_ps``, with ``buf`` and
    ``state``). ``Subscription._id`` exists only on a subscription: a lean puller that
    cannot read it fails to start, and :func:`open_puller` falls back then."""
    try:
        from nats.protocol import parser
    except ImportError as exc:
        return f"nats.protocol.parser ({exc})"
    for name in ("AWAITING_CONTROL_LINE", "MAX_CONTROL_LINE_SIZE"):
        if not isinstance(getattr(parser, name, None), int):
            return f"nats.protocol.parser.{name}"
    parser_cls = getattr(parser, "Parser", None)
    if parser_cls is None or not inspect.iscoroutinefunction(getattr(parser_cls, "parse", None)):
        return "nats.protocol.parser.Parser.parse"
    process = getattr(Client, "_process_msg", None)
    if (not inspect.iscoroutinefunction(process)
            or list(inspect.signature(process).parameters) != _PROCESS_MSG_ARGS):
        return "nats.aio.client.Client._process_msg(sid, subject, reply, data, headers)"
    if nc is not None:
        ps = getattr(nc, "_ps", None)
        if (not isinstance(ps, parser_cls)
                or not isinstance(getattr(ps, "buf", None), bytearray)
                or not hasattr(ps, "state")):
            return "Client._ps (the connection's Parser, with buf and state)"
    return None


def lean_check(nc: Client | None = None) -> str | None:
    """Why the lean puller must not run here (None: it may): the installed nats-py is not
    a minor version it was tested against, or lacks a private part it patches."""
    version = nats_py_version()
    if version is None:
        return "nats-py's version is unknown (no package metadata)"
    if _minor(version) not in LEAN_NATS_PY:
        return (f"nats-py {version} is not a version the lean puller is tested against "
                f"({_tested()})")
    missing = lean_internals_missing(nc)
    if missing is not None:
        return f"nats-py {version} lacks {missing}"
    return None


def puller_mode(configured: str = "auto") -> tuple[str, str | None]:
    """The mode to run (``auto``, ``lean`` or ``fetch``) and what forced it (None for
    ``auto``): ``configured`` (``LedgerConfig.puller``) unless it is ``auto``, then the
    ``FLEET_PULLER`` environment variable. A value that is none of these is an error."""
    if configured not in MODES:
        raise ValueError(f"LedgerConfig.puller must be one of {', '.join(MODES)}, "
                         f"not {configured!r}")
    if configured != "auto":
        return configured, f"puller = {configured} in the ledger's config"
    env = os.environ.get(PULLER_ENV, "").strip()
    if not env or env == "auto":
        return "auto", None
    if env not in MODES:
        raise ValueError(f"{PULLER_ENV} must be one of {', '.join(MODES)}, not {env!r}")
    return env, f"{PULLER_ENV}={env}"


@dataclass
class PullerState:
    """Which puller a ledger runs, why, and how many times the fetch puller was started
    (every start of the fold loop's puller counts: after a failure it is started again).
    ``fleet status`` shows it (:meth:`as_json`)."""

    mode: str = "auto"
    forced_by: str | None = None
    kind: str | None = None  # None until the first puller starts
    reason: str | None = None  # why the fetch puller runs (None for the lean one)
    fallbacks: int = 0

    @classmethod
    def from_config(cls, configured: str) -> PullerState:
        mode, forced_by = puller_mode(configured)
        return cls(mode, forced_by)

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "mode": self.mode, "fallbacks": self.fallbacks,
                "reason": self.reason, "nats_py": nats_py_version()}


_logged: set[str] = set()


def _log_once(reason: str, forced: bool) -> None:
    """Say once per process (per reason) that the fetch puller runs, and why."""
    if reason in _logged:
        return
    _logged.add(reason)
    if forced:
        log.info("pulling with nats-py's fetch (%s); nats-py %s", reason, nats_py_version())
    else:
        log.warning("pulling with nats-py's fetch, slower than the lean puller: %s", reason)


async def open_puller(nc: Client, js: JetStreamContext, stream: str, durable: str,
                      state: PullerState | None = None) -> Pull:
    """A started puller of ``durable`` on ``stream``, the one ``state.mode`` asks for
    (``auto``: the lean one when :func:`lean_check` passes, else the fetch one), recorded in
    ``state``. ``lean`` raises :class:`PullerUnavailable` when the private parts it needs
    are missing (the version is not checked: that is how a new nats-py is tried)."""
    state = PullerState() if state is None else state
    reason: str | None
    if state.mode == "fetch":
        reason = f"forced by {state.forced_by}"
    elif state.mode == "lean":
        missing = lean_internals_missing(nc)
        if missing is not None:
            raise PullerUnavailable(f"the lean puller ({state.forced_by}) needs {missing}, "
                                    f"which nats-py {nats_py_version()} lacks")
        reason = None
    else:
        reason = lean_check(nc)
    if reason is None:
        lean = await _start_lean(nc, stream, durable)
        if isinstance(lean, str):
            if state.mode == "lean":
                raise PullerUnavailable(lean)
            reason = lean
        else:
            state.kind, state.reason = lean.kind, None
            return lean
    _log_once(reason, forced=state.mode == "fetch")
    puller = await FetchPuller(js, stream, durable).start()
    state.kind, state.reason = puller.kind, reason
    state.fallbacks += 1
    return puller


async def _start_lean(nc: Client, stream: str, durable: str) -> Pull | str:
    """The lean puller, started; or why it could not be (imported or started), after
    undoing whatever of its start was done."""
    try:
        from fleet_ledger.ledger.puller import Puller
    except ImportError as exc:
        return f"nats-py {nats_py_version()}: the lean puller does not import ({exc})"
    puller = Puller(nc, stream, durable)
    try:
        return await puller.start()
    except (AttributeError, TypeError) as exc:
        try:
            await puller.stop()
        except Exception as undo:  # what it could not undo is logged; the fetch one runs
            log.warning("stopping the lean puller that failed to start: %s", undo)
        return f"nats-py {nats_py_version()}: the lean puller did not start ({exc!r})"
