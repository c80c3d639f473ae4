"""The anchoring task: beside the ledger, never in its fold loop.

One asyncio task per anchor watches the ledger's ``checkpoints`` table through its own
SQLite connection (WAL: reads never block the fold), hands the newest signed checkpoint
to its anchor, stores the receipt in the same database and, on failure, retries with
exponential backoff (0.5 s doubling to ``max_backoff``). Anchors skip checkpoints signed
while they were busy: each anchors the newest one, and a witness gets the consistency
proof from the size it last cosigned. After a witness cosigns, the checkpoint with every
cosignature gathered for its size is published on ``fleet.checkpoint.cosigned``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from anchors import store as anchor_store
from anchors.base import Anchor, AnchorError
from fleet.cosignature import add_signatures, parse_signature_lines

log = logging.getLogger(__name__)

COSIGNED_SUBJECT = "fleet.checkpoint.cosigned"
Publish = Callable[[str, bytes], Awaitable[None]]


class AnchorRunner:
    def __init__(self, db_path: Path, anchors: Sequence[Anchor], publish: Publish | None = None,
                 poll_s: float = 0.25, max_backoff: float = 30.0, timeout: float = 30.0
                 ) -> None:
        from ledger.store import connect
        from ledger.tree_store import TreeStore

        self.conn = connect(db_path)
        anchor_store.ensure_tables(self.conn)
        self.tree = TreeStore(self.conn)
        self.anchors = list(anchors)
        for anchor in self.anchors:
            anchor_store.register(self.conn, anchor.name, anchor.kind)
        self.publish = publish
        self.poll_s = poll_s
        self.max_backoff = max_backoff
        self.timeout = timeout

    def _newest(self) -> tuple[int, str] | None:
        row = self.conn.execute(
            "SELECT size, note FROM checkpoints ORDER BY size DESC LIMIT 1").fetchone()
        return None if row is None else (int(row[0]), row[1])

    async def run(self, stop: asyncio.Event) -> None:
        """Anchor until ``stop`` is set."""
        try:
            await asyncio.gather(*(self._loop(a, stop) for a in self.anchors))
        finally:
            for anchor in self.anchors:
                with contextlib.suppress(Exception):
                    await anchor.close()
            self.conn.close()

    async def _loop(self, anchor: Anchor, stop: asyncio.Event) -> None:
        backoff = 0.0
        while not stop.is_set():
            newest = self._newest()
            if newest is not None and newest[0] > anchor_store.last_anchored(self.conn,
                                                                              anchor.name):
                size, note = newest
                try:
                    receipt = await asyncio.wait_for(anchor.anchor(note, size, self.tree),
                                                     self.timeout)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # any failure of one anchor: note it, back off
                    detail = str(exc) if isinstance(exc, AnchorError) else \
                        f"{type(exc).__name__}: {exc}"
                    anchor_store.record_error(self.conn, anchor.name, detail)
                    backoff = min(max(backoff * 2, 0.5), self.max_backoff)
                    log.warning("anchor %s: %s; retrying in %.1fs", anchor.name, detail, backoff)
                else:
                    anchor_store.record_receipt(self.conn, receipt)
                    backoff = 0.0
                    if receipt.kind == "witness":
                        await self._publish_cosigned(size, note)
                    continue
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), backoff or self.poll_s)

    def cosigned_note(self, size: int, note: str) -> str:
        """``note`` with every witness cosignature stored for ``size``."""
        rows = self.conn.execute("SELECT data FROM anchor_receipts WHERE size = ? AND"
                                 " kind = 'witness' ORDER BY anchor", (size,)).fetchall()
        lines = [sig for (data,) in rows for sig in parse_signature_lines(data)]
        return add_signatures(note, lines)

    async def _publish_cosigned(self, size: int, note: str) -> None:
        if self.publish is None:
            return
        try:
            await self.publish(COSIGNED_SUBJECT, self.cosigned_note(size, note).encode())
        except Exception as exc:  # publishing is best effort; the receipts are stored
            log.warning("publishing the cosigned checkpoint %d failed: %s", size, exc)
