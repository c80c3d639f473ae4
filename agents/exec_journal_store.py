"""The exec journal's file: a small SQLite database in the run's host folder.

Tables: ``meta`` (the run it belongs to, when given), ``entries`` (interval, seq, an
entry's fields, and ``body``, its canonical bytes of :mod:`fleet.env.exec_journal`, kept in
the file's format for outside readers) and ``intervals`` (each sealed interval's root and
entry count). What is journaled, each entry's numbering, bytes and chain are the core's
(:class:`~fleet.env.exec_decision.JournalBook`), kept in memory as entries arrive (so
:meth:`ExecJournal.root` is exact at once); this shell adds the lock, the clock and the
file: rows are written by one writer thread in batches, so a decision never waits for an
fsync. Resuming and reading rebuild each entry from its fields; reading checks every
stored byte of an entry with the core (:func:`~fleet.env.exec_journal.check_body`: its body
against its fields; :func:`~fleet.env.exec_journal.interval_report`: its fields by the
interval's root), and :func:`read_journal` lists the entries that fail, by seq.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fleet_ledger.fleet.address import format_address, parse_address
from fleet_ledger.fleet.env.exec_decision import JOURNAL_ALWAYS, JOURNAL_FIRST, JournalBook, Verdict
from fleet_ledger.fleet.env.exec_journal import JournalEntry, check_body, interval_report
from fleet_ledger.fleet.env.exec_policy import ALLOW, VERDICTS, code_of
from fleet_ledger.fleet.errors import FleetError
from fleet_ledger.plumbing import sqlite
from fleet_ledger.plumbing.transactions import immediate

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS entries (interval INTEGER NOT NULL, seq INTEGER PRIMARY KEY,"
    " time_ns INTEGER NOT NULL, access TEXT NOT NULL, verdict TEXT NOT NULL,"
    " cause TEXT NOT NULL, bytes TEXT NOT NULL, policy TEXT NOT NULL, label TEXT NOT NULL,"
    " path TEXT NOT NULL, body BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS intervals (interval INTEGER PRIMARY KEY, root TEXT NOT NULL,"
    " entries INTEGER NOT NULL, sealed_ns INTEGER NOT NULL)",
)
_STOP = object()


class ExecJournal:
    """Append-only journal of one unit's exec decisions, by interval."""

    def __init__(self, path: Path | str, run: str | None = None) -> None:
        self.path = Path(path)
        self._db = sqlite.connect(self.path)
        for stmt in _SCHEMA:
            self._db.execute(stmt)
        if run is not None:
            self._db.execute("INSERT OR REPLACE INTO meta VALUES ('run', ?)", (run,))
        row = self._db.execute("SELECT max(seq) FROM entries").fetchone()
        seq = row[0] or 0
        row = self._db.execute("SELECT max(interval) FROM intervals").fetchone()
        interval = (row[0] or 0) + 1
        self._book = JournalBook(seq, interval, _entries(self._db, interval))
        self._lock = threading.Lock()
        self.error: Exception | None = None
        self._rows: queue.Queue[Any] = queue.Queue()
        self._writer = threading.Thread(target=self._write_loop, name="exec-journal",
                                        daemon=True)
        self._writer.start()

    @property
    def interval(self) -> int:
        """The number of the interval entries now go to."""
        return self._book.interval

    def wants(self, verdict: Verdict) -> bool:
        """Whether :meth:`record` would journal ``verdict`` now (so the guard need not
        look up the path of what it will not journal)."""
        with self._lock:
            return self._book.wants(verdict)

    def record(self, verdict: Verdict, path: str) -> JournalEntry | None:
        """Journal the guard's ``verdict`` in the current interval if the core's rule keeps
        it (:meth:`fleet.env.exec_decision.JournalBook.admit`); ``None`` if not."""
        with self._lock:
            got = self._book.admit(verdict, time.time_ns(), path)
            if got is None:
                return None
            self._rows.put((self._book.interval, *got))
            return got[0]

    def append(self, *, access: str, verdict: str, cause: str, content: bytes, policy: bytes,
               label: str, path: str) -> JournalEntry:
        """Journal one decision in the current interval."""
        got = self.record(_verdict(access, verdict, cause, content, policy, label,
                                   JOURNAL_ALWAYS), path)
        assert got is not None
        return got

    def append_once(self, *, access: str, verdict: str, cause: str, content: bytes,
                    policy: bytes, label: str, path: str) -> JournalEntry | None:
        """As :meth:`append`, but only if the current interval has no entry of the same
        (content, access, verdict, policy) from this method yet (``None`` then): the
        allow-listed mode's first allow of each address per interval, however the
        interval is sealed."""
        return self.record(_verdict(access, verdict, cause, content, policy, label,
                                    JOURNAL_FIRST), path)

    def root(self) -> bytes:
        """The root of the current interval's entries so far."""
        with self._lock:
            return self._book.root

    def seal_interval(self) -> tuple[int, bytes, int]:
        """Close the current interval: (its number, root, entry count); a new one begins."""
        with self._lock:
            sealed = self._book.seal()
            self._rows.put(("seal", *sealed))
        self.flush()
        return sealed

    def flush(self) -> None:
        """Wait until every journaled entry is in the file."""
        done = threading.Event()
        self._rows.put(done)
        done.wait()
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        self.flush()
        self._rows.put(_STOP)
        self._writer.join()
        self._db.close()

    def _write_loop(self) -> None:
        while True:
            batch = [self._rows.get()]
            while True:
                try:
                    batch.append(self._rows.get_nowait())
                except queue.Empty:
                    break
            rows = [b for b in batch if isinstance(b, tuple)]
            try:
                self._write(rows)
            except Exception as exc:  # a full disk: kept, raised by the next flush
                self.error = exc
            for b in batch:
                if isinstance(b, threading.Event):
                    b.set()
            if any(b is _STOP for b in batch):
                return

    def _write(self, rows: list[tuple[Any, ...]]) -> None:
        if not rows:
            return
        with immediate(self._db):
            for row in rows:
                if row[0] == "seal":
                    self._db.execute("INSERT INTO intervals VALUES (?, ?, ?, ?)",
                                     (row[1], format_address(row[2]), row[3], time.time_ns()))
                    continue
                interval, e, body = row
                self._db.execute(
                    "INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (interval, e.seq, e.time_ns, e.access, e.verdict, e.cause,
                     format_address(e.content), format_address(e.policy), e.label, e.path,
                     body))


def _verdict(access: str, verdict: str, cause: str, content: bytes, policy: bytes,
             label: str, journal: str) -> Verdict:
    """A decision given by its fields (``verdict`` by name, checked) as the core's Verdict."""
    code_of(VERDICTS, verdict, "verdict")
    return Verdict(access, verdict == ALLOW, cause, content, policy, label, journal)


def read_journal(path: Path | str) -> dict[str, Any]:
    """The journal file as JSON: its run, sealed intervals (root, count) and entries,
    each interval's root recomputed from the stored fields and compared, and
    ``bad_entries``: every entry whose fields cannot be read or whose stored ``body`` is
    not their canonical bytes (``{"seq", "interval", "error"}``)."""
    db = sqlite.connect(path)
    # An edited text that is not UTF-8 must be a mismatch to report, not a crash.
    db.text_factory = lambda raw: raw.decode("utf-8", "surrogateescape")
    bad: list[dict[str, Any]] = []
    try:
        meta = dict(db.execute("SELECT key, value FROM meta"))
        stored = {n: (root, count) for n, root, count in
                  db.execute("SELECT interval, root, entries FROM intervals")}
        by_interval: dict[int, list[JournalEntry]] = {}
        for row in db.execute("SELECT interval, seq, time_ns, access, verdict, cause, bytes,"
                              " policy, label, path, CAST(body AS BLOB) FROM entries ORDER BY seq"):
            n, seq, body = row[0], row[1], row[10]
            try:
                e = _entry(row[1:10])
                check_body(e, body)
            except (FleetError, ValueError, TypeError) as exc:
                bad.append({"seq": seq, "interval": n, "error": str(exc)})
                continue
            by_interval.setdefault(n, []).append(e)
    finally:
        db.close()
    intervals = [interval_report(n, by_interval.get(n, []), stored.get(n))
                 for n in sorted(set(stored) | set(by_interval))]
    return {"run": meta.get("run"), "intervals": intervals, "bad_entries": bad}


def _rows(db: Any, where: str, args: tuple[Any, ...]) -> Iterator[tuple[int, JournalEntry]]:
    """(interval, entry) of the stored rows, rebuilt from their columns: the chain is the
    core's (:class:`~fleet.env.exec_journal.JournalChain`) over these, never a stored copy."""
    for row in db.execute("SELECT interval, seq, time_ns, access, verdict, cause, bytes,"
                          " policy, label, path FROM entries " + where, args):
        yield row[0], _entry(row[1:])


def _entry(row: tuple[Any, ...]) -> JournalEntry:
    seq, t, access, verdict, cause, content, policy, label, p = row
    return JournalEntry(seq, t, access, verdict, cause, parse_address(content),
                        parse_address(policy), label, p)


def _entries(db: Any, interval: int) -> Iterator[JournalEntry]:
    for _n, e in _rows(db, "WHERE interval = ? ORDER BY seq", (interval,)):
        yield e
