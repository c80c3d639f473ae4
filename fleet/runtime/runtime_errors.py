"""Named refusals of the durable agent runtime (docs/runtime.md, docs/spec/runtime.md).

Kept apart from :mod:`fleet.errors` like :mod:`fleet.env.pool_errors`; the class name is the
rule name a CLI prints.
"""

from __future__ import annotations

from fleet_ledger.fleet.errors import FleetError

__all__ = [
    "CodeChanged",
    "EnvironmentChanged",
    "JournalTampered",
    "NotTranscriptPark",
    "ReplayDiverged",
    "RunBusy",
    "RunFinished",
    "RuntimeError_",
    "SignalConflict",
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


class SignalConflict(RuntimeError_):
    """A signal sent under an id already used for this run with another name or other
    data: refused (nothing stored, nothing delivered); the same id with the same name and
    data is a duplicate, delivered once."""


class RunBusy(RuntimeError_):
    """Another process on this host is running an interval of the run (it holds the run's
    interval lock); one interval at a time."""


class CodeChanged(RuntimeError_):
    """A parked run's resume with code of another version than the one it parked under
    (its module's bytes changed, or its declared ``code_version``): refused before any
    step runs, nothing sealed (fleet.runtime.runtime_identity)."""


class EnvironmentChanged(RuntimeError_):
    """A parked run's resume in an environment whose stamped manifest is not the one it
    parked under: refused before any step runs, nothing sealed."""
