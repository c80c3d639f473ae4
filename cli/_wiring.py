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
from ledger.service import Ledger, LedgerConfig
from ledger.store import DB_NAME, open_db
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
