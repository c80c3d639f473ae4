"""The audit's view of one run (:func:`fleet.audit.audit_run`), from plain values: a run's
state and its folded messages, no store and no broker."""

from __future__ import annotations

from fleet_ledger.fleet.audit import SEGMENT_KINDS, audit_run
from fleet_ledger.fleet.record.kernel import CLAIMED, CLOSED, EXECUTED, RESUMED, SUSPENDED
from fleet_ledger.fleet.record.wire import ClaimedWire, envelope_wire

from fault_helpers import sealed_run

KIND = {"k": CLAIMED, "e": EXECUTED, "p": SUSPENDED, "r": RESUMED, "c": CLOSED}


def test_parks_and_slots_are_decided_from_the_folded_segments() -> None:
    """A claimed run parked twice: the first park ends at its resume with the resume's idle
    energy, the second at a bare close (its draw missing); the claim is its one warm slot;
    executed segments are passed over; verdict and energy come from the state."""
    plan = "keprepc"
    run = sealed_run("h1", "audit-run", plan)
    rows = [(idx, KIND[step], 10.0 * idx, data)
            for idx, (step, (_subject, data)) in enumerate(zip(plan, run.messages, strict=True))]
    state = run.builder.state
    got = audit_run("r1", "h1", state.phase, state,
                    [r for r in rows if r[1] in SEGMENT_KINDS], 0.0, 60.0)
    first, second = got.parks
    assert (first.segment, first.suspended_at, first.resumed_at) == (2, 20.0, 30.0)
    assert (first.idle_uj, first.provenance, first.closed_bare) == (5000, "estimated", False)
    assert (second.segment, second.suspended_at, second.resumed_at) == (5, 50.0, 60.0)
    assert second.idle_uj is None and second.closed_bare
    claim = envelope_wire(run.messages[0][1])
    assert claim is not None and isinstance(claim.segment, ClaimedWire)
    assert got.slots == ((claim.segment.slot, CLAIMED, 0),)
    assert got.verdict == "NonBlocking" and got.verdict_segment is None
    assert got.receipts_uj == dict(state.energy.receipts) and got.claim_uj
    assert (got.first_at, got.last_at) == (0.0, 60.0)
    # Executed segments change nothing: the audit reads parks and slots only.
    assert audit_run("r1", "h1", state.phase, state, rows, 0.0, 60.0) == got
