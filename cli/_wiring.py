"""Wiring the shells together: a ledger with its anchors (:mod:`plumbing.anchoring`).

The ledger and the anchors never import each other. Here the ledger gets the anchors'
receipt store (the anchor tables kept in its own database file, read into proof bundles and
the status) and, when anchors are configured, a factory that builds the anchoring task from
the ledger's checkpoints once the ledger is connected. A host that adopts a run gets its
record and proofs from the ledger's API through :class:`LedgerRecordSource`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fleet_ledger.anchors.base import AnchorConfig
from fleet_ledger.anchors.factory import build_anchor
from fleet_ledger.anchors.runner import AnchorRunner
from fleet_ledger.anchors.store import AnchorStore
from fleet_ledger.cli._app import FLEET
from fleet_ledger.cli._common import text_or_file
from fleet_ledger.fleet.log.note import Verifier, parse_verifier_key
from fleet_ledger.fleet.record.record_file import join_pages
from fleet_ledger.fleet.record.wire import RecordWire, decode_record, encode_record
from fleet_ledger.fleet.subjects import fleet_names
from fleet_ledger.ledger.client import call
from fleet_ledger.ledger.http import HttpServers, Readiness, Throttle, start_servers
from fleet_ledger.ledger.log_reader import LogReader
from fleet_ledger.ledger.metrics import StoreCollector
from fleet_ledger.ledger.nats_config import READER, inbox_prefix
from fleet_ledger.ledger.service import Ledger, LedgerConfig
from fleet_ledger.ledger.store import DB_NAME, open_db
from fleet_ledger.plumbing import sqlite
from fleet_ledger.plumbing.anchoring import AnchorTask, CheckpointSource, Publish


def open_receipts(data_dir: Path) -> AnchorStore:
    """The anchors' receipts kept in the ledger's database in ``data_dir``."""
    data_dir.mkdir(parents=True, exist_ok=True)
    return AnchorStore(open_db(data_dir / DB_NAME))


def make_ledger(config: LedgerConfig, anchors: Sequence[AnchorConfig] = ()) -> Ledger:
    """The ledger of ``config``, reading the anchors' receipts from its database, and
    anchoring its checkpoints with ``anchors`` (built when the ledger starts)."""
    db = config.data_dir / DB_NAME

    def anchoring(source: CheckpointSource, publish: Publish | None) -> AnchorTask:
        built = [build_anchor(c) for c in anchors]
        return AnchorRunner(AnchorStore(open_db(db)), built, source, publish,
                            cosigned_subject=fleet_names(config.fleet).cosigned)

    receipts = open_receipts(config.data_dir)
    try:
        return Ledger(config, receipts=receipts, anchoring=anchoring if anchors else None)
    except BaseException:
        receipts.close()
        raise


class LedgerRecordSource:
    """A host's :class:`agents.adoption.RecordSource` over the ledger's API (``export`` and
    ``prove``), for ``fleet run adopt`` and the simulator's adopting hosts. Synchronous:
    call it from a thread, not from a running event loop."""

    def __init__(self, url: str, nkey: Path | None = None, timeout: float = 30.0,
                 host: str | None = None) -> None:
        self.url = url
        self.nkey = nkey
        self.timeout = timeout
        # Under nkey auth a host reads replies in its own inbox (ledger.nats_config).
        self.inbox = inbox_prefix(READER if host is None else host)

    # Segments per export page: a page stays well inside NATS's 1 MiB message limit.
    PAGE = 500

    def record(self, run: str) -> bytes:
        """The run's record file, fetched in pages and joined (a long record is larger
        than one NATS message)."""
        async def pages() -> list[RecordWire]:
            out: list[RecordWire] = []
            first = 1
            while True:
                page = decode_record(await call(
                    self.url, "export", {"run": run, "from": first, "limit": self.PAGE},
                    nkey=self.nkey, timeout=self.timeout, inbox_prefix=self.inbox,
                    fleet=FLEET["name"]))
                got = len(page.segments)
                if got == 0:
                    return out
                out.append(page)
                first += got
                if got < self.PAGE:
                    return out

        return encode_record(join_pages(asyncio.run(pages())))

    def proof(self, run: str, index: int) -> dict[str, Any]:
        return json.loads(asyncio.run(call(self.url, "prove", {"run": run, "index": index},
                                           nkey=self.nkey, timeout=self.timeout,
                                           inbox_prefix=self.inbox, fleet=FLEET["name"])))


def ledger_keys(text_or_path: str) -> list[Verifier]:
    """The ledger's verifier key(s): note key text, or a file holding it (``ledger.vkey``)."""
    return [parse_verifier_key(text_or_file(text_or_path))]


def host_ledger_keys(host_dir: Path, vkey: str | None) -> list[Verifier]:
    """A host command's ``--vkey`` (default: ``ledger.vkey`` in the host's folder), or a
    one-line UserError."""
    from fleet_ledger.cli._app import UserError
    from fleet_ledger.fleet.log.log_errors import LogError

    key_text = vkey if vkey is not None else str(host_dir / "ledger.vkey")
    if vkey is None and not (host_dir / "ledger.vkey").exists():
        raise UserError(f"no ledger key: pass --vkey, or put it in {host_dir / 'ledger.vkey'}")
    try:
        return ledger_keys(key_text)
    except (LogError, OSError) as exc:
        raise UserError(f"--vkey: not a ledger verifier key: {exc}") from None


async def start_ledger_http(ledger: Ledger, log: tuple[str, int] | None,
                            ops: tuple[str, int] | None, max_unsigned_s: float = 30.0,
                            busy_rate: float | None = 200.0) -> HttpServers | None:
    """The ledger's HTTP servers (:mod:`ledger.http`) in its loop, reading through their
    own read-only connections (the anchors' receipts too); None when neither is asked.
    ``busy_rate``: log requests a second while the fold has a backlog (None: no limit)."""
    if log is None and ops is None:
        return None
    from fleet_ledger.ledger.explorer import add_explorer

    db = ledger.config.data_dir / DB_NAME
    reader = LogReader(ledger.config.data_dir,
                       receipts=AnchorStore(sqlite.connect(db, read_only=True)))
    registry = ledger.metrics.registry
    registry.register(StoreCollector(
        reader.store, reader.receipts, ledger.metrics,
        lag=lambda: max(0, ledger.stream_last_seq - reader.store.watermark())))
    readiness = Readiness(
        connected=lambda: ledger.nc is not None and ledger.nc.is_connected,
        healthy=lambda: (ledger.healthy, ledger.health_detail),
        unsigned_age=ledger.metrics.unsigned_age, signs=ledger.signs,
        max_unsigned_s=max_unsigned_s)
    return await start_servers(reader, log, ops, registry=registry, fold=ledger.metrics,
                               readiness=readiness,
                               throttle=None if busy_rate is None else Throttle(
                                   busy_rate, lambda: ledger.backlogged),
                               extra_routes=lambda app: add_explorer(
                                   app, reader, lambda run: _runtime_journal(ledger, run)))


async def _runtime_journal(ledger: Ledger, run: str) -> dict[str, Any] | None:
    """A runtime run's journal from the JetStream the ledger is connected to (None while
    it is not)."""
    from fleet_ledger.ledger.runtime_journals import runtime_journal

    if ledger.nc is None or not ledger.nc.is_connected:
        return None
    return await runtime_journal(ledger.nc.jetstream(), ledger.names, run)
