"""What the ledger shows of grants: a run's ``"grant"`` (none, or its chain, history and
checkpoints), a grant's own document, and the audit's count of grant refusals."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet_ledger.fleet.address import digest, format_address
from fleet_ledger.fleet.audit import grant_refusals
from fleet_ledger.fleet.grants.grant import grant_address
from fleet_ledger.ledger import views
from fleet_ledger.ledger.audit_rows import audit_store
from fleet_ledger.ledger.grant_views import GrantNotFound, grant_status

from grant_helpers import (
    AGENT,
    CHILD_AGENT,
    ISSUER,
    NO_AMENDMENT,
    TRIGGERS,
    World,
    amend_event,
    checkpoint_event,
    child_grant,
    mint_event,
    policy,
    run_under,
    terms,
    trigger_event,
)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path / "ledger")
    yield w
    w.close()


def test_a_run_under_no_presented_grant_has_none(world: World) -> None:
    """A run whose grant was never presented shows ``"grant": null`` (enforce mode)."""
    r = run_under(digest(b"never presented"))
    assert world.rule(r.subject, r.execute(0)) == "accepted"
    assert views.run_status(world.ledger.store, format_address(r.run))["grant"] is None


def test_a_childs_run_shows_its_chain_history_and_checkpoints(world: World) -> None:
    """A run under a minted child shows the child's effective terms (met with its
    amended parent's), the chain up to the standing grant, the chain's events in stream
    order, and the run's checkpoints apart; ``grant_status`` numbers the amendments."""
    sid = world.issue(terms(mint=policy(), budget_uj=50_000))
    assert world.event(trigger_event(TRIGGERS, "go")) == "accepted"
    child = child_grant(sid, terms(budget_uj=9_000))
    cid = grant_address(child)
    assert world.event(mint_event(AGENT, sid, "go", child)) == "accepted"
    first = amend_event(ISSUER, sid, 1, NO_AMENDMENT, terms(mint=policy(), budget_uj=5_000))
    assert world.event(first) == "accepted"
    r = run_under(cid)
    assert world.rule(r.subject, r.execute(0, uj=1_200)) == "accepted"
    head = world.ledger.store.head_at(r.run, 1)
    cp = checkpoint_event(CHILD_AGENT, r.run, 1, head, digest(b"state"), "one")
    assert world.event(cp) == "accepted"
    g = views.run_status(world.ledger.store, format_address(r.run), world.ledger.grants)["grant"]
    assert g["id"] == format_address(cid) and g["used_uj"] == 1_200
    assert g["chain"] == [format_address(cid), format_address(sid)]
    assert g["effective"]["budget_uj"] == 5_000
    assert [(e["kind"], e["stream_seq"]) for e in g["history"]] == [
        ("issue", 1), ("mint", 3), ("amend", 4)]
    assert [(c["kind"], c["note"]) for c in g["checkpoints"]] == [("checkpoint", "one")]
    doc = grant_status(world.ledger.store, world.ledger.grants, format_address(sid))
    assert (doc["amended"], doc["minted"]) == (1, 1)
    assert doc["last_amendment"] == format_address(digest(first))
    with pytest.raises(GrantNotFound):
        grant_status(world.ledger.store, world.ledger.grants, format_address(digest(b"x")))


def test_the_audit_counts_grant_refusals_by_rule_and_kind(world: World) -> None:
    """Refused segments and refused grant events are counted apart, by rule; other
    refusals and those before ``since`` are not counted."""
    gid = world.issue(terms(budget_uj=1_000))
    r = run_under(gid)
    assert world.rule(r.subject, r.execute(0, uj=1_001)) == "OverBudget"
    assert world.event(amend_event(ISSUER, gid, 2, NO_AMENDMENT, terms(budget_uj=5))
                       ) == "AmendmentOutOfOrder"
    doc = audit_store(world.ledger.store)["grant_refusals"]
    assert doc == {"total": 2, "segments": 1, "events": 1,
                   "by_rule": {"AmendmentOutOfOrder": 1, "OverBudget": 1}}
    rows = [("OverBudget", 10.0, False), ("IndexGap", 20.0, False),
            ("NotIssuer", 30.0, True), ("OverBudget", 5.0, False)]
    assert grant_refusals(rows, since=10.0) == {
        "total": 2, "segments": 1, "events": 1, "by_rule": {"NotIssuer": 1, "OverBudget": 1}}
