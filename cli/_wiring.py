"""Wiring the shells together: a ledger with its anchors (:mod:`plumbing.anchoring`).

The ledger and the anchors never import each other. Here the ledger gets the anchors'
receipt store (the anchor tables kept in its own database file, read into proof bundles and
the status) and, when anchors are configured, a factory that builds the anchoring task from
the ledger's checkpoints once the ledger is connected.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from anchors.base import AnchorConfig
from anchors.factory import build_anchor
from anchors.runner import AnchorRunner
from anchors.store import AnchorStore
from ledger.http import HttpServers, Readiness, Throttle, start_servers
from ledger.log_reader import LogReader
from ledger.metrics import StoreCollector
from ledger.service import Ledger, LedgerConfig
from ledger.store import DB_NAME, open_db
from plumbing import sqlite
from plumbing.anchoring import AnchorTask, CheckpointSource, Publish


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
        return AnchorRunner(AnchorStore(open_db(db)), built, source, publish)

    receipts = open_receipts(config.data_dir)
    try:
        return Ledger(config, receipts=receipts, anchoring=anchoring if anchors else None)
    except BaseException:
        receipts.close()
        raise


async def start_ledger_http(ledger: Ledger, log: tuple[str, int] | None,
                            ops: tuple[str, int] | None, max_unsigned_s: float = 30.0,
                            busy_rate: float | None = 200.0) -> HttpServers | None:
    """The ledger's HTTP servers (:mod:`ledger.http`) in its loop, reading through their
    own read-only connections (the anchors' receipts too); None when neither is asked.
    ``busy_rate``: log requests a second while the fold has a backlog (None: no limit)."""
    if log is None and ops is None:
        return None
    from ledger.explorer import add_explorer

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
        unsigned_age=ledger.metrics.unsigned_age, max_unsigned_s=max_unsigned_s)
    return await start_servers(reader, log, ops, registry=registry, fold=ledger.metrics,
                               readiness=readiness,
                               throttle=None if busy_rate is None else Throttle(
                                   busy_rate, lambda: ledger.backlogged),
                               extra_routes=lambda app: add_explorer(app, reader))
