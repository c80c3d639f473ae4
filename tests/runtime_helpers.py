"""What the runtime tests that run a worker in this process share."""

from __future__ import annotations

from pathlib import Path
from typing import Any

EXAMPLES = str(Path(__file__).resolve().parent.parent / "examples")


async def no_adopt(run: str) -> Any:
    """A worker's adopt for runs that are all held here."""
    raise AssertionError(f"the run {run} is held here")


async def no_drain() -> None:
    """A worker's drain with no ledger: the outbox stays on the host."""
