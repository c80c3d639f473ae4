"""When a ledger signs a checkpoint: a decision of values; the signing is the shell's.

Whether it leads is held by :class:`LeadState`: a single ledger always leads, from the
stream's start; a replica while its lease holds, from the stream's end as it was when it
took the lease (:func:`leads_signing`).

The ledger that leads (a single ledger, or the replica holding the lease) signs when the
tree has grown past the last checkpoint by ``every`` leaves or ``every_ms`` have passed
since it was signed. Any ledger signs when a reader waits for a checkpoint of ``wanted``
leaves that the tree now holds and none signed holds (a proof of a new leaf, or the first
checkpoint): reads never sign, they wait for the checkpoint step.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["LeadState", "checkpoint_due", "leads_signing"]


def leads_signing(leading: bool, lead_floor: int | None, committed_seq: int) -> bool:
    """Whether a ledger signs on count and time, publishes and anchors: while it leads (a
    single ledger always; a replica while its lease is fresh) and has committed the stream
    up to ``lead_floor``, the stream's end when it took the lease (``None``: not read yet),
    so it never publishes a checkpoint below one its predecessor published."""
    return leading and lead_floor is not None and committed_seq >= lead_floor


def checkpoint_due(size: int, signed: int | None, elapsed_ms: float, every: int,
                   every_ms: float, wanted: int | None = None, leading: bool = True) -> bool:
    """Whether to sign the tree of ``size`` leaves now. ``signed``: the size of the last
    checkpoint (``None``: none yet), ``elapsed_ms`` since it was signed; ``wanted``: the
    largest size a waiting reader asked for (``None``: no reader waits); ``leading``:
    whether this ledger signs on count and time."""
    have = -1 if signed is None else signed
    if wanted is not None and have < wanted <= size:
        return True
    if not leading or size <= max(have, 0):
        return False
    return size - max(have, 0) >= every or elapsed_ms >= every_ms


class LeadState:
    """Whether a ledger leads, and from which stream position it signs. ``replicated``: it
    is one of several replicas sharing a lease (else it always leads, from the start);
    ``holds`` (set once the replica's lease task runs) says whether it holds the lease now;
    :attr:`floor` is the stream's end when it took the lease (``None``: not leading, or the
    end not read yet, which the lease task then asks again)."""

    __slots__ = ("floor", "holds", "replicated")

    def __init__(self, replicated: bool) -> None:
        self.replicated = replicated
        self.floor: int | None = None if replicated else 0
        self.holds: Callable[[], bool] | None = None

    @property
    def leading(self) -> bool:
        """A single ledger always leads; a replica while it holds the lease."""
        if self.holds is None:
            return not self.replicated
        return self.holds()

    def took(self, stream_end: int | None) -> None:
        """The lease was taken with the stream ending at ``stream_end`` (``None``: not read)."""
        self.floor = stream_end

    def dropped(self) -> None:
        """The lease was lost: nothing is signed on the timer until it is taken again."""
        self.floor = None

    def signs(self, committed_seq: int) -> bool:
        """Whether the ledger signs on the timer, publishes and anchors, having committed
        the stream up to ``committed_seq`` (:func:`leads_signing`)."""
        return leads_signing(self.leading, self.floor, committed_seq)
