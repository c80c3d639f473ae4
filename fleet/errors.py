"""Named refusals.

Every rule the record, the fold or a proof can break is one exception class here, and the
class name *is* the rule name that the ledger stores, counts and publishes. The classes
carry the segment index they concern (1-based, ``None`` when the failure is not about one
segment) so a verifier can name the first bad segment.

Each record refusal says who is at fault by its base class (and its ``fault`` text):

* :class:`WireError` (``"wire"``): bytes that do not decode to a well-formed segment;
* :class:`RuleError` (``"record"``): a well-formed segment that breaks a rule of the
  record (:mod:`fleet.record.kernel`). Raised by :class:`fleet.record.builder.RecordBuilder` to the
  host
  program calling it, a rule or wire error is that program's misuse of the API: it asked
  for a segment the record forbids, and nothing was sealed. Raised by the fold or by
  ``fleet verify``, it is bad bytes from whoever sealed them;
* :class:`AdmissionError` (``"admission"``): a segment the ledger will not admit where it
  arrived (unknown or revoked host, someone else's run, wrong subject, replay, fork),
  whatever its own validity.
"""

from __future__ import annotations

__all__ = [
    "AdmissionError",
    "AttestationMismatch",
    "BadSeal",
    "FleetError",
    "ForeignRun",
    "Fork",
    "HeadMismatch",
    "IndexGap",
    "MalformedAddress",
    "MalformedCallAccount",
    "MalformedSegment",
    "MalformedSnapshot",
    "ManifestMismatch",
    "PhaseViolation",
    "RecordClosed",
    "RecordError",
    "Replay",
    "RevokedHost",
    "RuleError",
    "RunMismatch",
    "SnapshotMismatch",
    "SubjectMismatch",
    "UnknownHost",
    "ValueOutOfRange",
    "WireError",
    "ZeroClaimEnergy",
    "ZeroIdleEnergy",
    "ZeroOverheadEnergy",
]



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


class WireError(RecordError):
    """Bytes that do not decode to a well-formed segment, reference or field."""

    fault = "wire"


class RuleError(RecordError):
    """A well-formed segment that breaks a rule of the record."""

    fault = "record"


class AdmissionError(RecordError):
    """A segment the ledger does not admit where and when it arrived."""

    fault = "admission"


class MalformedAddress(WireError):
    """A content address is not ``b3:`` + 43 characters of unpadded base64url."""


class MalformedSegment(WireError):
    """Bytes that do not decode to a segment, or a segment of an unknown kind."""


class MalformedSnapshot(WireError):
    """A snapshot reference naming neither form, both, or a transcript beside a memory image."""


class MalformedCallAccount(WireError):
    """A call account whose ids are empty, too long or not text."""


class ValueOutOfRange(WireError):
    """A number or text field outside the range the canonical bytes can carry."""


class ZeroIdleEnergy(RuleError):
    """A resumed segment claiming that a park drew no energy."""


class ZeroClaimEnergy(RuleError):
    """A claimed segment saying its warm slot's warm-up or idle drew no energy."""


class ZeroOverheadEnergy(RuleError):
    """An evicted segment saying the evicted slot's warm-up or idle drew no energy."""


class PhaseViolation(RuleError):
    """A segment kind not allowed in the record's current phase (e.g. executing while parked)."""


class SnapshotMismatch(RuleError):
    """A resume offering a snapshot other than the one recorded at suspension."""


class ManifestMismatch(RuleError):
    """A resume in an environment whose manifest address differs from the recorded one."""


class RecordClosed(RuleError):
    """A segment after the record was closed."""


class AttestationMismatch(RuleError):
    """The attestation object beside an executed segment does not hash to its address."""


class HeadMismatch(RuleError):
    """A stated head differs from the head recomputed from genesis."""


class BadSeal(RuleError):
    """A seal that does not verify under the host key for this run, index and head."""


class IndexGap(RuleError):
    """A segment whose index is not the next one of its run."""


class Fork(AdmissionError):
    """A second, different segment at an index the run already holds."""


# -- refusals of the ledger's fold, beyond the record's own rules ----------------------------


class UnknownHost(AdmissionError):
    """A segment from a host the ledger has not enrolled (or not yet, at that stream position)."""


class RevokedHost(AdmissionError):
    """A segment from a host revoked before this stream position; its earlier segments stay."""


class SubjectMismatch(AdmissionError):
    """A segment published on a subject that is not its own host's and run's."""


class RunMismatch(AdmissionError):
    """A message whose run is not the genesis head of its unit and grant ids."""


class ForeignRun(AdmissionError):
    """A segment for a run that another host started."""


class Replay(AdmissionError):
    """A segment the ledger already folded, arriving again (e.g. after the dedup window)."""
