"""The ledger's SQLite store: runs, segments, refusals, hosts, checkpoints, the Merkle tree
and the stream watermark, all in one database file so one transaction commits a whole batch.

The watermark is the highest stream sequence whose message has been decided (folded or
refused). It is written in the same transaction as the leaves and rows that message
produced, so after a crash the ledger resumes at ``watermark + 1`` and nothing is decided
twice. WAL journal, ``synchronous=FULL``: a committed batch survives power loss.

Host enrollment is written by the operator's ``fleet host enroll`` into this same file
while the ledger may be running. Every change of the hosts table bumps ``hosts_version``
(in ``meta``); the ledger reloads its hosts when that moves, and a batch decided with an
older host table is refused inside its own write transaction (:class:`HostsChanged`) and
decided again. An enrollment takes effect after the watermark it reads, so without that
check a batch decided just before an enrollment committed, and written just after, would
refuse segments a ledger rebuilt from the stream accepts.

Enrollments are also kept in ``hosts.json`` beside the database, rewritten (atomically) by
every enroll and revoke before the database commits. The fold's decisions depend on them
(``enrolled_after``, ``revoked_after``), so a store rebuilt from the stream (``ledger.db``
deleted) or restored from an older backup must start from the same enrollments to reach
the same tree: on opening, the store takes every host from ``hosts.json`` (the file wins
over an older database row) and keeps database rows the file lacks.

A segment's ``at`` is when the batch that folded it was written (the audit's park
durations; a store rebuilt from the stream dates its segments at the rebuild).
A segment's ``rowid`` is its leaf index + 1: the log's entries (the leaves, rebuilt from
``run``, ``idx`` and ``head``) are read by leaf range without a second index
(:mod:`ledger.log_reader`).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import msgspec

from fleet_ledger.fleet.address import format_address, id_text, parse_address
from fleet_ledger.fleet.fold import Accepted, HostEntry, Refused, RunSlot
from fleet_ledger.fleet.fold.batch import Incoming
from fleet_ledger.fleet.fold.control import (
    KINDS,
    ControlAccepted,
    ControlState,
    decide_bootstrap,
    keys_at,
)
from fleet_ledger.fleet.fold.grant_events import (
    GrantAccepted,
    GrantBook,
    apply,
    decode_event,
    event_ref,
)
from fleet_ledger.fleet.fold.job_events import JobAccepted
from fleet_ledger.fleet.fold.job_fold import BatchJobs, JobBook, Sealed
from fleet_ledger.fleet.log.merkle import leaf_hash
from fleet_ledger.fleet.record.run_codec import state_from_json, state_to_json
from fleet_ledger.fleet.record.seal import decode_key, encode_key
from fleet_ledger.fleet.record.wire import envelope_wire
from fleet_ledger.fleet.subjects import check_host_name
from fleet_ledger.ledger import job_store
from fleet_ledger.ledger.store_reads import StoreReads
from fleet_ledger.ledger.tree_store import TreeStore
from fleet_ledger.plumbing import sqlite
from fleet_ledger.plumbing.files import write_atomically
from fleet_ledger.plumbing.transactions import immediate

DB_NAME = "ledger.db"
HOSTS_FILE = "hosts.json"
HOSTS_FORMAT = "fleet-ledger-hosts/v1"
_HOST_KEYS = ("name", "public_key", "enrolled_after", "revoked_after")

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS hosts (name TEXT PRIMARY KEY, public_key TEXT NOT NULL,"
    " enrolled_after INTEGER NOT NULL, revoked_after INTEGER, enrolled_at REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS runs (run TEXT PRIMARY KEY, host TEXT NOT NULL,"
    " segments INTEGER NOT NULL, head TEXT NOT NULL, phase TEXT NOT NULL,"
    " state BLOB NOT NULL, first_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS segments (run TEXT NOT NULL, idx INTEGER NOT NULL,"
    " head TEXT NOT NULL, kind TEXT NOT NULL, leaf_index INTEGER NOT NULL,"
    " stream_seq INTEGER NOT NULL, payload BLOB NOT NULL, PRIMARY KEY (run, idx))",
    "CREATE TABLE IF NOT EXISTS rejections (id INTEGER PRIMARY KEY, stream_seq INTEGER NOT NULL,"
    " subject TEXT NOT NULL, host TEXT, run TEXT, idx INTEGER, rule TEXT NOT NULL,"
    " detail TEXT NOT NULL, payload BLOB NOT NULL, at REAL NOT NULL)",
    "CREATE INDEX IF NOT EXISTS rejections_rule ON rejections (rule)",
    # Control events folded from the stream (fleet.fold.control) and the operator keys they
    # are decided with: the hosts they enroll are rows of ``hosts`` with source 'stream'.
    "CREATE TABLE IF NOT EXISTS control_events (stream_seq INTEGER PRIMARY KEY,"
    " kind TEXT NOT NULL, operator TEXT NOT NULL, seq INTEGER NOT NULL, host TEXT,"
    " key TEXT NOT NULL, payload BLOB NOT NULL)",
    # Offline (bootstrap) control events, decided at the watermark ``position``
    # (fleet.fold.control.decide_bootstrap): with control_events, a host's key history.
    "CREATE TABLE IF NOT EXISTS bootstrap_events (id INTEGER PRIMARY KEY,"
    " position INTEGER NOT NULL, kind TEXT NOT NULL, host TEXT NOT NULL, key TEXT NOT NULL,"
    " at REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS operators (key TEXT PRIMARY KEY, last_seq INTEGER NOT NULL,"
    " retired INTEGER NOT NULL DEFAULT 0)",
    "CREATE TABLE IF NOT EXISTS checkpoints (size INTEGER PRIMARY KEY, root BLOB NOT NULL,"
    " note TEXT NOT NULL, at REAL NOT NULL)",
    # Grant events folded from the stream (fleet.fold.grant_events), in stream order: the grant
    # book is rebuilt from them (the one state change, fleet.fold.grant_events.apply). ``ref``:
    # the grant an event concerns (the run, for a checkpoint), for a run's history.
    "CREATE TABLE IF NOT EXISTS grant_events (stream_seq INTEGER PRIMARY KEY,"
    " kind TEXT NOT NULL, signer TEXT NOT NULL, ref TEXT NOT NULL, at_ms INTEGER NOT NULL,"
    " payload BLOB NOT NULL)",
    "CREATE INDEX IF NOT EXISTS grant_events_ref ON grant_events (ref)",
)


class StoreError(Exception):
    """The store cannot do what was asked (bad name, unknown host, unwritable disk)."""


class HostsChanged(Exception):
    """The hosts table changed after the batch being written was decided."""


def open_db(path: Path) -> sqlite3.Connection:
    """A connection to the ledger's database file (also for those keeping tables in it).

    Writers wait up to 30 s for each other. The WAL is checkpointed into the database every
    ~40 MB rather than SQLite's 4 MB: the pages every batch rewrites (tree strips, index
    interiors, run rows) are then copied once per many batches instead of once per two.
    """
    return sqlite.connect(path, busy_timeout_s=30.0, wal_autocheckpoint=10_000)


class LedgerStore(StoreReads):
    def __init__(self, data_dir: Path | str) -> None:
        self.dir = Path(data_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / DB_NAME
        self.conn = open_db(self.path)
        with self.transaction():
            for statement in _SCHEMA:
                self.conn.execute(statement)
            job_store.create(self.conn)
            self.tree = TreeStore(self.conn)
            self._add_segment_times()
            self._add_host_source()
            self._merge_hosts_file()

    def close(self) -> None:
        self.conn.close()

    def _add_segment_times(self) -> None:
        """Stores from before segments had a fold time get the column (NULL in old rows)."""
        columns = {row[1] for row in self.conn.execute("PRAGMA table_info(segments)")}
        if "at" not in columns:
            self.conn.execute("ALTER TABLE segments ADD COLUMN at REAL")
        # Ledger time (the stream's timestamp, ms) a segment was judged at: what an offline
        # verifier needs to recompute its grant's decision.
        if "at_ms" not in columns:
            self.conn.execute("ALTER TABLE segments ADD COLUMN at_ms INTEGER")

    def _add_host_source(self) -> None:
        """Hosts enrolled offline (``hosts.json``) and from the stream are told apart: only
        the former are the file's."""
        columns = {row[1] for row in self.conn.execute("PRAGMA table_info(hosts)")}
        if "source" not in columns:
            self.conn.execute("ALTER TABLE hosts ADD COLUMN source TEXT NOT NULL"
                              " DEFAULT 'offline'")

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        return immediate(self.conn)

    # -- meta -----------------------------------------------------------------------------

    def meta(self, key: str, default: str | None = None) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return default if row is None else row[0]

    def set_meta(self, key: str, value: str) -> None:
        self.conn.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key)"
                          " DO UPDATE SET value = excluded.value", (key, value))

    def watermark(self) -> int:
        return int(self.meta("watermark", "0") or 0)

    def hosts_version(self) -> int:
        """A counter bumped by every change of the hosts table."""
        return int(self.meta("hosts_version", "0") or 0)

    def _bump_hosts_version(self) -> None:
        self.set_meta("hosts_version", str(self.hosts_version() + 1))

    # -- hosts ----------------------------------------------------------------------------

    def enroll(self, name: str, public_key: str) -> None:
        """Enroll a host (valid for stream positions after the watermark), or re-key a known
        one: an offline control event (:func:`fleet.fold.control.decide_bootstrap`)."""
        try:
            check_host_name(name)
            key = bytes(decode_key(public_key))
        except ValueError as exc:
            raise StoreError(str(exc)) from None
        self._bootstrap(name, key)

    def revoke(self, name: str) -> None:
        """Refuse the host's segments after the current watermark; earlier ones stay (an
        offline control event, :func:`fleet.fold.control.decide_bootstrap`)."""
        self._bootstrap(name, None)

    def _bootstrap(self, name: str, key: bytes | None) -> None:
        """Decide an offline control event at the watermark by the host table's one rule
        and write the entry it leaves (and ``hosts.json``) in one transaction."""
        with self.transaction():
            hosts, position = self.hosts(), self.watermark()
            d = decide_bootstrap(hosts, name, key, position)
            if isinstance(d, Refused):
                if key is None and d.detail.endswith("is not enrolled"):
                    raise StoreError(f"no enrolled host named {name!r}")
                raise StoreError(f"{d.rule}: {d.detail}")
            kind = "revoke" if key is None else "rekey" if name in hosts else "enroll"
            self.conn.execute("INSERT INTO bootstrap_events (position, kind, host, key, at)"
                              " VALUES (?, ?, ?, ?, ?)",
                              (position, kind, name, encode_key(d.public_key), time.time()))
            self._upsert_host(d.name, encode_key(d.public_key), d.enrolled_after,
                              d.revoked_after)
            self._write_hosts_file()

    def _upsert_host(self, name: str, public_key: str, enrolled_after: int,
                     revoked_after: int | None, source: str = "offline") -> None:
        self.conn.execute(
            "INSERT INTO hosts (name, public_key, enrolled_after, revoked_after, enrolled_at,"
            " source) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET"
            " public_key = excluded.public_key, enrolled_after = excluded.enrolled_after,"
            " revoked_after = excluded.revoked_after, enrolled_at = excluded.enrolled_at,"
            " source = excluded.source",
            (name, public_key, enrolled_after, revoked_after, time.time(), source),
        )
        self._bump_hosts_version()

    def _write_hosts_file(self) -> None:
        """Rewrite ``hosts.json`` from the hosts table (inside the caller's transaction, so
        a failed write rolls the change back): a temporary file, fsync'd, then renamed."""
        doc = {"format": HOSTS_FORMAT, "hosts": self.host_rows(offline=True)}
        path = self.dir / HOSTS_FILE
        try:
            write_atomically(path, (json.dumps(doc, indent=1) + "\n").encode())
        except OSError as exc:
            raise StoreError(f"cannot write {path}: {exc.strerror or exc}") from None

    def _merge_hosts_file(self) -> None:
        """Take the enrollments of ``hosts.json`` into a new or restored database."""
        path = self.dir / HOSTS_FILE
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            if self.conn.execute("SELECT 1 FROM hosts LIMIT 1").fetchone() is not None:
                self._write_hosts_file()  # a store from before the file existed
            return
        except (OSError, ValueError) as exc:
            raise StoreError(f"cannot read {path}: {exc}") from None
        if not isinstance(doc, dict) or doc.get("format") != HOSTS_FORMAT:
            raise StoreError(f"{path} is not a {HOSTS_FORMAT} file")
        held = {h["name"]: h for h in self.host_rows(offline=True)}
        listed = doc.get("hosts", [])
        for h in listed:
            row = {k: h.get(k) for k in _HOST_KEYS}
            try:
                check_host_name(row["name"])
                decode_key(row["public_key"])
            except (TypeError, ValueError) as exc:
                raise StoreError(f"{path}: bad host entry {row!r}: {exc}") from None
            if held.get(row["name"]) != row:
                self._upsert_host(row["name"], row["public_key"], row["enrolled_after"],
                                  row["revoked_after"])
        if [h.get("name") for h in listed] != [h["name"] for h in self.host_rows(offline=True)]:
            self._write_hosts_file()  # the database held hosts the file lacked

    def hosts(self) -> dict[str, HostEntry]:
        rows = self.conn.execute(
            "SELECT name, public_key, enrolled_after, revoked_after FROM hosts")
        return {
            name: HostEntry(name, decode_key(key), enrolled, revoked)
            for name, key, enrolled, revoked in rows
        }

    def host_rows(self, offline: bool = False) -> list[dict[str, Any]]:
        """The hosts table (``offline``: only the hosts enrolled offline, ``hosts.json``'s)."""
        rows = self.conn.execute("SELECT name, public_key, enrolled_after, revoked_after"
                                 " FROM hosts" + (" WHERE source = 'offline'" if offline else "")
                                 + " ORDER BY name")
        return [{"name": n, "public_key": k, "enrolled_after": e, "revoked_after": r}
                for n, k, e, r in rows]

    # -- operators and control events -----------------------------------------------------

    def trust_operators(self, keys: Collection[bytes]) -> None:
        """Trust these operator keys (the ledger's configuration) unless a rotation in the
        stream retired them; keys already known keep their last sequence number."""
        with self.transaction():
            self.conn.executemany("INSERT OR IGNORE INTO operators (key, last_seq) VALUES (?, 0)",
                                  [(encode_key(k),) for k in keys])

    def operators(self) -> tuple[dict[bytes, int], set[bytes]]:
        """(trusted operator key -> its last folded seq, the retired keys)."""
        trusted: dict[bytes, int] = {}
        retired: set[bytes] = set()
        for key, last, gone in self.conn.execute("SELECT key, last_seq, retired FROM operators"):
            raw = bytes(decode_key(key))
            if gone:
                retired.add(raw)
            else:
                trusted[raw] = last
        return trusted, retired

    def host_keys_at(self, run: str) -> dict[str, str]:
        """Each host's key as it was when ``run``'s last segment was folded: the current key,
        unless a re-key in the stream came after (then the key before it). A run sealed on
        both sides of its host's re-key cannot be exported whole (one key per host)."""
        keys = {h["name"]: h["public_key"] for h in self.host_rows()}
        row = self.conn.execute("SELECT last_seq FROM runs WHERE run = ?", (run,)).fetchone()
        if row is None:
            return keys
        return keys_at(keys, self.key_history(), row[0])

    def key_history(self) -> list[tuple[int, int, str, str]]:
        """The host table's history, in the order it was decided: (position, kind, host,
        key) of every folded control event naming a host and every offline one (decided at
        the watermark, so after a stream event at the same position)."""
        kinds = {name: kind for kind, name in KINDS.items()}
        rows = self.conn.execute(
            "SELECT stream_seq, 0, stream_seq, kind, host, key FROM control_events"
            " WHERE host IS NOT NULL UNION ALL"
            " SELECT position, 1, id, kind, host, key FROM bootstrap_events ORDER BY 1, 2, 3")
        return [(at, kinds[kind], host, key) for at, _, _, kind, host, key in rows]

    def control_rows(self, host: str | None = None) -> list[dict[str, Any]]:
        """The folded control events (a host's key history), in stream order."""
        rows = self.conn.execute(
            "SELECT stream_seq, kind, operator, seq, host, key FROM control_events"
            + (" WHERE host = ?" if host else "") + " ORDER BY stream_seq",
            (host,) if host else ())
        keys = ("stream_seq", "kind", "operator", "seq", "host", "key")
        return [dict(zip(keys, row, strict=True)) for row in rows]

    def _write_control(self, accepted: Sequence[tuple[ControlAccepted, bytes]],
                       state: ControlState) -> None:
        """The batch's accepted control events, the host entries they left, and the
        operators as the batch's control state (``state``, changed by the one state
        change, :func:`fleet.fold.control.apply`) leaves them."""
        db = self.conn
        for d, payload in accepted:
            ev = d.event
            db.execute("INSERT INTO control_events (stream_seq, kind, operator, seq, host, key,"
                       " payload) VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (d.stream_seq, ev.kind_name, encode_key(ev.operator), ev.seq,
                        ev.host or None, encode_key(ev.key), payload))
            if d.entry is not None:
                e = d.entry
                self._upsert_host(e.name, encode_key(e.public_key), e.enrolled_after,
                                  e.revoked_after, "stream")
        db.executemany("INSERT INTO operators (key, last_seq, retired) VALUES (?, ?, 0)"
                       " ON CONFLICT(key) DO UPDATE SET last_seq = excluded.last_seq",
                       [(encode_key(k), last) for k, last in state.operators.items()])
        db.executemany("UPDATE operators SET retired = 1 WHERE key = ?",
                       [(encode_key(k),) for k in state.retired])

    # -- grants ---------------------------------------------------------------------------

    def grant_book(self) -> GrantBook:
        """The grant book as the folded events left it (replayed through the one state
        change, :func:`fleet.fold.grant_events.apply`)."""
        book = GrantBook()
        for seq, at_ms, data in self.grant_events():
            # Accepted when folded: their signatures were checked then.
            ev = decode_event(data, verify=False)
            apply(book, GrantAccepted(ev, data, seq, at_ms, event_ref(ev)))
        return book

    def grant_count(self) -> int:
        """How many grants the book holds: one for each accepted issue or mint."""
        return int(self.conn.execute("SELECT COUNT(*) FROM grant_events WHERE kind IN"
                                     " ('issue', 'mint')").fetchone()[0])

    def grant_history(self, refs: Sequence[bytes]) -> list[tuple[int, int, bytes]]:
        """(stream seq, ledger time ms, event bytes) of the events concerning ``refs``
        (grants, or a run for its checkpoints), in stream order."""
        if not refs:
            return []
        rows = self.conn.execute(
            f"SELECT stream_seq, at_ms, payload FROM grant_events WHERE ref IN "
            f"({','.join('?' * len(refs))}) ORDER BY stream_seq",
            [format_address(r) for r in refs]).fetchall()
        return [(seq, at, bytes(p)) for seq, at, p in rows]

    def grant_events(self) -> list[tuple[int, int, bytes]]:
        """Every accepted grant event as (stream seq, ledger time, bytes), in stream order."""
        return [(seq, at_ms, bytes(payload)) for seq, at_ms, payload in self.conn.execute(
            "SELECT stream_seq, at_ms, payload FROM grant_events ORDER BY stream_seq")]

    def segment_times(self, run: bytes) -> list[tuple[int, int, int, str]]:
        """Each folded segment of ``run`` as (index, stream seq, ledger time, sealing host)."""
        return [(idx, seq, at_ms or 0, _envelope_host(bytes(payload)))
                for idx, seq, at_ms, payload in self.conn.execute(
                    "SELECT idx, stream_seq, at_ms, payload FROM segments WHERE run = ?"
                    " ORDER BY idx", (format_address(run),))]

    # -- runs -----------------------------------------------------------------------------

    def load_run(self, run: bytes) -> RunSlot | None:
        row = self.conn.execute("SELECT host, state FROM runs WHERE run = ?",
                                (format_address(run),)).fetchone()
        if row is None:
            return None
        return RunSlot(row[0], state_from_json(msgspec.json.decode(row[1])))

    def load_runs(self, runs: Collection[bytes]) -> dict[bytes, RunSlot]:
        """The stored slots of ``runs`` (those the store holds), in few queries."""
        wanted = {id_text(run): run for run in runs}
        names = list(wanted)
        found: dict[bytes, RunSlot] = {}
        for first in range(0, len(names), 500):
            chunk = names[first:first + 500]
            rows = self.conn.execute(
                f"SELECT run, host, state FROM runs WHERE run IN ({','.join('?' * len(chunk))})",
                chunk)
            for name, host, state in rows:
                found[wanted[name]] = RunSlot(host, state_from_json(msgspec.json.decode(state)))
        return found

    def head_at(self, run: bytes, index: int) -> bytes | None:
        row = self.conn.execute("SELECT head FROM segments WHERE run = ? AND idx = ?",
                                (format_address(run), index)).fetchone()
        return None if row is None else parse_address(row[0])

    # -- the batch ------------------------------------------------------------------------

    def write_batch(self, batch: Sequence[Incoming], watermark: int,
                    hosts_version: int | None = None,
                    runs: Mapping[bytes, RunSlot] | None = None,
                    control: ControlState | None = None, jobs: BatchJobs | None = None
                    ) -> int:
        """Write a batch's leaves, runs, segments and refusals with the new watermark in a
        new transaction, left open for :meth:`commit`; returns the tree size after it.
        ``runs``: the states of the runs the batch changed (:attr:`fleet.fold.BatchRuns.
        changed`; the batch's accepted messages must all be among them).
        ``hosts_version``: the hosts table the batch was decided with (:class:`HostsChanged`
        if it has moved since; checked under the write lock, so no enrollment can slip in
        between). ``control``: the control state the batch's events left (needed when it
        holds any), whose operators are written as they stand. ``jobs``: the batch's jobs
        (:class:`fleet.fold.job_fold.BatchJobs`; needed when it holds job events or items):
        each receipt's leaf follows the leaf of the message that sealed its job."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            if hosts_version is not None and self.hosts_version() != hosts_version:
                raise HostsChanged("the hosts table changed after the batch was decided")
            return self._write(batch, watermark, runs or {}, control, jobs)
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise

    def rollback(self) -> None:
        """Abandon the open transaction, if any."""
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")

    def commit(self) -> None:
        """Commit the open transaction, or roll it back if the commit fails (full disk): the
        connection is never left inside a failed transaction. Safe to run in a thread while
        the event loop waits: its callers hold the ledger's store lock."""
        try:
            self.conn.execute("COMMIT")
        except BaseException:
            self.rollback()
            raise

    def _write(self, batch: Sequence[Incoming], watermark: int,
               slots: Mapping[bytes, RunSlot], state: ControlState | None,
               jobs: BatchJobs | None = None) -> int:
        db = self.conn
        size = self.tree.size()
        leaves: list[bytes] = []
        segment_rows = []
        runs: dict[str, tuple[bytes, int]] = {}  # run text -> (run, its last stream seq)
        first_seq: dict[str, int] = {}
        refusals = []
        control: list[tuple[ControlAccepted, bytes]] = []
        grants: list[GrantAccepted] = []
        job_events: list[JobAccepted] = []
        # The receipts the fold made, by the message that sealed their job: their leaves
        # follow that message's (at the leaf index the fold gave them).
        receipts: dict[int, list[Sealed]] = {}
        for r in () if jobs is None else jobs.receipts:
            receipts.setdefault(r.stream_seq, []).append(r)
        now = time.time()
        for item in batch:
            d = item.decision
            if isinstance(d, ControlAccepted):
                control.append((d, item.payload))
            elif isinstance(d, GrantAccepted):
                grants.append(d)
            elif isinstance(d, JobAccepted):
                job_events.append(d)
            elif isinstance(d, Accepted):
                run = id_text(d.run)
                segment_rows.append((run, d.index, d.head_text or format_address(d.head), d.kind,
                                     size + len(leaves), item.stream_seq, item.payload,
                                     item.at_ms))
                leaves.append(leaf_hash(d.leaf))
                runs[run] = (d.run, item.stream_seq)
                first_seq.setdefault(run, item.stream_seq)
            else:
                refusals.append((item.stream_seq, item.subject, d.host,
                                 None if d.run is None else id_text(d.run), d.index,
                                 d.rule, d.detail, item.payload, now))
            if receipts and item.stream_seq in receipts:
                for r in receipts.pop(item.stream_seq):
                    assert r.leaf_index == size + len(leaves), "the fold's leaf index"
                    leaves.append(leaf_hash(r.leaf))
        # rowid = leaf index + 1 (what SQLite assigned anyway, segments are never deleted),
        # so the log's entries are read by leaf index through the table's own b-tree.
        db.executemany("INSERT INTO segments (rowid, run, idx, head, kind, leaf_index,"
                       " stream_seq, payload, at_ms, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       [(row[4] + 1, *row, now) for row in segment_rows])
        db.executemany(
            "INSERT INTO runs (run, host, segments, head, phase, state, first_seq, last_seq)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(run) DO UPDATE SET host = excluded.host,"
            " segments = excluded.segments, head = excluded.head, phase = excluded.phase,"
            " state = excluded.state, last_seq = excluded.last_seq",
            [(run, slot.host, slot.state.index, format_address(slot.state.head),
              slot.state.phase, msgspec.json.encode(state_to_json(slot.state)),
              first_seq[run], seq)
             for run, slot, seq in ((run, slots[raw], seq) for run, (raw, seq) in runs.items())],
        )
        db.executemany("INSERT INTO rejections (stream_seq, subject, host, run, idx, rule,"
                       " detail, payload, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", refusals)
        if control:
            assert state is not None, "control events are written with the state they left"
            self._write_control(control, state)
        if grants:
            db.executemany("INSERT INTO grant_events (stream_seq, kind, signer, ref, at_ms,"
                           " payload) VALUES (?, ?, ?, ?, ?, ?)",
                           [(d.stream_seq, d.event.kind_name, encode_key(d.event.signer),
                             format_address(d.ref), d.at_ms, d.data) for d in grants])
        if jobs is not None and jobs.changed:
            job_store.write(db, job_events, jobs)
        new_size = self.tree.append(leaves)
        self.set_meta("watermark", str(watermark))
        return new_size

    # -- jobs -----------------------------------------------------------------------------

    def job_book(self) -> JobBook:
        """The job book as the folded batches left it (:mod:`ledger.job_store`)."""
        return job_store.load_book(self.conn)

    # -- checkpoints ----------------------------------------------------------------------

    def last_checkpoint(self) -> tuple[int, bytes, str] | None:
        """(size, root, signed note) of the newest checkpoint (None before the first)."""
        row = self.newest_checkpoint()
        return None if row is None else (row.size, row.root, row.note)

    def checkpoint_at_least(self, size: int) -> tuple[int, bytes, str] | None:
        row = self.conn.execute("SELECT size, root, note FROM checkpoints WHERE size >= ?"
                                " ORDER BY size LIMIT 1", (size,)).fetchone()
        return None if row is None else (row[0], row[1], row[2])

    def add_checkpoint(self, size: int, root: bytes, note: str) -> None:
        with self.transaction():
            self.conn.execute("INSERT OR IGNORE INTO checkpoints (size, root, note, at)"
                              " VALUES (?, ?, ?, ?)", (size, root, note, time.time()))

    def checkpoint_notes(self, sizes: Sequence[int]) -> dict[int, str]:
        """The signed notes of the checkpoints of ``sizes`` (those signed)."""
        if not sizes:
            return {}
        return dict(self.conn.execute(
            f"SELECT size, note FROM checkpoints WHERE size IN ({','.join('?' * len(sizes))})",
            list(sizes)).fetchall())

    def first_checkpoint_time_after(self, size: int) -> float | None:
        """When the first checkpoint larger than ``size`` was signed (None: none is)."""
        return self.conn.execute("SELECT MIN(at) FROM checkpoints WHERE size > ?",
                                 (size,)).fetchone()[0]

    # -- reads ----------------------------------------------------------------------------

    def run_row(self, run: str) -> dict[str, Any] | None:
        row = self.conn.execute("SELECT run, host, segments, head, phase, state FROM runs"
                                " WHERE run = ?", (run,)).fetchone()
        if row is None:
            return None
        return {"run": row[0], "host": row[1], "segments": row[2], "head": row[3],
                "phase": row[4], "state": msgspec.json.decode(row[5])}

    def list_runs(self) -> list[dict[str, Any]]:
        rows = self.conn.execute("SELECT run, host, segments, head, phase FROM runs"
                                 " ORDER BY first_seq")
        return [{"run": r, "host": h, "segments": n, "head": hd, "phase": p}
                for r, h, n, hd, p in rows]

    def segment(self, run: str, index: int) -> tuple[str, int] | None:
        """(head, leaf index) of segment ``index`` of ``run``."""
        row = self.conn.execute("SELECT head, leaf_index FROM segments WHERE run = ? AND idx = ?",
                                (run, index)).fetchone()
        return None if row is None else (row[0], row[1])

    def payloads(self, run: str, first: int = 1, limit: int = -1) -> list[bytes]:
        """The folded messages of ``run`` from segment ``first`` on (``limit`` of them; -1:
        all), in order."""
        rows = self.conn.execute("SELECT payload FROM segments WHERE run = ? AND idx >= ?"
                                 " ORDER BY idx LIMIT ?", (run, first, limit))
        return [bytes(p) for (p,) in rows]

    def counts(self) -> dict[str, Any]:
        runs = self.run_count()
        segs = self.conn.execute("SELECT COUNT(*) FROM segments").fetchone()[0]
        return {"runs": runs, "segments_folded": segs, "rejected": self.refusal_counts()}

    def refusal_counts(self) -> dict[str, int]:
        """Refused segments by rule."""
        return dict(self.conn.execute("SELECT rule, COUNT(*) FROM rejections GROUP BY rule"))

    def rejections(self, limit: int = 100, host: str | None = None, run: str | None = None,
                   stream_seq: int | None = None) -> list[dict[str, Any]]:
        """The newest refusals, of ``host``, of ``run``, at ``stream_seq`` if given."""
        where = [(c, v) for c, v in (("host", host), ("run", run), ("stream_seq", stream_seq))
                 if v is not None]
        sql = ("SELECT stream_seq, subject, host, run, idx, rule, detail, at FROM rejections"
               + (" WHERE " + " AND ".join(f"{c} = ?" for c, _ in where) if where else "")
               + " ORDER BY id DESC LIMIT ?")
        args = (*(v for _, v in where), limit)
        keys = ("stream_seq", "subject", "host", "run", "index", "rule", "detail", "at")
        return [dict(zip(keys, row, strict=True)) for row in self.conn.execute(sql, args)]


class CheckpointReader(StoreReads):
    """The ledger's signed checkpoints and consistency proofs, for the anchors
    (:class:`plumbing.anchoring.CheckpointSource`), read through a connection of their own:
    in WAL mode it never blocks the fold and never sees a batch before its commit."""

    def __init__(self, path: Path) -> None:
        self.conn = open_db(path)
        self.tree = TreeStore(self.conn)

    def close(self) -> None:
        self.conn.close()

    def newest_checkpoint_after(self, size: int) -> tuple[int, str] | None:
        row = self.newest_checkpoint()
        return None if row is None or row.size <= size else (row.size, row.note)

    def consistency_proof(self, old_size: int, new_size: int | None = None) -> list[bytes]:
        return self.tree.consistency_proof(old_size, new_size)


class ReadOnlyStore(LedgerStore):
    """The store's reads (:class:`LedgerStore`'s read methods, ``tree``) on a connection of
    its own opened read-only: for the ledger's HTTP server and other readers beside the
    fold. In WAL mode it never waits on the fold's write lock nor sees a batch before its
    commit; the schema and ``hosts.json`` are the writer's business, never touched here."""

    def __init__(self, data_dir: Path | str) -> None:
        self.dir = Path(data_dir)
        self.path = self.dir / DB_NAME
        if not self.path.exists():
            raise StoreError(f"{self.dir}: no ledger store here ({DB_NAME} is missing)")
        self.conn = sqlite.connect(self.path, read_only=True)
        self.tree = TreeStore(self.conn, create=False)


def _envelope_host(payload: bytes) -> str:
    """The host a stored (accepted, hence decodable) segment's envelope names."""
    wire = envelope_wire(payload)
    assert wire is not None, "a folded segment's envelope decodes"
    return wire.host
