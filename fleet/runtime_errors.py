"""Named refusals of the durable agent runtime (docs/runtime.md, docs/spec/runtime.md).

Kept apart from :mod:`fleet.errors` like :mod:`fleet.pool_errors`; the class name is the
rule name a CLI prints.
"""

from __future__ import annotations

from fleet.errors import FleetError

__all__ = [
    "JournalTampered",
    "NotTranscriptPark",
    "ReplayDiverged",
    "RunFinished",
    "RuntimeError_",
    "SignalTimeout",
    "ValueShredded",
    "WorkflowUnknown",
]


class RuntimeError_(FleetError):
    """Base of the runtime's refusals."""


class ReplayDiverged(RuntimeError_):
    """Replaying a journal, the workflow asked for something else than the journal holds at
    that position (a reordered or renamed step, changed arguments, a clock or random value
    read outside the context, a missing or extra call). Nothing is appended."""

    def __init__(self, message: str, *, seq: int, expected: str, actual: str,
                 line: str) -> None:
        super().__init__(f"{message} at journal entry {seq}: expected {expected}, got"
                         f" {actual} ({line})")
        self.seq = seq
        self.expected = expected
        self.actual = actual
        self.line = line


class JournalTampered(RuntimeError_):
    """A journal whose entries do not chain to the head they claim (or to the park's
    transcript address), or a blob that does not hash to its address."""


class NotTranscriptPark(RuntimeError_):
    """A runtime run parked with an image snapshot: only a transcript park (the journal's
    head) continues a workflow."""


class ValueShredded(RuntimeError_):
    """A replay needs a journaled value whose key was deleted (crypto-shredded)."""


class WorkflowUnknown(RuntimeError_):
    """A journal names a workflow this process cannot import."""


class RunFinished(RuntimeError_):
    """The run is done, failed or cancelled already: there is nothing left to cancel."""


class SignalTimeout(RuntimeError_, TimeoutError):
    """``ctx.signal(..., timeout=...)`` reached its deadline with no signal."""
