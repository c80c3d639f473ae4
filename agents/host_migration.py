"""Reading a host folder written before run states moved into the outbox.

Until then a host kept each run's state in a second SQLite file, ``runs.db`` (table
``runs (run TEXT PRIMARY KEY, state BLOB NOT NULL)``, the state as
:func:`fleet.record.run_codec.state_to_json` JSON), saved after the outbox put: a host killed
between the two left segments in the outbox beyond the saved state. Opening such a folder
moves every run's state into ``outbox.db`` once, folding in the segments beyond it (the
last time that gap is repaired: from now on a segment and its state are one transaction),
then renames ``runs.db`` to ``runs.db.migrated``. A crash part-way leaves ``runs.db`` in
place and the migration runs again; runs already moved are left as they are.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from nacl.signing import VerifyKey

from fleet_ledger.agents.outbox import Outbox
from fleet_ledger.fleet.record.record import RunState
from fleet_ledger.fleet.record.run_codec import decode_state, encode_state
from fleet_ledger.fleet.record.verify import fold_sealed
from fleet_ledger.fleet.record.wire import decode_envelope
from fleet_ledger.plumbing import sqlite

OLD_FILE: Final = "runs.db"
DONE_SUFFIX: Final = ".migrated"

__all__ = ["OLD_FILE", "migrate_runs_db"]


def _caught_up(state: RunState | None, payloads: list[bytes], key: VerifyKey
               ) -> RunState | None:
    for payload in payloads:
        env = decode_envelope(payload)
        if state is None:
            if env.sealed.index != 1:
                return None  # its first rows were pruned and no state was saved: not ours
            state = RunState.open(env.unit_id, env.grants_id)
        fold_sealed(state, env.sealed, key)
    return state


def migrate_runs_db(data_dir: Path, outbox: Outbox, key: VerifyKey) -> int:
    """Move the run states of ``data_dir/runs.db`` (if any) into ``outbox``; returns how
    many runs were moved."""
    old = data_dir / OLD_FILE
    if not old.exists():
        return 0
    db = sqlite.connect(old, busy_timeout_s=5.0)
    try:
        saved = dict(db.execute("SELECT run, state FROM runs").fetchall())
    finally:
        db.close()
    moved = 0
    for run in sorted(set(saved) | set(outbox.runs())):
        if outbox.state(run) is not None:
            continue  # moved by an earlier, interrupted migration
        state = decode_state(saved[run]) if run in saved else None
        payloads = outbox.payloads_after(run, 0 if state is None else state.index)
        state = _caught_up(state, payloads, key)
        if state is not None:
            outbox.save_state(run, encode_state(state))
            moved += 1
    os.replace(old, old.with_name(OLD_FILE + DONE_SUFFIX))
    return moved
