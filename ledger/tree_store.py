"""SQLite storage of the fleet log's Merkle tree: complete-subtree hashes in per-level strips.

What is stored
    Every complete subtree node ``(level, index)`` (see :mod:`fleet.log.merkle`) - leaves
    included - packed ``STRIP`` = 63 consecutive hashes of one level to a row::

        tree_nodes(id INTEGER PRIMARY KEY, hashes BLOB)   id = level << 48 | index // 63
        tree_state(id INTEGER PRIMARY KEY CHECK (id = 0), size INTEGER)

    A row holds ``32 * k`` bytes, the hashes of nodes ``63 * strip .. 63 * strip + k - 1``.
    The last strip of a level fills up as the tree grows (``CAST(hashes || ? AS BLOB)``); a full
    strip never changes again.

Why strips of one level rather than a row per node or C2SP tlog-tiles
    A row per node costs two SQLite rows per leaf, and SQLite's per-row cost dominates bulk
    appends. tlog-tiles store only every eighth level, so a proof recomputes up to 255
    hashes per tile it touches. Strips keep *every* level (a proof reads exactly the nodes
    it needs, no hashing beyond folding the ragged right edge) at 1/63 of the rows. 63, not
    64: a full strip is 2016 bytes, so two rows (with their cell headers) fill one 4 KiB
    SQLite page, where 2048-byte rows would leave each page half empty. Because complete nodes never
    change, the root and the proofs of *every* historical size <= the current one are
    answerable from the same rows, each with O(log n) node reads (a handful of rows).

Transactions
    The ledger keeps tree, runs and its stream watermark in one database and commits a fold
    batch in one transaction, so :class:`TreeStore` works on a connection it is given and
    :meth:`TreeStore.append` never commits: the caller does. Only the compact range (one
    hash per level) is held in memory; every public method first compares the stored size
    with the cached one and rebuilds the compact range from O(log n) stored nodes when they
    differ (after a rollback, or another writer), so the cache can never silently diverge.

:func:`open_tree_store` opens a standalone file for tests and benchmarks: WAL journal with
``synchronous=FULL``, so a commit returns only after the WAL is fsynced - an append counts
as durable once committed, even across power loss. The one fsync per commit is amortised by
appending in batches.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from fleet_ledger.fleet.log.log_errors import InvalidProofRequest, MissingNode
from fleet_ledger.fleet.log.merkle import (
    EMPTY_ROOT,
    HASH_SIZE,
    NodeId,
    Plan,
    assemble,
    consistency_plan,
    fold,
    inclusion_plan,
    plan_nodes,
    root_plan,
)
from fleet_ledger.fleet.log.merkle_append import compact_nodes, compact_root, extend
from fleet_ledger.plumbing import sqlite

STRIP = 63
_LEVEL_SHIFT = 48
_MAX_PARAMS = 500

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS tree_nodes (id INTEGER PRIMARY KEY, hashes BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS tree_state "
    "(id INTEGER PRIMARY KEY CHECK (id = 0), size INTEGER NOT NULL)",
)


def _strip_id(level: int, index: int) -> int:
    return (level << _LEVEL_SHIFT) | (index // STRIP)


class TreeStore:
    """The fleet log's Merkle tree on an open SQLite connection.

    Methods: :meth:`size`, :meth:`root` (current or any historical size),
    :meth:`append` (leaf hashes, no commit), :meth:`inclusion_proof`,
    :meth:`consistency_proof`.
    """

    def __init__(self, conn: sqlite3.Connection, create: bool = True) -> None:
        """``create=False``: the tables exist already (a read-only connection)."""
        self.conn = conn
        if create:
            for statement in _SCHEMA:
                conn.execute(statement)
        self._size = -1
        self._compact: dict[int, bytes] = {}
        self._sync()

    # -- state ----------------------------------------------------------------------------

    def _stored_size(self) -> int:
        row = self.conn.execute("SELECT size FROM tree_state WHERE id = 0").fetchone()
        return 0 if row is None else int(row[0])

    def _sync(self) -> int:
        """Stored size; rebuild the compact range from stored nodes if it moved under us."""
        stored = self._stored_size()
        if stored != self._size:
            self._size = stored
            nodes = compact_nodes(stored)
            hashes = self._read(nodes, stored)
            self._compact = {level: hashes[(level, index)] for level, index in nodes}
        return stored

    def size(self) -> int:
        """Number of leaves in the tree (as of this connection's view)."""
        return self._sync()

    def root(self, size: int | None = None) -> bytes:
        """Root hash of the tree at ``size`` leaves (default: now); O(log n) node reads."""
        current = self._sync()
        if size is None or size == current:
            return compact_root(self._compact)
        if not 0 <= size <= current:
            raise InvalidProofRequest(f"no root for size {size}: the tree has {current} leaves")
        if size == 0:
            return EMPTY_ROOT
        nodes = root_plan(size)
        hashes = self._read(nodes, current)
        return fold([hashes[node] for node in nodes])

    # -- writing --------------------------------------------------------------------------

    def append(self, leaf_hashes: Sequence[bytes]) -> int:
        """Append leaf hashes; return the new size. Does not commit - the caller does."""
        size = self._sync()
        if not leaf_hashes:
            return size
        for item in leaf_hashes:
            if len(item) != HASH_SIZE:
                raise ValueError(f"leaf hashes are {HASH_SIZE} bytes, got {len(item)}")
        ext = extend(size, self._compact, leaf_hashes)
        inserts: list[tuple[int, bytes]] = []
        updates: list[tuple[bytes, int]] = []
        for level, first, row in ext.levels:
            blob = b"".join(row)
            pos, end = first, first + len(row)
            while pos < end:
                slot = pos % STRIP
                stop = min(end, pos - slot + STRIP)
                chunk = blob[(pos - first) * HASH_SIZE : (stop - first) * HASH_SIZE]
                if slot:
                    updates.append((chunk, _strip_id(level, pos)))
                else:
                    inserts.append((_strip_id(level, pos), chunk))
                pos = stop
        cur = self.conn.cursor()
        cur.executemany(
            "UPDATE tree_nodes SET hashes = CAST(hashes || ? AS BLOB) WHERE id = ?", updates
        )
        cur.executemany("INSERT INTO tree_nodes (id, hashes) VALUES (?, ?)", inserts)
        cur.execute(
            "INSERT INTO tree_state (id, size) VALUES (0, ?) "
            "ON CONFLICT (id) DO UPDATE SET size = excluded.size",
            (ext.size,),
        )
        self._size, self._compact = ext.size, ext.compact
        return ext.size

    # -- reading --------------------------------------------------------------------------

    def _read(self, nodes: Iterable[NodeId], size: int) -> dict[NodeId, bytes]:
        wanted = list(nodes)
        for level, index in wanted:
            if not 0 <= index < size >> level:
                raise MissingNode(f"node {level}/{index} is not complete at size {size}")
        strip_ids = list(dict.fromkeys(_strip_id(level, index) for level, index in wanted))
        rows: dict[int, bytes] = {}
        for start in range(0, len(strip_ids), _MAX_PARAMS):
            batch = strip_ids[start : start + _MAX_PARAMS]
            marks = ",".join("?" * len(batch))
            sql = f"SELECT id, hashes FROM tree_nodes WHERE id IN ({marks})"
            rows.update(self.conn.execute(sql, batch).fetchall())
        out: dict[NodeId, bytes] = {}
        for level, index in wanted:
            offset = (index % STRIP) * HASH_SIZE
            item = rows.get(_strip_id(level, index), b"")[offset : offset + HASH_SIZE]
            if len(item) != HASH_SIZE:
                raise MissingNode(f"node {level}/{index} is missing from the store")
            out[(level, index)] = item
        return out

    def node_row(self, level: int, first: int, count: int, size: int) -> bytes:
        """The hashes of nodes ``(level, first) .. (level, first + count - 1)``, concatenated,
        each complete at tree ``size`` (else :class:`MissingNode`): a tlog tile is one such
        row, read from its strips without hashing."""
        if count <= 0 or first < 0 or first + count > size >> level:
            raise MissingNode(f"nodes {level}/{first}+{count} are not complete at size {size}")
        first_strip, last_strip = _strip_id(level, first), _strip_id(level, first + count - 1)
        rows = self.conn.execute("SELECT hashes FROM tree_nodes WHERE id BETWEEN ? AND ?"
                                 " ORDER BY id", (first_strip, last_strip)).fetchall()
        offset = (first % STRIP) * HASH_SIZE
        row = b"".join(bytes(r[0]) for r in rows)[offset:offset + count * HASH_SIZE]
        if len(rows) != last_strip - first_strip + 1 or len(row) != count * HASH_SIZE:
            raise MissingNode(f"nodes {level}/{first}+{count} are missing from the store")
        return row

    def _prove(self, make_plan: Callable[[int], Plan], size: int | None) -> list[bytes]:
        current = self._sync()
        size = current if size is None else size
        if size > current:
            raise InvalidProofRequest(f"tree size {size} is beyond the current {current}")
        plan = make_plan(size)
        return assemble(plan, self._read(plan_nodes(plan), current))

    def inclusion_proof(self, leaf_index: int, tree_size: int | None = None) -> list[bytes]:
        """RFC 9162 inclusion proof of leaf ``leaf_index`` (0-based) in ``tree_size`` leaves."""
        return self._prove(lambda size: inclusion_plan(leaf_index, size), tree_size)

    def consistency_proof(self, old_size: int, new_size: int | None = None) -> list[bytes]:
        """RFC 9162 consistency proof from ``old_size`` to ``new_size`` (default: now)."""
        return self._prove(lambda size: consistency_plan(old_size, size), new_size)


def connect(path: str | Path) -> sqlite3.Connection:
    """A connection for a standalone tree file: WAL journal, ``synchronous=FULL``; Python
    opens the transactions, the caller commits them (``conn.commit()``)."""
    return sqlite.connect(path, autocommit=False)


def open_tree_store(path: str | Path) -> TreeStore:
    """A :class:`TreeStore` on its own file; commit with ``store.conn.commit()``."""
    return TreeStore(connect(path))
