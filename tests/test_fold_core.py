"""The fold's pure core (fleet.fold.route, .policy, .cache, .batch) decides from values alone:
no NATS, no SQLite, no ledger."""

from __future__ import annotations

import pytest

from fleet_ledger.fleet.errors import ForeignRun
from fleet_ledger.fleet.fold import (
    Accepted,
    Admission,
    BatchRuns,
    HostEntry,
    Message,
    Refused,
    RunSlot,
)
from fleet_ledger.fleet.fold import decide as decide_one
from fleet_ledger.fleet.fold.batch import (
    BatchHeads,
    Decided,
    Incoming,
    decide_batch,
    decide_written,
    first_gap,
    merge_seals,
    refusal_notices,
    seal_items,
)
from fleet_ledger.fleet.fold.cache import RunCache
from fleet_ledger.fleet.fold.fast import batch_addresses
from fleet_ledger.fleet.fold.grant_events import GrantBook
from fleet_ledger.fleet.fold.policy import LeadState, checkpoint_due, leads_signing
from fleet_ledger.fleet.fold.route import CONTROL, GRANT, SEGMENT, Router
from fleet_ledger.fleet.record.phases import PARKED, RESUMED
from fleet_ledger.fleet.record.record import RunState
from fleet_ledger.fleet.record.wire import envelope_wire
from fleet_ledger.fleet.subjects import DEFAULT_FLEET, fleet_names

from fault_helpers import host_key, sealed_run


def test_each_subject_goes_to_exactly_one_fold_whatever_the_order_of_tests():
    """The grant subject lies under the control prefix: a prefix test read first would take
    grant events for control events; the router's table never does."""
    for names in (DEFAULT_FLEET, fleet_names("acme")):
        route = Router(names)
        grant = names.grant_subject
        assert names.is_control(grant)  # the trap: the prefix test alone says "control"
        assert route(grant) == GRANT
        assert route(names.control_subject("host")) == CONTROL
        assert route(names.control_subject("operator")) == CONTROL
        assert route(names.control + ".unknown") == CONTROL  # refused by the control fold
        assert route(names.segment_subject("h1", "b3:" + "0" * 64)) == SEGMENT
        assert route("elsewhere.ctl.grant") == SEGMENT  # refused by the segment fold
        some = [grant, names.control_subject("host"), names.control + ".x", "a.b", ""]
        assert route.routes(some) == [route(s) for s in some]  # the batch form agrees
    assert Router(fleet_names("acme"))(DEFAULT_FLEET.grant_subject) == SEGMENT


def test_checkpoint_policy_signs_on_count_time_or_a_waiting_reader_and_never_over_nothing():
    """The leader signs after N leaves or T ms, any ledger when a reader waits for a size
    the tree holds and no checkpoint does; never when the tree did not grow."""
    assert not checkpoint_due(10, 10, 10**9, 1, 0)  # nothing new: never
    assert not checkpoint_due(0, None, 10**9, 1, 0)  # an empty tree on the timer: never
    assert checkpoint_due(1010, 10, 0, 1000, 1000)  # N leaves
    assert not checkpoint_due(1009, 10, 999, 1000, 1000)
    assert checkpoint_due(11, 10, 1000, 1000, 1000)  # T ms
    assert checkpoint_due(1000, None, 0, 1000, 1000)  # N leaves, none signed yet
    assert not checkpoint_due(11, 10, 1000, 1000, 1000, leading=False)  # a follower: no timer
    assert checkpoint_due(11, 10, 0, 1000, 1000, wanted=11, leading=False)  # a reader waits
    assert not checkpoint_due(11, 10, 0, 1000, 1000, wanted=12)  # not held yet
    assert not checkpoint_due(11, 11, 0, 1000, 1000, wanted=11)  # already signed
    assert checkpoint_due(0, None, 0, 1000, 1000, wanted=0)  # the first checkpoint, empty


def test_a_ledger_signs_on_the_timer_only_leading_and_caught_up_to_its_floor():
    """A replica that took the lease signs only once it has committed up to the stream's
    end as it was then; without a lease, or before the end was read, it does not."""
    assert leads_signing(True, 0, 0)  # a single ledger
    assert not leads_signing(True, 100, 99) and leads_signing(True, 100, 100)
    assert not leads_signing(True, None, 10**6)  # the stream's end not read at takeover
    assert not leads_signing(False, 0, 10**6)  # no lease


def test_the_batch_checks_beside_the_fold_the_seals_of_known_hosts_and_grant_signatures():
    """Each decodable segment of an enrolled host gives its seal item (with its run); an
    unknown host's or an undecodable message gives none, nor does a grant event that does
    not parse."""
    r, msgs, hosts = _batch()
    names = DEFAULT_FLEET
    batch = [*msgs[:2], (5, msgs[0][1], b"not json"),
             (6, names.grant_subject, b"not an event")]
    wires = [envelope_wire(data) for _s, _j, data in batch]
    routes = Router(names).routes(subject for _seq, subject, _data in batch)
    found = seal_items(batch, wires, batch_addresses(wires), hosts, routes, 0xFFFF)
    assert found.positions == [0, 1] and found.runs == {r.run}
    key = bytes(host_key("h1").verify_key)
    assert [item[0] for item in found.items] == [key, key]
    assert seal_items(batch, wires, batch_addresses(wires), {}, routes, 0xFFFF
                      ).positions == []


def test_seal_verdicts_merge_to_the_conjunction_of_each_message_items():
    """A message with several checked items (a grant event's signatures) is valid only if
    all are; a message with none stays unchecked (None)."""
    assert merge_seals(4, [0, 2, 2, 3], [True, True, False, False]) == [True, None, False, False]
    assert merge_seals(2, [1, 1], [True, True]) == [None, True]


def test_the_run_cache_forgets_the_least_recently_used_and_asks_the_store_once_per_batch():
    """Trimmed to its limit between batches (the oldest used first); a batch's unknown runs
    are read in one call, and a run the store lacked is not asked for again."""
    stored = {b"a": RunSlot("h", RunState.open(b"u" * 32, b"g" * 32)),
              b"b": RunSlot("h", RunState.open(b"v" * 32, b"g" * 32))}
    asked: list[object] = []

    def load_one(run: bytes) -> RunSlot | None:
        asked.append(run)
        return stored.get(run)

    def load_many(runs: object) -> dict[bytes, RunSlot]:
        asked.append(frozenset(runs))  # type: ignore[arg-type]
        return {r: stored[r] for r in runs if r in stored}  # type: ignore[attr-defined]

    cache = RunCache(1, load_one, load_many)
    committed = cache.preload({b"a", b"b", b"new"})
    assert asked == [frozenset({b"a", b"b", b"new"})]
    assert committed(b"new") is None and committed(b"a") is stored[b"a"]
    assert asked == [frozenset({b"a", b"b", b"new"})]  # no second read for either
    cache.trim()
    assert len(cache) == 1 and b"a" in cache and b"b" not in cache  # b used least recently
    assert cache.get(b"b") is stored[b"b"] and asked[-1] == b"b"


def _batch(host: str = "h1"):  # type: ignore[no-untyped-def]
    r = sealed_run(host, "core-unit", "eee")
    msgs = [(n, subject, data) for n, (subject, data) in enumerate(r.messages, 1)]
    msgs.append((4, *r.messages[1]))  # segment 2 again, after 3, in the same batch
    hosts = {host: HostEntry(host, host_key(host).verify_key)}
    return r, msgs, hosts


def _decide_alone(msgs, hosts, watermark: int):  # type: ignore[no-untyped-def]
    """The batch decided by the core with nothing committed and no pre-checks."""
    n = len(msgs)
    routes = Router(DEFAULT_FLEET).routes(subject for _seq, subject, _data in msgs)
    return decide_batch(msgs, routes, [0] * n, [None] * n, [None] * n, [None] * n, watermark,
                        names=DEFAULT_FLEET,
                        committed_runs=lambda run: None, stored_head_at=lambda r, i: None,
                        hosts=hosts, operators=({}, set()), grants=GrantBook())


def test_a_replay_within_the_batch_is_judged_against_the_batch_heads():
    """Segment 2 replayed after 3 in one batch is a Replay: its held head comes from the
    batch's overlay; judged against the store alone (which holds nothing yet) it could not
    be compared and would be called a Fork."""
    r, msgs, hosts = _batch()
    decided = _decide_alone(msgs, hosts, 0)
    rules = [type(i.decision).__name__ if isinstance(i.decision, Accepted) else i.decision.rule
             for i in decided.items]
    assert rules == ["Accepted", "Accepted", "Accepted", "Replay"]
    assert decided.top == 4 and decided.changes.runs[r.run].state.index == 3

    # Without the overlay: the same runs, the store's heads only.
    runs = BatchRuns(lambda run: None)
    ctx = Admission(hosts, runs, lambda run, index: None)
    for seq, subject, data in msgs[:3]:
        d = decide_one(ctx, Message(subject, data, seq))
        assert isinstance(d, Accepted)
        runs.take(d)
    last = decide_one(ctx, Message(msgs[3][1], msgs[3][2], 4))
    assert isinstance(last, Refused) and last.rule == "Fork"


def test_messages_at_or_below_the_watermark_are_not_decided_again():
    """A batch redelivered after a crash folds nothing twice: the watermark skips it."""
    _r, msgs, hosts = _batch()
    decided = _decide_alone(msgs, hosts, 4)
    assert decided.items == [] and decided.top == 4 and decided.changes.runs == {}


def test_a_message_redelivered_within_its_batch_is_decided_once():
    """A consumer redelivers what was not acked when its server restarted, and a pull
    waiting across the restart gets both copies: the same stream sequence twice in one
    batch. Decided again, the second copy was refused as a Replay of the first (a refusal
    recorded for a message that was folded, and a notice to its host). It is skipped, and
    a genuine replay (segment 2 again under another stream sequence) is still refused."""
    _r, msgs, hosts = _batch()
    delivered = [*msgs[:3], *msgs[:3], msgs[3]]  # 1 2 3, then 1 2 3 redelivered, then 4
    decided = _decide_alone(delivered, hosts, 0)
    assert [(i.stream_seq, type(i.decision).__name__ if isinstance(i.decision, Accepted)
             else i.decision.rule) for i in decided.items] == [
        (1, "Accepted"), (2, "Accepted"), (3, "Accepted"), (4, "Replay")]
    assert decided.top == 4


def test_batch_heads_gather_accepted_heads_only_and_fall_back_to_the_store():
    """The overlay answers heads accepted in the batch and, for any other, the store's."""
    r, msgs, hosts = _batch()
    items: list[Incoming] = []
    heads = BatchHeads(items, lambda run, index: b"stored")
    runs = BatchRuns(lambda run: None)
    ctx = Admission(hosts, runs, heads)
    for seq, subject, data in msgs[:2]:
        d = decide_one(ctx, Message(subject, data, seq))
        assert isinstance(d, Accepted)
        runs.take(d)
        items.append(Incoming(seq, subject, data, d))
    items.append(Incoming(9, "x", b"", Refused("Fork", "", None, r.run, 3)))
    assert heads(r.run, 2) == items[1].decision.head  # type: ignore[union-attr]
    assert heads(r.run, 3) == b"stored"


def test_the_batch_moves_a_runs_holder_by_the_kernels_rule_only():
    """Taking a step moves the holder as the kernel says: a parked run's resume by another
    host hands it over, and a step the kernel would refuse (ForeignRun) is refused at the
    take too, never written into the batch's copy."""
    state = RunState.open(bytes(32), bytes(32))
    state.index, state.phase = 2, PARKED
    committed = RunSlot("h1", state)
    runs = BatchRuns(lambda run: committed if run == state.run else None)

    def step(host: str, kind: str, index: int) -> Accepted:
        st = (b"", RESUMED, None, None, None, False, None, None)
        return Accepted(host, state.run, index, bytes(32), kind, b"", st)

    runs.take(step("h2", "resumed", 3))
    assert runs.changed[state.run].host == "h2" and committed.host == "h1"
    with pytest.raises(ForeignRun):
        runs.take(step("h3", "executed", 4))
    held = runs.changed[state.run]
    assert held.host == "h2" and held.state.index == 3


def test_the_lead_state_signs_always_alone_and_as_a_replica_from_its_floor_while_it_holds():
    """A single ledger leads and signs from the start; a replica only while its lease holds,
    once committed up to the stream's end it read at takeover, and never after a drop."""
    alone = LeadState(replicated=False)
    assert alone.leading and alone.signs(0)
    replica = LeadState(replicated=True)
    assert not replica.leading and not replica.signs(10**6)  # no lease task yet
    held = [True]
    replica.holds = lambda: held[0]
    replica.took(None)  # the stream's end not read
    assert replica.leading and not replica.signs(10**6)
    replica.took(100)
    assert not replica.signs(99) and replica.signs(100)
    held[0] = False
    assert not replica.leading and not replica.signs(100)
    held[0] = True
    replica.dropped()
    assert replica.floor is None and not replica.signs(100)


def test_a_batch_refused_at_its_write_is_prepared_and_decided_again_until_written():
    """The write says the table the batch was decided against changed: the core prepares
    it again and decides again; an empty decision is never written."""
    _r, msgs, hosts = _batch()
    calls: list[str] = []

    def decide(prepared: int) -> Decided:
        calls.append(f"decide {prepared}")
        return _decide_alone(msgs, hosts, 0)

    def write(decided: Decided, prepared: int) -> bool:
        calls.append(f"write {prepared}")
        return prepared >= 2

    def again(prepared: int) -> int:
        calls.append(f"again {prepared}")
        return prepared + 1

    decided = decide_written(1, decide, write, again)
    assert len(decided.items) == 4
    assert calls == ["decide 1", "write 1", "again 1", "decide 2", "write 2"]
    calls.clear()
    empty = decide_written(1, lambda _p: _decide_alone(msgs, hosts, 4), write, again)
    assert empty.items == [] and calls == []


def test_each_refusal_naming_its_host_becomes_one_notice_for_that_host():
    """A refused message that names its host is told to it as the JSON the host reads;
    accepted messages and refusals of no host make none."""
    refused = Refused("Fork", "the run already holds a different segment 3", "h1", b"r", 3)
    items = [Incoming(7, "s.h1", b"", refused),
             Incoming(8, "s.x", b"", Refused("MalformedSegment", "bad", None, None, None))]
    _r, msgs, hosts = _batch()
    items += _decide_alone(msgs[:1], hosts, 0).items
    assert refusal_notices(items) == [(
        "h1", b'{"stream_seq":7,"subject":"s.h1","rule":"Fork","detail":'
              b'"the run already holds a different segment 3","index":3}')]


def test_the_first_hole_in_a_delivery_is_found_and_redeliveries_are_none():
    """A delivery going on from the one due (redeliveries of earlier ones allowed) has no
    hole; the first sequence beyond the one due is reported with the one it skipped to,
    and scanning again past it finds the next."""
    assert first_gap(5, [5, 6, 7]) is None
    assert first_gap(5, [3, 5, 4, 6]) is None  # redeliveries
    assert first_gap(5, []) is None
    assert first_gap(5, [5, 6, 9, 10, 12]) == (9, 7)
    assert first_gap(10, [5, 6, 9, 10, 12]) == (12, 11)  # past the first hole
    assert first_gap(13, [5, 6, 9, 10, 12]) is None
