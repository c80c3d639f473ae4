"""The ledger store's job tables: the job events folded, each job's row, its bound items and
the receipts the fold made, written in the batch's one transaction (:mod:`ledger.store`).

::

    job_events  (stream_seq PK, kind, signer, job, at_ms, payload)   accepted open/seal events
    jobs        (job PK, name, items, issuer, grant, terms, opened_seq, bound, closed,
                 sealed_seq, receipt, leaf_index)                    one row per job
    job_items   (job, idx, run, bound_seq; PK (job, idx))            an item bound to its run
    job_trees   (job PK, leaves)                                     a sealed job's sum-tree
                                                                     leaves, in index order
    job_leaves  (leaf_index PK, job, stream_seq, leaf)               receipts' fleet-log leaves

An item is written once, when it is bound. Its leaf is not written at its close: it is a
function of its run's state, which the close writes to ``runs`` anyway
(:func:`fleet.jobs.sum_tree.state_leaf`), so an open job's leaves are read from its item
runs' rows (:func:`item_states`), and a sealed job's are the ones its receipt was made from,
written once at the seal (``job_trees``; a store sealed before that table gets them from
the runs' rows too, the receipt's missing list saying which items it left out).

A receipt's leaf is a leaf of the fleet log beside the segments' (whose rowid is their leaf
index + 1, so a receipt's index is a hole in the segments' rowids): the log's entries are
the two tables merged by leaf index (:meth:`ledger.store_reads.StoreReads.leaves`). The job
book (:class:`fleet.fold.job_fold.JobBook`) is rebuilt from ``jobs``, ``job_items`` and the
item runs' rows when the ledger starts, through its one state change.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

from fleet_ledger.fleet.address import PREFIX, format_address, id_text, parse_address
from fleet_ledger.fleet.fold.job_events import JobAccepted
from fleet_ledger.fleet.fold.job_fold import BatchJobs, ItemEntry, JobBook, JobEntry, rebuild
from fleet_ledger.fleet.jobs.job_id import TAG_SIZE, decode_terms, job_tag, parse_item_unit
from fleet_ledger.fleet.jobs.receipt import decode_receipt
from fleet_ledger.fleet.jobs.sum_tree import encode_item_leaf, item_of
from fleet_ledger.fleet.record.kinds import CLOSED
from fleet_ledger.fleet.record.run_codec import decode_state
from fleet_ledger.fleet.record.seal import decode_key, encode_key

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS job_events (stream_seq INTEGER PRIMARY KEY, kind TEXT NOT NULL,"
    " signer TEXT NOT NULL, job TEXT NOT NULL, at_ms INTEGER NOT NULL, payload BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS jobs (job TEXT PRIMARY KEY, name TEXT NOT NULL,"
    " items INTEGER NOT NULL, issuer TEXT NOT NULL, grant_id TEXT, terms BLOB NOT NULL,"
    " opened_seq INTEGER NOT NULL, bound INTEGER NOT NULL, closed INTEGER NOT NULL,"
    " sealed_seq INTEGER, receipt BLOB, leaf_index INTEGER)",
    # (A store made before leaves were read from the runs' rows has a ``leaf`` column
    # more here, no longer written or read.)
    "CREATE TABLE IF NOT EXISTS job_items (job TEXT NOT NULL, idx INTEGER NOT NULL,"
    " run TEXT NOT NULL, bound_seq INTEGER NOT NULL, PRIMARY KEY (job, idx))"
    # Keyed by its primary key alone: a rowid table would write a second b-tree (its key
    # index) for each item.
    " WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS job_trees (job TEXT PRIMARY KEY, leaves BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS job_leaves (leaf_index INTEGER PRIMARY KEY, job TEXT NOT NULL,"
    " stream_seq INTEGER NOT NULL, leaf BLOB NOT NULL)",
)


def create(conn: sqlite3.Connection) -> None:
    for statement in SCHEMA:
        conn.execute(statement)


def write(conn: sqlite3.Connection, events: Sequence[JobAccepted], jobs: BatchJobs) -> None:
    """A batch's accepted job events, the job rows it changed, the items it bound or closed
    and its receipts' leaves (their leaf indexes were fixed by the fold and are checked by
    the caller as it appends them)."""
    conn.executemany(
        "INSERT INTO job_events (stream_seq, kind, signer, job, at_ms, payload)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        [(d.stream_seq, d.event.kind_name, encode_key(d.event.signer), format_address(d.job),
          d.at_ms, d.data) for d in events])
    receipts = {r.job: r for r in jobs.receipts}
    conn.executemany(
        "INSERT INTO jobs (job, name, items, issuer, grant_id, terms, opened_seq, bound, closed,"
        " sealed_seq, receipt, leaf_index) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT(job) DO UPDATE SET bound = excluded.bound, closed = excluded.closed,"
        " sealed_seq = excluded.sealed_seq, receipt = excluded.receipt,"
        " leaf_index = COALESCE(excluded.leaf_index, jobs.leaf_index)",
        [(format_address(e.job), e.terms.name, e.items, encode_key(e.terms.issuer),
          None if e.terms.grant is None else format_address(e.terms.grant), e.terms_bytes,
          e.opened, e.bound, e.closed, e.sealed, e.receipt,
          receipts[e.job].leaf_index if e.job in receipts else None)
         for e in jobs.jobs.values()])
    texts = {job: format_address(job) for job in {key[0] for key, _entry in jobs.bound}}
    # id_text: the runs' rows of this batch formatted the same run ids already.
    conn.executemany(
        "INSERT INTO job_items (job, idx, run, bound_seq) VALUES (?, ?, ?, ?)",
        [(texts[key[0]], key[1], id_text(e.run), e.bound) for key, e in jobs.bound])
    conn.executemany("INSERT INTO job_trees (job, leaves) VALUES (?, ?)",
                     [(format_address(r.job), b"".join(r.leaves)) for r in jobs.receipts])
    conn.executemany("INSERT INTO job_leaves (leaf_index, job, stream_seq, leaf)"
                     " VALUES (?, ?, ?, ?)",
                     [(r.leaf_index, format_address(r.job), r.stream_seq, r.leaf)
                      for r in jobs.receipts])


def load_book(conn: sqlite3.Connection) -> JobBook:
    """The committed job book as the folded batches left it."""
    jobs = [JobEntry(parse_address(job), decode_terms(bytes(terms)), bytes(terms),
                     decode_terms(bytes(terms)).issuer, opened, bound, closed, sealed,
                     None if receipt is None else bytes(receipt))
            for job, terms, opened, bound, closed, sealed, receipt in conn.execute(
                "SELECT job, terms, opened_seq, bound, closed, sealed_seq, receipt FROM jobs"
                " ORDER BY opened_seq")]
    return rebuild(jobs, _items(conn))


def _items(conn: sqlite3.Connection
           ) -> Iterator[tuple[tuple[bytes, int], ItemEntry, bytes | None]]:
    """The items of the open jobs, each with its leaf once its run closed (the book forgets
    a sealed job's: JobBook.install). An open job took every close of its items' runs."""
    for job, idx, run, bound, state in conn.execute(
            "SELECT i.job, i.idx, i.run, i.bound_seq,"
            " CASE WHEN r.phase = ? THEN r.state END FROM job_items i JOIN runs r"
            " ON r.run = i.run WHERE i.job IN (SELECT job FROM jobs WHERE sealed_seq IS NULL)",
            (CLOSED,)):
        yield ((parse_address(job), idx), ItemEntry(parse_address(run), bound),
               None if state is None else state_item_leaf(idx, state))


def state_item_leaf(index: int, state: bytes) -> bytes:
    """The sum-tree leaf of item ``index`` from its closed run's row's state: the core's
    item of that state (:func:`fleet.jobs.sum_tree.item_of`, the leaf the fold made at the
    close), encoded and checked."""
    return encode_item_leaf(item_of(index, decode_state(state)))


# -- reads (the API, the explorer, the CLI offline) ---------------------------------------------


def job_rows(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """Every job, newest first: id, name, items, issuer (hex), grant, bound, closed,
    sealed."""
    keys = ("job", "name", "items", "issuer", "grant", "opened_seq", "bound", "closed",
            "sealed_seq", "leaf_index")
    return [_issuer_hex(dict(zip(keys, row, strict=True))) for row in conn.execute(
        "SELECT job, name, items, issuer, grant_id, opened_seq, bound, closed, sealed_seq,"
        " leaf_index FROM jobs ORDER BY opened_seq DESC")]


def _issuer_hex(doc: dict[str, Any]) -> dict[str, Any]:
    """The row's issuer key in hex, as a receipt states it (:func:`fleet.jobs.receipt.
    receipt_json`) and a grant its issuer; the column holds it in base64."""
    doc["issuer"] = decode_key(doc["issuer"]).encode().hex()
    return doc


def job_row(conn: sqlite3.Connection, job: str) -> dict[str, Any] | None:
    """One job's row with its terms and receipt bytes (``None``: no such job)."""
    row = conn.execute(
        "SELECT job, name, items, issuer, grant_id, opened_seq, bound, closed, sealed_seq,"
        " leaf_index, terms, receipt FROM jobs WHERE job = ?", (job,)).fetchone()
    if row is None:
        return None
    keys = ("job", "name", "items", "issuer", "grant", "opened_seq", "bound", "closed",
            "sealed_seq", "leaf_index", "terms", "receipt")
    doc = _issuer_hex(dict(zip(keys, row, strict=True)))
    doc["terms"] = bytes(doc["terms"])
    doc["receipt"] = None if doc["receipt"] is None else bytes(doc["receipt"])
    return doc


def item_rows(conn: sqlite3.Connection, job: str) -> list[tuple[int, str, int, bool]]:
    """The job's bound items as (index, run, bound stream seq, whether the run is closed),
    by index. (A sealed job's receipt leaves out an item whose run closed after the seal:
    its missing list says which.)"""
    return [(idx, run, seq, phase == CLOSED) for idx, run, seq, phase in conn.execute(
        "SELECT i.idx, i.run, i.bound_seq, r.phase FROM job_items i JOIN runs r"
        " ON r.run = i.run WHERE i.job = ? ORDER BY i.idx", (job,))]


def item_states(conn: sqlite3.Connection, job: str) -> Iterator[tuple[int, bytes]]:
    """(index, run state) of the job's items whose run is closed, by index."""
    for idx, state in conn.execute(
            "SELECT i.idx, r.state FROM job_items i JOIN runs r ON r.run = i.run"
            " WHERE i.job = ? AND r.phase = ? ORDER BY i.idx", (job, CLOSED)):
        yield idx, bytes(state)


def sealed_leaves(conn: sqlite3.Connection, job: str) -> bytes | None:
    """The leaves a sealed job's receipt was made from, concatenated in index order
    (``None``: not sealed, or sealed before the store kept them; a read-only reader of
    such a store may not even find the table)."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND"
                    " name = 'job_trees'").fetchone() is None:
        return None
    row = conn.execute("SELECT leaves FROM job_trees WHERE job = ?", (job,)).fetchone()
    return None if row is None else bytes(row[0])


def item_of_unit(conn: sqlite3.Connection, unit: bytes, run: str) -> dict[str, Any] | None:
    """What the jobs say of a run with unit ``unit``: ``None`` for an ordinary unit, else
    the item its unit names (``index``), its job (``job``; ``None``: no job of that tag was
    opened here), whether this run is the item's (``holds``), its leaf is in the job
    (``closed``) and the job is sealed (``sealed``). A run the gate let in holds its item of
    a job opened here; ``job`` ``None`` or ``holds`` ``False`` are runs a store folded
    before item units were held to their job (before any job was opened)."""
    named = parse_item_unit(unit)
    if named is None:
        return None
    doc: dict[str, Any] = {"job": None, "index": named.index, "holds": False,
                           "closed": False, "sealed": False}
    if not has_tables(conn):
        return doc
    # The text of a job id starts with the base64 digits its tag fixes whole (26: 156 of
    # its 160 bits): the primary key's index finds the few candidates, the tag picks one.
    prefix = format_address(named.tag + bytes(32 - TAG_SIZE))[:len(PREFIX) + TAG_SIZE * 8 // 6]
    for job, receipt in conn.execute("SELECT job, receipt FROM jobs WHERE job GLOB ?",
                                     (prefix + "*",)):
        if job_tag(parse_address(job)) == named.tag:
            doc.update(job=job, sealed=receipt is not None)
            row = conn.execute(
                "SELECT i.run, r.phase FROM job_items i JOIN runs r ON r.run = i.run"
                " WHERE i.job = ? AND i.idx = ?", (job, named.index)).fetchone()
            if row is not None and row[0] == run:
                # Sealed, the receipt says which items it holds (a run closed after the
                # seal is missing there); open, the job took every close of its items.
                closed = (named.index not in decode_receipt(bytes(receipt)).missing
                          if receipt is not None else row[1] == CLOSED)
                doc.update(holds=True, closed=closed)
            break
    return doc


def receipt_leaves(conn: sqlite3.Connection, first: int, last: int
                   ) -> list[tuple[int, bytes]]:
    """The receipts' log leaves with index in ``first .. last``, as (leaf index, bytes)."""
    return [(i, bytes(leaf)) for i, leaf in conn.execute(
        "SELECT leaf_index, leaf FROM job_leaves WHERE leaf_index BETWEEN ? AND ?"
        " ORDER BY leaf_index", (first, last))]


def has_tables(conn: sqlite3.Connection) -> bool:
    """Whether the store has the job tables (a read-only reader of an older store: no)."""
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND"
                        " name = 'job_leaves'").fetchone() is not None
