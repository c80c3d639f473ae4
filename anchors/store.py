"""Anchor receipts and per-anchor progress: the anchors' own tables in the ledger's file.

Two tables, created by :meth:`AnchorStore.ensure_tables`: ``anchor_receipts`` (one row per
anchor and checkpoint size anchored) and ``anchor_state`` (per anchor: last anchored size
and time, last error). They live in the ledger's SQLite file (one backup holds the log and
its receipts), but only this module reads or writes them; the ledger reads them through
:class:`plumbing.anchoring.ReceiptStore`, which :class:`AnchorStore` is. The anchoring task
and the ledger's reads each have a store (a connection) of their own.
"""

from __future__ import annotations

import sqlite3
import time

from fleet_ledger.anchors.base import Receipt
from fleet_ledger.plumbing.anchoring import AnchorState
from fleet_ledger.plumbing.transactions import immediate

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS anchor_receipts (anchor TEXT NOT NULL, size INTEGER NOT NULL,"
    " kind TEXT NOT NULL, data TEXT NOT NULL, at REAL NOT NULL, PRIMARY KEY (anchor, size))",
    "CREATE TABLE IF NOT EXISTS anchor_state (anchor TEXT PRIMARY KEY, kind TEXT NOT NULL,"
    " anchored_size INTEGER, anchored_at REAL, error TEXT, error_at REAL,"
    " failures INTEGER NOT NULL DEFAULT 0)",
)


class AnchorStore:
    """The anchor tables on ``conn`` (opened with ``isolation_level=None``; closed by
    :meth:`close`)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def close(self) -> None:
        self.conn.close()

    def ensure_tables(self) -> None:
        for statement in _SCHEMA:
            self.conn.execute(statement)

    def _has_tables(self) -> bool:
        row = self.conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table'"
                                " AND name = 'anchor_state'").fetchone()
        return row is not None

    # -- the anchoring task's writes ------------------------------------------------------

    def register(self, name: str, kind: str) -> None:
        self.conn.execute("INSERT INTO anchor_state (anchor, kind) VALUES (?, ?)"
                          " ON CONFLICT(anchor) DO UPDATE SET kind = excluded.kind",
                          (name, kind))

    def record_receipt(self, receipt: Receipt) -> None:
        now = time.time()
        with immediate(self.conn):
            self.conn.execute("INSERT OR REPLACE INTO anchor_receipts (anchor, size, kind, data,"
                              " at) VALUES (?, ?, ?, ?, ?)",
                              (receipt.anchor, receipt.size, receipt.kind, receipt.data, now))
            self.conn.execute("UPDATE anchor_state SET anchored_size = MAX(COALESCE("
                              "anchored_size, 0), ?), anchored_at = ?, error = NULL,"
                              " failures = 0 WHERE anchor = ?",
                              (receipt.size, now, receipt.anchor))

    def record_error(self, name: str, error: str) -> None:
        self.conn.execute("UPDATE anchor_state SET error = ?, error_at = ?,"
                          " failures = failures + 1 WHERE anchor = ?",
                          (error[:500], time.time(), name))

    # -- reads ----------------------------------------------------------------------------

    def last_anchored(self, name: str) -> int:
        row = self.conn.execute("SELECT anchored_size FROM anchor_state WHERE anchor = ?",
                                (name,)).fetchone()
        return 0 if row is None or row[0] is None else int(row[0])

    def witness_signatures(self, size: int) -> list[str]:
        """The receipts of every witness for the checkpoint of ``size`` (cosignature lines),
        by anchor name."""
        if not self._has_tables():
            return []
        rows = self.conn.execute("SELECT data FROM anchor_receipts WHERE size = ? AND"
                                 " kind = 'witness' ORDER BY anchor", (size,)).fetchall()
        return [data for (data,) in rows]

    def anchor_states(self) -> list[AnchorState]:
        """Per anchor, by name: kind, last anchored size and time, last error."""
        if not self._has_tables():
            return []
        rows = self.conn.execute(
            "SELECT anchor, kind, anchored_size, anchored_at, error, error_at, failures,"
            " (SELECT COUNT(*) FROM anchor_receipts r WHERE r.anchor = s.anchor)"
            " FROM anchor_state s ORDER BY anchor")
        return [AnchorState(*row) for row in rows]

    def receipts_covering(self, size: int) -> list[Receipt]:
        """For each anchor, its receipt of the smallest anchored checkpoint of ``size`` or
        more."""
        if not self._has_tables():
            return []
        rows = self.conn.execute(
            "SELECT r.anchor, r.kind, r.size, r.data FROM anchor_receipts r JOIN"
            " (SELECT anchor, MIN(size) AS size FROM anchor_receipts WHERE size >= ?"
            "  GROUP BY anchor) m ON r.anchor = m.anchor AND r.size = m.size ORDER BY r.anchor",
            (size,)).fetchall()
        return [Receipt(a, k, s, d) for a, k, s, d in rows]
