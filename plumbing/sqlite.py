"""Opening a SQLite file, one way everywhere: WAL journal, ``synchronous=FULL``.

Every database of the fleet (the ledger's store, a host's outbox and run states, a
standalone tree file) is opened by :func:`connect`, so each one survives power loss once a
commit returns and readers never block its writer. What differs between them is a choice
the caller names:

- ``autocommit=True`` (``isolation_level=None``): nothing opens a transaction behind the
  caller's back; writes go in :func:`plumbing.transactions.immediate` (or the caller's own
  ``BEGIN IMMEDIATE``). ``False``: Python's sqlite3 opens a deferred transaction before the
  first write and the caller ends it with ``conn.commit()``.
- ``busy_timeout_s``: how long a statement waits for another connection's write lock.
- ``wal_autocheckpoint``: WAL pages after which a commit on this connection copies the WAL
  into the database (SQLite's default, 1000, when None).
- ``read_only``: the file is opened ``mode=ro`` (it must exist and already be in WAL mode,
  as every file opened here is): a reader that can never take the write lock, e.g. the
  ledger's HTTP server beside its fold.

Connections may be used from any thread (``check_same_thread=False``); callers that do
serialise their use themselves (a lock, or one thread at a time).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path


def connect(path: str | Path, *, autocommit: bool = True, busy_timeout_s: float = 5.0,
            wal_autocheckpoint: int | None = None, read_only: bool = False
            ) -> sqlite3.Connection:
    """A connection to the SQLite file ``path`` (see the module docstring)."""
    if read_only:
        uri = Path(path).resolve().as_uri() + "?mode=ro"
        return sqlite3.connect(uri, uri=True, isolation_level=None, timeout=busy_timeout_s,
                               check_same_thread=False)
    # DEFERRED: what the legacy default "" begins too (SQLite's BEGIN is deferred).
    conn = sqlite3.connect(str(path), isolation_level=None if autocommit else "DEFERRED",
                           timeout=busy_timeout_s, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    if wal_autocheckpoint is not None:
        conn.execute(f"PRAGMA wal_autocheckpoint={int(wal_autocheckpoint)}")
    return conn
