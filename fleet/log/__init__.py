"""The fleet log: the RFC 9162 Merkle tree and its appends, tiles and proofs, C2SP signed notes,
checkpoints and cosignatures, witnesses, the 84-byte leaf, proof and anchor bundles. Above
:mod:`fleet.record` (the leaf names a record kind)."""

__all__: list[str] = []
