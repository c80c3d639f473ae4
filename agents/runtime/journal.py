"""The runtime's journal and blob store: one SQLite file per host folder (``runtime.db``).

Entries are hash-chained (:mod:`fleet.runtime.runtime_journal`); an append is one ``BEGIN
IMMEDIATE`` transaction holding the entry and, for a value, its encrypted blob and key, so
a crash before the commit means the entry never happened and after it, it always did.
Every blob is encrypted with its own key (PyNaCl SecretBox); :meth:`Journal.shred` deletes
the key and the ciphertext, after which the value is gone and every hash still verifies.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nacl.secret import SecretBox

from fleet_ledger.fleet.address import format_address, parse_address
from fleet_ledger.fleet.runtime.runtime_errors import JournalTampered, ValueShredded
from fleet_ledger.fleet.runtime.runtime_journal import (
    blob_address,
    canon,
    chain_hashes,
    entry_hash,
    genesis,
    value_addresses,
)
from fleet_ledger.fleet.runtime.runtime_journal import open_blob as open_blob_raw
from fleet_ledger.plumbing import sqlite
from fleet_ledger.plumbing.transactions import immediate

DB_NAME = "runtime.db"

SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (run TEXT NOT NULL, seq INTEGER NOT NULL,
  kind TEXT NOT NULL, call TEXT NOT NULL, body TEXT NOT NULL, hash BLOB NOT NULL,
  PRIMARY KEY (run, seq));
CREATE TABLE IF NOT EXISTS blobs (address BLOB PRIMARY KEY, box BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS blob_keys (address BLOB PRIMARY KEY, key BLOB NOT NULL,
  salt BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS runs (run TEXT PRIMARY KEY, name TEXT NOT NULL,
  workflow TEXT NOT NULL, status TEXT NOT NULL, meta TEXT NOT NULL);
"""


@dataclass(frozen=True, slots=True)
class Entry:
    seq: int
    kind: str
    call: str
    body: str
    hash: bytes

    def data(self) -> dict[str, Any]:
        return json.loads(self.body)


@dataclass(frozen=True, slots=True)
class Value:
    """A value put in the blob store: its address (what entries commit to) and bytes."""

    address: str
    raw: bytes


class Journal:
    """The journals of every run on one host, and their blobs."""

    def __init__(self, data_dir: Path | str) -> None:
        self.dir = Path(data_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.db = sqlite.connect(self.dir / DB_NAME, busy_timeout_s=30.0)
        self.db.executescript(SCHEMA)
        # Group commit: entries appended with ``defer`` wait here (per run) and are written
        # in the transaction of the run's next append, or by flush() (docs/runtime.md).
        self._pending: dict[str, list[tuple[tuple[Any, ...], tuple[tuple[bytes, bytes, bytes,
                                                                          bytes], ...]]]] = {}
        self._runs_pending: dict[str, tuple[str, dict[str, Any]]] = {}  # set_run(defer=True)

    def close(self) -> None:
        self.flush()
        self.db.close()

    # -- runs --------------------------------------------------------------------------

    def create_run(self, run: str, name: str, workflow: str, meta: dict[str, Any]) -> bool:
        """Record a run; False when it exists already."""
        with immediate(self.db):
            got = self.db.execute("SELECT 1 FROM runs WHERE run = ?", (run,)).fetchone()
            if got is not None:
                return False
            self.db.execute("INSERT INTO runs VALUES (?, ?, ?, ?, ?)",
                            (run, name, workflow, "new", canon(meta).decode()))
            return True

    def run_row(self, run: str) -> tuple[str, str, str, dict[str, Any]] | None:
        row = self.db.execute("SELECT name, workflow, status, meta FROM runs WHERE run = ?",
                              (run,)).fetchone()
        if row is not None and run in self._runs_pending:  # this process's deferred mark
            return row[0], row[1], *self._runs_pending[run]
        return None if row is None else (row[0], row[1], row[2], json.loads(row[3]))

    def set_run(self, run: str, status: str, meta: dict[str, Any], *,
                defer: bool = False) -> None:
        """Set a run's status and meta; with ``defer``, only in this process until the
        run's next entries are written, in their transaction (a mark that must be durable
        before any entry it speaks of, and need not be before; with no entry it is never
        written: the next set_run replaces it)."""
        if defer:
            self._runs_pending[run] = (status, json.loads(canon(meta)))
            return
        self._runs_pending.pop(run, None)
        self.db.execute("UPDATE runs SET status = ?, meta = ? WHERE run = ?",
                        (status, canon(meta).decode(), run))

    def runs(self) -> list[tuple[str, str, str, str, dict[str, Any]]]:
        rows = self.db.execute("SELECT run, name, workflow, status, meta FROM runs ORDER BY"
                               " name").fetchall()
        return [(r[0], r[1], r[2], r[3], json.loads(r[4])) for r in rows]

    # -- entries -----------------------------------------------------------------------

    def entries(self, run: str, start: int = 0) -> list[Entry]:
        """The run's entries from seq ``start`` on (deferred ones written first)."""
        self.flush(run)
        rows = self.db.execute("SELECT seq, kind, call, body, hash FROM entries WHERE run = ?"
                               " AND seq >= ? ORDER BY seq", (run, start)).fetchall()
        return [Entry(*row) for row in rows]

    def with_id(self, run: str, kinds: tuple[str, ...], ident: str) -> list[Entry]:
        """The run's entries of ``kinds`` whose body may carry ``"id": ident`` (a filter on
        the canonical text, read in SQLite: the caller checks the parsed body)."""
        self.flush(run)
        marks = ",".join("?" * len(kinds))
        needle = '"id":' + canon(ident).decode()
        rows = self.db.execute(f"SELECT seq, kind, call, body, hash FROM entries WHERE run = ?"
                               f" AND kind IN ({marks}) AND instr(body, ?) > 0 ORDER BY seq",
                               (run, *kinds, needle)).fetchall()
        return [Entry(*row) for row in rows]

    def head(self, run: str, workflow: str) -> tuple[int, bytes]:
        """The next seq and the chain's head (a deferred entry counts)."""
        if self._pending.get(run):
            last = self._pending[run][-1][0]
            return last[1] + 1, last[5]
        row = self.db.execute("SELECT seq, hash FROM entries WHERE run = ? ORDER BY seq DESC"
                              " LIMIT 1", (run,)).fetchone()
        return (0, genesis(run, workflow)) if row is None else (row[0] + 1, row[1])

    def append(self, run: str, workflow: str, kind: str, call: str, body: dict[str, Any],
               values: tuple[tuple[Value, bytes, bytes], ...] = (), *,
               defer: bool = False) -> Entry:
        """Append one entry (and the blobs it commits to) in one transaction, together with
        the run's deferred entries. With ``defer`` the entry is only queued: it is written
        (it happened) with the run's next append or flush, and a crash before that means it
        never happened."""
        text = canon(body).decode()
        seq, prev = self.head(run, workflow)
        digest = entry_hash(prev, seq, kind, call, text)
        blobs = tuple((parse_address(value.address), SecretBox(key).encrypt(value.raw), key,
                       salt) for value, key, salt in values)
        self._pending.setdefault(run, []).append(((run, seq, kind, call, text, digest),
                                                  blobs))
        if not defer:
            self.flush(run)
        return Entry(seq, kind, call, text, digest)

    def flush(self, run: str | None = None) -> None:
        """Write the deferred entries of ``run`` (of every run with None) in one
        transaction."""
        runs = [run] if run is not None else list(self._pending)
        pending = [p for r in runs for p in self._pending.get(r, [])]
        if not pending:
            return
        # A deferred mark is written with the run's entries (it speaks of them), else not.
        marks = [(r, self._runs_pending.pop(r)) for r in runs
                 if r in self._runs_pending and self._pending.get(r)]
        with immediate(self.db):
            for r, (status, meta) in marks:
                self.db.execute("UPDATE runs SET status = ?, meta = ? WHERE run = ?",
                                (status, canon(meta).decode(), r))
            for r in runs:  # the head a deferred entry chained to must still be the head
                if r in self._pending:
                    self._check_head(r, self._pending[r][0][0])
            for row, blobs in pending:
                for raw_address, box, key, salt in blobs:
                    self.db.execute("INSERT OR IGNORE INTO blobs VALUES (?, ?)",
                                    (raw_address, box))
                    self.db.execute("INSERT OR IGNORE INTO blob_keys VALUES (?, ?, ?)",
                                    (raw_address, key, salt))
                self.db.execute("INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?)", row)
        for r in runs:
            self._pending.pop(r, None)

    def _check_head(self, run: str, first: tuple[Any, ...]) -> None:
        """The first queued entry of ``run`` must follow the stored head (else another
        writer appended meanwhile: the INSERT's key refuses a seq taken; this refuses a
        chain that forked)."""
        row = self.db.execute("SELECT seq, hash FROM entries WHERE run = ? ORDER BY seq DESC"
                              " LIMIT 1", (run,)).fetchone()
        if row is not None and (row[0] + 1 != first[1]):
            raise JournalTampered(f"journal of {run} moved under this process (entry"
                                  f" {row[0]} is stored; this process appends {first[1]})")

    # -- blobs -------------------------------------------------------------------------

    @staticmethod
    def seal_value(value: Any) -> tuple[Value, bytes, bytes]:
        """A JSON value as a blob: its salted address, its own key and salt."""
        raw = canon(value)
        salt, key = os.urandom(32), os.urandom(SecretBox.KEY_SIZE)
        return Value(format_address(blob_address(salt, raw)), raw), key, salt

    def value(self, address: str) -> Any:
        """The JSON value at ``address``; ValueShredded when its key is gone."""
        held = self._blob(parse_address(address))
        if held is None:
            raise ValueShredded(f"the value at {address} was shredded, or its key is not held"
                                " here (a worker's host holds keys only during an interval)")
        box, key, salt = held
        return json.loads(open_blob(address, box, key, salt))

    def values(self, addresses: list[str]) -> dict[str, Any]:
        """The JSON values at ``addresses`` read in a few queries (a replay's batch), each
        checked to open to its address; one whose key or ciphertext is gone is left out."""
        out: dict[str, Any] = {}
        raw = {parse_address(a): a for a in addresses}
        keys = list(raw)
        for i in range(0, len(keys), 500):
            chunk = keys[i:i + 500]
            marks = ",".join("?" * len(chunk))
            rows = self.db.execute(
                "SELECT b.address, b.box, k.key, k.salt FROM blobs b JOIN blob_keys k ON"
                f" k.address = b.address WHERE b.address IN ({marks})", chunk).fetchall()
            for raw_address, box, key, salt in rows:
                out[raw[raw_address]] = json.loads(
                    open_blob_raw(raw_address, box, key, salt))
        return out

    def _blob(self, raw_address: bytes) -> tuple[bytes, bytes, bytes] | None:
        """A blob's ciphertext, key and salt (a deferred one too); None when its key or
        ciphertext is gone."""
        for queued in self._pending.values():
            for _row, blobs in queued:
                for held in blobs:
                    if held[0] == raw_address:
                        return held[1], held[2], held[3]
        key = self.db.execute("SELECT key, salt FROM blob_keys WHERE address = ?",
                              (raw_address,)).fetchone()
        box = self._box(raw_address)
        return None if key is None or box is None else (box, key[0], key[1])

    def _box(self, raw_address: bytes) -> bytes | None:
        """A stored blob's ciphertext (its key may be here or only in the key bucket)."""
        row = self.db.execute("SELECT box FROM blobs WHERE address = ?",
                              (raw_address,)).fetchone()
        return None if row is None else bytes(row[0])

    def shred(self, address: str) -> bool:
        """Delete a value's key and ciphertext; True when this host held either (a worker's
        host holds the key only during an interval: the fleet's bucket holds it)."""
        raw_address = parse_address(address)
        with immediate(self.db):
            gone = self.db.execute("DELETE FROM blob_keys WHERE address = ?",
                                   (raw_address,)).rowcount
            gone += self.db.execute("DELETE FROM blobs WHERE address = ?",
                                    (raw_address,)).rowcount
        return bool(gone)

    def forget_keys(self, run: str) -> int:
        """Delete the keys of ``run``'s values here (their ciphertexts stay): once they are in
        the fleet's key bucket, that is the one place a key lives, so a shred there reaches
        every host. Returns how many were deleted."""
        raw = [parse_address(a) for e in self.entries(run) for a in addresses(e)]
        with immediate(self.db):
            return sum(self.db.execute("DELETE FROM blob_keys WHERE address = ?",
                                       (a,)).rowcount for a in raw)

    def missing_keys(self, run: str) -> list[str]:
        """Addresses of ``run``'s values whose ciphertext is here and whose key is not."""
        out = []
        for entry in self.entries(run):
            for address in addresses(entry):
                raw = parse_address(address)
                has_box = self.db.execute("SELECT 1 FROM blobs WHERE address = ?",
                                          (raw,)).fetchone()
                has_key = self.db.execute("SELECT 1 FROM blob_keys WHERE address = ?",
                                          (raw,)).fetchone()
                if has_box and not has_key:
                    out.append(address)
        return out

    def put_keys(self, keys: dict[str, list[str]]) -> None:
        """Take keys back for an interval (from the key bucket), each checked to open its
        blob to its address (else JournalTampered, nothing written)."""
        rows = []
        for address, (key_text, salt_text) in keys.items():
            raw = parse_address(address)
            box = self._box(raw)
            if box is None:
                continue
            key, salt = _unb64(key_text), _unb64(salt_text)
            open_blob(address, box, key, salt)
            rows.append((raw, key, salt))
        with immediate(self.db):
            self.db.executemany("INSERT OR IGNORE INTO blob_keys VALUES (?, ?, ?)", rows)

    # -- moving a journal between hosts -------------------------------------------------

    def export(self, run: str) -> tuple[dict[str, Any], dict[str, list[str]]]:
        """The run's journal with its encrypted blobs (what another host imports), and the
        blobs' keys apart (kept where shredding can reach them: ``fleet_store``)."""
        name, workflow, _status, _meta = self.run_row(run) or ("", "", "", {})
        entries = self.entries(run)
        blobs: dict[str, str] = {}
        keys: dict[str, list[str]] = {}
        for entry in entries:
            for address in addresses(entry):
                raw = parse_address(address)
                held = self._blob(raw)
                if held is not None:
                    box, key, salt = held
                    blobs[address] = _b64(box)
                    keys[address] = [_b64(key), _b64(salt)]
                elif (shut := self._box(raw)) is not None:
                    # A key given back to the fleet's bucket after its interval: the
                    # ciphertext still travels, the key is the bucket's to give.
                    blobs[address] = _b64(shut)
        journal = {"run": run, "name": name, "workflow": workflow,
                   "entries": [[e.seq, e.kind, e.call, e.body] for e in entries],
                   "blobs": blobs}
        return journal, keys

    def import_run(self, data: dict[str, Any], head: bytes, meta: dict[str, Any],
                   keys: dict[str, list[str]]) -> None:
        """Take in another host's export after checking that its entries chain to ``head``
        (the park's transcript address) and every blob whose key is given to its address:
        else JournalTampered and nothing is written. A blob without a key was shredded."""
        run, workflow = str(data["run"]), str(data["workflow"])
        entries = [tuple(e) for e in data["entries"]]
        rows = [(run, *entry, h) for entry, h in zip(
            entries, chain_hashes(run, workflow, entries), strict=True)]
        prev = rows[-1][-1] if rows else genesis(run, workflow)
        if prev != head:
            raise JournalTampered(f"the journal of {run} does not chain to its park's"
                                  f" transcript address {format_address(head)}")
        blobs = []
        for address, box in data["blobs"].items():
            if address not in keys:
                continue
            key, salt = (_unb64(k) for k in keys[address])
            open_blob(address, _unb64(box), key, salt)
            blobs.append((parse_address(address), _unb64(box), key, salt))
        with immediate(self.db):
            self.db.execute("DELETE FROM entries WHERE run = ?", (run,))
            self.db.executemany("INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?)", rows)
            for raw_address, box, key, salt in blobs:
                self.db.execute("INSERT OR IGNORE INTO blobs VALUES (?, ?)", (raw_address, box))
                self.db.execute("INSERT OR IGNORE INTO blob_keys VALUES (?, ?, ?)",
                                (raw_address, key, salt))
            self.db.execute("INSERT INTO runs VALUES (?, ?, ?, ?, ?) ON CONFLICT(run) DO"
                            " UPDATE SET status = excluded.status, meta = excluded.meta",
                            (run, str(data["name"]), workflow, "parked", canon(meta).decode()))


def open_blob(address: str, box: bytes, key: bytes, salt: bytes) -> bytes:
    """A blob's plaintext, checked to hash to ``address``
    (:func:`fleet.runtime.runtime_journal.open_blob`)."""
    return open_blob_raw(parse_address(address), box, key, salt)


def verify_chain(run: str, workflow: str, entries: list[Entry], trusted: int = 0) -> bytes:
    """The head of ``entries`` after recomputing every hash; JournalTampered at the first
    entry whose stored hash is not its own. With ``trusted`` = k, entries 0 .. k-1 are
    taken as verified and the chain is recomputed from entry k on, from entry k-1's stored
    hash."""
    prev = genesis(run, workflow) if trusted == 0 else entries[trusted - 1].hash
    if trusted == 0 and entries and entries[0].seq != 0:
        raise JournalTampered(f"journal entry 0 is numbered {entries[0].seq}")
    return verify_from(prev, entries[trusted:])


def verify_from(prev: bytes, entries: list[Entry]) -> bytes:
    """The head after ``entries`` (numbered on from the first one's seq) chained from
    ``prev``; JournalTampered at the first whose stored hash is not its own."""
    first = entries[0].seq if entries else 0
    for i, entry in enumerate(entries, first):
        if entry.seq != i:
            raise JournalTampered(f"journal entry {i} is numbered {entry.seq}")
        prev = entry_hash(prev, entry.seq, entry.kind, entry.call, entry.body)
        if prev != entry.hash:
            raise JournalTampered(f"journal entry {i} ({entry.kind} {entry.call}) does not"
                                  " hash to its stored hash")
    return prev


def addresses(entry: Entry) -> list[str]:
    """The blob addresses an entry commits to."""
    return value_addresses(entry.body)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _unb64(text: str) -> bytes:
    return base64.b64decode(text)


__all__ = ["DB_NAME", "Entry", "Journal", "Value", "addresses", "open_blob",
           "verify_chain", "verify_from"]
