"""The ledger's commit pipeline: the batches between decision and ack, and the store lock.

One object holds the lock that keeps readers off a batch that is written but not committed:
:meth:`CommitPipeline.start` takes it, writes the batch (the shell's decide-and-write) and
starts the commit on a thread of its own; :meth:`settle` waits for that commit, installs the
batch's changes and releases the lock; :meth:`abandon` (after a failure) waits a commit
still running, installs it only if it stored, and releases the lock. Nothing else takes or
releases it but readers, through :meth:`reading`, so at most one batch is ever in flight
and a reader sees only committed batches.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

from fleet_ledger.fleet.fold.batch import BatchChanges, Incoming

M = TypeVar("M")  # what the shell acks the batch by (its deliveries)
P = TypeVar("P")  # a prepared batch

WriteBatch = Callable[[P], "tuple[list[Incoming], int, BatchChanges]"]


@dataclass
class Settled(Generic[M]):
    """A batch whose commit finished (``committed``: it had anything to store): the shell
    acks ``msgs`` and publishes the batch's refusals."""

    msgs: M
    batch: list[Incoming]
    started: float  # time.monotonic() when it began deciding
    committed: bool


@dataclass
class _InFlight(Generic[M]):
    msgs: M
    batch: list[Incoming]
    done: asyncio.Future[None] | None
    changes: BatchChanges
    top: int
    started: float


class CommitPipeline(Generic[M, P]):
    """One batch's commit in flight at a time, under the store lock (see the module)."""

    def __init__(self, write: Callable[[P], tuple[list[Incoming], int, BatchChanges]],
                 commit: Callable[[], None], rollback: Callable[[], None],
                 install: Callable[[BatchChanges, int], None]) -> None:
        self._write = write
        self._commit = commit
        self._rollback = rollback
        self._install = install
        self._lock = asyncio.Lock()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="ledger-commit")
        self._in_flight: _InFlight[M] | None = None

    @property
    def lock(self) -> asyncio.Lock:
        """The store lock, for readers that hold it across several awaits (and tests)."""
        return self._lock

    @property
    def busy(self) -> bool:
        """A batch is written and its commit not yet settled."""
        return self._in_flight is not None

    @contextlib.asynccontextmanager
    async def reading(self) -> AsyncIterator[None]:
        """Hold the store while reading: no batch is written but uncommitted meanwhile."""
        async with self._lock:
            yield

    async def start(self, msgs: M, prepared: P) -> None:
        """Decide and write ``prepared``, then start its commit; the lock is held until
        :meth:`settle` or :meth:`abandon`."""
        assert self._in_flight is None, "settle the batch in flight first"
        await self._lock.acquire()
        started = time.monotonic()
        try:
            batch, top, changes = self._write(prepared)
            done: asyncio.Future[None] | None = None
            if batch:
                try:
                    done = asyncio.get_running_loop().run_in_executor(self._executor,
                                                                      self._commit)
                except BaseException:
                    self._rollback()
                    raise
        except BaseException:
            self._lock.release()
            raise
        self._in_flight = _InFlight(msgs, batch, done, changes, top if batch else 0, started)

    async def settle(self) -> Settled[M] | None:
        """Wait for the commit in flight, install its changes, release the lock."""
        flight, self._in_flight = self._in_flight, None
        if flight is None:
            return None
        try:
            if flight.done is not None:
                # Shielded: a cancelled wait must not release the lock mid-commit.
                await asyncio.shield(flight.done)
            self._install(flight.changes, flight.top)
        finally:
            self._lock.release()
        return Settled(flight.msgs, flight.batch, flight.started, flight.done is not None)

    async def abandon(self) -> None:
        """Drop the batch in flight after a failure (the shell nak'd it): wait out a commit
        still running, so the store is not left mid-transaction."""
        flight, self._in_flight = self._in_flight, None
        if flight is None:
            return
        try:
            if flight.done is not None:
                try:
                    await flight.done
                except Exception:  # not stored: the cache keeps what was committed
                    pass
                else:
                    self._install(flight.changes, flight.top)
        finally:
            self._lock.release()

    def unacked(self) -> M | None:
        """The deliveries of the batch in flight (to nak after a failure)."""
        return None if self._in_flight is None else self._in_flight.msgs

    def close(self) -> None:
        self._executor.shutdown(wait=True)
