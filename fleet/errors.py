"""Named refusals.

Every rule the record, the fold or a proof can break is one exception class here, and the
class name *is* the rule name that the ledger stores, counts and publishes. The classes
carry the segment index they concern (1-based, ``None`` when the failure is not about one
segment) so a verifier can name the first bad segment.
"""

from __future__ import annotations


class FleetError(Exception):
    """Base of every error the fleet ledger names."""

    @property
    def rule(self) -> str:
        return type(self).__name__


class RecordError(FleetError):
    """A run record, segment or reference breaks a rule of the record."""

    def __init__(self, message: str, *, segment: int | None = None) -> None:
        super().__init__(message)
        self.segment = segment

    def at(self, segment: int) -> RecordError:
        """Return this error pinned to ``segment`` (keeps the first pin)."""
        if self.segment is None:
            self.segment = segment
        return self


class MalformedAddress(RecordError):
    """A content address is not ``b3:`` + 43 characters of unpadded base64url."""


class MalformedSegment(RecordError):
    """Bytes that do not decode to a segment, or a segment of an unknown kind."""


class MalformedSnapshot(RecordError):
    """A snapshot reference naming neither form, both, or a transcript beside a memory image."""


class MalformedCallAccount(RecordError):
    """A call account whose ids are empty, too long or not text."""


class ValueOutOfRange(RecordError):
    """A number or text field outside the range the canonical bytes can carry."""


class ZeroIdleEnergy(RecordError):
    """A resumed segment claiming that a park drew no energy."""


class PhaseViolation(RecordError):
    """A segment kind not allowed in the record's current phase (e.g. executing while parked)."""


class SnapshotMismatch(RecordError):
    """A resume offering a snapshot other than the one recorded at suspension."""


class ManifestMismatch(RecordError):
    """A resume in an environment whose manifest address differs from the recorded one."""


class RecordClosed(RecordError):
    """A segment after the record was closed."""


class AttestationMismatch(RecordError):
    """The attestation object beside an executed segment does not hash to its address."""


class HeadMismatch(RecordError):
    """A stated head differs from the head recomputed from genesis."""


class BadSeal(RecordError):
    """A seal that does not verify under the host key for this run, index and head."""


class IndexGap(RecordError):
    """A segment whose index is not the next one of its run."""


class Fork(RecordError):
    """A second, different segment at an index the run already holds."""


# -- refusals of the ledger's fold, beyond the record's own rules ----------------------------


class UnknownHost(RecordError):
    """A segment from a host the ledger has not enrolled (or not yet, at that stream position)."""


class RevokedHost(RecordError):
    """A segment from a host revoked before this stream position; its earlier segments stay."""


class SubjectMismatch(RecordError):
    """A segment published on a subject that is not its own host's and run's."""


class RunMismatch(RecordError):
    """A message whose run is not the genesis head of its unit and grant ids."""


class ForeignRun(RecordError):
    """A segment for a run that another host started."""


class Replay(RecordError):
    """A segment the ledger already folded, arriving again (e.g. after the dedup window)."""
