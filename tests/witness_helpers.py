"""Test helpers: an in-memory signed log (honest or forked) to submit to witnesses."""

from __future__ import annotations

from hashlib import sha256

from merkle_helpers import consistency, node_map

from fleet_ledger.fleet.log.checkpoint import make_checkpoint, sign_checkpoint
from fleet_ledger.fleet.log.merkle import fold, leaf_hash, root_plan
from fleet_ledger.fleet.log.note import Signer


class MemLog:
    """A log of ``size`` leaves whose leaf i is derived from (seed, i); same signer, any seed."""

    def __init__(self, signer: Signer, size: int, seed: bytes = b"honest",
                 fork_at: int | None = None) -> None:
        self.signer = signer
        self.origin = signer.name
        leaves = []
        for i in range(size):
            tag = seed if fork_at is not None and i >= fork_at else b"honest"
            leaves.append(leaf_hash(sha256(tag + i.to_bytes(8, "big")).digest()))
        self.nodes = node_map(leaves)
        self.size = size

    def root(self, size: int) -> bytes:
        return fold([self.nodes[n] for n in root_plan(size)])

    def note(self, size: int) -> str:
        return sign_checkpoint(make_checkpoint(self.origin, size, self.root(size)), self.signer)

    def consistency_proof(self, old_size: int, new_size: int | None = None) -> list[bytes]:
        new = self.size if new_size is None else new_size
        return [] if old_size in (0, new) else consistency(self.nodes, old_size, new)
