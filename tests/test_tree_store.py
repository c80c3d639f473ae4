"""The SQLite tree store: batched appends, reopening, historical roots and proofs."""

from __future__ import annotations

import sqlite3

import merkle_reference as ref
import pytest

from fleet_ledger.fleet.log.log_errors import InvalidProofRequest
from fleet_ledger.fleet.log.merkle import (
    EMPTY_ROOT,
    leaf_hashes,
    verify_consistency,
    verify_inclusion,
)
from fleet_ledger.ledger.tree_store import STRIP, TreeStore, connect, open_tree_store

DATA = [i.to_bytes(3, "big") for i in range(700)]
HASHES = leaf_hashes(DATA)


def _filled(path, batches=(1, 2, 61, 3, 200, 1, 130, 302)) -> TreeStore:
    store = open_tree_store(path)
    done = 0
    for count in batches:
        store.append(HASHES[done : done + count])
        store.conn.commit()
        done += count
    assert done == 700
    return store


def test_roots_of_every_historical_size(tmp_path):
    """After uneven batches, the root of every size 0..700 equals the RFC's MTH."""
    store = _filled(tmp_path / "t.db")
    assert store.size() == 700
    assert store.root(0) == EMPTY_ROOT
    for n in range(1, 701, 7):
        assert store.root(n) == ref.mth(DATA[:n])
    assert store.root() == ref.mth(DATA)


def test_proofs_for_historical_sizes_verify(tmp_path):
    """Inclusion and consistency proofs at old sizes verify against the RFC roots."""
    store = _filled(tmp_path / "t.db")
    for n in (1, 2, 63, 64, 65, 127, 300, 699, 700):
        root = ref.mth(DATA[:n])
        for m in {0, n // 3, n - 1}:
            verify_inclusion(HASHES[m], m, n, store.inclusion_proof(m, n), root)
        for old in {1, n // 2 or 1, n}:
            proof = store.consistency_proof(old, n)
            assert proof == ref.proof(old, DATA[:n])
            verify_consistency(old, n, proof, ref.mth(DATA[:old]), root)


def test_reopen_rebuilds_compact_range_and_keeps_appending(tmp_path):
    """A reopened store continues from the stored nodes and reaches the same root."""
    store = open_tree_store(tmp_path / "t.db")
    store.append(HASHES[:333])
    store.conn.commit()
    store.conn.close()
    again = open_tree_store(tmp_path / "t.db")
    assert again.size() == 333
    assert again.root() == ref.mth(DATA[:333])
    again.append(HASHES[333:])
    again.conn.commit()
    assert again.root() == ref.mth(DATA)


def test_append_does_not_commit_and_rollback_resyncs(tmp_path):
    """append leaves the transaction open; after a rollback the store follows the database."""
    store = open_tree_store(tmp_path / "t.db")
    store.append(HASHES[:10])
    store.conn.commit()
    store.append(HASHES[10:20])
    assert store.conn.in_transaction
    other = connect(tmp_path / "t.db")
    assert TreeStore(other).size() == 10  # nothing of the open batch is visible
    store.conn.rollback()
    assert store.size() == 10
    assert store.root() == ref.mth(DATA[:10])
    store.append(HASHES[10:30])
    store.conn.commit()
    assert store.root() == ref.mth(DATA[:30])


def test_shares_a_connection_with_other_tables():
    """The store lives beside the ledger's own tables and joins the caller's transaction."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE watermark (seq INTEGER)")
    store = TreeStore(conn)
    store.append(HASHES[:5])
    conn.execute("INSERT INTO watermark VALUES (42)")
    conn.rollback()
    assert store.size() == 0
    assert conn.execute("SELECT count(*) FROM watermark").fetchone()[0] == 0


def test_proof_reads_are_logarithmic(tmp_path):
    """An inclusion proof reads at most one row per level, never the leaves around it."""
    store = _filled(tmp_path / "t.db")
    reads: list[str] = []
    store.conn.set_trace_callback(reads.append)
    store.inclusion_proof(345, 700)
    selects = [sql for sql in reads if "FROM tree_nodes" in sql]
    assert len(selects) == 1
    assert selects[0].count(",") < 2 * 10  # 10 levels: about one strip each
    assert STRIP == 63


def test_requests_beyond_the_tree_are_refused(tmp_path):
    """Asking for a size or leaf the tree does not have raises InvalidProofRequest."""
    store = _filled(tmp_path / "t.db")
    with pytest.raises(InvalidProofRequest):
        store.inclusion_proof(5, 701)
    with pytest.raises(InvalidProofRequest):
        store.inclusion_proof(700, 700)
    with pytest.raises(InvalidProofRequest):
        store.consistency_proof(10, 701)
    with pytest.raises(InvalidProofRequest):
        store.root(701)
    with pytest.raises(ValueError):
        store.append([b"short"])
