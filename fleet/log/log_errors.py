"""Named failures of the fleet log: Merkle proofs, leaves, signed notes, checkpoints, bundles.

Kept apart from :mod:`fleet.errors` (the record's refusals) so the two can grow
independently; every class still subclasses :class:`~fleet.errors.FleetError`, and the class
name is the rule name a CLI prints and an operator counts.
"""

from __future__ import annotations

from fleet_ledger.fleet.errors import FleetError

__all__ = [
    "AmbiguousKey",
    "BadSignature",
    "BadTimestamp",
    "BundleError",
    "CheckpointError",
    "InconsistentCheckpoint",
    "InvalidProofRequest",
    "LeafMismatch",
    "LogError",
    "MalformedBundle",
    "MalformedCheckpoint",
    "MalformedKey",
    "MalformedLeaf",
    "MalformedNote",
    "MalformedProof",
    "MalformedTilePath",
    "MissingCosignatures",
    "MissingNode",
    "NoteError",
    "OriginMismatch",
    "ProofError",
    "ProofLengthMismatch",
    "RootMismatch",
    "ShrinkingCheckpoint",
    "SizeMismatch",
    "UnknownKey",
]



class LogError(FleetError):
    """Base of every failure concerning the fleet log and its proofs."""


# -- Merkle proofs ------------------------------------------------------------------------


class ProofError(LogError):
    """A Merkle inclusion or consistency proof does not verify."""


class InvalidProofRequest(ProofError):
    """A proof asked for indexes or sizes that do not exist (index >= size, old > new ...)."""


class MalformedProof(ProofError):
    """A proof element that is not a 32-byte hash."""


class ProofLengthMismatch(ProofError):
    """A proof holds more or fewer hashes than its sizes call for."""


class RootMismatch(ProofError):
    """A proof recomputes to a root other than the one expected; carries both."""

    def __init__(self, message: str, *, expected: bytes, calculated: bytes) -> None:
        super().__init__(f"{message}: expected {expected.hex()}, calculated {calculated.hex()}")
        self.expected = expected
        self.calculated = calculated


class MissingNode(LogError):
    """A store was asked for a node hash it does not hold (the tree is too small)."""


# -- leaves -------------------------------------------------------------------------------


class MalformedLeaf(LogError):
    """Leaf bytes of the wrong length, domain tag or with an index out of range."""


# -- tiles ----------------------------------------------------------------------------------


class MalformedTilePath(LogError):
    """A tile or entry-bundle path not in the c2sp.org/tlog-tiles form, or a bundle cut short."""


# -- signed notes -------------------------------------------------------------------------


class NoteError(LogError):
    """A signed note or a note key fails to parse or to verify."""


class MalformedNote(NoteError):
    """Bytes that are not a signed note: no blank line, bad signature line, control chars ..."""


class MalformedKey(NoteError):
    """Key text that is not ``name+keyid+base64`` (or ``PRIVATE+KEY+...``), or whose id is wrong."""


class AmbiguousKey(NoteError):
    """Two different verifier keys with the same name and key id were offered."""


class UnknownKey(NoteError):
    """The note carries no signature by any of the verifier keys offered."""


class BadSignature(NoteError):
    """A signature by a known key does not verify over the note text."""

    def __init__(self, message: str, *, name: str = "", key_id: int = 0) -> None:
        super().__init__(message)
        self.name = name
        self.key_id = key_id


# -- checkpoints --------------------------------------------------------------------------


class CheckpointError(LogError):
    """A checkpoint body is malformed or would contradict an earlier one."""


class MalformedCheckpoint(CheckpointError):
    """A note text that is not a C2SP tlog-checkpoint body."""


class ShrinkingCheckpoint(CheckpointError):
    """A new checkpoint smaller than the last one signed."""


class InconsistentCheckpoint(CheckpointError):
    """A new checkpoint whose tree does not extend the last one signed."""


# -- proof bundles ------------------------------------------------------------------------


class BundleError(LogError):
    """A proof bundle fails one of its checks."""


class MalformedBundle(BundleError):
    """A bundle missing a field, or with a field of the wrong type or encoding."""


class OriginMismatch(BundleError):
    """The bundle's origin differs from the origin in its signed checkpoint."""


class SizeMismatch(BundleError):
    """The bundle's tree size differs from the size in its signed checkpoint."""


class LeafMismatch(BundleError):
    """The leaf bytes do not bind the run, index or head the bundle states."""


# -- anchors ------------------------------------------------------------------------------


class MissingCosignatures(BundleError):
    """Fewer known witnesses cosigned the bundle's checkpoint (or a later one) than required."""


class BadTimestamp(BundleError):
    """An RFC 3161 receipt whose token, imprint or certificate chain does not verify."""
