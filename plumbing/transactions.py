"""SQLite write transactions, one way everywhere: ``BEGIN IMMEDIATE`` ... ``COMMIT``.

IMMEDIATE takes the write lock at the start, so two writers (the ledger and an operator's
``fleet host enroll``, a host and its publisher) wait for each other at the door instead
of failing halfway. Any exception rolls back, a failed ``COMMIT`` (a full disk) too: the
connection is never left inside a transaction for the next caller to stumble on.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def immediate(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction on ``conn`` (opened with ``isolation_level=None``)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
