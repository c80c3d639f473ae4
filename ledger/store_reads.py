"""The ledger store's reads for those beside the fold: the audit, the metrics, the explorer,
the log reader (tiles, entry bundles, proofs) and the benchmarks.

Each answer is a named method returning typed rows (:class:`typing.NamedTuple`), so the
readers hold no SQL and know no column; the schema is :mod:`ledger.store`'s. "The newest
checkpoint" is one query here (:meth:`StoreReads.newest_checkpoints`), which the
writer's :meth:`~ledger.store.LedgerStore.last_checkpoint` and the anchors'
:class:`~ledger.store.CheckpointReader` read too.

:class:`StoreReads` is mixed into every class holding a connection to the ledger's
database (the writer, its read-only twin, the anchors' reader): it needs ``self.conn``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection
from typing import NamedTuple

import msgspec

from fleet_ledger.fleet.record.record import RunState
from fleet_ledger.fleet.record.run_codec import state_from_json
from fleet_ledger.ledger import job_store


class CheckpointRow(NamedTuple):
    """A signed checkpoint: its tree size, root, signed note and when it was signed."""

    size: int
    root: bytes
    note: str
    at: float


class RunRow(NamedTuple):
    """A run as the fold left it: its host, segment count, phase and decoded state."""

    run: str
    host: str
    segments: int
    phase: str
    state: RunState


class SegmentRow(NamedTuple):
    """A folded segment: its run, index, kind, when its batch was written (None in a store
    from before segments had a fold time), its message and its leaf index."""

    run: str
    idx: int
    kind: str
    at: float | None
    payload: bytes
    leaf_index: int


class LeafRow(NamedTuple):
    """A leaf of the fleet log, as the segments table holds what it is built from; a job
    receipt's leaf (``raw``: its bytes, ``run``/``idx``/``head`` empty) as the job tables
    hold it."""

    leaf_index: int
    run: str
    idx: int
    head: str
    raw: bytes | None = None


class RefusalRow(NamedTuple):
    """A refusal's rule, when it was made and the subject of the refused message."""

    rule: str
    at: float | None
    subject: str


class StoreReads:
    """Read methods over ``self.conn``, a connection to the ledger's database."""

    conn: sqlite3.Connection

    # -- checkpoints ----------------------------------------------------------------------

    def newest_checkpoints(self, limit: int = 1) -> list[CheckpointRow]:
        """The ``limit`` newest signed checkpoints, newest first (checkpoints are signed in
        size order: the largest is the newest)."""
        return [CheckpointRow(size, bytes(root), note, at) for size, root, note, at in
                self.conn.execute("SELECT size, root, note, at FROM checkpoints"
                                  " ORDER BY size DESC LIMIT ?", (limit,))]

    def newest_checkpoint(self) -> CheckpointRow | None:
        """The newest signed checkpoint (None before the first)."""
        rows = self.newest_checkpoints(1)
        return rows[0] if rows else None

    def checkpoints(self) -> list[CheckpointRow]:
        """Every signed checkpoint, oldest (smallest) first."""
        return [CheckpointRow(size, bytes(root), note, at) for size, root, note, at in
                self.conn.execute("SELECT size, root, note, at FROM checkpoints ORDER BY size")]

    def checkpoint_count(self) -> int:
        return int(self.conn.execute("SELECT COUNT(*) FROM checkpoints").fetchone()[0])

    def signed_size_between(self, start: int, stop: int, at_most: int) -> bool:
        """Whether a checkpoint was signed at a size in ``start .. stop - 1`` and at most
        ``at_most`` (a partial tile's, :func:`fleet.log.tiles.partial_sizes`)."""
        return self.conn.execute(
            "SELECT 1 FROM checkpoints WHERE size >= ? AND size < ? AND size <= ? LIMIT 1",
            (start, stop, at_most)).fetchone() is not None

    # -- runs -----------------------------------------------------------------------------

    def run_count(self) -> int:
        return int(self.conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0])

    def run_rows(self, newest_first: bool = False) -> list[RunRow]:
        """Every run with its decoded state, in the order the ledger first folded them."""
        order = "DESC" if newest_first else "ASC"
        return [RunRow(run, host, segments, phase,
                       state_from_json(msgspec.json.decode(state)))
                for run, host, segments, phase, state in self.conn.execute(
                    "SELECT run, host, segments, phase, state FROM runs"
                    f" ORDER BY first_seq {order}")]

    # -- segments -------------------------------------------------------------------------

    def _at_column(self) -> str:
        """The segments' fold time, or NULL in a store from before segments had one (read
        here without migrating it)."""
        columns = {row[1] for row in self.conn.execute("PRAGMA table_info(segments)")}
        return "at" if "at" in columns else "NULL AS at"

    def _segment_rows(self, where: str, args: tuple[object, ...]) -> list[SegmentRow]:
        return [SegmentRow(run, idx, kind, at, bytes(payload), leaf)
                for run, idx, kind, at, payload, leaf in self.conn.execute(
                    f"SELECT run, idx, kind, {self._at_column()}, payload, leaf_index"
                    f" FROM segments WHERE {where} ORDER BY run, idx", args)]

    def run_segments(self, run: str) -> list[SegmentRow]:
        """The folded segments of ``run``, in index order."""
        return self._segment_rows("run = ?", (run,))

    def segments_of_kinds(self, kinds: Collection[str]) -> list[SegmentRow]:
        """Every folded segment of one of ``kinds``, by run and index."""
        kinds = sorted(kinds)
        return self._segment_rows(f"kind IN ({','.join('?' * len(kinds))})", tuple(kinds))

    def executed_with_mark(self, mark: str, run: str | None = None) -> list[SegmentRow]:
        """The executed segments (of ``run``, or all) whose message bytes contain ``mark``
        (a call-account id mark, fleet.runtime.runtime_journal): only those need decoding."""
        where = "kind = 'executed' AND instr(payload, CAST(? AS BLOB)) > 0"
        if run is None:
            return self._segment_rows(where, (mark,))
        return self._segment_rows(where + " AND run = ?", (mark, run))

    def fold_times(self) -> dict[str, tuple[float | None, float | None]]:
        """Each run's first and last fold time (None: unknown)."""
        at = self._at_column()
        return {run: (first, last) for run, first, last in self.conn.execute(
            f"SELECT run, MIN({at}), MAX({at}) FROM segments GROUP BY run")}

    def latest_index_below(self, run: str, size: int) -> int | None:
        """The index of ``run``'s latest segment whose leaf is in a tree of ``size``."""
        row = self.conn.execute("SELECT MAX(idx) FROM segments WHERE run = ? AND leaf_index < ?",
                                (run, size)).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def leaves(self, first: int, count: int) -> list[LeafRow]:
        """The leaves ``first .. first + count - 1`` that the store holds, in order (a
        segment's rowid is its leaf index + 1, so this reads the table's own b-tree; a job
        receipt's leaf fills the hole its index leaves there, :mod:`ledger.job_store`)."""
        rows = [LeafRow(*row) for row in self.conn.execute(
            "SELECT leaf_index, run, idx, head FROM segments WHERE rowid BETWEEN ? AND ?"
            " ORDER BY rowid", (first + 1, first + count))]
        if len(rows) == count or not job_store.has_tables(self.conn):
            return rows
        receipts = [LeafRow(i, "", 0, "", raw)
                    for i, raw in job_store.receipt_leaves(self.conn, first, first + count - 1)]
        return sorted(rows + receipts)

    def leaf_indexes(self) -> dict[tuple[str, int], int]:
        """(run, segment index) -> leaf index, for every folded segment."""
        return {(run, idx): leaf for run, idx, leaf in self.conn.execute(
            "SELECT run, idx, leaf_index FROM segments")}

    # -- refusals -------------------------------------------------------------------------

    def refusals_of(self, rules: Collection[str]) -> list[RefusalRow]:
        """The refusals by one of ``rules``, oldest first."""
        rules = sorted(rules)
        return [RefusalRow(*row) for row in self.conn.execute(
            "SELECT rule, at, subject FROM rejections WHERE rule IN"
            f" ({','.join('?' * len(rules))}) ORDER BY id", rules)]
