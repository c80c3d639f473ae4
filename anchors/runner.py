"""The anchoring task: beside the ledger, never in its fold loop.

One asyncio task per anchor watches the ledger's signed checkpoints (a
:class:`plumbing.anchoring.CheckpointSource` the ledger hands over, reading through its
own connection: reads never block the fold), hands the newest one to its anchor, stores
the receipt in the anchors' tables (:class:`anchors.store.AnchorStore`) and, on failure,
retries with exponential backoff (0.5 s doubling to ``max_backoff``). Anchors skip
checkpoints signed while they were busy: each anchors the newest one, and a witness gets
the consistency proof from the size it last cosigned. After a witness cosigns, the
checkpoint with every cosignature gathered for its size is published on the fleet's
cosigned subject (``fleet.checkpoint.cosigned`` for the default fleet).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence

from fleet_ledger.anchors.base import Anchor, AnchorError
from fleet_ledger.anchors.store import AnchorStore
from fleet_ledger.fleet.log.cosignature import cosigned_note
from fleet_ledger.fleet.subjects import DEFAULT_FLEET
from fleet_ledger.plumbing.anchoring import CheckpointSource, Publish

log = logging.getLogger(__name__)

COSIGNED_SUBJECT = DEFAULT_FLEET.cosigned


class AnchorRunner:
    """Anchors the checkpoints of ``source`` with ``anchors``, keeping their receipts in
    ``store`` (closed, with the anchors, when :meth:`run` ends); cosigned checkpoints go
    out on ``cosigned_subject``."""

    def __init__(self, store: AnchorStore, anchors: Sequence[Anchor], source: CheckpointSource,
                 publish: Publish | None = None, poll_s: float = 0.25, max_backoff: float = 30.0,
                 timeout: float = 30.0, cosigned_subject: str = COSIGNED_SUBJECT) -> None:
        self.store = store
        self.cosigned_subject = cosigned_subject
        store.ensure_tables()
        self.source = source
        self.anchors = list(anchors)
        for anchor in self.anchors:
            store.register(anchor.name, anchor.kind)
        self.publish = publish
        self.poll_s = poll_s
        self.max_backoff = max_backoff
        self.timeout = timeout

    async def run(self, stop: asyncio.Event) -> None:
        """Anchor until ``stop`` is set."""
        try:
            await asyncio.gather(*(self._loop(a, stop) for a in self.anchors))
        finally:
            for anchor in self.anchors:
                with contextlib.suppress(Exception):
                    await anchor.close()
            self.store.close()

    async def _loop(self, anchor: Anchor, stop: asyncio.Event) -> None:
        backoff = 0.0
        while not stop.is_set():
            newest = self.source.newest_checkpoint_after(self.store.last_anchored(anchor.name))
            if newest is not None:
                size, note = newest
                try:
                    receipt = await asyncio.wait_for(anchor.anchor(note, size, self.source),
                                                     self.timeout)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # any failure of one anchor: note it, back off
                    detail = str(exc) if isinstance(exc, AnchorError) else \
                        f"{type(exc).__name__}: {exc}"
                    self.store.record_error(anchor.name, detail)
                    backoff = min(max(backoff * 2, 0.5), self.max_backoff)
                    log.warning("anchor %s: %s; retrying in %.1fs", anchor.name, detail, backoff)
                else:
                    self.store.record_receipt(receipt)
                    backoff = 0.0
                    if receipt.kind == "witness":
                        await self._publish_cosigned(size, note)
                    continue
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), backoff or self.poll_s)

    def cosigned_note(self, size: int, note: str) -> str:
        """``note`` with every witness cosignature stored for ``size``."""
        return cosigned_note(note, self.store.witness_signatures(size))

    async def _publish_cosigned(self, size: int, note: str) -> None:
        if self.publish is None:
            return
        try:
            await self.publish(self.cosigned_subject, self.cosigned_note(size, note).encode())
        except Exception as exc:  # publishing is best effort; the receipts are stored
            log.warning("publishing the cosigned checkpoint %d failed: %s", size, exc)
