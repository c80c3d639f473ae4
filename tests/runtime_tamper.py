"""Ways to tamper with a parked run's journal in a host's ``runtime.db``, as someone who
can write that file would: delete the last entry, edit an entry in place, or swap a step's
value for a forged one and re-hash the chain so that it verifies again."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from nacl.secret import SecretBox

from fleet_ledger.agents.runtime.journal import DB_NAME, Journal
from fleet_ledger.fleet.address import parse_address
from fleet_ledger.fleet.runtime.runtime_journal import canon, chain_hashes


def _db(host_dir: Path) -> sqlite3.Connection:
    return sqlite3.connect(host_dir / DB_NAME, isolation_level=None, timeout=30)


def _rows(db: sqlite3.Connection, run: str) -> list[tuple[int, str, str, str]]:
    return db.execute("SELECT seq, kind, call, body FROM entries WHERE run = ? ORDER BY seq",
                      (run,)).fetchall()


def delete_last(host_dir: Path, run: str) -> None:
    """Delete the journal's last entry (the chain that is left still verifies)."""
    db = _db(host_dir)
    db.execute("DELETE FROM entries WHERE run = ? AND seq = (SELECT MAX(seq) FROM entries"
               " WHERE run = ?)", (run, run))
    db.close()


def edit_entry(host_dir: Path, run: str, kind: str = "dispatch") -> None:
    """Edit the first ``kind`` entry's body in place, leaving its stored hash."""
    db = _db(host_dir)
    seq, _k, _c, body = next(r for r in _rows(db, run) if r[1] == kind)
    data = json.loads(body)
    data["site"] = "forged.py:1"
    db.execute("UPDATE entries SET body = ? WHERE run = ? AND seq = ?",
               (canon(data).decode(), run, seq))
    db.close()


def forge_value(host_dir: Path, run: str, workflow: str, value: Any) -> None:
    """Replace the first step result with ``value`` (a new blob with its own key and salt)
    and re-hash every entry from there, so that the chain verifies."""
    db = _db(host_dir)
    rows = _rows(db, run)
    seq, kind, call, body = next(r for r in rows if r[1] == "resolve")
    sealed, key, salt = Journal.seal_value(value)
    address = parse_address(sealed.address)
    db.execute("INSERT INTO blobs VALUES (?, ?)", (address, SecretBox(key).encrypt(sealed.raw)))
    db.execute("INSERT INTO blob_keys VALUES (?, ?, ?)", (address, key, salt))
    data = json.loads(body)
    data["value"] = sealed.address
    rows[seq] = (seq, kind, call, canon(data).decode())
    db.execute("BEGIN")
    for (s, _k, _c, b), h in zip(rows, chain_hashes(run, workflow, rows), strict=True):
        db.execute("UPDATE entries SET body = ?, hash = ? WHERE run = ? AND seq = ?",
                   (b, h, run, s))
    db.execute("COMMIT")
    db.close()


def run_status(host_dir: Path, run: str) -> tuple[str, dict[str, Any]]:
    db = _db(host_dir)
    try:
        status, meta = db.execute("SELECT status, meta FROM runs WHERE run = ?",
                                  (run,)).fetchone()
    finally:
        db.close()
    return status, json.loads(meta)
