"""SQLite write transactions (plumbing.transactions.immediate): all or nothing, never left open."""

from __future__ import annotations

import sqlite3

import pytest

from fleet_ledger.plumbing.transactions import immediate


def _db(tmp_path) -> sqlite3.Connection:  # type: ignore[no-untyped-def]
    conn = sqlite3.connect(tmp_path / "t.db", isolation_level=None)
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
    conn.execute("CREATE TABLE child (id INTEGER PRIMARY KEY, parent INTEGER REFERENCES"
                 " parent(id) DEFERRABLE INITIALLY DEFERRED)")
    return conn


def test_commits_on_success_and_rolls_back_on_an_exception(tmp_path):
    conn = _db(tmp_path)
    with immediate(conn):
        conn.execute("INSERT INTO parent VALUES (1)")
    with pytest.raises(RuntimeError), immediate(conn):
        conn.execute("INSERT INTO parent VALUES (2)")
        raise RuntimeError("stop")
    assert not conn.in_transaction
    assert conn.execute("SELECT id FROM parent").fetchall() == [(1,)]


def test_a_failed_commit_is_rolled_back_not_left_open(tmp_path):
    """A COMMIT that fails (here a deferred constraint; a full disk in life) rolls back:
    the connection is out of the transaction and the next one starts cleanly."""
    conn = _db(tmp_path)
    with pytest.raises(sqlite3.IntegrityError), immediate(conn):
        conn.execute("INSERT INTO parent VALUES (5)")
        conn.execute("INSERT INTO child VALUES (1, 99)")  # checked at COMMIT
    assert not conn.in_transaction
    assert conn.execute("SELECT count(*) FROM parent").fetchone() == (0,)
    with immediate(conn):
        conn.execute("INSERT INTO parent VALUES (6)")
    assert conn.execute("SELECT id FROM parent").fetchall() == [(6,)]
