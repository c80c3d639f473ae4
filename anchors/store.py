"""Anchor receipts and per-anchor progress, kept in the ledger's own SQLite file.

Two tables, created by :func:`ensure_tables`: ``anchor_receipts`` (one row per anchor and
checkpoint size anchored) and ``anchor_state`` (per anchor: last anchored size and time,
last error). The readers here take a plain connection, so the ledger's status view, its
proof view and the anchoring task (its own connection) share them.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from anchors.base import Receipt
from plumbing.transactions import immediate

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS anchor_receipts (anchor TEXT NOT NULL, size INTEGER NOT NULL,"
    " kind TEXT NOT NULL, data TEXT NOT NULL, at REAL NOT NULL, PRIMARY KEY (anchor, size))",
    "CREATE TABLE IF NOT EXISTS anchor_state (anchor TEXT PRIMARY KEY, kind TEXT NOT NULL,"
    " anchored_size INTEGER, anchored_at REAL, error TEXT, error_at REAL,"
    " failures INTEGER NOT NULL DEFAULT 0)",
)


def ensure_tables(conn: sqlite3.Connection) -> None:
    for statement in _SCHEMA:
        conn.execute(statement)


def _has_tables(conn: sqlite3.Connection) -> bool:
    row = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table'"
                       " AND name = 'anchor_state'").fetchone()
    return row is not None


def register(conn: sqlite3.Connection, name: str, kind: str) -> None:
    conn.execute("INSERT INTO anchor_state (anchor, kind) VALUES (?, ?) ON CONFLICT(anchor)"
                 " DO UPDATE SET kind = excluded.kind", (name, kind))


def record_receipt(conn: sqlite3.Connection, receipt: Receipt) -> None:
    now = time.time()
    with immediate(conn):
        conn.execute("INSERT OR REPLACE INTO anchor_receipts (anchor, size, kind, data, at)"
                     " VALUES (?, ?, ?, ?, ?)",
                     (receipt.anchor, receipt.size, receipt.kind, receipt.data, now))
        conn.execute("UPDATE anchor_state SET anchored_size = MAX(COALESCE(anchored_size, 0), ?),"
                     " anchored_at = ?, error = NULL, failures = 0 WHERE anchor = ?",
                     (receipt.size, now, receipt.anchor))


def record_error(conn: sqlite3.Connection, name: str, error: str) -> None:
    conn.execute("UPDATE anchor_state SET error = ?, error_at = ?, failures = failures + 1"
                 " WHERE anchor = ?", (error[:500], time.time(), name))


def last_anchored(conn: sqlite3.Connection, name: str) -> int:
    row = conn.execute("SELECT anchored_size FROM anchor_state WHERE anchor = ?",
                       (name,)).fetchone()
    return 0 if row is None or row[0] is None else int(row[0])


def anchor_status(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """Per anchor: kind, last anchored size and time, lag behind the last checkpoint (leaves
    and seconds since the first checkpoint it has not anchored), last error."""
    if not _has_tables(conn):
        return []
    last = conn.execute("SELECT MAX(size) FROM checkpoints").fetchone()[0] or 0
    rows = conn.execute("SELECT anchor, kind, anchored_size, anchored_at, error, error_at,"
                        " failures FROM anchor_state ORDER BY anchor").fetchall()
    now = time.time()
    out = []
    for name, kind, size, at, error, error_at, failures in rows:
        anchored = size or 0
        pending = conn.execute("SELECT MIN(at) FROM checkpoints WHERE size > ?",
                               (anchored,)).fetchone()[0]
        out.append({
            "name": name, "kind": kind, "anchored_size": size, "anchored_at": at,
            "lag": max(0, last - anchored),
            "lag_s": None if pending is None else round(now - pending, 3),
            "error": error, "error_at": error_at, "failures": failures,
        })
    return out


def receipts_covering(conn: sqlite3.Connection, size: int) -> list[Receipt]:
    """For each anchor, its receipt of the smallest anchored checkpoint of ``size`` or more."""
    if not _has_tables(conn):
        return []
    rows = conn.execute(
        "SELECT r.anchor, r.kind, r.size, r.data FROM anchor_receipts r JOIN"
        " (SELECT anchor, MIN(size) AS size FROM anchor_receipts WHERE size >= ?"
        "  GROUP BY anchor) m ON r.anchor = m.anchor AND r.size = m.size ORDER BY r.anchor",
        (size,)).fetchall()
    return [Receipt(a, k, s, d) for a, k, s, d in rows]


def bundle_fields(conn: sqlite3.Connection, tree: Any, size: int) -> dict[str, Any]:
    """The optional proof-bundle keys for a bundle on the checkpoint of ``size``.

    ``anchors``: each anchor's receipt of the smallest anchored checkpoint >= ``size``;
    ``anchor_checkpoints`` / ``anchor_consistency``: for each such later size, the ledger's
    signed note and the RFC 9162 consistency proof (hex) from ``size`` to it. Empty when
    nothing covers the checkpoint yet.
    """
    receipts = receipts_covering(conn, size)
    if not receipts:
        return {}
    later = sorted({r.size for r in receipts if r.size != size})
    notes = dict(conn.execute(
        f"SELECT size, note FROM checkpoints WHERE size IN ({','.join('?' * len(later))})",
        later).fetchall()) if later else {}
    return {
        "anchors": [r.as_json() for r in receipts],
        "anchor_checkpoints": {str(s): notes[s] for s in later},
        "anchor_consistency": {str(s): [h.hex() for h in tree.consistency_proof(size, s)]
                               for s in later},
    }
