"""When a ledger signs a checkpoint: a decision of values, the signing is the shell's.

A checkpoint is due when the tree has grown past the last one signed and either
``every`` leaves were added since, ``every_ms`` have passed, or a reader waits for a
checkpoint of at least ``wanted`` leaves that the tree now holds (a proof of a new leaf:
reads never sign, they wait for the checkpoint step).
"""

from __future__ import annotations

__all__ = ["checkpoint_due"]


def checkpoint_due(size: int, signed: int, elapsed_ms: float, every: int, every_ms: float,
                   wanted: int = 0) -> bool:
    """Whether to sign the tree of ``size`` leaves now; ``signed``: the size of the last
    checkpoint (0: none), ``elapsed_ms`` since it was signed, ``wanted``: the largest size a
    waiting reader asked for (0: none)."""
    if size <= signed:
        return False
    return size - signed >= every or elapsed_ms >= every_ms or signed < wanted <= size
