"""A parked run moves to another host: the ledger's holder rule, adoption on the host (the
record verified from genesis, its head proved in the signed log), and every refusal named
with nothing sealed. The ledger here is a real one folding into its SQLite store in
process; tests/test_moving_runs.py drives the same through nats-server and processes."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import msgspec
import pytest

from fleet_ledger.agents.adoption import HeadNotLogged, NotParked, RecordInvalid, StateMismatch
from fleet_ledger.agents.host import Host
from fleet_ledger.fleet.address import digest, format_address
from fleet_ledger.fleet.errors import ManifestMismatch, SnapshotMismatch
from fleet_ledger.fleet.record.segment import make_snapshot
from fleet_ledger.fleet.record.verify import verify_record
from fleet_ledger.fleet.record.wire import decode_record
from fleet_ledger.ledger import views
from fleet_ledger.ledger.service import Ledger, LedgerConfig

UNIT, GRANTS = digest(b"unit-moving"), digest(b"grants")
PARK = make_snapshot(transcript=digest(b"transcript"))
MANIFEST = digest(b"manifest")


class LedgerSource:
    """A RecordSource over a ledger's store (the CLI wires the ledger's API the same way)."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def record(self, run: str) -> bytes:
        return views.export_record(self.ledger.store, run)

    def proof(self, run: str, index: int) -> dict[str, Any]:
        return views.prove(self.ledger.store, run, index)


class Fleet:
    """Hosts and a ledger in one test: ``sync()`` folds what the hosts queued."""

    def __init__(self, tmp: Path, names: tuple[str, ...] = ("A", "B", "C")) -> None:
        self.ledger = Ledger(LedgerConfig(data_dir=tmp / "ledger", servers=[], seal_workers=0))
        self.hosts = {n: Host(n, tmp / n) for n in names}
        for name, host in self.hosts.items():
            self.ledger.store.enroll(name, host.public_key)
        self.seq = 0
        self.source = LedgerSource(self.ledger)
        self.keys = [self.ledger.signer.verifier()]

    def sync(self, order: tuple[str, ...] = ()) -> list[Any]:
        """Fold every queued segment, host by host (``order`` first: stream order)."""
        msgs = []
        for name in (*order, *(n for n in self.hosts if n not in order)):
            host = self.hosts[name]
            for entry in host.outbox.pending():
                self.seq += 1
                msgs.append((self.seq, entry.subject, entry.payload))
                host.outbox.mark_acked(entry.id, self.seq)
        batch, _ = self.ledger.fold_messages(msgs)
        self.ledger.sign_checkpoint()  # the checkpoint step (a proof never signs)
        return [item.decision for item in batch]

    def close(self) -> None:
        for host in self.hosts.values():
            host.close()
        self.ledger.store.close()


@pytest.fixture
def fleet(tmp_path: Path):  # type: ignore[no-untyped-def]
    f = Fleet(tmp_path)
    yield f
    f.close()


def _parked_on_a(fleet: Fleet):  # type: ignore[no-untyped-def]
    run = fleet.hosts["A"].open_run(UNIT, GRANTS)
    run.execute(uj=10, provenance="measured", meter="m", journal_root=digest(b"j1"))
    run.suspend(PARK, MANIFEST)
    assert all(not hasattr(d, "rule") for d in fleet.sync())
    return run


def test_a_parked_run_moves_a_to_b_to_c_and_every_record_verifies(fleet: Fleet):
    """A parks, B adopts and resumes, parks again, C adopts and closes: the ledger accepts
    every segment, says who held which, and the exported record verifies offline."""
    a = _parked_on_a(fleet)
    b = fleet.hosts["B"].adopt_run(a.run, fleet.source, fleet.keys)
    b.resume(PARK, MANIFEST, idle_uj=5, provenance="estimated", meter="est")
    b.execute(uj=20, provenance="measured", meter="m", journal_root=digest(b"j2"))
    b.suspend(PARK, MANIFEST)
    assert all(not hasattr(d, "rule") for d in fleet.sync())
    c = fleet.hosts["C"].adopt_run(a.run, fleet.source, fleet.keys)
    c.resume(PARK, MANIFEST, idle_uj=7, provenance="estimated", meter="est")
    c.close()
    assert all(not hasattr(d, "rule") for d in fleet.sync())
    status = views.run_status(fleet.ledger.store, a.run)
    assert status["host"] == "C" and status["segments"] == 7
    assert status["holders"] == [{"host": "A", "first": 1, "last": 2},
                                 {"host": "B", "first": 3, "last": 5},
                                 {"host": "C", "first": 6, "last": 7}]
    record = decode_record(views.export_record(fleet.ledger.store, a.run))
    assert sorted(record.hosts or {}) == ["A", "B", "C"]
    for fast in (True, False):
        report = verify_record(record, fast=fast)
        assert report.sealed and report.segments == 7 and report.phase == "closed"


def test_late_segments_of_the_former_holder_and_a_second_adopter_are_foreign(fleet: Fleet):
    """After B resumes A's park, A's own resume and C's resume of the same park are refused
    as ForeignRun and change nothing: exactly one resume enters the log."""
    a = _parked_on_a(fleet)
    b = fleet.hosts["B"].adopt_run(a.run, fleet.source, fleet.keys)
    c = fleet.hosts["C"].adopt_run(a.run, fleet.source, fleet.keys)
    b.resume(PARK, MANIFEST, idle_uj=5, provenance="estimated", meter="est")
    c.resume(PARK, MANIFEST, idle_uj=6, provenance="estimated", meter="est")
    a.resume(PARK, MANIFEST, idle_uj=9, provenance="estimated", meter="est")
    decisions = fleet.sync(order=("B", "C", "A"))
    assert [getattr(d, "rule", d.host) for d in decisions] == ["B", "ForeignRun", "ForeignRun"]
    status = views.run_status(fleet.ledger.store, a.run)
    assert status["segments"] == 3 and status["host"] == "B"
    assert status["energy"]["idle_uj"]["estimated"] == 5


def test_adoption_refuses_a_tampered_record(fleet: Fleet):
    """A record whose bytes were edited is RecordInvalid, and the host holds nothing."""
    a = _parked_on_a(fleet)

    class Tampered(LedgerSource):
        def record(self, run: str) -> bytes:
            doc = json.loads(super().record(run))
            doc["segments"][0]["attestation_object"]["receipt"]["uj"] += 1
            return json.dumps(doc).encode()

    with pytest.raises(RecordInvalid, match="AttestationMismatch"):
        fleet.hosts["B"].adopt_run(a.run, Tampered(fleet.ledger), fleet.keys)
    assert fleet.hosts["B"].outbox.payloads_after(a.run, 0) == []
    assert not (fleet.hosts["B"].dir / "adopted").exists()


def test_adoption_refuses_a_head_the_signed_log_does_not_hold(fleet: Fleet, tmp_path: Path):
    """A proof of an earlier head, or a proof under a key that is not the ledger's, is
    HeadNotLogged: a ledger cannot hand over a record it never logged."""
    a = _parked_on_a(fleet)

    class Stale(LedgerSource):
        def proof(self, run: str, index: int) -> dict[str, Any]:
            return super().proof(run, index - 1)

    with pytest.raises(HeadNotLogged):
        fleet.hosts["B"].adopt_run(a.run, Stale(fleet.ledger), fleet.keys)
    other = Ledger(LedgerConfig(data_dir=tmp_path / "other", servers=[], seal_workers=0))
    try:
        with pytest.raises(HeadNotLogged):
            fleet.hosts["B"].adopt_run(a.run, fleet.source, [other.signer.verifier()])
    finally:
        other.store.close()


def test_adoption_refuses_a_run_that_is_not_parked(fleet: Fleet):
    """Only a park can move: a run that is running is NotParked."""
    run = fleet.hosts["A"].open_run(UNIT, GRANTS)
    run.execute(uj=10, provenance="measured", meter="m", journal_root=digest(b"j1"))
    fleet.sync()
    with pytest.raises(NotParked):
        fleet.hosts["B"].adopt_run(run.run, fleet.source, fleet.keys)


def test_an_adopted_run_resumes_only_with_the_recorded_snapshot_and_manifest(fleet: Fleet):
    """Another snapshot or another environment is refused by the record's rules on the
    adopting host, and nothing is sealed or queued."""
    a = _parked_on_a(fleet)
    b = fleet.hosts["B"].adopt_run(a.run, fleet.source, fleet.keys)
    with pytest.raises(SnapshotMismatch):
        b.resume(make_snapshot(transcript=digest(b"other")), MANIFEST, idle_uj=5,
                 provenance="estimated", meter="est")
    with pytest.raises(ManifestMismatch):
        b.resume(PARK, digest(b"another environment"), idle_uj=5, provenance="estimated",
                 meter="est")
    assert fleet.hosts["B"].outbox.payloads_after(a.run, 0) == []
    assert b.state.index == 2 and b.state.phase == "parked"


def test_a_host_refuses_to_resume_its_own_run_from_an_edited_state(fleet: Fleet):
    """Edit the saved run state (in outbox.db) so the parked snapshot differs: after a
    restart the host verifies its run from its own sealed segments and refuses
    (StateMismatch) before sealing anything."""
    a = _parked_on_a(fleet)
    host = fleet.hosts["A"]
    path = host.dir
    host.close()
    db = sqlite3.connect(path / "outbox.db")
    (state,) = db.execute("SELECT state FROM runs WHERE run = ?", (a.run,)).fetchone()
    doc = msgspec.json.decode(state)
    doc["parked"] = {"transcript": format_address(digest(b"forged"))}
    db.execute("UPDATE runs SET state = ? WHERE run = ?", (msgspec.json.encode(doc), a.run))
    db.commit()
    db.close()
    again = Host("A", path)
    fleet.hosts["A"] = again
    run = again.open_run(UNIT, GRANTS)
    with pytest.raises(StateMismatch):
        run.resume(make_snapshot(transcript=digest(b"forged")), MANIFEST, idle_uj=5,
                   provenance="estimated", meter="est")
    assert len(again.outbox.payloads_after(a.run, 0)) == 2
    run2 = Host("A", path).open_run(UNIT, GRANTS)  # a fresh process: unverified again
    with pytest.raises(StateMismatch):
        run2.resume(PARK, MANIFEST, idle_uj=5, provenance="estimated", meter="est")


def test_the_record_in_pages_joins_to_the_whole_export(fleet: Fleet):
    """A record fetched in pages (each naming every segment's host) joins to exactly the
    ledger's whole export: the single-host form for a run that never moved, the multi-host
    form for one that did."""
    from fleet_ledger.fleet.record.record_file import join_pages
    from fleet_ledger.fleet.record.wire import encode_record

    a = _parked_on_a(fleet)
    still = fleet.hosts["C"].open_run(digest(b"unit-stays"), GRANTS)
    for n in range(5):
        still.execute(uj=n + 1, provenance="measured", meter="m", journal_root=digest(b"%d" % n))
    b = fleet.hosts["B"].adopt_run(a.run, fleet.source, fleet.keys)
    b.resume(PARK, MANIFEST, idle_uj=5, provenance="estimated", meter="est")
    b.execute(uj=20, provenance="measured", meter="m", journal_root=digest(b"j2"))
    fleet.sync()
    store = fleet.ledger.store
    for run in (a.run, still.run):
        whole = views.export_record(store, run)
        for size in (1, 2, 3, 10):
            segments = views.run_status(store, run)["segments"]
            pages = [decode_record(views.export_page(store, run, first, size))
                     for first in range(1, segments + 1, size)]
            assert encode_record(join_pages(pages)) == whole


def test_a_host_whose_outbox_was_pruned_verifies_its_run_from_the_ledger(fleet: Fleet):
    """With its early segments pruned, a restarted host verifies its parked run from the
    ledger's record and proof (when it has a ledger) before resuming it, and refuses with
    RecordUnavailable when it has none."""
    from fleet_ledger.agents.adoption import RecordUnavailable

    run = fleet.hosts["A"].open_run(UNIT, GRANTS)
    for n in range(3):
        run.execute(uj=10 + n, provenance="measured", meter="m", journal_root=digest(b"%d" % n))
    run.suspend(PARK, MANIFEST)
    fleet.sync()
    host = fleet.hosts["A"]
    host.outbox.prune(0)  # every acked row but the run's newest
    assert len(host.outbox.payloads_after(run.run, 0)) == 1
    again = Host("A", host.dir)
    try:
        mine = again.open_run(UNIT, GRANTS)
        with pytest.raises(RecordUnavailable):
            mine.resume(PARK, MANIFEST, idle_uj=5, provenance="estimated", meter="est")
        again.ledger = (fleet.source, fleet.keys)
        mine.resume(PARK, MANIFEST, idle_uj=5, provenance="estimated", meter="est")
        assert mine.state.index == 5
    finally:
        again.close()


def test_a_run_comes_back_to_a_host_that_held_it_before(fleet: Fleet):
    """A parks, B adopts, resumes and parks again, A adopts it back (its outbox had stopped
    the run meanwhile) and resumes: the ledger accepts every segment. A record that does
    not go past what A holds is still NotParked."""
    a = _parked_on_a(fleet)
    host_a = fleet.hosts["A"]
    with pytest.raises(NotParked):
        host_a.adopt_run(a.run, fleet.source, fleet.keys)  # nothing past A's own park
    b = fleet.hosts["B"].adopt_run(a.run, fleet.source, fleet.keys)
    b.resume(PARK, MANIFEST, idle_uj=5, provenance="estimated", meter="est")
    b.execute(uj=20, provenance="measured", meter="m", journal_root=digest(b"j2"))
    b.suspend(PARK, MANIFEST)
    assert all(not hasattr(d, "rule") for d in fleet.sync())
    host_a.outbox.stop_run(a.run, "ForeignRun")
    back = host_a.adopt_run(a.run, fleet.source, fleet.keys)
    assert back.state.index == 5 and a.run not in host_a.outbox.stopped_runs()
    back.resume(PARK, MANIFEST, idle_uj=7, provenance="estimated", meter="est")
    back.close()
    assert all(not hasattr(d, "rule") for d in fleet.sync())
    status = views.run_status(fleet.ledger.store, a.run)
    assert status["host"] == "A" and status["segments"] == 7
    assert status["holders"] == [{"host": "A", "first": 1, "last": 2},
                                 {"host": "B", "first": 3, "last": 5},
                                 {"host": "A", "first": 6, "last": 7}]
    reopened = host_a.open_run(UNIT, GRANTS)
    assert reopened.state.index == 7 and reopened.state.phase == "closed"
    with pytest.raises(NotParked):
        host_a.adopt_run(a.run, fleet.source, fleet.keys)
