"""The host's durable outbox: every sealed segment is on disk before it is sent.

Why: nothing sealed may be lost (ARCHITECTURE, principle 4). A host writes a segment here in
one fsync'd transaction, the publisher sends it to JetStream with its content address as
``Nats-Msg-Id`` (:func:`fleet.record.wire.segment_id`: BLAKE3 of the whole envelope), and only
JetStream's acknowledgement moves it to ``acked``. A crash at
any point leaves the segment either still pending (it is sent again; the broker or the
publisher's fork check recognises it) or acked with its stream sequence.

Storage: one SQLite file per host, WAL journal, ``synchronous=FULL`` (every commit is
fsync'd). Table ``segments`` holds (id, run, idx, kind, subject, msg_id, payload,
acked_seq, state) with state ``pending`` -> ``acked`` (or ``stopped``); table ``runs``
holds per run the stream sequence of its last acknowledged segment (the next segment's
``Nats-Expected-Last-Subject-Sequence``), a ``stopped`` flag with its first reason (a
fork: the stream holds something else for that run; a duplicate of another message; a
refusal by the ledger) and ``state``, the host's state of the run after its newest segment
(opaque bytes here, written by the same transaction as that segment: one file, one fsync
per segment, no window between the two); table ``refusals`` holds the stream sequence of
every ledger refusal acted on, so none stops a run twice (:mod:`agents.refusals`).

Acked rows are kept as a record of what was sent, up to ``keep_acked_bytes`` of payload
(default 256 MiB): past it, every ``PRUNE_EVERY`` acks, the oldest acked rows are deleted
down to the bound, so a long-lived host's file stays bounded. Each run's newest row is never
deleted, acked or not (the segment its saved state ends at, which a different segment put
at its index is checked against). A pruned row's
index is no longer checked locally against a different segment put again; the broker's
expected-last-sequence check still stops that run as a fork.

Backpressure with a reserved share: pending bytes are bounded by ``limit_bytes`` (default
64 MiB). An ``executed`` segment is refused with :class:`OutboxFull` once pending bytes
plus its own would pass ``limit_bytes * (1 - reserve)`` (default reserve 10%, so 57.6 MiB);
``suspended``, ``resumed`` and ``closed`` segments may use the reserve up to the full
limit, so a run can always park or close while the broker is away.

Ownership: one :class:`Outbox` per file, owned by one process (the host). Its methods are
serialised by a lock, so a host thread may ``put()`` while the publisher's event loop
drains; each write blocks for one fsync. Listeners registered with :meth:`on_put` are called
after every committed put (from the putting thread) to wake a publisher.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from fleet_ledger.fleet.record.kernel import EXECUTED, KINDS, Kind
from fleet_ledger.plumbing import sqlite
from fleet_ledger.plumbing.transactions import immediate

PRIORITY_KINDS: Final = frozenset(KINDS) - {EXECUTED}
DEFAULT_LIMIT_BYTES: Final = 64 * 1024 * 1024
DEFAULT_RESERVE: Final = 0.10
DEFAULT_KEEP_ACKED_BYTES: Final = 256 * 1024 * 1024
PRUNE_EVERY: Final = 1024  # acks between two checks of the acked rows' size

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS segments (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run TEXT NOT NULL,
    idx INTEGER NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ({", ".join(f"'{kind}'" for kind in KINDS)})),
    subject TEXT NOT NULL,
    msg_id TEXT NOT NULL,
    payload BLOB NOT NULL,
    acked_seq INTEGER,
    state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'acked', 'stopped')),
    UNIQUE (run, idx)
);
CREATE INDEX IF NOT EXISTS segments_state ON segments (state, id);
CREATE TABLE IF NOT EXISTS runs (
    run TEXT PRIMARY KEY,
    last_acked_seq INTEGER NOT NULL DEFAULT 0,
    stopped INTEGER NOT NULL DEFAULT 0,
    stop_reason TEXT,
    state BLOB
);
CREATE TABLE IF NOT EXISTS refusals (
    stream_seq INTEGER PRIMARY KEY,
    run TEXT NOT NULL
);
"""


class OutboxError(Exception):
    """Base of the outbox's named refusals."""


class OutboxFull(OutboxError):
    """The segment would pass the outbox's byte budget for its kind; retry after a drain."""

    def __init__(self, kind: str, size: int, pending_bytes: int, budget: int) -> None:
        self.kind, self.size, self.pending_bytes, self.budget = kind, size, pending_bytes, budget
        super().__init__(
            f"the outbox holds {pending_bytes} unacknowledged bytes; a {kind!r} segment of "
            f"{size} bytes would pass its budget of {budget} bytes. Wait for the publisher "
            "to drain (is the broker reachable?) and put it again."
        )


class RunStopped(OutboxError):
    """The run was stopped (a fork was found); no further segment of it is taken."""

    def __init__(self, run: str, reason: str) -> None:
        self.run, self.reason = run, reason
        super().__init__(f"run {run} was stopped and takes no more segments: {reason}")


class OutboxConflict(OutboxError):
    """A different segment already holds this (run, idx) in the outbox."""

    def __init__(self, run: str, idx: int, held: str, offered: str) -> None:
        self.run, self.idx, self.held, self.offered = run, idx, held, offered
        super().__init__(
            f"segment {idx} of run {run} is already in the outbox as {held}; "
            f"refusing a different one, {offered}"
        )


@dataclass(frozen=True, slots=True)
class Entry:
    """One outbox row."""

    id: int
    run: str
    idx: int
    kind: str
    subject: str
    msg_id: str
    payload: bytes
    acked_seq: int | None
    state: str


@dataclass(frozen=True, slots=True)
class Stats:
    pending_count: int
    pending_bytes: int
    stopped_count: int
    limit_bytes: int
    executed_budget: int


def _widen_kinds(db: sqlite3.Connection) -> None:
    """An outbox made before warm pools checks kinds against the first four only: rebuild
    its table (rows, ids and state kept) under the current schema. SQLite cannot alter a
    CHECK in place."""
    row = db.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'segments'"
                     ).fetchone()
    if row is None or "'claimed'" in row[0]:
        return
    db.execute("ALTER TABLE segments RENAME TO segments_before_pools")
    db.execute("DROP INDEX IF EXISTS segments_state")
    db.execute(_SCHEMA.split(";")[0])
    db.execute("INSERT INTO segments SELECT * FROM segments_before_pools")
    # Ids keep counting from where the old table stopped (pruned rows included).
    db.execute("DELETE FROM sqlite_sequence WHERE name = 'segments'")
    db.execute("UPDATE sqlite_sequence SET name = 'segments'"
               " WHERE name = 'segments_before_pools'")
    db.execute("DROP TABLE segments_before_pools")


def _add_state(db: sqlite3.Connection) -> None:
    """An outbox made before run states moved in (they were in ``runs.db``) has no
    ``runs.state`` column: add it (agents.host_migration fills it)."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(runs)")}
    if columns and "state" not in columns:
        db.execute("ALTER TABLE runs ADD COLUMN state BLOB")


class Outbox:
    """A durable, bounded queue of sealed segments waiting for JetStream's ack."""

    def __init__(
        self,
        path: str | Path,
        *,
        limit_bytes: int = DEFAULT_LIMIT_BYTES,
        reserve: float = DEFAULT_RESERVE,
        keep_acked_bytes: int = DEFAULT_KEEP_ACKED_BYTES,
    ) -> None:
        if not 0.0 <= reserve < 1.0:
            raise ValueError(f"reserve is a share in [0, 1), got {reserve}")
        if limit_bytes <= 0:
            raise ValueError(f"limit_bytes must be positive, got {limit_bytes}")
        if keep_acked_bytes < 0:
            raise ValueError(f"keep_acked_bytes must not be negative, got {keep_acked_bytes}")
        self.path = Path(path)
        self.limit_bytes = limit_bytes
        self.reserve = reserve
        self.keep_acked_bytes = keep_acked_bytes
        self._acks_since_prune = 0
        self._lock = threading.RLock()
        self._listeners: list[Callable[[], None]] = []
        self._db = sqlite.connect(self.path, busy_timeout_s=5.0)
        with self._tx():
            _widen_kinds(self._db)
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    self._db.execute(statement)
            _add_state(self._db)
            # Kept up to date by mark_acked and prune, so the bound is checked without a scan.
            self._acked_bytes = self._payload_bytes(self._db, "acked")

    @property
    def executed_budget(self) -> int:
        """Pending bytes beyond which an ``executed`` segment is refused."""
        return int(self.limit_bytes * (1.0 - self.reserve))

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock, immediate(self._db) as db:
            yield db

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> Outbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def on_put(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener()`` after every committed put (to wake a publisher).

        Returns a function that unregisters it.
        """
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    # -- writing -------------------------------------------------------------------------

    def put(self, run: str, idx: int, kind: Kind, subject: str, msg_id: str, payload: bytes,
            state: bytes | None = None) -> int:
        """Store a sealed segment durably (fsync'd) and return its row id; with ``state``,
        the run's state after it, in the same transaction.

        Putting the same (run, idx, msg_id), or the same bytes, again returns the existing
        id (and keeps the state stored with it). Raises :class:`OutboxFull`,
        :class:`RunStopped` or :class:`OutboxConflict`.
        """
        if kind not in KINDS:
            raise ValueError(f"kind is one of {KINDS}, got {kind!r}")
        with self._tx() as db:
            held = db.execute(
                "SELECT id, msg_id, payload FROM segments WHERE run = ? AND idx = ?", (run, idx)
            ).fetchone()
            if held is not None:
                # The same bytes under another id form (a row written before ids named the
                # whole envelope, fleet.record.wire.segment_id) are the same segment.
                if held[1] != msg_id and bytes(held[2]) != payload:
                    raise OutboxConflict(run, idx, held[1], msg_id)
                return int(held[0])
            stopped = db.execute(
                "SELECT stop_reason FROM runs WHERE run = ? AND stopped", (run,)
            ).fetchone()
            if stopped is not None:
                raise RunStopped(run, stopped[0])
            pending = self._payload_bytes(db, "pending")
            budget = self.limit_bytes if kind in PRIORITY_KINDS else self.executed_budget
            if pending + len(payload) > budget:
                raise OutboxFull(kind, len(payload), pending, budget)
            cur = db.execute(
                "INSERT INTO segments (run, idx, kind, subject, msg_id, payload)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (run, idx, kind, subject, msg_id, payload),
            )
            db.execute("INSERT INTO runs (run, state) VALUES (?, ?) ON CONFLICT (run) DO UPDATE"
                       " SET state = coalesce(excluded.state, state)", (run, state))
            row_id = int(cur.lastrowid or 0)
        for listener in list(self._listeners):
            listener()
        return row_id

    def mark_acked(self, row_id: int, stream_seq: int) -> None:
        """Record JetStream's ack: the row is acked at ``stream_seq``, its run's last seq too."""
        with self._tx() as db:
            row = db.execute("SELECT run, state, length(payload) FROM segments WHERE id = ?",
                             (row_id,)).fetchone()
            if row is None:
                raise KeyError(f"no outbox row {row_id}")
            db.execute(
                "UPDATE segments SET state = 'acked', acked_seq = ? WHERE id = ?",
                (stream_seq, row_id),
            )
            db.execute(
                "UPDATE runs SET last_acked_seq = max(last_acked_seq, ?) WHERE run = ?",
                (stream_seq, row[0]),
            )
            if row[1] != "acked":
                self._acked_bytes += row[2]
            self._acks_since_prune += 1
            due = self._acks_since_prune >= PRUNE_EVERY
            if due:
                self._acks_since_prune = 0
        if due and self._acked_bytes > self.keep_acked_bytes:
            self.prune(self.keep_acked_bytes)

    def stop_run(self, run: str, reason: str, refusal_seq: int | None = None) -> bool:
        """Stop a run (a fork, a refusal): its pending rows are kept as ``stopped`` and
        never sent; the first reason stays. With ``refusal_seq`` (the stream sequence of the
        ledger's refusal that stops it), a refusal acted on before stops nothing again (a run
        that came back to this host is not stopped by its old refusal); False then."""
        with self._tx() as db:
            if refusal_seq is not None and db.execute(
                    "INSERT OR IGNORE INTO refusals (stream_seq, run) VALUES (?, ?)",
                    (refusal_seq, run)).rowcount == 0:
                return False
            db.execute("INSERT OR IGNORE INTO runs (run) VALUES (?)", (run,))
            db.execute("UPDATE runs SET stop_reason = ? WHERE run = ? AND NOT stopped",
                       (reason, run))
            db.execute("UPDATE runs SET stopped = 1 WHERE run = ?", (run,))
            db.execute(
                "UPDATE segments SET state = 'stopped' WHERE run = ? AND state = 'pending'",
                (run,),
            )
        return True

    def holds_run(self, run: str) -> bool:
        """Whether this outbox ever took a segment of ``run``."""
        with self._lock:
            return self._db.execute("SELECT 1 FROM runs WHERE run = ?", (run,)
                                    ).fetchone() is not None

    def restart_run(self, run: str) -> None:
        """Lift a run's stop (it came back to this host under a verified record): new
        segments of it are taken again; rows stopped before stay stopped, never sent."""
        with self._tx() as db:
            self._lift_stop(db, run)

    @staticmethod
    def _lift_stop(db: sqlite3.Connection, run: str) -> None:
        db.execute("UPDATE runs SET stopped = 0, stop_reason = NULL WHERE run = ?", (run,))

    def save_state(self, run: str, state: bytes, *, restart: bool = False) -> None:
        """Store ``run``'s state without a segment (a run adopted from its record, or moved
        from an old ``runs.db``); ``restart``: and lift its stop (:meth:`restart_run`), in
        the same transaction."""
        with self._tx() as db:
            db.execute("INSERT INTO runs (run, state) VALUES (?, ?) ON CONFLICT (run) DO UPDATE"
                       " SET state = excluded.state", (run, state))
            if restart:
                self._lift_stop(db, run)

    def prune(self, keep_bytes: int = 0) -> int:
        """Delete the oldest acked rows until at most ``keep_bytes`` of acked payload remain,
        never a run's newest row (see the module's notes); runs keep their last acked seq.
        Returns how many rows were deleted."""
        # Acked rows that are not their run's newest: the only ones that may go.
        prunable = ("state = 'acked' AND idx < (SELECT max(s2.idx) FROM segments AS s2"
                    " WHERE s2.run = segments.run)")
        with self._tx() as db:
            excess = self._acked_bytes - keep_bytes
            if excess <= 0:
                return 0
            cutoff, freed = None, 0
            for row_id, size in db.execute(
                    f"SELECT id, length(payload) FROM segments WHERE {prunable} ORDER BY id"):
                cutoff = row_id
                freed += size
                if freed >= excess:
                    break
            if cutoff is None:
                return 0
            # Exactly the rows just read: the prunable ones up to the cutoff, oldest first.
            deleted = db.execute(f"DELETE FROM segments WHERE id <= ? AND {prunable}",
                                 (cutoff,)).rowcount
            self._acked_bytes -= freed
            return deleted


    # -- reading -------------------------------------------------------------------------

    @staticmethod
    def _payload_bytes(db: sqlite3.Connection, state: str) -> int:
        row = db.execute(
            "SELECT coalesce(sum(length(payload)), 0) FROM segments WHERE state = ?", (state,)
        ).fetchone()
        return int(row[0])

    def pending(self, limit: int = 1000) -> list[Entry]:
        """Up to ``limit`` unacknowledged rows of running runs, oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT id, run, idx, kind, subject, msg_id, payload, acked_seq, state"
                " FROM segments WHERE state = 'pending' ORDER BY id LIMIT ?",
                (limit,),
            ).fetchall()
        return [Entry(*row) for row in rows]

    def get(self, row_id: int) -> Entry | None:
        with self._lock:
            row = self._db.execute(
                "SELECT id, run, idx, kind, subject, msg_id, payload, acked_seq, state"
                " FROM segments WHERE id = ?",
                (row_id,),
            ).fetchone()
        return None if row is None else Entry(*row)

    def payloads_after(self, run: str, idx: int) -> list[bytes]:
        """The payloads the outbox holds for ``run`` beyond segment ``idx``, in index order
        (what a host that died before saving its run state catches up from)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT payload FROM segments WHERE run = ? AND idx > ? ORDER BY idx",
                (run, idx),
            ).fetchall()
        return [bytes(p) for (p,) in rows]

    def state(self, run: str) -> bytes | None:
        """The run's state stored with its newest segment (or its adoption); None if none."""
        with self._lock:
            row = self._db.execute("SELECT state FROM runs WHERE run = ?", (run,)).fetchone()
        return None if row is None or row[0] is None else bytes(row[0])

    def runs(self) -> list[str]:
        """Every run the outbox holds a segment or a state of."""
        with self._lock:
            rows = self._db.execute("SELECT run FROM runs UNION SELECT run FROM segments"
                                    ).fetchall()
        return [run for (run,) in rows]

    def last_acked_seq(self, run: str) -> int:
        """The stream sequence of the run's last acked segment; 0 if none is acked yet."""
        with self._lock:
            row = self._db.execute(
                "SELECT last_acked_seq FROM runs WHERE run = ?", (run,)
            ).fetchone()
        return 0 if row is None else int(row[0])

    def stopped_runs(self) -> dict[str, str]:
        """Stopped runs and the reason each was stopped."""
        with self._lock:
            rows = self._db.execute("SELECT run, stop_reason FROM runs WHERE stopped").fetchall()
        return {run: reason or "" for run, reason in rows}

    def stats(self) -> Stats:
        with self._lock:
            count = self._db.execute(
                "SELECT count(*) FROM segments WHERE state = 'pending'"
            ).fetchone()[0]
            stopped = self._db.execute(
                "SELECT count(*) FROM segments WHERE state = 'stopped'"
            ).fetchone()[0]
            pending_bytes = self._payload_bytes(self._db, "pending")
        return Stats(
            pending_count=int(count),
            pending_bytes=pending_bytes,
            stopped_count=int(stopped),
            limit_bytes=self.limit_bytes,
            executed_budget=self.executed_budget,
        )
