"""A host folder written before run states moved into the outbox (``outbox.db`` + ``runs.db``)
opens and continues its runs: agents.host_migration."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import msgspec
import pytest

from fleet_ledger.agents.host import Host, load_or_create_key
from fleet_ledger.agents.outbox import RunStopped
from fleet_ledger.fleet.address import digest, format_address
from fleet_ledger.fleet.record.builder import RecordBuilder
from fleet_ledger.fleet.record.run_codec import state_to_json
from fleet_ledger.fleet.record.segment import make_snapshot
from fleet_ledger.fleet.record.wire import encode_envelope
from fleet_ledger.fleet.subjects import fleet_names

GRANTS = digest(b"migration/grants")
MANIFEST = digest(b"migration/manifest")

# The schemas the previous version wrote, verbatim: its outbox (no run state) and runs.db.
OLD_OUTBOX = """
CREATE TABLE segments (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run TEXT NOT NULL,
    idx INTEGER NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('executed', 'suspended', 'resumed', 'closed',
                                       'claimed', 'evicted')),
    subject TEXT NOT NULL,
    msg_id TEXT NOT NULL,
    payload BLOB NOT NULL,
    acked_seq INTEGER,
    state TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'acked', 'stopped')),
    UNIQUE (run, idx)
);
CREATE INDEX segments_state ON segments (state, id);
CREATE TABLE runs (
    run TEXT PRIMARY KEY,
    last_acked_seq INTEGER NOT NULL DEFAULT 0,
    stopped INTEGER NOT NULL DEFAULT 0,
    stop_reason TEXT
);
"""
OLD_RUNS = "CREATE TABLE runs (run TEXT PRIMARY KEY, state BLOB NOT NULL)"


def _old_folder(path: Path) -> dict[str, RecordBuilder]:
    """Write a host folder as the previous version left it after a crash: run ``gap`` has
    three segments in the outbox but its state saved at two (killed between the two
    fsyncs), run ``unsaved`` has one segment and no saved state, run ``parked`` is saved
    whole, and run ``stopped`` was stopped as a fork."""
    path.mkdir(parents=True)
    key = load_or_create_key(path)
    names = fleet_names("fleet")
    box, runs = sqlite3.connect(path / "outbox.db"), sqlite3.connect(path / "runs.db")
    box.executescript(OLD_OUTBOX)
    runs.execute(OLD_RUNS)
    made: dict[str, RecordBuilder] = {}
    plan = {"gap": (3, 2), "unsaved": (1, None), "parked": (2, 2), "stopped": (1, 1)}
    for name, (segments, saved_at) in plan.items():
        b = RecordBuilder(key, digest(b"migration/" + name.encode()), GRANTS)
        run = format_address(b.run)
        for i in range(segments):
            if name == "parked" and i == 1:
                sealed = b.suspend(make_snapshot(transcript=digest(b"t")), MANIFEST)
            else:
                sealed = b.execute(uj=10 + i, provenance="measured", meter="m",
                                   journal_root=digest(b"j%d" % i))
            payload = encode_envelope("old", b.run, b.state.unit_id, b.state.grants_id, sealed)
            box.execute("INSERT INTO segments (run, idx, kind, subject, msg_id, payload)"
                        " VALUES (?, ?, ?, ?, ?, ?)",
                        (run, sealed.index, sealed.segment.kind,
                         names.segment_subject("old", run), format_address(sealed.head),
                         payload))
            box.execute("INSERT OR IGNORE INTO runs (run) VALUES (?)", (run,))
            if sealed.index == saved_at:
                runs.execute("INSERT INTO runs (run, state) VALUES (?, ?) ON CONFLICT(run)"
                              " DO UPDATE SET state = excluded.state",
                              (run, msgspec.json.encode(state_to_json(b.state))))
        made[name] = b
    box.execute("UPDATE runs SET stopped = 1, stop_reason = 'fork' WHERE run = ?",
                (format_address(made["stopped"].run),))
    box.execute("UPDATE segments SET state = 'stopped' WHERE run = ?",
                (format_address(made["stopped"].run),))
    for db in (box, runs):
        db.commit()
        db.close()
    return made


def test_an_old_host_folder_opens_and_continues_its_runs(tmp_path: Path) -> None:
    """Every run of an old folder continues at its right index (the gap of the old crash
    window folded in once), its state matches its sealed segments, a stopped run stays
    stopped, and runs.db is set aside."""
    folder = tmp_path / "old"
    made = _old_folder(folder)
    host = Host("old", folder)
    try:
        assert not (folder / "runs.db").exists() and (folder / "runs.db.migrated").exists()
        opened = {name: host.open_run(b.state.unit_id, GRANTS) for name, b in made.items()}
        for name, hr in opened.items():
            assert hr.state == made[name].state, name
            host.verified_state(hr)  # raises StateMismatch if it differs from the record
        nxt = opened["gap"].execute(uj=1, provenance="measured", meter="m",
                                    journal_root=digest(b"next"))
        assert nxt.index == 4  # not a second segment 3 (a fork)
        assert opened["unsaved"].execute(uj=1, provenance="measured", meter="m",
                                         journal_root=digest(b"next")).index == 2
        resumed = opened["parked"].resume(make_snapshot(transcript=digest(b"t")), MANIFEST,
                                          idle_uj=5, provenance="estimated", meter="e")
        assert resumed.index == 3
        with pytest.raises(RunStopped):
            opened["stopped"].execute(uj=1, provenance="measured", meter="m",
                                      journal_root=digest(b"next"))
    finally:
        host.close()
    again = Host("old", folder)
    try:
        assert again.open_run(made["gap"].state.unit_id, GRANTS).state.index == 4
    finally:
        again.close()


def test_a_migration_interrupted_before_the_rename_runs_again_harmlessly(tmp_path: Path
                                                                         ) -> None:
    """A host killed after moving the states but before setting runs.db aside migrates
    again on its next start, leaving every moved run's state as it is (a run that went on
    is not set back to runs.db's older state)."""
    folder = tmp_path / "old"
    made = _old_folder(folder)
    kept = tmp_path / "runs.db.copy"
    shutil.copy(folder / "runs.db", kept)
    host = Host("old", folder)
    gap = host.open_run(made["gap"].state.unit_id, GRANTS)
    gap.execute(uj=1, provenance="measured", meter="m", journal_root=digest(b"next"))
    host.close()
    shutil.copy(kept, folder / "runs.db")  # as if the rename had not happened
    again = Host("old", folder)
    try:
        hr = again.open_run(made["gap"].state.unit_id, GRANTS)
        assert hr.state.index == 4
        again.verified_state(hr)
        assert not (folder / "runs.db").exists()
    finally:
        again.close()

