"""The builder's pure prepare and its apply (fleet.record.builder): a segment is a value until
applied, and only to the state it was prepared from."""

from __future__ import annotations

import pytest
from nacl.signing import SigningKey

from fleet_ledger.fleet.address import digest
from fleet_ledger.fleet.errors import FleetError
from fleet_ledger.fleet.record.builder import RecordBuilder, StalePrepared, execute_segment
from fleet_ledger.fleet.record.run_codec import state_to_json
from fleet_ledger.fleet.record.segment import Closed, make_snapshot, resumed


def _builder() -> RecordBuilder:
    b = RecordBuilder(SigningKey(bytes([7]) * 32), digest(b"prepare/u"), digest(b"prepare/g"))
    b.execute(uj=5, provenance="measured", meter="m", journal_root=digest(b"j"))
    return b


def test_prepare_changes_nothing_and_apply_moves_to_its_state() -> None:
    """Preparing leaves the builder's state as it was; applying makes it the prepared one,
    the same a direct call would reach."""
    b, direct = _builder(), _builder()
    before = state_to_json(b.state)
    prepared = b.prepare(*execute_segment(uj=9, provenance="measured", meter="m",
                                          journal_root=digest(b"k")))
    assert state_to_json(b.state) == before and b.state.index == 1
    sealed = b.apply(prepared)
    assert sealed == direct.execute(uj=9, provenance="measured", meter="m",
                                    journal_root=digest(b"k"))
    assert b.state == direct.state and b.sealed == direct.sealed


def test_a_refused_prepare_and_a_stale_apply_change_nothing() -> None:
    """A segment the record's rules refuse raises before anything moves; a prepared value
    applied twice, or after the state moved on, is refused (StalePrepared)."""
    b = _builder()
    before = state_to_json(b.state)
    with pytest.raises(FleetError):
        b.prepare(resumed(make_snapshot(transcript=digest(b"t")), digest(b"m"), 1, "estimated",
                          "e"))  # a run that is not parked cannot resume
    assert state_to_json(b.state) == before
    first, second = b.prepare(Closed()), b.prepare(Closed())
    b.apply(first)
    with pytest.raises(StalePrepared):
        b.apply(second)
    with pytest.raises(StalePrepared):
        b.apply(first)
    assert b.state.index == 2 and len(b.sealed) == 2
