"""Which of a job's items a set of run states makes, by one rule for the ledger's fold and
the offline check (``fleet job verify RECEIPT --records DIR``): a run is item ``index`` of
a job when its unit names that item (:func:`fleet.jobs.job_id.parse_item_unit`), and the
item is present in the job's sum tree once the run is closed, with its final head, energy
and wait-proof verdict (:func:`fleet.jobs.sum_tree.item_of`); an item with no run, or whose
run has not closed, is missing.
"""

from __future__ import annotations

from collections.abc import Iterable

from fleet_ledger.fleet.jobs.job_errors import DuplicateItem, ItemOutOfRange, JobIdMismatch
from fleet_ledger.fleet.jobs.job_id import JobTerms, job_id, job_tag, parse_item_unit
from fleet_ledger.fleet.jobs.sum_tree import Item, item_of
from fleet_ledger.fleet.record.kernel import RunState
from fleet_ledger.fleet.record.phases import CLOSED

__all__ = ["item_from_state", "items_from_states"]


def item_from_state(index: int, state: RunState) -> Item | None:
    """The item run ``state`` makes at ``index``: present once closed, else ``None``."""
    return item_of(index, state) if state.phase == CLOSED else None


def items_from_states(terms: JobTerms, states: Iterable[RunState]) -> list[Item | None]:
    """A job's items in index order from the states of its item runs (each run's unit names
    its item): :class:`JobIdMismatch` for a run of no item of this job,
    :class:`ItemOutOfRange` for an index past the job's items, :class:`DuplicateItem` for a
    second run of one item."""
    tag = job_tag(job_id(terms))
    items: list[Item | None] = [None] * terms.items
    seen: set[int] = set()
    for state in states:
        named = parse_item_unit(state.unit_id)
        if named is None or named.tag != tag:
            raise JobIdMismatch("a run that is not an item of the receipt's job",
                                expected=tag, calculated=None if named is None else named.tag)
        if named.index >= terms.items:
            raise ItemOutOfRange(f"item {named.index} of a job of {terms.items} items")
        if named.index in seen:
            raise DuplicateItem(f"two runs of item {named.index}")
        seen.add(named.index)
        items[named.index] = item_from_state(named.index, state)
    return items
