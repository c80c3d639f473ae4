"""The exec journal's file: a small SQLite database in the run's host folder.

Tables: ``meta`` (the run it belongs to, when given), ``entries`` (interval, seq, an
entry's fields, and ``body``, its canonical bytes of :mod:`fleet.exec_journal`, kept in
the file's format for outside readers) and ``intervals`` (each sealed interval's root and
entry count). The chain is computed in memory as entries arrive (so
:meth:`ExecJournal.root` is exact at once); rows are written by one writer thread in
batches, so a decision never waits for an fsync. Resuming and reading rebuild each entry
from its fields and chain it with the core's :class:`~fleet.exec_journal.JournalChain`;
reading also checks that ``body`` is exactly the canonical bytes of those fields, so every
stored byte of an entry is checked: its fields by the interval's root, its body against
its fields (:func:`read_journal` lists the entries that fail, by seq).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fleet.address import format_address, parse_address
from fleet.errors import FleetError
from fleet.exec_journal import (
    JournalChain,
    JournalEntry,
    clip_path,
    entry_bytes,
    journal_root,
)
from plumbing import sqlite
from plumbing.transactions import immediate

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
        self._seq = row[0] or 0
        row = self._db.execute("SELECT max(interval) FROM intervals").fetchone()
        self.interval = (row[0] or 0) + 1
        self._chain = JournalChain()
        for e in _entries(self._db, self.interval):
            self._chain.add(e)
        self._once: set[tuple[bytes, str, str, bytes]] = set()
        self._lock = threading.Lock()
        self.error: Exception | None = None
        self._rows: queue.Queue[Any] = queue.Queue()
        self._writer = threading.Thread(target=self._write_loop, name="exec-journal",
                                        daemon=True)
        self._writer.start()

    def append(self, *, access: str, verdict: str, cause: str, content: bytes, policy: bytes,
               label: str, path: str) -> JournalEntry:
        """Journal one decision in the current interval."""
        with self._lock:
            return self._append(access, verdict, cause, content, policy, label, path)

    def append_once(self, *, access: str, verdict: str, cause: str, content: bytes,
                    policy: bytes, label: str, path: str) -> JournalEntry | None:
        """As :meth:`append`, but only if the current interval has no entry of the same
        (content, access, verdict, policy) from this method yet (``None`` then): the
        allow-listed mode's first allow of each address per interval, however the
        interval is sealed."""
        key = (content, access, verdict, policy)
        with self._lock:
            if key in self._once:
                return None
            self._once.add(key)
            return self._append(access, verdict, cause, content, policy, label, path)

    def _append(self, access: str, verdict: str, cause: str, content: bytes, policy: bytes,
                label: str, path: str) -> JournalEntry:
        self._seq += 1
        entry = JournalEntry(self._seq, time.time_ns(), access, verdict, cause, content,
                             policy, label, clip_path(path))
        body = self._chain.add(entry)
        self._rows.put((self.interval, entry, body))
        return entry

    def journaled(self, *, content: bytes, access: str, verdict: str, policy: bytes) -> bool:
        """Whether :meth:`append_once` with these fields would journal nothing now."""
        return (content, access, verdict, policy) in self._once

    def root(self) -> bytes:
        """The root of the current interval's entries so far."""
        with self._lock:
            return self._chain.root

    def seal_interval(self) -> tuple[int, bytes, int]:
        """Close the current interval: (its number, root, entry count); a new one begins."""
        with self._lock:
            sealed = (self.interval, self._chain.root, self._chain.count)
            self._rows.put(("seal", *sealed))
            self.interval += 1
            self._chain = JournalChain()
            self._once.clear()
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
                if entry_bytes(e) != body:
                    raise ValueError("the stored body is not the canonical bytes of the "
                                     "entry's fields")
            except (FleetError, ValueError, TypeError) as exc:
                bad.append({"seq": seq, "interval": n, "error": str(exc)})
                continue
            by_interval.setdefault(n, []).append(e)
    finally:
        db.close()
    intervals = []
    for n in sorted(set(stored) | set(by_interval)):
        entries = by_interval.get(n, [])
        root = format_address(journal_root(entries))
        item: dict[str, Any] = {
            "interval": n, "sealed": n in stored, "root": root, "entries": len(entries),
            "denied": sum(1 for e in entries if e.verdict == "deny"),
            "decisions": [e.to_json() for e in entries]}
        if n in stored:
            item["root_matches"] = stored[n][0] == root and stored[n][1] == len(entries)
        intervals.append(item)
    return {"run": meta.get("run"), "intervals": intervals, "bad_entries": bad}


def _rows(db: Any, where: str, args: tuple[Any, ...]) -> Iterator[tuple[int, JournalEntry]]:
    """(interval, entry) of the stored rows, rebuilt from their columns: the chain is the
    core's (:class:`~fleet.exec_journal.JournalChain`) over these, never a stored copy."""
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
