"""Jobs as the ledger's fold sees them: the book the job events and item runs build, one
batch's overlay on it, the item gate every new run passes, and the receipt the fold makes
when a job's last item closes or the job is sealed (``docs/spec/jobs.md``, ``docs/jobs.md``).

:class:`JobBook` holds every job folded (its terms, owner, counts, whether it is sealed and
its receipt), each bound item (its run, and its sum-tree leaf once the run closed) and the
tags item units name their job by (:func:`fleet.jobs.job_id.item_unit`). :class:`BatchJobs`
overlays a batch's changes on the committed book (copy on first change, like
:class:`fleet.fold.BatchRuns`), so nothing committed moves before the batch is durable.

The fold asks two things of it for each accepted segment
(:func:`fleet.fold.fast.fold_message`), both only once a job is in the book:

- :meth:`BatchJobs.gate`, for a run the segment opens whose unit names an item
  (:func:`fleet.jobs.job_id.parse_item_unit`): the job is known (``UnknownJob``), the
  index in range (``ItemOutOfRange``), the job not sealed (``JobSealed``), the item not
  already another run's (``DuplicateItem``), the run under the job's grant if it names one
  (``ItemGrantMismatch``); the refusal is the segment's;
- :meth:`BatchJobs.took`, once the step is taken: an opened item is bound to its run; a
  close of an item run gives the item its leaf (:func:`fleet.jobs.job_records.
  item_from_state`: the run's final head, energy and wait-proof verdict), and the job's
  last close seals it.

A job is sealed by its last item's close or by a SEAL event; either way the fold builds the
receipt there (:func:`fleet.jobs.receipt.seal_leaves`, with the fleet log's size at that
point: the receipt's leaf comes right after the message that sealed it) and the shell
appends its leaf (:func:`fleet.jobs.receipt.receipt_leaf`) to the fleet log. Everything is
a function of the stream, so replicas make the same receipt, byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

from fleet_ledger.fleet.errors import FleetError
from fleet_ledger.fleet.fold.job_events import OPEN, JobAccepted, decide_job_event
from fleet_ledger.fleet.fold.reference import Accepted, Refused, RunSlot
from fleet_ledger.fleet.grants.grant_book import GrantView
from fleet_ledger.fleet.jobs.job_errors import (
    DuplicateItem,
    ItemGrantMismatch,
    ItemOutOfRange,
    JobSealed,
    UnknownJob,
)
from fleet_ledger.fleet.jobs.job_id import JobTerms, job_tag, parse_item_unit
from fleet_ledger.fleet.jobs.job_records import item_from_state
from fleet_ledger.fleet.jobs.receipt import encode_receipt, receipt_leaf, seal_leaves
from fleet_ledger.fleet.jobs.sum_tree import encode_item_leaf
from fleet_ledger.fleet.record.kinds import CLOSED

__all__ = ["BatchJobs", "ItemEntry", "JobBook", "JobEntry", "Sealed", "rebuild"]

Item = tuple[bytes, int]  # (job id, item index)


@dataclass(slots=True)
class JobEntry:
    """A folded job: its terms, owner, the stream position it was opened at, how many of
    its items are bound to a run and closed, and once sealed, where and its receipt."""

    job: bytes
    terms: JobTerms
    terms_bytes: bytes
    owner: bytes
    opened: int
    bound: int = 0
    closed: int = 0
    sealed: int | None = None
    receipt: bytes | None = None

    @property
    def items(self) -> int:
        return self.terms.items

    def copy(self) -> JobEntry:
        return JobEntry(self.job, self.terms, self.terms_bytes, self.owner, self.opened,
                        self.bound, self.closed, self.sealed, self.receipt)


@dataclass(frozen=True, slots=True)
class ItemEntry:
    """A bound item: its run, the stream position it was bound at, and its sum-tree leaf
    once the run closed (``None`` before)."""

    run: bytes
    bound: int
    leaf: bytes | None = None


@dataclass(frozen=True, slots=True)
class Sealed:
    """A receipt the fold made: the message that sealed the job (``stream_seq``), the
    receipt's bytes, its fleet-log leaf and that leaf's index (the log's size before it)."""

    stream_seq: int
    job: bytes
    receipt: bytes
    leaf: bytes
    leaf_index: int
    missing: int


class JobBook:
    """The jobs, items and item runs folded so far: a ledger's committed book, or
    (``base``) a batch's overlay on it holding what the batch changed until
    :meth:`install` makes it the base's."""

    __slots__ = ("base", "items", "jobs", "runs", "tags")

    def __init__(self, base: JobBook | None = None) -> None:
        self.base = base
        self.jobs: dict[bytes, JobEntry] = {}
        self.items: dict[Item, ItemEntry] = {}
        self.runs: dict[bytes, Item] = {}
        self.tags: dict[bytes, bytes] = {}

    @property
    def live(self) -> bool:
        """Whether any job was ever folded (else no segment needs a look)."""
        return bool(self.jobs) or (self.base is not None and self.base.live)

    def job(self, job: bytes) -> JobEntry | None:
        held = self.jobs.get(job)
        return held if held is not None or self.base is None else self.base.job(job)

    def job_state(self, job: bytes) -> tuple[bytes, bool] | None:
        entry = self.job(job)
        return None if entry is None else (entry.owner, entry.sealed is not None)

    def item(self, key: Item) -> ItemEntry | None:
        held = self.items.get(key)
        return held if held is not None or self.base is None else self.base.item(key)

    def run_item(self, run: bytes) -> Item | None:
        held = self.runs.get(run)
        return held if held is not None or self.base is None else self.base.run_item(run)

    def tag_job(self, tag: bytes) -> bytes | None:
        held = self.tags.get(tag)
        return held if held is not None or self.base is None else self.base.tag_job(tag)

    def item_leaves(self, job: bytes, count: int) -> list[bytes | None]:
        """Each item's leaf in index order (``None``: missing: no run, or not closed)."""
        out: list[bytes | None] = []
        for index in range(count):
            held = self.item((job, index))
            out.append(None if held is None else held.leaf)
        return out

    # -- the state changes (the store rebuilds a book through them too) -------------------

    def put_job(self, entry: JobEntry) -> None:
        """A job opened (or its entry changed): its item units name it by its tag."""
        self.tags[job_tag(entry.job)] = entry.job
        self.jobs[entry.job] = entry

    def put_item(self, key: Item, entry: ItemEntry) -> None:
        self.items[key] = entry
        self.runs[entry.run] = key

    def install(self, sealed: Collection[bytes] = ()) -> None:
        """Make this overlay's changes the base's (once the batch is durable), forgetting
        the items of the jobs in ``sealed``: a sealed job refuses every new item before
        asking whose it is, and its receipt is made, so the book holds items of open jobs
        only (the store keeps them all)."""
        base = self.base
        assert base is not None
        base.jobs.update(self.jobs)
        base.items.update(self.items)
        base.runs.update(self.runs)
        base.tags.update(self.tags)
        if sealed:
            gone = [key for key in base.items if key[0] in sealed]
            for key in gone:
                base.runs.pop(base.items.pop(key).run, None)


@dataclass
class BatchJobs(JobBook):
    """The committed book under one batch: its accepted job events (:attr:`accepted`), the
    items it bound and closed (:attr:`bound`, :attr:`closed`) and the receipts it made
    (:attr:`receipts`), in stream order, for the store. ``leaves``: how many leaves the
    fleet log holds before the message being decided (the batch's own included)."""

    committed: JobBook
    leaves: Callable[[], int]
    accepted: list[JobAccepted] = field(default_factory=list)
    bound: list[tuple[Item, ItemEntry]] = field(default_factory=list)
    closed: list[tuple[Item, ItemEntry]] = field(default_factory=list)
    receipts: list[Sealed] = field(default_factory=list)
    sealed: set[bytes] = field(default_factory=set)

    def __post_init__(self) -> None:
        JobBook.__init__(self, self.committed)

    def install(self, sealed: Collection[bytes] = ()) -> None:
        """:meth:`JobBook.install`, forgetting also the jobs this batch sealed."""
        JobBook.install(self, {*sealed, *self.sealed})

    @property
    def changed(self) -> bool:
        return bool(self.accepted or self.bound or self.closed)

    def _own(self, job: bytes) -> JobEntry:
        """The batch's copy of ``job``'s entry (copied on its first change)."""
        held = self.jobs.get(job)
        if held is None:
            base = self.committed.job(job)
            assert base is not None
            held = self.jobs[job] = base.copy()
        return held

    # -- job events -----------------------------------------------------------------------

    def fold(self, stream_seq: int, at_ms: int, data: bytes, grants: GrantView | None,
             operators: Collection[bytes]) -> JobAccepted | Refused:
        """Decide one job event and, accepted, take it into the batch: an open puts the
        job, a seal seals it (its receipt next in the log)."""
        d = decide_job_event(self, data, stream_seq, at_ms, grants, operators)
        if isinstance(d, Refused):
            return d
        ev = d.event
        if ev.kind == OPEN:
            assert ev.terms is not None
            self.put_job(JobEntry(ev.job, ev.terms, ev.terms_bytes, ev.signer, stream_seq))
        else:
            self._seal(self._own(ev.job), stream_seq, self.leaves())
        self.accepted.append(d)
        return d

    # -- item runs ------------------------------------------------------------------------

    def gate(self, d: Accepted) -> Accepted | Refused:
        """``d`` (a segment that opens a run) if its run may be the item its unit names (or
        names none), else the refusal (the module's docstring gives the order)."""
        opened = d.opened
        assert opened is not None
        named = parse_item_unit(opened[0])
        if named is None:
            return d
        index = named.index
        try:
            job = self.tag_job(named.tag)
            entry = None if job is None else self.job(job)
            if job is None or entry is None:
                raise UnknownJob("the run's unit names an item of a job not opened here")
            if not index < entry.items:
                raise ItemOutOfRange(f"item {index} of a job of {entry.items} items")
            if entry.sealed is not None:
                raise JobSealed(f"item {index}: the job is sealed")
            held = self.item((job, index))
            if held is not None and held.run != d.run:
                raise DuplicateItem(f"item {index} of the job is already another run")
            grant = entry.terms.grant
            if grant is not None and opened[1] != grant:
                raise ItemGrantMismatch(f"item {index} runs under another grant set than "
                                        "its job's grant")
        except FleetError as exc:
            return Refused(exc.rule, str(exc), d.host, d.run, d.index)
        return d

    def took(self, d: Accepted, slot: RunSlot, stream_seq: int) -> None:
        """After an accepted step of ``slot``'s run: bind an opened item, give a closed
        item its leaf (sealing its job with the last one)."""
        if d.opened is not None:
            named = parse_item_unit(d.opened[0])
            job = None if named is None else self.tag_job(named.tag)
            if named is None or job is None:
                return
            key = (job, named.index)
            entry = ItemEntry(d.run, stream_seq)
            self.put_item(key, entry)
            self.bound.append((key, entry))
            self._own(key[0]).bound += 1
        if d.kind != CLOSED:
            return
        item_key = self.run_item(d.run)
        if item_key is None:
            return
        entry_of_job = self.job(item_key[0])
        assert entry_of_job is not None, "an item's job is in the book"
        if entry_of_job.sealed is not None:
            return  # sealed early: the receipt lists it missing, and so do its leaves
        held = self.item(item_key)
        made = item_from_state(item_key[1], slot.state)
        assert held is not None and made is not None, "a closed item run makes its item"
        closed = ItemEntry(held.run, held.bound, encode_item_leaf(made))
        self.put_item(item_key, closed)
        self.closed.append((item_key, closed))
        own = self._own(item_key[0])
        own.closed += 1
        if own.closed == own.items:
            # The receipt's leaf follows this segment's.
            self._seal(own, stream_seq, self.leaves() + 1)

    def _seal(self, job: JobEntry, stream_seq: int, log_size: int) -> None:
        leaves = self.item_leaves(job.job, job.items)
        made = seal_leaves(job.terms, [encode_item_leaf(i) if leaf is None else leaf
                                       for i, leaf in enumerate(leaves)], log_size)
        receipt = encode_receipt(made)
        job.sealed = stream_seq
        job.receipt = receipt
        self.sealed.add(job.job)
        self.receipts.append(Sealed(stream_seq, job.job, receipt, receipt_leaf(receipt),
                                    log_size, len(made.missing)))


def rebuild(jobs: Iterable[JobEntry], items: Iterable[tuple[Item, ItemEntry]]) -> JobBook:
    """A committed book from the store's rows (:meth:`JobBook.put_job`, ``put_item``)."""
    book = JobBook()
    for entry in jobs:
        book.put_job(entry)
    for key, item in items:
        book.put_item(key, item)
    return book
