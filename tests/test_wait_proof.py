"""The wait proof's four verdicts and their precedence."""

from __future__ import annotations

from fleet_ledger.fleet.record.segment import CallAccount
from fleet_ledger.fleet.record.wait_proof import (
    Blocked,
    Malformed,
    NonBlocking,
    Unproved,
    WaitTracker,
)


def verdict(*accounts):
    t = WaitTracker()
    for i, acc in enumerate(accounts, start=1):
        t.add(i, None if acc is None else CallAccount(tuple(acc[0]), tuple(acc[1])))
    return t.verdict()


def test_no_intervals_is_unproved():
    """A record with no executed interval proves nothing."""
    assert verdict() == Unproved()


def test_all_accounted_and_resolved_later_is_nonblocking():
    """Dispatch in one interval, resolve in a later one: NonBlocking."""
    assert verdict((["a"], []), ([], ["a"])) == NonBlocking()
    assert verdict(([], [])) == NonBlocking()


def test_resolving_own_dispatch_is_blocked_at_that_segment():
    """An interval that resolves what it dispatched itself waited: Blocked(segment)."""
    assert verdict((["a"], []), (["b"], ["b"])) == Blocked(2)


def test_malformed_cases_name_their_segment():
    """Never dispatched, resolved twice, dispatched twice: Malformed(segment)."""
    assert verdict(([], ["x"])) == Malformed(1)
    assert verdict((["a"], []), ([], ["a", "a"])) == Malformed(2)
    assert verdict((["a", "a"], [])) == Malformed(1)
    assert verdict((["a"], []), ([], ["a"]), ([], ["a"])) == Malformed(3)
    assert verdict((["a"], []), (["a"], [])) == Malformed(2)


def test_malformed_outranks_blocked_and_blocked_outranks_unproved():
    """Precedence: Malformed, then Blocked, then Unproved."""
    assert verdict((["a"], ["a"]), ([], ["zz"])) == Malformed(2)
    assert verdict(None, (["a"], ["a"])) == Blocked(2)


def test_unaccounted_interval_makes_unknown_results_undecidable():
    """After an unaccounted interval, a result for an unseen id is not Malformed."""
    assert verdict(None, ([], ["x"])) == Unproved()
    assert verdict((["a"], []), None, ([], ["a"])) == Unproved()
