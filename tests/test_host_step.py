"""A host's segment is one durable step (agents.host): prepared as a value, put with the
run's state in one transaction, applied after; a refused put leaves nothing to undo."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet_ledger.agents.host import Host
from fleet_ledger.agents.outbox import OutboxFull
from fleet_ledger.fleet.address import digest
from fleet_ledger.fleet.record.run_codec import state_to_json
from fleet_ledger.fleet.record.segment import make_snapshot

GRANTS = digest(b"host-step/grants")
MANIFEST = digest(b"host-step/manifest")


def test_a_refused_put_leaves_the_run_where_it_was(tmp_path: Path) -> None:
    """A put the outbox refuses (OutboxFull) moves neither the run in memory nor its saved
    state: the next segment takes the same index, nothing restored."""
    host = Host("full", tmp_path / "h", outbox_limit=2500, reserve=0.5)
    try:
        run = host.open_run(digest(b"full/u"), GRANTS)
        run.execute(uj=1, provenance="measured", meter="m", journal_root=digest(b"j0"))
        before = state_to_json(run.state)
        with pytest.raises(OutboxFull):
            for i in range(1, 10):
                run.execute(uj=1, provenance="measured", meter="m",
                            journal_root=digest(b"j%d" % i))
        held = state_to_json(run.state)
        assert held["index"] >= before["index"]
        assert host.open_run(digest(b"full/u"), GRANTS).state.index == held["index"]
        parked = run.suspend(make_snapshot(transcript=digest(b"t")), MANIFEST)  # the reserve
        assert parked.index == held["index"] + 1
    finally:
        host.close()
