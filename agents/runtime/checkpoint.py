"""Replay checkpoints: a resume that neither re-reads nor re-verifies the journal's prefix.

A checkpoint of run R at entry k holds the journal's entries 0 .. k-1 as one blob (the
replay's state as of k: every command and resolution the workflow code is matched
against, and their chain hashes) and the head hash at k, bound by a keyed BLAKE3 MAC (the
key derived from the host's sealing key, else from a per-folder key file) over R, k, the
head and the blob (docs/spec/runtime.md §6). A resume with a valid checkpoint reads that
blob (one MAC check, one JSON parse: C speed, no per-entry hashing), reads only entries k
and after from the table and recomputes the chain from k. A checkpoint that does not
verify is rejected (``CheckpointRejected``, logged and counted) and treated as absent: the
resume reads and verifies every entry from genesis, so a tampered checkpoint costs time,
never correctness.

A workflow is a Python coroutine: its state cannot be saved, so a resume still re-runs the
workflow code against the journal (each replayed command a dict lookup and a compare).
What a checkpoint saves is the journal's per-entry reading and verification. Checkpoints
stay on their host: a verifier (``fleet runtime verify``) never sees them and checks every
entry from genesis; an export or a move to another host reads the entries table.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import struct
from collections.abc import Sequence
from hmac import compare_digest
from pathlib import Path

from blake3 import blake3

from fleet_ledger.agents.runtime.journal import Entry, Journal
from fleet_ledger.fleet.runtime.runtime_journal import canon, text

log = logging.getLogger(__name__)

KEY_FILE = "runtime-checkpoint.key"
KEY_CONTEXT = "fleet.runtime.checkpoint/1 mac key"
SCHEMA = """CREATE TABLE IF NOT EXISTS checkpoints (run TEXT PRIMARY KEY, seq INTEGER NOT
NULL, head BLOB NOT NULL, state BLOB NOT NULL, mac BLOB NOT NULL)"""
# A checkpoint is renewed when the entries after it exceed this share of it (and at least
# MIN_TAIL): the tail a resume verifies stays a small share of the journal, and rewriting
# the state blob costs O(1) amortised per entry.
TAIL_SHARE = 0.25
MIN_TAIL = 64


def pack(entries: Sequence[Entry]) -> bytes:
    """The state blob: ``[[kind, call, body, hash hex], ...]`` for entries 0 .. k-1."""
    return canon([[e.kind, e.call, e.body, e.hash.hex()] for e in entries])


def unpack(state: bytes) -> list[Entry]:
    return [Entry(i, kind, call, body, bytes.fromhex(h))
            for i, (kind, call, body, h) in enumerate(json.loads(state))]


def mac_key(seed: bytes) -> bytes:
    """The checkpoint MAC key derived from a secret ``seed`` (the host's sealing seed)."""
    return blake3(seed, derive_key_context=KEY_CONTEXT).digest()


def folder_key(data_dir: Path) -> bytes:
    """A key for a runtime without a host: a random seed in ``runtime-checkpoint.key``
    (mode 0600), created once."""
    path = Path(data_dir) / KEY_FILE
    try:
        seed = path.read_bytes()
    except FileNotFoundError:
        seed = os.urandom(32)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(seed)
    return mac_key(seed)


def _mac(key: bytes, run: str, seq: int, head: bytes, state: bytes) -> bytes:
    return blake3(b"fleet.runtime.checkpoint/1" + text(run) + struct.pack(">Q", seq) + head
                  + state, key=key).digest()


class CheckpointRejected(Exception):
    """A stored checkpoint that does not verify (forged, edited, or not this journal's)."""


class Checkpoints:
    """The checkpoints of the runs in one ``runtime.db`` (its own table)."""

    def __init__(self, db: sqlite3.Connection, key: bytes) -> None:
        self.db = db
        self.key = key
        self.rejected = 0  # checkpoints found not to verify, since this process started
        self.db.execute(SCHEMA)

    def take(self, run: str, entries: Sequence[Entry], force: bool = False) -> bool:
        """Checkpoint ``entries`` (all of the run's, verified) when the tail after the
        last checkpoint has grown past its share (or ``force``); True when taken."""
        if not entries:
            return False
        got = self.db.execute("SELECT seq FROM checkpoints WHERE run = ?", (run,)).fetchone()
        last = 0 if got is None else int(got[0])
        tail = len(entries) - last
        if not force and (tail < MIN_TAIL or tail < TAIL_SHARE * last):
            return False
        seq, head, state = len(entries), entries[-1].hash, pack(entries)
        self.db.execute(
            "INSERT INTO checkpoints VALUES (?, ?, ?, ?, ?) ON CONFLICT(run) DO UPDATE SET"
            " seq = excluded.seq, head = excluded.head, state = excluded.state,"
            " mac = excluded.mac", (run, seq, head, state, _mac(self.key, run, seq, head, state)))
        return True

    def load(self, run: str) -> list[Entry]:
        """The entries a valid checkpoint of ``run`` holds ([] without one); a checkpoint
        that does not verify raises CheckpointRejected."""
        row = self.db.execute("SELECT seq, head, state, mac FROM checkpoints WHERE run = ?",
                              (run,)).fetchone()
        if row is None:
            return []
        seq, head, state, mac = int(row[0]), bytes(row[1]), bytes(row[2]), bytes(row[3])
        if not compare_digest(mac, _mac(self.key, run, seq, head, state)):
            raise CheckpointRejected(f"the checkpoint of {run} at entry {seq} does not carry"
                                     " this host's MAC")
        entries = unpack(state)
        if len(entries) != seq or entries[-1].hash != head:
            raise CheckpointRejected(f"the checkpoint of {run} does not end at entry {seq}")
        return entries

    def entries(self, journal: Journal, run: str) -> tuple[list[Entry], int]:
        """``run``'s entries and how many leading ones a valid checkpoint vouches for (the
        chain is to be verified from there). A rejected checkpoint is logged, counted and
        treated as none; a checkpoint beyond the journal (entries deleted) too."""
        try:
            prefix = self.load(run)
        except CheckpointRejected as exc:
            self.rejected += 1
            log.warning("%s: verifying from genesis", exc)
            prefix = []
        if prefix:
            # The table must still hold entry k-1 with the hash the checkpoint ends at, else
            # the journal was cut or replaced under it: verify from genesis.
            row = journal.db.execute("SELECT hash FROM entries WHERE run = ? AND seq = ?",
                                     (run, len(prefix) - 1)).fetchone()
            if row is None or bytes(row[0]) != prefix[-1].hash:
                self.rejected += 1
                log.warning("the checkpoint of %s is not on its journal: verifying from"
                            " genesis", run)
                prefix = []
        return prefix + journal.entries(run, len(prefix)), len(prefix)


__all__ = ["CheckpointRejected", "Checkpoints", "folder_key", "mac_key", "pack", "unpack"]
