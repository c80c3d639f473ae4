"""Where the ledger and the anchors meet: two small protocols, each side owning its tables.

- :class:`CheckpointSource`, offered by the ledger (``ledger.store.CheckpointReader``): its
  newest signed checkpoint beyond a size and consistency proofs between sizes - what an
  anchor needs to anchor.
- :class:`ReceiptStore`, offered by the anchors (``anchors.store.AnchorStore``): the
  receipts covering a checkpoint size and each anchor's progress - what the ledger needs
  for its proof bundles and its status.

Neither side imports the other. The CLI (``cli/``) wires them: it hands the ledger a
:class:`ReceiptStore` and an :data:`AnchorTaskFactory`, and the ledger, once connected,
calls the factory with its :class:`CheckpointSource` and a publish function, and runs the
task it returns beside its fold.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from fleet_ledger.fleet.log.anchor_bundle import Receipt

Publish = Callable[[str, bytes], Awaitable[None]]
"""Publish a message on a NATS subject (the ledger's connection)."""


class CheckpointSource(Protocol):
    """The ledger's signed checkpoints, as the anchors read them."""

    def newest_checkpoint_after(self, size: int) -> tuple[int, str] | None:
        """(size, signed note) of the newest checkpoint if its tree is larger than
        ``size``, else None."""
        ...

    def consistency_proof(self, old_size: int, new_size: int | None = None) -> list[bytes]:
        """RFC 9162 consistency proof from ``old_size`` to ``new_size`` (default: now)."""
        ...


@dataclass(frozen=True)
class AnchorState:
    """One anchor's progress: the largest checkpoint size it anchored, and its last error."""

    name: str
    kind: str
    anchored_size: int | None
    anchored_at: float | None
    error: str | None
    error_at: float | None
    failures: int
    receipts: int = 0  # receipts stored (checkpoints anchored), for the metrics


class ReceiptStore(Protocol):
    """The anchors' receipts, as the ledger reads them."""

    def receipts_covering(self, size: int) -> list[Receipt]:
        """For each anchor, its receipt of the smallest anchored checkpoint of ``size`` or
        more."""
        ...

    def witness_signatures(self, size: int) -> list[str]:
        """Every witness's signature lines for exactly the checkpoint of ``size``."""
        ...

    def anchor_states(self) -> list[AnchorState]:
        """Every anchor's progress, by name."""
        ...

    def close(self) -> None:
        """Release the store's connection."""
        ...


class AnchorTask(Protocol):
    """Anchoring checkpoints beside the fold, until ``stop`` is set."""

    async def run(self, stop: asyncio.Event) -> None: ...


AnchorTaskFactory = Callable[[CheckpointSource, Publish | None], AnchorTask]
"""What the CLI hands the ledger: given the ledger's checkpoints and a publish function
(None without a connection), the task that anchors them."""
