"""One batch of a ledger's stream decided, as a function of values.

:func:`decide_batch` takes the batch's messages (stream sequence, subject, bytes, ledger
time, wire form, parsed addresses), the verdicts on their seals (checked beside the fold,
merged by :func:`merge_seals`), the watermark, and the committed state as the shell reads it
(the runs, the heads, the host table, the operators, the grant book); it returns each
message above the watermark with its decision (:class:`Incoming`), the new watermark, and
what the batch changes (:class:`BatchChanges`), for the shell to commit and then install.

Within the batch, the runs, heads, host table and grant book are overlays on the committed
ones (:class:`fleet.fold.reference.BatchRuns`, :class:`BatchHeads`,
:class:`fleet.fold.control.BatchControl`, :class:`fleet.fold.grant_fold.BatchGrants`): a message is
decided against everything folded before it, in stream order, and nothing committed is
touched. Each message goes to one fold by its subject (its route, computed once per batch by
:meth:`fleet.fold.route.Router.routes`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple, TypeVar

import msgspec

from fleet_ledger.fleet.fold.control import BatchControl, ControlAccepted
from fleet_ledger.fleet.fold.fast import fold_message, wire_seal_item
from fleet_ledger.fleet.fold.grant_decide import RunAt
from fleet_ledger.fleet.fold.grant_events import GrantAccepted, GrantBook, signature_items
from fleet_ledger.fleet.fold.grant_fold import BatchGrants
from fleet_ledger.fleet.fold.job_events import JobAccepted
from fleet_ledger.fleet.fold.job_fold import BatchJobs, JobBook
from fleet_ledger.fleet.fold.reference import (
    Accepted,
    Admission,
    BatchRuns,
    HostEntry,
    Message,
    Refused,
    RunSlot,
)
from fleet_ledger.fleet.fold.route import CONTROL, GRANT, JOB, Route
from fleet_ledger.fleet.record.wire import EnvelopeWire, identity
from fleet_ledger.fleet.subjects import FleetNames

__all__ = ["BatchChanges", "BatchHeads", "Decided", "Incoming", "SealItems", "decide_batch",
           "decide_written", "first_gap", "merge_seals", "refusal_notices", "run_at",
           "seal_items"]

HeadAt = Callable[[bytes, int], "bytes | None"]
P = TypeVar("P")  # a prepared batch, as the shell holds it


class Incoming(msgspec.Struct, frozen=True, gc=False):
    """One decided message of a batch, with what the store keeps of it (untracked by the
    cycle collector, as the decisions it holds: it can never refer back to itself)."""

    stream_seq: int
    subject: str
    payload: bytes
    decision: Accepted | Refused | ControlAccepted | GrantAccepted | JobAccepted
    at_ms: int = 0  # ledger time: the message's stream timestamp, ms since the epoch


class BatchChanges(NamedTuple):
    """What a decided batch changes, installed once its commit is durable: the runs it
    changed (copies), its grant events (an overlay on the committed book), its control
    events (an overlay on the committed host table and operators) and its jobs (job
    events, items bound and closed, receipts: an overlay on the committed job book)."""

    runs: dict[bytes, RunSlot]
    grants: BatchGrants
    control: BatchControl
    jobs: BatchJobs


class Decided(NamedTuple):
    """A decided batch: the messages above the watermark, the new watermark, the changes."""

    items: list[Incoming]
    top: int
    changes: BatchChanges


class SealItems(NamedTuple):
    """What of a batch is checked beside the fold: ``items`` (public key, message,
    signature), ``positions`` the message each belongs to, ``runs`` the segments' runs."""

    items: list[tuple[bytes, bytes, bytes]]
    positions: list[int]
    runs: set[bytes]


def seal_items(msgs: Sequence[tuple[int, str, bytes]], wires: Sequence[EnvelopeWire | None],
               addresses: Sequence[list[bytes] | None], hosts: Mapping[str, HostEntry],
               routes: Sequence[Route], max_message: int) -> SealItems:
    """A segment's seal under its host's key (:func:`fleet.fold.fast.wire_seal_item`) and a
    grant event's signatures (its own, an issued or minted grant's: the event's verdict is
    their conjunction, :func:`merge_seals`); an event with a message longer than
    ``max_message`` is left to the fold to check."""
    found = [(n, item) for n, item in (
        (n, None if w is None else wire_seal_item(w, hosts, a[0] if a else None))
        for n, (w, a) in enumerate(zip(wires, addresses, strict=True)))
        if item is not None]
    runs = {identity(w.run) for n, _ in found if (w := wires[n]) is not None}
    for n, ((_seq, _subject, data), route) in enumerate(zip(msgs, routes, strict=True)):
        if route == GRANT:
            items = signature_items(data)
            if items is not None and all(len(m) <= max_message for _, m, _ in items):
                found += [(n, item) for item in items]
    return SealItems([item for _, item in found], [n for n, _ in found], runs)


def merge_seals(count: int, positions: Sequence[int], verdicts: Iterable[bool]
                ) -> list[bool | None]:
    """Each message's seal verdict (``None``: none checked) from the verdicts on the items
    checked at ``positions``; a message with several items (a grant event's signatures)
    is valid only if all are."""
    seals: list[bool | None] = [None] * count
    for n, ok in zip(positions, verdicts, strict=True):
        held = seals[n]
        seals[n] = ok if held is None else held and ok
    return seals


class BatchHeads:
    """``head_at(run, index)`` as the batch sees it: the heads accepted earlier in the batch
    (not in the store yet: without them a replay of one would be judged by where the batch
    happened to end, Fork vs Replay), else the committed head (``stored``).

    Only the reference path asks, so the batch's heads are gathered lazily from ``items``
    (the batch's decisions so far), never for a batch nobody asks about."""

    __slots__ = ("_gathered", "_heads", "_stored", "items")

    def __init__(self, items: list[Incoming], stored: HeadAt) -> None:
        self.items = items
        self._stored = stored
        self._heads: dict[tuple[bytes, int], bytes] = {}
        self._gathered = 0

    def __call__(self, run: bytes, index: int) -> bytes | None:
        items = self.items
        for item in items[self._gathered:]:
            d = item.decision
            if isinstance(d, Accepted):
                self._heads[(d.run, d.index)] = d.head
        self._gathered = len(items)
        held = self._heads.get((run, index))
        return held if held is not None else self._stored(run, index)


def run_at(runs: BatchRuns, head_at: HeadAt) -> RunAt:
    """What a grant event asks of a run (:mod:`fleet.fold.grant_fold`): (its grants id, its
    index, its head at ``index`` if it holds that index), as the batch sees it."""
    def at(run: bytes, index: int) -> tuple[bytes, int, bytes | None] | None:
        slot = runs.get(run)
        if slot is None:
            return None
        st = slot.state
        head = (st.head if index == st.index
                else head_at(run, index) if 1 <= index < st.index else None)
        return st.grants_id, st.index, head
    return at


def decide_batch(
    msgs: Sequence[tuple[int, str, bytes]],
    routes: Sequence[Route],
    times: Sequence[int],
    wires: Sequence[EnvelopeWire | None],
    addresses: Sequence[list[bytes] | None],
    seals: Sequence[bool | None],
    watermark: int,
    *,
    names: FleetNames,
    committed_runs: Callable[[bytes], RunSlot | None],
    stored_head_at: HeadAt,
    hosts: Mapping[str, HostEntry],
    operators: tuple[Mapping[bytes, int], set[bytes]],
    grants: GrantBook,
    require_grants: bool = False,
    fast: bool = True,
    jobs: JobBook | None = None,
    tree_size: int = 0,
) -> Decided:
    """Decide the messages of a batch above ``watermark`` in stream order (the module's
    docstring says against what); changes nothing committed. ``jobs``: the committed job
    book; ``tree_size``: the fleet log's committed size (a receipt states where it lands)."""
    items: list[Incoming] = []
    top = watermark
    heads = BatchHeads(items, stored_head_at)
    # Control events change the host table in stream order: the batch decides against its
    # own copy, and once one is accepted, the seals checked before (with the table the
    # batch was prepared with) are checked again in line.
    trusted, retired = operators
    control = BatchControl(trusted, hosts, retired)
    batch_grants = BatchGrants(grants)

    def leaves() -> int:  # the log's size before the message being decided (receipts: rare)
        return (tree_size + sum(1 for item in items if type(item.decision) is Accepted)
                + len(batch_jobs.receipts))

    batch_jobs = BatchJobs(JobBook() if jobs is None else jobs, leaves)
    ctx = Admission(control.hosts, BatchRuns(committed_runs), heads, names, batch_grants,
                    require_grants, batch_jobs)
    grant_run_at = run_at(ctx.runs, heads)
    host_keys: set[bytes] | None = None
    keys_at = 0
    append = items.append
    for (seq, subject, data), kind, at_ms, wire, seal_ok, parsed in zip(
            msgs, routes, times, wires, seals, addresses, strict=True):
        # At or below the watermark: folded by an earlier batch. At or below the batch's own
        # top: a redelivery of a message this batch already holds (a consumer redelivers
        # what was not acked when its server restarted, and the pull that was waiting gets
        # both copies); decided again it would be refused as a Replay of itself. The shell
        # lets only such redeliveries through below the top (ledger.service's
        # _check_contiguous refuses a hole).
        if seq <= top:
            continue
        decision: Accepted | Refused | ControlAccepted | GrantAccepted | JobAccepted
        if kind == GRANT:
            # The enrolled keys, taken once per batch (again after a control event).
            if host_keys is None or keys_at != len(control.accepted):
                host_keys = {e.public_key for e in control.hosts.values()}
                keys_at = len(control.accepted)
            decision = batch_grants.fold(seq, at_ms, data, host_keys, grant_run_at, seal_ok)
        elif kind == CONTROL:
            decision = control.fold(seq, data)
        elif kind == JOB:
            decision = batch_jobs.fold(seq, at_ms, data, batch_grants, control.state.operators)
        else:
            decision = fold_message(
                ctx, Message(subject, data, seq, wire, None if control.changed else seal_ok,
                             parsed, at_ms), fast)
        append(Incoming(seq, subject, data, decision, at_ms))
        if seq > top:
            top = seq
    return Decided(items, top, BatchChanges(ctx.runs.changed, batch_grants, control,
                                            batch_jobs))


def decide_written(prepared: P, decide: Callable[[P], Decided],
                   write: Callable[[Decided, P], bool], again: Callable[[P], P]) -> Decided:
    """Decide a prepared batch (``decide``) and write it (``write``, in a transaction the
    shell commits later); a batch decided against a host table that has changed since it
    was prepared (``write`` says ``False``, writing nothing) is prepared again with the
    current table (``again``) and decided again. A batch with nothing to decide is not
    written."""
    while True:
        decided = decide(prepared)
        if not decided.items or write(decided, prepared):
            return decided
        prepared = again(prepared)


def refusal_notices(items: Iterable[Incoming]) -> list[tuple[str, bytes]]:
    """(host, JSON) of each refusal in ``items`` that names its host: what the ledger tells
    that host on its rejection subject, ``{"stream_seq", "subject", "rule", "detail",
    "index"}`` (the host's refusal watcher reads it)."""
    out = []
    for item in items:
        d = item.decision
        if isinstance(d, Refused) and d.host is not None:
            out.append((d.host, msgspec.json.encode(
                {"stream_seq": item.stream_seq, "subject": item.subject, "rule": d.rule,
                 "detail": d.detail, "index": d.index})))
    return out


def first_gap(expected: int, seqs: Iterable[int]) -> tuple[int, int] | None:
    """The first hole in a delivery's order: ``(seq, expected)``, the first stream
    sequence beyond the one due (``expected``, then one past each in turn) and the one it
    skipped to; ``None`` when the delivery goes on without a hole (a redelivery of an
    earlier message is no hole). The fold must not go past a hole: the shell asks the stream
    whether it has the hole itself (then the hole is passed over: scanning again from
    ``seq + 1`` finds the next) or the delivery lost messages (then it folds again from its
    watermark)."""
    for seq in seqs:
        if seq < expected:
            continue
        if seq > expected:
            return seq, expected
        expected = seq + 1
    return None
