"""Named mismatches between a runtime run's journal and its run record
(:mod:`fleet.runtime.runtime_verify`, ``fleet runtime verify``; docs/spec/runtime.md §5).

A chain that does not recompute, or a blob that does not open to its address, is the
runtime's :class:`fleet.runtime.runtime_errors.JournalTampered`; the classes here name what ties a
journal to its record. Each carries the segment (1-based) or journal entry it concerns.
"""

from __future__ import annotations

from fleet_ledger.fleet.runtime.runtime_errors import RuntimeError_

__all__ = [
    "CallAccountMismatch",
    "JournalBeyondRecord",
    "JournalRootMismatch",
    "JournalRunMismatch",
    "MalformedJournal",
    "RecordUnsealed",
    "RuntimeMismatch",
    "TranscriptMismatch",
]


class RuntimeMismatch(RuntimeError_):
    """Base of the journal-to-record mismatches; ``segment`` names the record's segment."""

    def __init__(self, message: str, *, segment: int | None = None) -> None:
        super().__init__(message)
        self.segment = segment


class MalformedJournal(RuntimeMismatch):
    """A journal file that is not a runtime journal export (shape, types, encodings)."""


class RecordUnsealed(RuntimeMismatch):
    """The record names no host key, so its seals cannot be checked."""


class JournalRunMismatch(RuntimeMismatch):
    """The journal is another run's: its run is not the record's genesis head."""


class JournalRootMismatch(RuntimeMismatch):
    """An executed segment's journal root is the root of no interval of the journal that
    starts where the previous one ended."""


class CallAccountMismatch(RuntimeMismatch):
    """An executed segment's call account is not the one its interval's entries give."""


class TranscriptMismatch(RuntimeMismatch):
    """A park's transcript address is not the journal's head where its interval ended (or
    the park is not a transcript park)."""


class JournalBeyondRecord(RuntimeMismatch):
    """The record is closed or parked, yet the journal holds entries after its last sealed
    interval."""
