"""Jobs as the ledger's fold sees them: the book the job events and item runs build, one
batch's overlay on it, the item gate every new run passes, and the receipt the fold makes
when a job's last item closes or the job is sealed (``docs/spec/jobs.md``, ``docs/jobs.md``).

:class:`JobBook` holds every job folded (its terms, owner, counts, whether it is sealed and
its receipt), each bound item (its run, and its sum-tree leaf once the run closed) and the
tags item units name their job by (:func:`fleet.jobs.job_id.item_unit`). :class:`BatchJobs`
overlays a batch's changes on the committed book (copy on first change, like
:class:`fleet.fold.BatchRuns`), so nothing committed moves before the batch is durable.

The fold asks two things of it for each accepted segment that opens a run, and, once a job
is in the book, for each that closes one (:func:`fleet.fold.fast.fold_message`; no other
step changes an item):

- :meth:`BatchJobs.gate`, before the step is taken. For a run the segment opens whose unit
  names an item (:func:`fleet.jobs.job_id.parse_item_unit`): the job is known
  (``UnknownJob``), the index in range (``ItemOutOfRange``), the job not sealed
  (``JobSealed``), the item not already another run's (``DuplicateItem``), the run under the
  job's grant if it names one (``ItemGrantMismatch``). For a close of an item of an open
  job: the run's energy after the close, added to the job's items closed before it, stays
  within 2**64 - 1 in each account (``ItemEnergyOverflow``: else the receipt could not be
  built; a bound on the sums clears the usual close at once, and past it the state the
  close leads to, :meth:`fleet.record.kernel.RunState.after`, is summed exactly). The
  refusal is the segment's;
- :meth:`BatchJobs.took`, once the step is taken: what the gate made of it is applied (an
  opened item bound to its run, a closed item given its leaf, made from the state the close
  left: :func:`fleet.jobs.sum_tree.state_leaf`, equal to
  :func:`fleet.jobs.job_records.item_from_state`'s item: the run's final head, energy and
  wait-proof verdict), and the job's last close seals it.

A job is sealed by its last item's close or by a SEAL event; either way the fold builds the
receipt there (:func:`fleet.jobs.receipt.seal_leaves`, with the fleet log's size at that
point: the receipt's leaf comes right after the message that sealed it) and the shell
appends its leaf (:func:`fleet.jobs.receipt.receipt_leaf`) to the fleet log. Everything is
a function of the stream, so replicas make the same receipt, byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from operator import add
from typing import NamedTuple

from fleet_ledger.fleet.errors import FleetError
from fleet_ledger.fleet.fold.job_events import OPEN, JobAccepted, decide_job_event
from fleet_ledger.fleet.fold.reference import Accepted, Refused, RunSlot
from fleet_ledger.fleet.grants.grant_book import GrantView
from fleet_ledger.fleet.jobs.job_errors import (
    DuplicateItem,
    ItemEnergyOverflow,
    ItemGrantMismatch,
    ItemOutOfRange,
    JobSealed,
    UnknownJob,
)
from fleet_ledger.fleet.jobs.job_id import JobTerms, job_tag, parse_item_unit
from fleet_ledger.fleet.jobs.receipt import encode_receipt, receipt_leaf, seal_leaves
from fleet_ledger.fleet.jobs.sum_tree import (
    decode_item_leaf,
    encode_item_leaf,
    energy_of,
    state_leaf,
)
from fleet_ledger.fleet.record.kernel import MAX_U64, step_uj
from fleet_ledger.fleet.record.kinds import CLOSED
from fleet_ledger.fleet.record.record import RunState

__all__ = ["BatchJobs", "ItemEntry", "JobBook", "JobEntry", "Sealed", "rebuild"]

Item = tuple[bytes, int]  # (job id, item index)
_NO_ENERGY = (0,) * 8


@dataclass(slots=True)
class JobEntry:
    """A folded job: its terms, owner, the stream position it was opened at, how many of
    its items are bound to a run and closed, the 8 energy totals of its closed items (the
    receipt's, so far), and once sealed, where and its receipt."""

    job: bytes
    terms: JobTerms
    terms_bytes: bytes
    owner: bytes
    opened: int
    bound: int = 0
    closed: int = 0
    sealed: int | None = None
    receipt: bytes | None = None
    energy: tuple[int, ...] = _NO_ENERGY

    @property
    def items(self) -> int:
        return self.terms.items

    def copy(self) -> JobEntry:
        return JobEntry(self.job, self.terms, self.terms_bytes, self.owner, self.opened,
                        self.bound, self.closed, self.sealed, self.receipt, self.energy)

    def energy_with(self, item: tuple[int, ...]) -> tuple[int, ...]:
        """The job's energy totals with one more closed item's (unchecked: the gate holds
        them within u64 before a close is taken)."""
        return tuple(map(add, self.energy, item))


class ItemEntry(NamedTuple):
    """A bound item: its run and the stream position it was bound at (its leaf, once the
    run closed, is kept beside it: :meth:`JobBook.leaf`). A tuple: a job's items are
    many, and the collector stops tracking a tuple of bytes and ints."""

    run: bytes
    bound: int


@dataclass(frozen=True, slots=True)
class Sealed:
    """A receipt the fold made: the message that sealed the job (``stream_seq``), the
    receipt's bytes, its fleet-log leaf and that leaf's index (the log's size before it),
    and the sum-tree leaves it was made from (index order, a missing item's included)."""

    stream_seq: int
    job: bytes
    receipt: bytes
    leaf: bytes
    leaf_index: int
    missing: int
    leaves: list[bytes]


class JobBook:
    """The jobs, items and item runs folded so far: a ledger's committed book, or
    (``base``) a batch's overlay on it holding what the batch changed until
    :meth:`install` makes it the base's."""

    __slots__ = ("base", "items", "jobs", "leaf_of", "runs", "tags")

    def __init__(self, base: JobBook | None = None) -> None:
        self.base = base
        self.jobs: dict[bytes, JobEntry] = {}
        self.items: dict[Item, ItemEntry] = {}
        self.leaf_of: dict[Item, bytes] = {}
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

    def leaf(self, key: Item) -> bytes | None:
        """A closed item's sum-tree leaf (``None``: not closed)."""
        held = self.leaf_of.get(key)
        return held if held is not None or self.base is None else self.base.leaf(key)

    def run_item(self, run: bytes) -> Item | None:
        held = self.runs.get(run)
        return held if held is not None or self.base is None else self.base.run_item(run)

    def tag_job(self, tag: bytes) -> bytes | None:
        held = self.tags.get(tag)
        return held if held is not None or self.base is None else self.base.tag_job(tag)

    def item_leaves(self, job: bytes, count: int) -> list[bytes | None]:
        """Each item's leaf in index order (``None``: missing: no run, or not closed)."""
        return [self.leaf((job, index)) for index in range(count)]

    # -- the state changes (the store rebuilds a book through them too) -------------------

    def put_job(self, entry: JobEntry) -> None:
        """A job opened (or its entry changed): its item units name it by its tag."""
        self.tags[job_tag(entry.job)] = entry.job
        self.jobs[entry.job] = entry

    def put_item(self, key: Item, entry: ItemEntry) -> None:
        self.items[key] = entry
        self.runs[entry.run] = key

    def put_leaf(self, key: Item, leaf: bytes) -> None:
        """A bound item's run closed: its leaf."""
        self.leaf_of[key] = leaf

    def install(self, sealed: Collection[bytes] = ()) -> None:
        """Make this overlay's changes the base's (once the batch is durable), forgetting
        the items of the jobs in ``sealed``: a sealed job refuses every new item before
        asking whose it is, and its receipt is made, so the book holds items of open jobs
        only (the store keeps them all)."""
        base = self.base
        assert base is not None
        base.jobs.update(self.jobs)
        base.items.update(self.items)
        base.leaf_of.update(self.leaf_of)
        base.runs.update(self.runs)
        base.tags.update(self.tags)
        if sealed:
            gone = [key for key in base.items if key[0] in sealed]
            for key in gone:
                base.runs.pop(base.items.pop(key).run, None)
                base.leaf_of.pop(key, None)


@dataclass
class BatchJobs(JobBook):
    """The committed book under one batch: its accepted job events (:attr:`accepted`), the
    items it bound (:attr:`bound`), the jobs it changed (their copies in :attr:`jobs`) and
    the receipts it made (:attr:`receipts`), in stream order, for the store (a closed
    item's leaf is not among them: it is a function of its run's state, which the store
    writes with the runs). ``leaves``:
    how many leaves the fleet log holds before the message being decided (the batch's own
    included)."""

    committed: JobBook
    leaves: Callable[[], int]
    accepted: list[JobAccepted] = field(default_factory=list)
    bound: list[tuple[Item, ItemEntry]] = field(default_factory=list)
    receipts: list[Sealed] = field(default_factory=list)
    sealed: set[bytes] = field(default_factory=set)
    # What gate made of the step it let through, for took: (run, item, whether the step
    # opens the run, whether it closes the item).
    _ready: tuple[bytes, Item, bool, bool] | None = None

    def __post_init__(self) -> None:
        JobBook.__init__(self, self.committed)

    def install(self, sealed: Collection[bytes] = ()) -> None:
        """:meth:`JobBook.install`, forgetting also the jobs this batch sealed."""
        JobBook.install(self, {*sealed, *self.sealed})

    @property
    def changed(self) -> bool:
        # Every change to a job (an open, a bind, a close, a seal) has its copy here.
        return bool(self.jobs)

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

    def gate(self, d: Accepted, slot: RunSlot | None) -> Accepted | Refused:
        """``d`` (a segment that opens a run, or closes ``slot``'s) if it may be taken as its
        item's step, else the refusal (the module's docstring gives the order); what it
        makes of the item is kept for :meth:`took`, which follows the step at once."""
        self._ready = None
        opened = d.opened
        try:
            if opened is not None:
                named = parse_item_unit(opened[0])
                if named is None:
                    return d
                key, entry = self._gate_open(named.tag, named.index, d.run, opened[1])
            else:
                held = self.run_item(d.run)
                if held is None:
                    return d
                key = held
                of_item = self.job(key[0])
                assert of_item is not None, "an item's job is in the book"
                entry = of_item
            # A sealed job's receipt lists the item missing, and so do its leaves.
            closes = d.kind == CLOSED and entry.sealed is None
            if closes:
                if slot is not None:
                    state = slot.state
                else:
                    assert opened is not None, "a close of a run the batch cannot see"
                    state = RunState.open(*opened)
                self._gate_close(key[1], entry, state, d)
        except FleetError as exc:
            return Refused(exc.rule, str(exc), d.host, d.run, d.index)
        self._ready = (d.run, key, opened is not None, closes)
        return d

    @staticmethod
    def _gate_close(index: int, entry: JobEntry, state: RunState, d: Accepted) -> None:
        """``ItemEnergyOverflow`` if the run's energy after the close ``d``, added to the
        job's items closed before it, passes 2**64 - 1 in an account. Each account's sum is
        at most the job's largest total plus all of the run's energy (its accounts' sum,
        ``spent``, and what the step adds), so below that bound nothing is looked at
        closer; past it, the exact sums of the state the close leads to decide."""
        if max(entry.energy) + state.energy.spent + step_uj(d.step) <= MAX_U64:
            return
        made = energy_of(state.after(d.index, d.head, d.step).energy)
        if max(entry.energy_with(made)) > MAX_U64:
            raise ItemEnergyOverflow(
                f"item {index}: its energy, with the job's items closed before it,"
                " exceeds what a receipt carries (2**64 - 1 uJ an account)")

    def _gate_open(self, tag: bytes, index: int, run: bytes, grants: bytes
                   ) -> tuple[Item, JobEntry]:
        job = self.tag_job(tag)
        entry = None if job is None else self.job(job)
        if job is None or entry is None:
            raise UnknownJob("the run's unit names an item of a job not opened here")
        if not index < entry.items:
            raise ItemOutOfRange(f"item {index} of a job of {entry.items} items")
        if entry.sealed is not None:
            raise JobSealed(f"item {index}: the job is sealed")
        held = self.item((job, index))
        if held is not None and held.run != run:
            raise DuplicateItem(f"item {index} of the job is already another run")
        grant = entry.terms.grant
        if grant is not None and grants != grant:
            raise ItemGrantMismatch(f"item {index} runs under another grant set than "
                                    "its job's grant")
        return (job, index), entry

    def took(self, d: Accepted, stream_seq: int, runs: Callable[[bytes], RunSlot | None]
             ) -> None:
        """After :meth:`gate` let ``d`` through and its step was taken (``runs``: the
        batch's runs, the step in them): bind an opened item, give a closed item its leaf,
        made from the run's state the close left (sealing its job with the last one)."""
        ready, self._ready = self._ready, None
        if ready is None or ready[0] != d.run:
            return
        run, key, opens, closes = ready
        job, index = key
        if opens:
            entry = ItemEntry(run, stream_seq)
            self.put_item(key, entry)
            self.bound.append((key, entry))
            self._own(job).bound += 1
        if not closes:
            return
        slot = runs(run)
        assert slot is not None, "a closing item's step is taken"
        state = slot.state
        made = energy_of(state.energy)
        leaf = state_leaf(index, state, made)
        self.put_leaf(key, leaf)
        own = self._own(job)
        own.closed += 1
        own.energy = own.energy_with(made)
        if own.closed == own.items:
            # The receipt's leaf follows this segment's.
            self._seal(own, stream_seq, self.leaves() + 1)

    def _seal(self, job: JobEntry, stream_seq: int, log_size: int) -> None:
        leaves = [encode_item_leaf(i) if leaf is None else leaf
                  for i, leaf in enumerate(self.item_leaves(job.job, job.items))]
        made = seal_leaves(job.terms, leaves, log_size)
        receipt = encode_receipt(made)
        job.sealed = stream_seq
        job.receipt = receipt
        self.sealed.add(job.job)
        self.receipts.append(Sealed(stream_seq, job.job, receipt, receipt_leaf(receipt),
                                    log_size, len(made.missing), leaves))


def rebuild(jobs: Iterable[JobEntry],
            items: Iterable[tuple[Item, ItemEntry, bytes | None]]) -> JobBook:
    """A committed book from the store's rows (:meth:`JobBook.put_job`, ``put_item``,
    ``put_leaf``: each item with its leaf if its run closed), with each open job's energy
    totals added up from its closed items' leaves."""
    book = JobBook()
    for entry in jobs:
        book.put_job(entry)
    for key, item, leaf in items:
        book.put_item(key, item)
        if leaf is not None:
            book.put_leaf(key, leaf)
            made = decode_item_leaf(leaf)
            entry = book.jobs[key[0]]
            if not isinstance(made, int) and entry.sealed is None:
                entry.energy = entry.energy_with(made.energy)
    return book
