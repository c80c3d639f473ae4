"""Replay checkpoints: a resume that reads, verifies and replays only the run's last epoch.

A workflow is a Python coroutine: its state cannot be saved, so a resume re-runs the
workflow code against the journal. What bounds that work is the workflow's own state held
as data: ``ctx.continue_as_new(value)`` journals a ``continue`` entry carrying ``value``
and enters the workflow function again with it, starting an *epoch*. Nothing after a
``continue`` depends on the entries before it (steps still running finish first), so a
replay may start at the last ``continue``, entering the function with its value.

A checkpoint of run R at entry k records where that epoch starts and the little the
replay needs from before it (docs/spec/runtime.md §6): the seq of the last ``continue``
below k (0: the ``start`` entry), the count of commands before it (call ids number every
command), the stored bytes before it (the park's idle energy) and the signal ids delivered
before it (one id is delivered once), bound to R, k and the head hash at k by a keyed
BLAKE3 MAC (the key derived from the host's sealing key, else from a per-folder key
file). A resume with a valid checkpoint reads the entries from the epoch's ``continue``
on, recomputes their chain from the stored hash of the entry before it, and requires it
to reach the checkpoint's head at k: the entries it replays are the ones the checkpoint
saw. Entries before the epoch are not read at all, so the resume's cost is the epoch's,
not the journal's.

A checkpoint that does not verify, or is no longer on its journal (entries cut or
replaced under it), is rejected (``CheckpointRejected``, logged and counted) and treated as
absent: the resume reads and verifies every entry from genesis and replays from the start
(through every ``continue``), which gives the same replay: a bad checkpoint costs time,
never correctness. Checkpoints stay on their host: a verifier (``fleet runtime verify``)
never sees them and checks every entry from genesis; an export reads the entries table.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from hmac import compare_digest
from pathlib import Path

from blake3 import blake3

from fleet_ledger.agents.runtime.journal import Entry, Journal, verify_from
from fleet_ledger.fleet.runtime.runtime_journal import CONTINUE, SIGNAL, START, canon, genesis, text

log = logging.getLogger(__name__)

KEY_FILE = "runtime-checkpoint.key"
KEY_CONTEXT = "fleet.runtime.checkpoint/1 mac key"
# /2: the state is the epoch (/1 held every entry: a /1 row fails the MAC and is rejected).
DOMAIN = b"fleet.runtime.checkpoint/2"
SCHEMA = """CREATE TABLE IF NOT EXISTS checkpoints (run TEXT PRIMARY KEY, seq INTEGER NOT
NULL, head BLOB NOT NULL, state BLOB NOT NULL, mac BLOB NOT NULL)"""
ENTRY_OVERHEAD = 64  # a stored entry's hash and framing beside its body (park idle size)


@dataclass(frozen=True, slots=True)
class Epoch:
    """Where a replay may start: the run's ``continue`` entry at ``seq`` (0: ``start``),
    the commands before it, the stored bytes of the entries before it, and the signal ids
    delivered before it."""

    seq: int = 0
    cursor: int = 0
    size: int = 0
    delivered: frozenset[str] = frozenset()

    def state(self) -> bytes:
        return canon({"epoch": self.seq, "cursor": self.cursor, "size": self.size,
                      "delivered": sorted(self.delivered)})

    def moved(self, entries: Sequence[Entry], seq: int, cursor: int) -> Epoch:
        """The epoch starting at ``seq`` (``cursor`` commands before it), given this one's
        ``entries`` (from this epoch's seq on, through ``seq`` at least)."""
        if seq == self.seq:
            return self
        before = [e for e in entries if self.seq <= e.seq < seq]
        ids = {i for e in before if e.kind == SIGNAL
               if isinstance(i := e.data().get("id"), str)}
        return Epoch(seq, cursor, self.size + stored_size(before), self.delivered | ids)


def stored_size(entries: Sequence[Entry]) -> int:
    """The stored bytes of ``entries`` as a transcript park's idle draw counts them."""
    return sum(len(e.body) + ENTRY_OVERHEAD for e in entries)


def unpack(state: bytes) -> Epoch:
    """The epoch a (MAC-checked) state holds; CheckpointRejected for another shape."""
    try:
        got = json.loads(state)
        epoch = Epoch(int(got["epoch"]), int(got["cursor"]), int(got["size"]),
                      frozenset(str(i) for i in got["delivered"]))
    except (ValueError, TypeError, KeyError) as exc:
        raise CheckpointRejected(f"a checkpoint's state does not parse: {exc}") from None
    return epoch


@dataclass
class View:
    """What a resume replays: the verified entries from ``epoch.seq`` to the journal's
    end, and how many leading entries of the run a checkpoint vouched for (0: none)."""

    entries: list[Entry]
    epoch: Epoch = field(default_factory=Epoch)
    trusted: int = 0

    @property
    def end(self) -> int:
        return self.entries[-1].seq + 1 if self.entries else 0

    @property
    def head(self) -> bytes | None:
        return self.entries[-1].hash if self.entries else None

    def size(self) -> int:
        """The stored bytes of the whole journal (before the epoch, and held here)."""
        return self.epoch.size + stored_size(self.entries)


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
    return blake3(DOMAIN + text(run) + struct.pack(">Q", seq) + head + state,
                  key=key).digest()


class CheckpointRejected(Exception):
    """A stored checkpoint that does not verify (forged, edited, or not this journal's)."""


class Checkpoints:
    """The checkpoints of the runs in one ``runtime.db`` (its own table)."""

    def __init__(self, db: sqlite3.Connection, key: bytes) -> None:
        self.db = db
        self.key = key
        self.rejected = 0  # checkpoints found not to verify, since this process started
        self.db.execute(SCHEMA)

    def take(self, run: str, end: int, head: bytes, epoch: Epoch) -> None:
        """Checkpoint ``run`` at entry ``end`` (its head hash ``head``), its last epoch
        ``epoch`` (one small row, rewritten at each interval's end)."""
        state = epoch.state()
        self.db.execute(
            "INSERT INTO checkpoints VALUES (?, ?, ?, ?, ?) ON CONFLICT(run) DO UPDATE SET"
            " seq = excluded.seq, head = excluded.head, state = excluded.state,"
            " mac = excluded.mac", (run, end, head, state, _mac(self.key, run, end, head, state)))

    def load(self, run: str) -> tuple[int, bytes, Epoch] | None:
        """``(seq, head, epoch)`` of a valid checkpoint of ``run`` (None without one); one
        that does not verify raises CheckpointRejected."""
        row = self.db.execute("SELECT seq, head, state, mac FROM checkpoints WHERE run = ?",
                              (run,)).fetchone()
        if row is None:
            return None
        seq, head, state, mac = int(row[0]), bytes(row[1]), bytes(row[2]), bytes(row[3])
        if not compare_digest(mac, _mac(self.key, run, seq, head, state)):
            raise CheckpointRejected(f"the checkpoint of {run} at entry {seq} does not carry"
                                     " this host's MAC")
        epoch = unpack(state)
        if not 0 <= epoch.seq < seq:
            raise CheckpointRejected(f"the checkpoint of {run} at entry {seq} names epoch"
                                     f" {epoch.seq}")
        return seq, head, epoch

    def view(self, journal: Journal, run: str, workflow: str, use: bool = True) -> View:
        """What a resume of ``run`` replays, verified: from the epoch a valid checkpoint
        names (entries before it not read), else (or without ``use``) every entry from
        genesis. A checkpoint rejected, or not on the journal any more, is logged, counted
        and not used. JournalTampered when an entry read does not hash to its stored
        hash."""
        try:
            got = self.load(run) if use else None
        except CheckpointRejected as exc:
            self.rejected += 1
            log.warning("%s: verifying from genesis", exc)
            got = None
        if got is not None:
            seq, head, epoch = got
            rows = journal.entries(run, max(0, epoch.seq - 1))
            prev = genesis(run, workflow)
            if epoch.seq > 0 and rows and rows[0].seq == epoch.seq - 1:
                prev, rows = rows[0].hash, rows[1:]
            if _on_journal(rows, seq, head, epoch):
                verify_from(prev, rows)  # through k-1, whose stored hash is the MAC'd head
                return View(rows, epoch, seq)
            self.rejected += 1
            log.warning("the checkpoint of %s is not on its journal: verifying from"
                        " genesis", run)
        rows = journal.entries(run)
        verify_from(genesis(run, workflow), rows)
        return View(rows)


def _on_journal(rows: list[Entry], seq: int, head: bytes, epoch: Epoch) -> bool:
    """Whether ``rows`` start at the epoch's entry (a ``continue``, or ``start`` at 0) and
    hold entry ``seq - 1`` stored with the checkpoint's ``head``."""
    if not rows or rows[0].seq != epoch.seq:
        return False
    if rows[0].kind != (CONTINUE if epoch.seq else START):
        return False
    last = seq - 1 - epoch.seq
    return last < len(rows) and rows[last].seq == seq - 1 and rows[last].hash == head


__all__ = ["CheckpointRejected", "Checkpoints", "Epoch", "View", "folder_key", "mac_key",
           "stored_size", "unpack"]
