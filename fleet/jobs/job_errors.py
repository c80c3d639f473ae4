"""Named refusals and verification failures of jobs (``docs/spec/jobs.md``).

Kept apart from :mod:`fleet.errors` like :mod:`fleet.fold.control_errors`; every class
subclasses :class:`~fleet.errors.FleetError`, and the class name is the rule name the ledger
stores and counts and the CLI prints. Three families:

* :class:`MalformedJob` and its subclasses: bytes that do not decode to one canonical value;
* :class:`JobRefusal`: what the ledger refuses while it folds a job's events and item runs;
* :class:`JobProofError`: a receipt or an item proof that does not verify. These carry what
  was expected and what was calculated, so a verifier can say exactly where they part.
"""

from __future__ import annotations

from fleet_ledger.fleet.errors import FleetError

__all__ = [
    "DuplicateItem",
    "ItemCountMismatch",
    "ItemEnergyOverflow",
    "ItemGrantMismatch",
    "ItemIndexMismatch",
    "ItemMismatch",
    "ItemOutOfRange",
    "ItemRunMismatch",
    "JobError",
    "JobExists",
    "JobIdMismatch",
    "JobProofError",
    "JobRefusal",
    "JobRootMismatch",
    "JobSealed",
    "JobTagTaken",
    "JobTooLarge",
    "JobTotalsMismatch",
    "MalformedItemProof",
    "MalformedJob",
    "MalformedJobTerms",
    "MalformedReceipt",
    "MissingItemsMismatch",
    "SumOverflow",
    "UnknownJob",
    "VerdictCountsMismatch",
]


class JobError(FleetError):
    """Base of every failure concerning jobs, their receipts and item proofs."""


# -- bytes --------------------------------------------------------------------------------


class MalformedJob(JobError):
    """Bytes or values that are not one canonical job value."""


class MalformedJobTerms(MalformedJob):
    """A job's terms that do not decode (or cannot be encoded): a name that is not printable
    text of 1..128 bytes, an item count outside 1..2**32 - 1, a bad grant flag, a wrong length."""


class MalformedReceipt(MalformedJob):
    """Receipt bytes that do not decode, or a receipt that contradicts itself (verdict counts
    that do not add up to its item count, a missing list that is not ascending, ...)."""


class MalformedItemProof(MalformedJob):
    """Item-proof or item-leaf bytes that do not decode, or a path of the wrong length for
    the item's index and the job's item count."""


class SumOverflow(MalformedJob):
    """A sum of the tree that would exceed its width (2**64 - 1 microjoules for an energy,
    2**32 - 1 for a count). Implementations refuse; they never wrap, or a huge item could
    cancel another's cost."""


# -- the ledger's refusals ----------------------------------------------------------------


class JobRefusal(JobError):
    """A job event or an item run the ledger will not fold."""


class UnknownJob(JobRefusal):
    """An item run, a seal or a request naming a job no accepted open event opened (the tag
    of an item's unit matches no job)."""


class JobSealed(JobRefusal):
    """An item run, or a second seal, for a job already sealed."""


class JobExists(JobRefusal):
    """An open event whose job id is already open or sealed (same terms, same nonce)."""


class JobTagTaken(JobRefusal):
    """An open event whose job's 20-byte tag equals another job's: item units name their
    job by the tag, so two jobs may never share one."""


class JobTooLarge(JobRefusal):
    """An open event for a job of more items than a ledger folds in one job
    (:data:`fleet.jobs.job_id.MAX_JOB_ITEMS`): its seal, linear in the item count, would
    stall the fold. A larger set of work is several jobs."""


class DuplicateItem(JobRefusal):
    """A second run for an item that already has one (whatever its grants)."""


class ItemOutOfRange(JobRefusal):
    """An item run whose index is not below its job's item count."""


class ItemGrantMismatch(JobRefusal):
    """An item run of a job opened under a grant, whose grants id is not that grant."""


class ItemEnergyOverflow(JobRefusal):
    """The close of an item run whose energy a receipt cannot carry: one of its 8 accounts
    past 2**64 - 1 microjoules, or the job's total of that account, with the items closed
    before it, past that width. Refused at the close (the run stays open and the item
    missing if the job is sealed) so that every sealed job has a receipt: accepted, the
    close would leave a job whose tree cannot be built."""


# -- verification -------------------------------------------------------------------------


class JobProofError(JobError):
    """A receipt or an item proof that does not verify; ``expected`` is what the receipt
    (or the proof) states, ``calculated`` what the check computed from the evidence."""

    def __init__(self, message: str, *, expected: object = None,
                 calculated: object = None) -> None:
        super().__init__(message)
        self.expected = expected
        self.calculated = calculated


class JobIdMismatch(JobProofError):
    """A proof or an item for another job than the receipt's."""


class ItemCountMismatch(JobProofError):
    """A proof or a set of items whose item count is not the receipt's."""


class ItemIndexMismatch(JobProofError):
    """A leaf whose index is not its position in the tree: an item moved or counted twice."""


class ItemRunMismatch(JobProofError):
    """A present leaf whose run id is not the genesis of its item's unit and its grants: the
    run is not item ``index`` of this job."""


class ItemMismatch(JobProofError):
    """A leaf that differs from what the item's record says (head, energy or verdict)."""


class MissingItemsMismatch(JobProofError):
    """A receipt's missing list that is not exactly the items without a run: an item dropped
    (listed missing while its run is there), or a missing leaf the list does not name."""


class JobTotalsMismatch(JobProofError):
    """A receipt's energy totals that are not the sums of its items' energies."""


class VerdictCountsMismatch(JobProofError):
    """A receipt's verdict counts that are not the counts of its items' verdicts."""


class JobRootMismatch(JobProofError):
    """A sum-tree root that is not the receipt's."""
