"""Drain the host's outbox into JetStream: per-run order, exactly one copy, forks stopped.

Why: a sealed segment is only as safe as the outbox it sits in until the broker has it. This
shell sends each pending row with two headers and moves it to ``acked`` on the PubAck:

- ``Nats-Msg-Id`` = the id of the whole sealed envelope (``fleet.record.wire.segment_id``), so a
  resend is recognised and no other sender's message is taken for it;
- ``Nats-Expected-Last-Subject-Sequence`` = the stream sequence of the run's last acked
  segment (``0`` for its first). The server reads 0 as "this subject holds nothing yet"
  and otherwise refuses with err_code 10071 ``wrong last sequence: <actual>``, so the
  stream never holds two segments a run did not chain in that order.

Segments of one run go strictly in order, one in flight (the next needs this one's stream
sequence); different runs are in flight together. Timeouts, no-responders, 503s, 500s and
"in process" conflicts (10158, 10164) are retried with the *same* msg id and expected
sequence, with bounded exponential backoff and jitter (nats-py retries none of them).

A lost ack comes back in one of two ways (verified against nats-server 2.14, see
tests/test_publisher.py): a replicated (R3) stream checks ``Nats-Msg-Id`` before the
expected sequence and answers ``duplicate: true`` with the first copy's sequence; a
single-replica (R1) stream checks the expected sequence first and answers 10071. So on
10071 the publisher reads the subject's last message: if it carries this segment's msg id
and bytes, the segment had landed and counts as acked at that sequence; otherwise the stream
holds something this host did not chain there — a fork. A ``duplicate: true`` ack is
checked the same way against the message the stream holds at the sequence it names: the id
binds the whole envelope (:func:`fleet.record.wire.segment_id`), so anything but this very segment
there (an old host's head id, a squatter's) means this one was dropped, not recorded. A
fork, such a duplicate, or any other refusal stops that run in the outbox with its reason
(never overwritten, never retried) and is reported to ``on_stop`` and the log; other runs go
on. What the *ledger* decides comes back on the host's refusals subject
(:mod:`agents.refusals`).

Hosts connect with :func:`plumbing.nats_connect.connect` (reconnects forever once up, an
nkey seed file for auth), as the ledger does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import nats
import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import Header

from fleet_ledger.agents.outbox import Entry, Outbox
from fleet_ledger.fleet.subjects import STREAM

log = logging.getLogger(__name__)

WRONG_LAST_SEQUENCE = 10071
RETRY_ERR_CODES = frozenset({10158, 10164})  # msg id / subject still "in process"
TRANSIENT = (
    asyncio.TimeoutError,
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.js.errors.NoStreamResponseError,
    nats.js.errors.ServiceUnavailableError,
    nats.js.errors.ServerError,
    nats.errors.OutboundBufferLimitError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.StaleConnectionError,
)


@dataclass(frozen=True, slots=True)
class Backoff:
    """Bounded exponential backoff: ``initial * 2**n`` capped at ``maximum``, jittered down
    by up to ``jitter`` of itself so a fleet of hosts does not retry in step."""

    initial: float = 0.05
    maximum: float = 5.0
    jitter: float = 0.5

    def delay(self, attempt: int) -> float:
        base = min(self.maximum, self.initial * (2 ** min(attempt, 30)))
        return base * (1.0 - self.jitter * random.random())


@dataclass(frozen=True, slots=True)
class Stopped:
    """A run the publisher stopped: a ``fork``, a segment the broker ``refused``, or one
    it dropped as a ``duplicate`` of a different message."""

    run: str
    idx: int
    msg_id: str
    kind: Literal["fork", "refused", "duplicate"]
    reason: str


@dataclass(slots=True)
class DrainReport:
    acked: int = 0
    duplicates: int = 0
    retries: int = 0
    stopped: list[Stopped] = field(default_factory=list)
    remaining: int = 0

    def add(self, other: DrainReport) -> None:
        self.acked += other.acked
        self.duplicates += other.duplicates
        self.retries += other.retries
        self.stopped.extend(other.stopped)
        self.remaining = other.remaining


class Publisher:
    """Sends an :class:`Outbox`'s pending segments to JetStream (single owner: one loop)."""

    def __init__(
        self,
        outbox: Outbox,
        js: JetStreamContext,
        *,
        stream: str = STREAM,
        ack_timeout: float = 2.0,
        backoff: Backoff | None = None,
        max_runs_in_flight: int = 64,
        batch: int = 1000,
        on_stop: Callable[[Stopped], None] | None = None,
    ) -> None:
        self.outbox = outbox
        self.js = js
        self.stream = stream
        self.ack_timeout = ack_timeout
        self.backoff = backoff or Backoff()
        self.batch = batch
        self.on_stop = on_stop
        self._slots = asyncio.Semaphore(max_runs_in_flight)

    async def drain(self, timeout: float | None = None) -> DrainReport:
        """Send every pending segment (also those put meanwhile); return the counts.

        With ``timeout``, return when it passes, counting what is still ``remaining``.
        """
        report = DrainReport()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while await self._pass(report):
                    pass
        report.remaining = self.outbox.stats().pending_count
        return report

    async def run_forever(self, stop: asyncio.Event, poll: float = 1.0) -> DrainReport:
        """Drain, then sleep until a put (or ``poll`` seconds), until ``stop`` is set.

        Stopping cancels what is in flight; it is still in the outbox and is resent (and
        recognised) by the next publisher.
        """
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()

        def on_put() -> None:
            loop.call_soon_threadsafe(wake.set)

        unsubscribe = self.outbox.on_put(on_put)
        report = DrainReport()
        stopping = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                wake.clear()
                work = asyncio.ensure_future(self.drain())
                await asyncio.wait({work, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if not work.done():
                    work.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await work
                    break
                report.add(work.result())
                waking = asyncio.ensure_future(wake.wait())
                await asyncio.wait(
                    {waking, stopping}, timeout=poll, return_when=asyncio.FIRST_COMPLETED
                )
                waking.cancel()
        finally:
            unsubscribe()
            stopping.cancel()
        report.remaining = self.outbox.stats().pending_count
        return report

    async def _pass(self, report: DrainReport) -> bool:
        """Send one batch of pending rows, one task per run; False when none was pending."""
        pending = self.outbox.pending(self.batch)
        if not pending:
            return False
        by_run: dict[str, list[Entry]] = {}
        for entry in pending:
            by_run.setdefault(entry.run, []).append(entry)
        try:
            async with asyncio.TaskGroup() as group:
                for rows in by_run.values():
                    group.create_task(self._send_run(rows, report))
        except ExceptionGroup as failed:  # e.g. the connection was closed under us
            raise failed.exceptions[0] from failed
        return True

    async def _send_run(self, rows: list[Entry], report: DrainReport) -> None:
        async with self._slots:
            for entry in rows:
                if not await self._send(entry, report):
                    return

    async def _send(self, entry: Entry, report: DrainReport) -> bool:
        """Send one segment until acked (True) or its run is stopped (False)."""
        expected = self.outbox.last_acked_seq(entry.run)
        attempt = 0
        while True:
            try:
                seq, duplicate = await self._attempt(entry, expected)
            except TRANSIENT as err:
                log.debug("segment %s of %s: %r, retrying", entry.idx, entry.run, err)
            except nats.js.errors.APIError as err:
                if err.err_code not in RETRY_ERR_CODES:
                    self._stop(entry, "refused", f"the broker refused it: {err}", report)
                    return False
            except _Fork as fork:
                self._stop(entry, "fork", str(fork), report)
                return False
            except _Duplicate as dropped:
                self._stop(entry, "duplicate", str(dropped), report)
                return False
            else:
                self.outbox.mark_acked(entry.id, seq)
                report.acked += 1
                report.duplicates += duplicate
                return True
            report.retries += 1
            await asyncio.sleep(self.backoff.delay(attempt))
            attempt += 1

    async def _attempt(self, entry: Entry, expected: int) -> tuple[int, bool]:
        headers: dict[str, Any] = {  # nats-py's type for them (a Header is a str)
            Header.MSG_ID: entry.msg_id,
            Header.EXPECTED_LAST_SUBJECT_SEQUENCE: str(expected),
        }
        try:
            ack = await self.js.publish(
                entry.subject,
                entry.payload,
                timeout=self.ack_timeout,
                stream=self.stream,
                headers=headers,
            )
        except nats.js.errors.APIError as err:
            if err.err_code != WRONG_LAST_SEQUENCE:
                raise
            return await self._landed_at(entry, expected, err), True
        if ack.duplicate:
            await self._check_duplicate(entry, ack.seq)
        return ack.seq, bool(ack.duplicate)

    async def _check_duplicate(self, entry: Entry, seq: int) -> None:
        """A duplicate ack says only that the stream holds *a* message with this id at
        ``seq``: it counts as this segment's ack only if that message is this segment
        (subject, id and bytes); anything else there means this one was dropped unrecorded."""
        held = await self.js.get_msg(self.stream, seq)
        held_id = (held.headers or {}).get(Header.MSG_ID)
        if (held.subject, held_id, held.data or b"") != (entry.subject, entry.msg_id,
                                                         entry.payload):
            raise _Duplicate(
                f"the broker dropped it as a duplicate of stream sequence {seq}, which holds "
                f"another message (subject {held.subject}, msg id {held_id!r}): this segment "
                "was not recorded")

    async def _landed_at(self, entry: Entry, expected: int, err: Exception) -> int:
        """The seq of this very segment if it is the subject's last message, else a fork."""
        try:
            last = await self.js.get_last_msg(self.stream, entry.subject)
        except nats.js.errors.NotFoundError:
            raise _Fork(
                f"expected the run's last stream sequence {expected} but the stream holds "
                f"nothing on {entry.subject} ({err})"
            ) from None
        held = (last.headers or {}).get(Header.MSG_ID)
        if held == entry.msg_id and (last.data or b"") == entry.payload and last.seq:
            return last.seq
        raise _Fork(
            f"expected the run's last stream sequence {expected}, but the stream's last "
            f"message on {entry.subject} is seq {last.seq} with msg id {held!r}, "
            f"not this segment {entry.msg_id} ({err})"
        )

    def _stop(
        self, entry: Entry, kind: Literal["fork", "refused", "duplicate"], why: str,
        report: DrainReport
    ) -> None:
        reason = f"{kind} at segment {entry.idx} ({entry.msg_id}): {why}"
        self.outbox.stop_run(entry.run, reason)
        stopped = Stopped(entry.run, entry.idx, entry.msg_id, kind, reason)
        report.stopped.append(stopped)
        log.warning("stopped run %s: %s", entry.run, reason)
        if self.on_stop is not None:
            self.on_stop(stopped)


class _Fork(Exception):
    """The stream holds, for this run, something other than what this host chained."""


class _Duplicate(Exception):
    """The broker took this segment for a duplicate of a message that is not this one."""
