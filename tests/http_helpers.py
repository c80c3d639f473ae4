"""Test helpers for the ledger's HTTP servers: a ``fleet ledger serve --http`` child, a
large store built fast (leaves appended to the tree store directly), genuine runs."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nats

from fleet_ledger.fleet.address import format_address
from fleet_ledger.fleet.log.checkpoint import make_checkpoint, sign_checkpoint
from fleet_ledger.fleet.log.leaf import encode_leaf
from fleet_ledger.fleet.log.merkle import leaf_hash
from fleet_ledger.fleet.record.seal import encode_key
from fleet_ledger.ledger.keys import load_or_create_signer
from fleet_ledger.ledger.store import LedgerStore

from fault_helpers import host_key, sealed_run
from pipeline_helpers import spawn, stop, wait_for

ORIGIN = "fleet-ledger.local/ledger"


@dataclass
class Served:
    """A running ``fleet ledger serve`` with its HTTP addresses."""

    log_url: str
    ops_url: str
    vkey: str
    log: Path


@contextlib.contextmanager
def serving(nats_url: str, data: Path, *extra: str) -> Iterator[Served]:
    """``fleet ledger serve --http 127.0.0.1:0 --ops 127.0.0.1:0`` on ``data``; stopped on
    exit, also on failure."""
    log = data.parent / f"{data.name}-serve.log"
    proc = spawn("ledger", "serve", "--nats", nats_url, "--data", str(data),
                 "--http", "127.0.0.1:0", "--ops", "127.0.0.1:0", *extra, log=log)
    try:
        def addresses() -> dict[str, str] | None:
            if proc.poll() is not None:
                raise AssertionError(log.read_text())
            found = dict(re.findall(r"(log|ops) http: (http://\S+)/", log.read_text()))
            return found if len(found) == 2 else None

        found = wait_for(addresses, 30, "the ledger's HTTP servers")
        vkey = (data / "ledger.vkey").read_text().strip()
        yield Served(found["log"], found["ops"], vkey, log)
    finally:
        stop(proc)


def http_get(url: str, headers: dict[str, str] | None = None
             ) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()


def enroll_h1(data: Path, *more: str) -> None:
    """Enroll host h1 (and ``more`` hosts) with their test keys."""
    store = LedgerStore(data)
    try:
        for name in ("h1", *more):
            store.enroll(name, encode_key(bytes(host_key(name).verify_key)))
    finally:
        store.close()


def publish(url: str, messages: list[tuple[str, bytes]]) -> None:
    """Publish (subject, data) messages to the stream, in order."""
    async def go() -> None:
        nc = await nats.connect(url)
        try:
            js = nc.jetstream()
            for subject, data in messages:
                await js.publish(subject, data)
        finally:
            await nc.close()

    asyncio.run(go())


def publish_runs(url: str, plans: list[str], tag: str) -> list[str]:
    """Publish genuine runs of host h1 (one per plan); their run ids."""
    runs = [sealed_run("h1", f"{tag}-{n}", plan) for n, plan in enumerate(plans)]
    publish(url, [m for run in runs for m in run.messages])
    return [format_address(r.run) for r in runs]


def build_store(data: Path, total: int, signed: list[int], per_run: int = 64) -> None:
    """A ledger store of ``total`` synthetic leaves (runs of ``per_run`` segments, made-up
    heads), with checkpoints signed by the ledger's key at each size of ``signed``: the
    rows the fold would write, without folding (seconds for 65,836 leaves, not minutes)."""
    store = LedgerStore(data)
    signer = load_or_create_signer(data, ORIGIN)
    try:
        segments, runs, hashes = [], [], []
        for leaf in range(total):
            n, idx = divmod(leaf, per_run)
            run = hashlib.sha256(b"run %d" % n).digest()
            head = hashlib.sha256(b"head %d %d" % (n, idx)).digest()
            segments.append((leaf + 1, format_address(run), idx + 1, format_address(head),
                             "execute", leaf, leaf + 1, b""))
            hashes.append(leaf_hash(encode_leaf(run, idx + 1, head)))
            if idx + 1 == per_run or leaf == total - 1:
                runs.append((format_address(run), "h1", idx + 1, format_address(head),
                             "executing", b"{}", leaf + 1, leaf + 1))
        with store.transaction():
            store.conn.executemany("INSERT INTO segments (rowid, run, idx, head, kind,"
                                   " leaf_index, stream_seq, payload) VALUES"
                                   " (?, ?, ?, ?, ?, ?, ?, ?)", segments)
            store.conn.executemany("INSERT INTO runs (run, host, segments, head, phase, state,"
                                   " first_seq, last_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", runs)
            done = 0
            for size in [*sorted(signed), total]:
                store.tree.append(hashes[done:size])
                done = size
                if size in signed:
                    root = store.tree.root(size)
                    note = sign_checkpoint(make_checkpoint(signer.name, size, root), signer)
                    store.conn.execute("INSERT INTO checkpoints (size, root, note, at)"
                                       " VALUES (?, ?, ?, 0)", (size, root, note))
            store.set_meta("watermark", "0")
    finally:
        store.close()
