"""A run's energy total (what a grant's budget is checked against on every segment) is kept
by the kernel's state change beside the accounts it sums, and always equals their sum."""

from __future__ import annotations

import pytest

from fleet_ledger.fleet.record.record import Energy
from fleet_ledger.fleet.record.run_codec import state_from_json, state_to_json

from fault_helpers import sealed_run


def _summed(e: Energy) -> int:
    return sum(sum(account.values()) for account in (e.receipts, e.idle, e.claim, e.overhead))


@pytest.mark.parametrize("plan", ["epreprec", "keprc", "vvv"])
def test_the_kept_total_is_the_sum_after_every_step(plan: str) -> None:
    """Receipts, idle, a claim's slot energy and a pool's evictions each move the total by
    what they add; a copy and a stored-and-read state carry the same total."""
    run = sealed_run("h1", f"spent-{plan}", "")
    totals = []
    for n, step in enumerate(plan):
        {"e": lambda n=n: run.execute(n), "p": lambda n=n: run.park(n),
         "r": lambda: run.resume(), "c": run.close, "k": lambda n=n: run.claim(n),
         "v": lambda n=n: run.evict(n)}[step]()
        energy = run.builder.state.energy
        assert energy.total_uj == _summed(energy)
        totals.append(energy.total_uj)
    assert totals[-1] > 0 and totals == sorted(totals)
    state = run.builder.state
    assert state.copy().energy.total_uj == state.energy.total_uj
    assert state_from_json(state_to_json(state)).energy.total_uj == state.energy.total_uj


def test_a_copy_is_independent() -> None:
    """A batch's copy moving on leaves the committed state's total where it was."""
    run = sealed_run("h1", "spent-copy", "e")
    committed = run.builder.state
    before = committed.energy.total_uj
    run.builder.state = committed.copy()
    run.execute(1, uj=777)
    assert committed.energy.total_uj == before
    assert run.builder.state.energy.total_uj == before + 777
