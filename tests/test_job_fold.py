"""Jobs in the ledger's fold, on a real ledger (its SQLite store, its own batch fold): job
events decided in stream order, the item gate's refusals by name, the receipt made when the
last item closes or the job is sealed, appended to the fleet log after the message that
sealed it, and the same bytes whichever way the stream is cut into batches or restarted."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from merkle_reference import mth
from nacl.signing import SigningKey

from fleet_ledger.fleet.address import digest
from fleet_ledger.fleet.fold import job_events, job_fold
from fleet_ledger.fleet.fold.job_events import open_event, seal_event
from fleet_ledger.fleet.jobs.job_errors import SumOverflow
from fleet_ledger.fleet.jobs.job_id import (
    MAX_JOB_ITEMS,
    JobTerms,
    encode_terms,
    item_unit,
    job_id,
)
from fleet_ledger.fleet.jobs.receipt import decode_receipt, receipt_leaf, seal_leaves
from fleet_ledger.fleet.jobs.sum_tree import ENERGY_NAMES
from fleet_ledger.fleet.log.leaf import leaf_kind
from fleet_ledger.fleet.log.tiles import Tile, decode_entry_bundle
from fleet_ledger.fleet.record.builder import RecordBuilder
from fleet_ledger.fleet.subjects import DEFAULT_FLEET
from fleet_ledger.ledger import job_store, job_views
from fleet_ledger.ledger.log_reader import LogReader

from fault_helpers import SealedRun, fold_in_random_batches, host_key, store_summary
from grant_helpers import World, key

JOB_SUBJECT = DEFAULT_FLEET.job_subject
OWNER = key("job-owner")
GRANTS = digest(b"job-test/grants")


def job_terms(items: int, name: str = "eval", owner: SigningKey = OWNER,
              grant: bytes | None = None, nonce: bytes = bytes(16)) -> JobTerms:
    return JobTerms(name, items, bytes(owner.verify_key), nonce, grant)


def item_run(job: bytes, index: int, host: str = "h1", grants: bytes = GRANTS) -> SealedRun:
    return SealedRun(host, RecordBuilder(host_key(host), item_unit(job, index), grants))


def open_job(world: World, items: int, **kw: object) -> bytes:
    terms = job_terms(items, **kw)  # type: ignore[arg-type]
    assert world.rule(JOB_SUBJECT, open_event(OWNER, encode_terms(terms))) == "accepted"
    return job_id(terms)


def finish(world: World, run: SealedRun, n: int = 0) -> list[str]:
    """Execute once and close ``run``: the two decisions' rules."""
    return [world.rule(run.subject, run.execute(n)), world.rule(run.subject,
                                                                run.add(run.builder.close()))]


def test_a_job_is_sealed_by_its_last_close_with_its_receipt_next_in_the_log(tmp_path: Path):
    """Three items closed: the third close seals the job, the receipt's leaf is the next
    leaf of the fleet log and states the log's size there, and nothing is missing."""
    w = World(tmp_path)
    job = open_job(w, 3)
    for i in range(3):
        assert finish(w, item_run(job, i), i) == ["accepted", "accepted"]
    size = w.ledger.store.tree.size()
    assert size == 7  # six segments and the receipt
    row = job_store.job_row(w.ledger.store.conn, _text(job))
    assert row is not None and row["sealed_seq"] == w.seq and row["leaf_index"] == 6
    receipt = decode_receipt(row["receipt"])
    assert receipt.log_size == 6 and receipt.missing == () and receipt.items == 3
    # The book forgets a sealed job's items (the store keeps them; proofs read the store).
    assert w.ledger.jobs.items == {} and w.ledger.jobs.runs == {}
    assert len(job_store.item_rows(w.ledger.store.conn, _text(job))) == 3
    [leaf] = w.ledger.store.leaves(6, 1)
    assert leaf.raw == receipt_leaf(row["receipt"]) and leaf_kind(leaf.raw) == "job"
    # The log's entries (tlog-tiles' entry bundle): the six run leaves and the receipt's, in
    # order, hashing to the tree's root.
    w.close()
    reader = LogReader(tmp_path)
    try:
        entries = decode_entry_bundle(reader._entries(Tile(None, 0, 7)))
    finally:
        reader.close()
    assert entries[6] == leaf.raw and [leaf_kind(e) for e in entries] == ["run"] * 6 + ["job"]
    assert mth(entries) == store_summary(tmp_path).root


def test_the_item_gate_refuses_by_name_and_keeps_folding(tmp_path: Path):
    """A second run of an item, an index out of range and an item of a job never opened
    are refused by name; the ledger folds the next message as before."""
    w = World(tmp_path)
    job = open_job(w, 2)
    assert finish(w, item_run(job, 0))[0] == "accepted"
    twin = item_run(job, 0, host="h2", grants=digest(b"other grants"))
    assert w.rule(twin.subject, twin.execute()) == "DuplicateItem"
    far = item_run(job, 2)
    assert w.rule(far.subject, far.execute()) == "ItemOutOfRange"
    stranger = item_run(digest(b"no such job"), 0)
    assert w.rule(stranger.subject, stranger.execute()) == "UnknownJob"
    plain = SealedRun("h1", RecordBuilder(host_key("h1"), digest(b"plain"), GRANTS))
    assert w.rule(plain.subject, plain.execute()) == "accepted"
    refused = {r["rule"] for r in w.ledger.store.rejections()}
    assert refused == {"DuplicateItem", "ItemOutOfRange", "UnknownJob"}


def test_a_job_sealed_early_lists_its_missing_items(tmp_path: Path):
    """A seal event before every item closed: the receipt lists the items without a closed
    run as missing, a later item run is JobSealed, a second seal too."""
    w = World(tmp_path)
    job = open_job(w, 4)
    finish(w, item_run(job, 1))
    open_only = item_run(job, 2)
    assert w.rule(open_only.subject, open_only.execute()) == "accepted"
    assert w.rule(JOB_SUBJECT, seal_event(OWNER, job)) == "accepted"
    row = job_store.job_row(w.ledger.store.conn, _text(job))
    assert row is not None
    assert decode_receipt(row["receipt"]).missing == (0, 2, 3)
    w.close()
    w.open()  # a restarted ledger: the sealed job's items are not loaded, the rules hold
    assert w.ledger.jobs.items == {}
    late = item_run(job, 3)
    assert w.rule(late.subject, late.execute()) == "JobSealed"
    assert w.rule(JOB_SUBJECT, seal_event(OWNER, job)) == "JobSealed"
    # Item 2's run closes after the seal: the run is folded, the receipt (and the leaves
    # an item proof is made from) still have the item missing.
    assert w.rule(open_only.subject, open_only.add(open_only.builder.close())) == "accepted"
    conn = w.ledger.store.conn
    receipt = decode_receipt(row["receipt"])
    kept = job_views._leaves(w.ledger.store, _text(job), 4, row["receipt"])
    made = seal_leaves(receipt.terms, kept, 0)
    assert made.root == receipt.root and made.missing == (0, 2, 3)
    # A store sealed before it kept a sealed job's leaves makes them from the item runs'
    # rows, leaving out what the receipt lists missing: the same leaves.
    with conn:
        conn.execute("DELETE FROM job_trees")
    assert job_store.sealed_leaves(conn, _text(job)) is None
    assert job_views._leaves(w.ledger.store, _text(job), 4, row["receipt"]) == kept
    with conn:
        conn.execute("DROP TABLE job_trees")  # an older store, read without creating it
    assert job_views._leaves(w.ledger.store, _text(job), 4, row["receipt"]) == kept
    # Item 2's run is closed, and not in the job: its views say so.
    assert job_store.item_of_unit(conn, item_unit(job, 2), _text(open_only.run)) == {
        "job": _text(job), "index": 2, "holds": True, "closed": False, "sealed": True}
    shown = job_views.job_status(w.ledger.store, _text(job), with_items=True)["item_runs"]
    assert [(i["index"], i["closed"]) for i in shown] == [(1, True), (2, False)]


def test_job_events_are_refused_by_name(tmp_path: Path):
    """An open signed by another key than its terms' issuer, a second open of the same
    job, a seal of an unknown job and a seal by a stranger are each refused by name."""
    w = World(tmp_path)
    terms = encode_terms(job_terms(2))
    assert w.rule(JOB_SUBJECT, open_event(key("mallory"), terms)) == "NotJobIssuer"
    job = open_job(w, 2)
    assert w.rule(JOB_SUBJECT, open_event(OWNER, terms)) == "JobExists"
    assert w.rule(JOB_SUBJECT, seal_event(OWNER, digest(b"nothing"))) == "UnknownJob"
    assert w.rule(JOB_SUBJECT, seal_event(key("mallory"), job)) == "NotJobOwner"
    assert w.rule(JOB_SUBJECT, b"fleet.jev/1 not an event") == "MalformedJobEvent"


def test_a_restarted_ledger_keeps_its_jobs(tmp_path: Path):
    """The job book is rebuilt from the store: after a restart an item's twin is still
    DuplicateItem and the job still seals on its last close."""
    w = World(tmp_path)
    job = open_job(w, 2)
    finish(w, item_run(job, 0))
    w.close()
    w.open()
    twin = item_run(job, 0, grants=digest(b"other"))
    assert w.rule(twin.subject, twin.execute()) == "DuplicateItem"
    finish(w, item_run(job, 1))
    row = job_store.job_row(w.ledger.store.conn, _text(job))
    assert row is not None and row["receipt"] is not None


def test_the_receipt_is_the_same_whatever_the_batches(tmp_path: Path):
    """One stream (a job of 12 items on three hosts, a twin, a seal of a second job) folded
    in batches of random sizes: the same tree, root and receipt bytes every time."""
    other = job_terms(3, name="second", nonce=b"\x01" * 16)
    first = job_terms(12)
    msgs: list[tuple[str, bytes]] = [(JOB_SUBJECT, open_event(OWNER, encode_terms(first))),
                                     (JOB_SUBJECT, open_event(OWNER, encode_terms(other)))]
    runs = [item_run(job_id(first), i, host=f"h{1 + i % 3}") for i in range(12)]
    for step in range(3):
        for i, r in enumerate(runs):
            if step == 0:
                msgs.append((r.subject, r.execute(i)))
            elif step == 1 and i % 2:
                msgs.append((r.subject, r.execute(100 + i)))
            elif step == 2:
                msgs.append((r.subject, r.add(r.builder.close())))
        if step == 1:
            twin = item_run(job_id(first), 5, grants=digest(b"twin"))
            msgs.append((twin.subject, twin.execute()))
            msgs.append((JOB_SUBJECT, seal_event(OWNER, job_id(other))))
    stream = [(n + 1, s, d) for n, (s, d) in enumerate(msgs)]
    seen = set()
    for trial in range(4):
        data = tmp_path / f"t{trial}"
        World(data).close()
        fold_in_random_batches(stream, data, random.Random(trial), 9)
        summary = store_summary(data)
        w = World(data)
        rows = [job_store.job_row(w.ledger.store.conn, _text(j))
                for j in (job_id(first), job_id(other))]
        w.close()
        seen.add((summary.size, summary.root, tuple(r["receipt"] for r in rows if r)))
    assert len(seen) == 1
    (size, _root, receipts), = seen
    assert size == 12 * 2 + 6 + 2 and all(receipts) and len(receipts) == 2


def _text(job: bytes) -> str:
    from fleet_ledger.fleet.address import format_address

    return format_address(job)


def test_a_twin_item_run_is_counted_without_the_gate_and_refused_with_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The attack: a second run of an item, under another grant set, is another run id,
    so a fold without the item gate (switched off here) folds it, and two runs claim item
    0 (`fleet job verify` would find them: DuplicateItem). With the gate the same message
    is refused DuplicateItem."""
    w = World(tmp_path)
    job = open_job(w, 2)
    assert finish(w, item_run(job, 0))[0] == "accepted"
    twin = item_run(job, 0, host="h2", grants=digest(b"twin"))
    message = twin.execute()
    with monkeypatch.context() as patched:
        patched.setattr(job_fold.BatchJobs, "gate", lambda self, d, slot: d)  # no defence
        seq = w.seq
        assert w.rule(twin.subject, message) == "accepted"
    w.close()
    defended = World(tmp_path / "defended")
    assert open_job(defended, 2) == job
    assert finish(defended, item_run(job, 0))[0] == "accepted"
    assert defended.rule(twin.subject, message) == "DuplicateItem"
    assert seq == defended.seq - 1


def test_job_events_route_to_the_job_fold_in_any_fleet():
    """``<fleet>.ctl.job`` is the job fold's subject in every fleet, never a control event
    nor a segment; another fleet's job subject is not this fleet's."""
    from fleet_ledger.fleet.fold.route import CONTROL, JOB, SEGMENT, Router
    from fleet_ledger.fleet.subjects import fleet_names

    for names in (DEFAULT_FLEET, fleet_names("blue")):
        route = Router(names)
        assert route(names.job_subject) == JOB == route.routes([names.job_subject])[0]
        assert route(names.control_subject("host")) == CONTROL
    assert Router(fleet_names("blue"))(DEFAULT_FLEET.job_subject) == SEGMENT


BIG = 2**63  # two of these in one account are past what a receipt's u64 carries


def _close_two_heavy_items(w: World, job: bytes) -> str:
    """Items 0 and 1 of ``job`` drew 2**63 uJ each, item 0 closed: item 1's close's rule."""
    for index in (0, 1):
        run = item_run(job, index)
        assert w.rule(run.subject, run.execute(index, uj=BIG)) == "accepted"
        if index == 0:
            assert w.rule(run.subject, run.add(run.builder.close())) == "accepted"
    return w.rule(run.subject, run.add(run.builder.close()))


def test_a_close_that_would_make_a_job_total_wrap_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The attack: two items of a job of two draw 2**63 uJ each (each fits its leaf; their
    sum does not fit the receipt's u64 total). Without the check at the close both closes
    are accepted, and the last one's seal cannot build the tree: the fold raises and the
    ledger folds nothing more (the same message again on every restart). With it the
    second close is ``ItemEnergyOverflow``: the run stays open, the ledger keeps folding,
    and the job seals with that item missing and the first item's total."""
    monkeypatch.setattr(job_fold, "MAX_U64", 2**80)  # no defence
    w = World(tmp_path / "undefended")
    with pytest.raises(SumOverflow):
        _close_two_heavy_items(w, open_job(w, 2))
    w.close()
    monkeypatch.undo()

    w = World(tmp_path / "defended")
    job = open_job(w, 2)
    assert _close_two_heavy_items(w, job) == "ItemEnergyOverflow"
    plain = SealedRun("h1", RecordBuilder(host_key("h1"), digest(b"plain"), GRANTS))
    assert w.rule(plain.subject, plain.execute()) == "accepted"
    assert w.rule(JOB_SUBJECT, seal_event(OWNER, job)) == "accepted"
    row = job_store.job_row(w.ledger.store.conn, _text(job))
    assert row is not None
    receipt = decode_receipt(row["receipt"])
    assert receipt.missing == (1,) and receipt.sums[0] == BIG
    [refusal] = [r for r in w.ledger.store.rejections() if r["rule"] == "ItemEnergyOverflow"]
    assert "2**64 - 1" in refusal["detail"]


def test_an_item_past_its_leaf_width_is_refused_and_totals_survive_a_restart(
        tmp_path: Path):
    """One item run whose own account passed 2**64 - 1 (two executes of 2**63) is refused
    at its close. A restart adds the job's totals up again from the stored leaves: a
    closed item of 2**63 then still refuses another of 2**63, and a small item closes."""
    w = World(tmp_path)
    job = open_job(w, 4)
    huge = item_run(job, 3)
    assert w.rule(huge.subject, huge.execute(0, uj=BIG)) == "accepted"
    assert w.rule(huge.subject, huge.execute(1, uj=BIG)) == "accepted"
    assert w.rule(huge.subject, huge.add(huge.builder.close())) == "ItemEnergyOverflow"
    first = item_run(job, 0)
    assert w.rule(first.subject, first.execute(0, uj=BIG)) == "accepted"
    assert w.rule(first.subject, first.add(first.builder.close())) == "accepted"
    w.close()
    w.open()
    entry = w.ledger.jobs.job(job)
    assert entry is not None and entry.energy[0] == BIG
    second = item_run(job, 1)
    assert w.rule(second.subject, second.execute(0, uj=BIG)) == "accepted"
    assert w.rule(second.subject, second.add(second.builder.close())) == "ItemEnergyOverflow"
    assert finish(w, item_run(job, 2), 5) == ["accepted", "accepted"]
    assert w.rule(JOB_SUBJECT, seal_event(OWNER, job)) == "accepted"
    row = job_store.job_row(w.ledger.store.conn, _text(job))
    assert row is not None
    receipt = decode_receipt(row["receipt"])
    assert receipt.missing == (1, 3) and receipt.sums[0] == BIG + 1005


def _park_and_close(w: World, run: SealedRun, idle_uj: int) -> str:
    """``run`` executes, parks, and closes from its park with ``idle_uj`` of measured idle
    energy: the close's rule."""
    assert w.rule(run.subject, run.execute(0)) == "accepted"
    assert w.rule(run.subject, run.park(0)) == "accepted"
    return w.rule(run.subject, run.add(run.builder.close(idle_uj, "measured", "rapl:package-0")))


def test_the_energy_a_close_itself_adds_is_held_to_the_job_totals(tmp_path: Path):
    """A close from a park brings the park's idle energy: two items that each close with
    2**63 uJ of idle would pass the job's idle total though neither run drew any before its
    close. The gate sums the run as the close leaves it, so the second close is refused and
    the job seals with it missing; with the sums read before the close, both would pass and
    the seal would raise."""
    w = World(tmp_path)
    job = open_job(w, 2)
    assert _park_and_close(w, item_run(job, 0), BIG) == "accepted"
    assert _park_and_close(w, item_run(job, 1), BIG) == "ItemEnergyOverflow"
    assert w.rule(JOB_SUBJECT, seal_event(OWNER, job)) == "accepted"
    row = job_store.job_row(w.ledger.store.conn, _text(job))
    assert row is not None
    receipt = decode_receipt(row["receipt"])
    idle_measured = ENERGY_NAMES.index("idle.measured")
    assert receipt.missing == (1,) and receipt.sums[idle_measured] == BIG


def test_large_totals_in_different_accounts_are_summed_exactly_and_accepted(tmp_path: Path):
    """The gate's quick bound (the job's largest total plus all of the run's energy) is
    passed by two items of 2**63 uJ in different accounts, whose sums still fit: past the
    bound the exact sums decide, so the close is accepted and the receipt carries both
    totals (a bound read as the rule would refuse an honest job here)."""
    w = World(tmp_path)
    job = open_job(w, 2)
    first, second = item_run(job, 0), item_run(job, 1)
    assert w.rule(first.subject, first.execute(0, uj=BIG)) == "accepted"
    assert w.rule(first.subject, first.add(first.builder.close())) == "accepted"
    assert w.rule(second.subject, second.execute(1, uj=BIG, provenance="estimated",
                                                 meter="estimate:model")) == "accepted"
    assert w.rule(second.subject, second.add(second.builder.close())) == "accepted"
    row = job_store.job_row(w.ledger.store.conn, _text(job))
    assert row is not None and row["sealed_seq"] is not None
    receipt = decode_receipt(row["receipt"])
    assert receipt.missing == () and receipt.sums[:2] == (BIG, BIG)


def test_an_item_run_before_any_job_is_unknown_job(tmp_path: Path):
    """A ledger that never folded a job still holds item units to their job: the first
    segment of a run whose unit names an item is UnknownJob, not a plain run (which would
    leave a run that names an item outside it once that job opens); a plain run folds."""
    w = World(tmp_path)
    assert not w.ledger.jobs.live
    early = item_run(job_id(job_terms(2)), 0)
    assert w.rule(early.subject, early.execute()) == "UnknownJob"
    plain = SealedRun("h1", RecordBuilder(host_key("h1"), digest(b"plain"), GRANTS))
    assert w.rule(plain.subject, plain.execute()) == "accepted"
    assert w.rule(plain.subject, plain.add(plain.builder.close())) == "accepted"
    job = open_job(w, 2)
    assert job == job_id(job_terms(2))
    assert finish(w, item_run(job, 0)) == ["accepted", "accepted"]


class _SealTooBig(Exception):
    pass


def test_an_open_of_more_items_than_a_ledger_seals_is_job_too_large(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The attack: an issuer opens a job of 2**32 - 1 items (the terms' encoding allows it)
    and seals it at once. Without the bound the open is accepted and the seal, inside the
    fold, asks for a leaf per item: 4,294,967,295 of them (stopped here at the request;
    run, it would take hours and more memory than the machine has, on every restart). With
    the bound the open is JobTooLarge; a job of exactly 2**20 items opens."""
    asked: list[int] = []

    def leaves(self: object, job: bytes, count: int) -> list[bytes | None]:
        asked.append(count)
        raise _SealTooBig(count)

    with monkeypatch.context() as patched:
        patched.setattr(job_events, "MAX_JOB_ITEMS", 2**32 - 1)  # no defence
        patched.setattr(job_fold.JobBook, "item_leaves", leaves)
        w = World(tmp_path / "undefended")
        job = open_job(w, 2**32 - 1)
        with pytest.raises(_SealTooBig):
            w.rule(JOB_SUBJECT, seal_event(OWNER, job))
        assert asked == [2**32 - 1]
        w.close()

    w = World(tmp_path / "defended")
    huge = job_terms(2**32 - 1)
    assert w.rule(JOB_SUBJECT, open_event(OWNER, encode_terms(huge))) == "JobTooLarge"
    over = job_terms(MAX_JOB_ITEMS + 1, name="over")
    assert w.rule(JOB_SUBJECT, open_event(OWNER, encode_terms(over))) == "JobTooLarge"
    assert w.rule(JOB_SUBJECT, seal_event(OWNER, job_id(huge))) == "UnknownJob"
    at_bound = open_job(w, MAX_JOB_ITEMS, name="at the bound")
    assert finish(w, item_run(at_bound, MAX_JOB_ITEMS - 1)) == ["accepted", "accepted"]
    refusals = [r for r in w.ledger.store.rejections() if r["rule"] == "JobTooLarge"]
    assert len(refusals) == 2 and all("several jobs" in r["detail"] for r in refusals)


def test_the_run_view_names_a_legacy_item_run_as_not_holding_its_item(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A store folded before item units were held to their job (the gate off here) holds an
    item-unit run no job knows: the run view names no job for it, and once the job opens
    and another run takes the item, names the job and says this run does not hold it; the
    item's own run holds it and, closed, has its leaf in the job."""
    w = World(tmp_path)
    terms = job_terms(2)
    early = item_run(job_id(terms), 0)
    with monkeypatch.context() as patched:
        patched.setattr(job_fold.BatchJobs, "gate", lambda self, d, slot: d)
        assert w.rule(early.subject, early.execute()) == "accepted"
    conn = w.ledger.store.conn
    unit = item_unit(job_id(terms), 0)
    assert job_store.item_of_unit(conn, unit, _text(early.run)) == {
        "job": None, "index": 0, "holds": False, "closed": False, "sealed": False}
    job = open_job(w, 2)
    held = item_run(job, 0, host="h2", grants=digest(b"taken"))
    assert finish(w, held) == ["accepted", "accepted"]
    assert job_store.item_of_unit(conn, unit, _text(early.run)) == {
        "job": _text(job), "index": 0, "holds": False, "closed": False, "sealed": False}
    assert job_store.item_of_unit(conn, unit, _text(held.run)) == {
        "job": _text(job), "index": 0, "holds": True, "closed": True, "sealed": False}
    assert job_store.item_of_unit(conn, digest(b"plain unit"), _text(early.run)) is None
