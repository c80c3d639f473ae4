"""Grants: the bytes, the one order, and every refusal the ledger's fold makes of grant
events and of segments under a grant, by name, with nothing changed after a refusal."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from fleet_ledger.fleet.address import digest
from fleet_ledger.fleet.fold.grant_events import decode_event
from fleet_ledger.fleet.grants.grant import (
    GRANT_DOMAIN,
    check_narrows,
    covers,
    decode_grant,
    grant_address,
    meet,
    nothing,
    sign_grant,
)
from fleet_ledger.fleet.grants.grant_errors import GrantWidens, MissingExpiry, NonCanonicalGrant
from fleet_ledger.fleet.record.wire import RecordWire

from fault_helpers import MANIFEST, SealedRun, host_key
from grant_helpers import (
    AGENT,
    CHILD_AGENT,
    ISSUER,
    NO_AMENDMENT,
    T0,
    TRIGGERS,
    World,
    amend_event,
    checkpoint_event,
    child_grant,
    issue_event,
    key,
    mint_event,
    policy,
    run_under,
    terms,
    trigger_event,
)

HOUR = 3_600_000


@pytest.fixture(params=[True, False], ids=["fast", "reference"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> World:
    w = World(tmp_path / "ledger", fast_path=request.param)
    yield w
    w.close()


def refused_unchanged(w: World, subject: str, data: bytes, rule: str,
                      at_ms: int = T0 + 1000) -> None:
    """``data`` is refused by ``rule`` and the ledger's runs, log and book are unchanged
    (but for the refusal kept with its reason)."""
    before = w.state()
    assert w.rule(subject, data, at_ms) == rule
    after = w.state()
    assert after[0].rejections[-1][1] == rule
    after[0].rejections.pop()
    after[0].watermark = before[0].watermark
    assert after == before


# -- bytes and order ------------------------------------------------------------------------


def test_a_grant_round_trips_and_its_address_is_its_bytes() -> None:
    g = sign_grant(ISSUER, bytes(AGENT.verify_key), terms(mint=policy()))
    decoded = decode_grant(g)
    assert decoded.terms == terms(mint=policy())
    assert grant_address(g) == digest(g)
    assert g.startswith(GRANT_DOMAIN)


def test_a_reordered_encoding_is_refused_even_with_a_valid_signature() -> None:
    """Hosts out of order, signed properly by the issuer: NonCanonicalGrant, since two
    encodings of one grant would be two addresses."""
    g = sign_grant(ISSUER, bytes(AGENT.verify_key), terms(hosts=["h1", "h2"]))
    body = g[:-64]
    swapped = body.replace(b"\x00\x02h1\x00\x02h2", b"\x00\x02h2\x00\x02h1")
    assert swapped != body
    forged = swapped + ISSUER.sign(swapped).signature
    with pytest.raises(NonCanonicalGrant):
        decode_grant(forged)
    # A scope with a trailing slash is not the normal form either.
    t = terms()
    raw = sign_grant(ISSUER, bytes(AGENT.verify_key), t)[:-64]
    bent = raw.replace(b"\x00\x08/fs/work", b"\x00\x09/fs/work/")
    with pytest.raises(NonCanonicalGrant):
        decode_grant(bent + ISSUER.sign(bent).signature)


def test_scopes_cover_at_a_slash_boundary_only() -> None:
    assert covers("/fs", "/fs") and covers("/fs", "/fs/a") and covers("/", "/x")
    assert not covers("/fs", "/fsx") and not covers("/fs/a", "/fs")
    parent = terms(scopes=["/fs"])
    check_narrows(terms(scopes=["/fs/a", "/fs/b"]), parent)
    with pytest.raises(GrantWidens, match="scopes"):
        check_narrows(terms(scopes=["/fsx"]), parent)


@pytest.mark.parametrize(("change", "field"), [
    ({"budget_uj": 10_001}, "budget_uj"),
    ({"expires_ms": T0 + HOUR + 1}, "expires_ms"),
    ({"not_before_ms": T0 - 1}, "not_before_ms"),
    ({"hosts": ["h1", "h2", "h3"]}, "hosts"),
    ({"hosts": None}, "hosts"),
    ({"manifests": None}, "manifests"),
    ({"mint": policy()}, "mint"),
])
def test_every_widening_is_named(change: dict, field: str) -> None:
    with pytest.raises(GrantWidens, match=field):
        check_narrows(terms(**change), terms())


def test_a_looser_mint_policy_widens() -> None:
    parent = terms(mint=policy(3, 2, 60_000))
    check_narrows(terms(mint=policy(2, 1, 120_000)), parent)
    for looser, field in ((policy(4, 2, 60_000), "max_children"),
                          (policy(3, 3, 60_000), "max_per_window"),
                          (policy(3, 2, 59_999), "window_ms")):
        with pytest.raises(GrantWidens, match=field):
            check_narrows(terms(mint=looser), parent)


def test_meet_is_below_both_and_nothing_is_below_all() -> None:
    a = terms(scopes=["/fs"], budget_uj=5, hosts=["h1", "h2"])
    b = terms(scopes=["/fs/x", "/net"], budget_uj=9, hosts=["h2", "h3"])
    m = meet(a, b)
    check_narrows(m, a)
    check_narrows(m, b)
    assert m.scopes == ("/fs/x",) and m.budget_uj == 5 and m.hosts == ("h2",)
    check_narrows(nothing(a), a)


def test_a_grant_without_expiry_is_not_signed() -> None:
    with pytest.raises(MissingExpiry):
        sign_grant(ISSUER, bytes(AGENT.verify_key), terms(expires_ms=T0))


# -- issuing ----------------------------------------------------------------------------------


def test_issuing_refuses_self_grants_host_issuers_children_and_duplicates(world: World
                                                                          ) -> None:
    subj = world.ledger.names.grant_subject
    self_grant = sign_grant(AGENT, bytes(AGENT.verify_key), terms())
    refused_unchanged(world, subj, issue_event(AGENT, self_grant), "IssuerIsSubject")
    host = host_key("h1")
    refused_unchanged(world, subj, issue_event(host, sign_grant(host, bytes(AGENT.verify_key),
                                                                terms())), "IssuerIsHost")
    g = sign_grant(ISSUER, bytes(AGENT.verify_key), terms())
    refused_unchanged(world, subj, issue_event(AGENT, g), "NotIssuer")
    assert world.event(issue_event(ISSUER, g)) == "accepted"
    refused_unchanged(world, subj, issue_event(ISSUER, g), "DuplicateGrant")
    child = child_grant(grant_address(g), terms(budget_uj=1))
    refused_unchanged(world, subj, issue_event(AGENT, child), "ChildNotMinted")
    unsigned = g[:-64] + bytes(64)
    refused_unchanged(world, subj, issue_event(ISSUER, unsigned), "BadGrantSignature")
    refused_unchanged(world, subj, b"fleet.gev/1" + b"\x09" + bytes(200), "MalformedGrant")


# -- segments under a grant -------------------------------------------------------------------


def test_landing_on_the_budget_is_allowed_and_one_microjoule_over_is_not(world: World) -> None:
    gid = world.issue(terms(budget_uj=10_000))
    r = run_under(gid)
    assert world.rule(r.subject, r.execute(0, uj=6_000)) == "accepted"
    over = r.execute(1, uj=4_001)
    refused_unchanged(world, r.subject, over, "OverBudget")
    r2 = run_under(gid, unit="exact")
    assert world.rule(r2.subject, r2.execute(0, uj=6_000)) == "accepted"
    assert world.rule(r2.subject, r2.execute(1, uj=4_000)) == "accepted"
    # Idle energy counts too: a resume's idle past the budget is refused.
    r3 = run_under(gid, unit="idle")
    for data in (r3.execute(0, uj=9_000), r3.park(0)):
        assert world.rule(r3.subject, data) == "accepted"
    refused_unchanged(world, r3.subject, r3.resume(idle_uj=1_001), "OverBudget")


def test_the_window_is_judged_by_ledger_time(world: World) -> None:
    gid = world.issue(terms(not_before_ms=T0 + 500, expires_ms=T0 + HOUR))
    r = run_under(gid)
    first = r.execute(0)
    refused_unchanged(world, r.subject, first, "GrantNotYetValid", at_ms=T0 + 499)
    assert world.rule(r.subject, first, T0 + 500) == "accepted"
    assert world.rule(r.subject, r.execute(1), T0 + HOUR - 1) == "accepted"
    refused_unchanged(world, r.subject, r.execute(2), "GrantExpired", at_ms=T0 + HOUR)


def test_hosts_and_manifests_the_grant_does_not_allow(world: World) -> None:
    gid = world.issue(terms(hosts=["h1"], manifests=[MANIFEST]))
    r = run_under(gid, host="h2")
    refused_unchanged(world, r.subject, r.execute(0), "HostNotGranted")
    other = digest(b"another manifest")
    gid2 = world.issue(terms(manifests=[other], budget_uj=9_999))
    r2 = run_under(gid2)
    assert world.rule(r2.subject, r2.execute(0)) == "accepted"
    refused_unchanged(world, r2.subject, r2.park(0), "ManifestNotGranted")


def test_unknown_grants_are_refused_only_where_required(tmp_path: Path) -> None:
    for mode, rule in (("require", "UnknownGrant"), ("enforce", "accepted")):
        w = World(tmp_path / mode, grants=mode)
        try:
            r = run_under(digest(b"no such grant"))
            assert w.rule(r.subject, r.execute(0)) == rule
        finally:
            w.close()


def test_a_grant_from_another_run_cannot_be_spliced_in(world: World) -> None:
    """A run opened under one grant cannot continue under another (its id binds the first),
    and a checkpoint bound to another run's head is refused."""
    g1, g2 = world.issue(terms(budget_uj=100_000)), world.issue(terms(budget_uj=1))
    a = run_under(g1, unit="a")
    assert world.rule(a.subject, a.execute(0)) == "accepted"
    spliced = run_under(g2, unit="a")
    spliced.builder.state.run = a.run  # the same run id, claiming the other grant
    env = spliced.envelope(spliced.builder.execute(uj=1, provenance="measured",
                                                   meter="m", journal_root=bytes(32)))
    refused_unchanged(world, a.subject, env, "RunMismatch")
    b = run_under(g1, unit="b")
    assert world.rule(b.subject, b.execute(0)) == "accepted"
    cp = checkpoint_event(AGENT, a.run, 1, b.builder.state.head, digest(b"s"), "mine")
    refused_unchanged(world, world.ledger.names.grant_subject, cp, "CheckpointMismatch")


# -- standing grants --------------------------------------------------------------------------


def _standing(world: World, **kw: object) -> bytes:
    return world.issue(terms(mint=policy(**kw), budget_uj=50_000))


def test_mints_refuse_strangers_unknown_and_replayed_triggers_and_children(world: World
                                                                          ) -> None:
    subj = world.ledger.names.grant_subject
    sid = _standing(world)
    child = child_grant(sid, terms(budget_uj=1_000))
    refused_unchanged(world, subj, mint_event(AGENT, sid, "t1", child), "UnknownTrigger")
    assert world.event(trigger_event(TRIGGERS, "t1")) == "accepted"
    refused_unchanged(world, subj, trigger_event(TRIGGERS, "t1"), "DuplicateTrigger")
    stranger = key("stranger")
    refused_unchanged(world, subj, mint_event(stranger, sid, "t1", child), "NotHolder")
    wide = child_grant(sid, terms(budget_uj=50_001))
    refused_unchanged(world, subj, mint_event(AGENT, sid, "t1", wide), "GrantWidens")
    fsx = child_grant(sid, terms(scopes=["/fs/workx"], budget_uj=1))
    refused_unchanged(world, subj, mint_event(AGENT, sid, "t1", fsx), "GrantWidens")
    late = child_grant(sid, terms(expires_ms=T0 + HOUR + 1, budget_uj=1))
    refused_unchanged(world, subj, mint_event(AGENT, sid, "t1", late), "GrantWidens")
    foreign = child_grant(digest(b"other parent"), terms(budget_uj=1))
    refused_unchanged(world, subj, mint_event(AGENT, sid, "t1", foreign), "ChildMismatch")
    # Raised by another key than the policy's: not a trigger of this grant.
    assert world.event(trigger_event(key("other"), "t2")) == "accepted"
    refused_unchanged(world, subj, mint_event(AGENT, sid, "t2", child), "UnknownTrigger")
    assert world.event(mint_event(AGENT, sid, "t1", child)) == "accepted"
    refused_unchanged(world, subj, mint_event(AGENT, sid, "t1", child), "ReplayedChild")
    other = child_grant(sid, terms(budget_uj=999))
    refused_unchanged(world, subj, mint_event(AGENT, sid, "t1", other), "ReplayedTrigger")
    plain = world.issue(terms(budget_uj=5))
    assert world.event(trigger_event(TRIGGERS, "t3")) == "accepted"
    refused_unchanged(world, subj, mint_event(AGENT, plain, "t3",
                                              child_grant(plain, terms(budget_uj=1))),
                      "NotStanding")


def test_rate_per_window_and_children_across_windows(world: World) -> None:
    """Two per minute (half-open: a mint stops counting window_ms after it), three ever."""
    subj = world.ledger.names.grant_subject
    sid = _standing(world, max_children=3, max_per_window=2, window_ms=60_000)
    for n in range(5):
        assert world.event(trigger_event(TRIGGERS, f"t{n}")) == "accepted"
    kids = [child_grant(sid, terms(budget_uj=100 + n)) for n in range(5)]
    t = T0 + 1000
    assert world.event(mint_event(AGENT, sid, "t0", kids[0]), t) == "accepted"
    assert world.event(mint_event(AGENT, sid, "t1", kids[1]), t + 10) == "accepted"
    refused_unchanged(world, subj, mint_event(AGENT, sid, "t2", kids[2]), "MintRateExceeded",
                      at_ms=t + 59_999)
    assert world.event(mint_event(AGENT, sid, "t2", kids[2]), t + 60_000) == "accepted"
    refused_unchanged(world, subj, mint_event(AGENT, sid, "t3", kids[3]), "MintLimitReached",
                      at_ms=t + 10 * 60_000)


def test_a_child_is_usable_only_once_minted_and_not_after_its_parent_is_revoked(
        tmp_path: Path) -> None:
    w = World(tmp_path / "l", grants="require")
    try:
        subj = w.ledger.names.grant_subject
        sid = _standing(w)
        child = child_grant(sid, terms(budget_uj=1_000, hosts=["h1"]))
        cid = grant_address(child)
        r = run_under(cid)
        first = r.execute(0, uj=10)
        refused_unchanged(w, r.subject, first, "UnknownGrant")
        assert w.event(trigger_event(TRIGGERS, "go")) == "accepted"
        assert w.event(mint_event(AGENT, sid, "go", child)) == "accepted"
        assert w.rule(r.subject, first) == "accepted"
        revoke = amend_event(ISSUER, sid, 1, NO_AMENDMENT,
                             nothing(terms(mint=policy(), budget_uj=50_000)))
        assert w.event(revoke) == "accepted"
        refused_unchanged(w, r.subject, r.execute(1, uj=10), "GrantRevoked")
        # A close still ends the run: it spends nothing.
        r.builder.state.index -= 1  # the refused interval was never folded
        r.builder.state.head = w.ledger.store.head_at(r.run, 1)
        assert w.rule(r.subject, r.close()) == "accepted"
        assert w.event(trigger_event(TRIGGERS, "again")) == "accepted"
        refused_unchanged(w, subj, mint_event(AGENT, sid, "again",
                                              child_grant(sid, terms(budget_uj=2))),
                          "NotStanding")
    finally:
        w.close()


# -- amendments and checkpoints ---------------------------------------------------------------


def test_amendments_only_by_the_issuer_only_tighter_only_in_order(world: World) -> None:
    subj = world.ledger.names.grant_subject
    t = terms(budget_uj=10_000)
    gid = world.issue(t)
    tighter = terms(budget_uj=5_000)
    refused_unchanged(world, subj, amend_event(AGENT, gid, 1, NO_AMENDMENT, tighter),
                      "NotIssuer")
    refused_unchanged(world, subj, amend_event(host_key("h1"), gid, 1, NO_AMENDMENT, tighter),
                      "NotIssuer")
    refused_unchanged(world, subj, amend_event(ISSUER, gid, 1, NO_AMENDMENT,
                                               terms(budget_uj=10_001)), "GrantWidens")
    refused_unchanged(world, subj, amend_event(ISSUER, gid, 2, NO_AMENDMENT, tighter),
                      "AmendmentOutOfOrder")
    refused_unchanged(world, subj, amend_event(ISSUER, digest(b"x"), 1, NO_AMENDMENT, tighter),
                      "UnknownGrant")
    first = amend_event(ISSUER, gid, 1, NO_AMENDMENT, tighter)
    assert world.event(first) == "accepted"
    refused_unchanged(world, subj, amend_event(ISSUER, gid, 1, NO_AMENDMENT,
                                               terms(budget_uj=4_000)), "ReplayedAmendment")
    refused_unchanged(world, subj, amend_event(ISSUER, gid, 2, NO_AMENDMENT,
                                               terms(budget_uj=4_000)), "AmendmentOutOfOrder")
    assert world.event(amend_event(ISSUER, gid, 2, digest(first), terms(budget_uj=4_000))
                       ) == "accepted"
    assert world.ledger.grants.effective(gid).budget_uj == 4_000


def test_an_amendment_stops_a_run_from_its_next_segment(world: World) -> None:
    gid = world.issue(terms(budget_uj=10_000))
    r = run_under(gid)
    assert world.rule(r.subject, r.execute(0, uj=3_000)) == "accepted"
    assert world.event(amend_event(ISSUER, gid, 1, NO_AMENDMENT,
                                   terms(budget_uj=4_000))) == "accepted"
    refused_unchanged(world, r.subject, r.execute(1, uj=1_001), "OverBudget")


def test_checkpoints_are_the_agents_and_bound_to_the_head(world: World) -> None:
    subj = world.ledger.names.grant_subject
    gid = world.issue()
    r = run_under(gid)
    for n in range(2):
        assert world.rule(r.subject, r.execute(n)) == "accepted"
    head1 = world.ledger.store.head_at(r.run, 1)
    refused_unchanged(world, subj, checkpoint_event(ISSUER, r.run, 1, head1, digest(b"s"), "x"),
                      "NotGrantSubject")
    refused_unchanged(world, subj, checkpoint_event(AGENT, r.run, 2, head1, digest(b"s"), "x"),
                      "CheckpointMismatch")
    refused_unchanged(world, subj, checkpoint_event(AGENT, r.run, 3, head1, digest(b"s"), "x"),
                      "CheckpointMismatch")
    cp = checkpoint_event(AGENT, r.run, 1, head1, digest(b"state"), "halfway")
    assert world.event(cp) == "accepted"
    history = world.ledger.store.grant_history([r.run])
    assert [decode_event(p).kind_name for _, _, p in history] == ["checkpoint"]


# -- the book is the stream's -----------------------------------------------------------------


def test_a_restarted_ledger_rebuilds_the_same_book_and_decides_alike(tmp_path: Path) -> None:
    w = World(tmp_path / "l")
    sid = _standing(w)
    assert w.event(trigger_event(TRIGGERS, "t")) == "accepted"
    child = child_grant(sid, terms(budget_uj=700))
    assert w.event(mint_event(AGENT, sid, "t", child)) == "accepted"
    assert w.event(amend_event(ISSUER, sid, 1, NO_AMENDMENT,
                               terms(mint=policy(), budget_uj=600))) == "accepted"
    before = w.state()
    w.close()
    w.open()
    try:
        assert w.state() == before
        assert w.ledger.grants.effective(grant_address(child)).budget_uj == 600
        r = run_under(grant_address(child))
        assert w.rule(r.subject, r.execute(0, uj=601)) == "OverBudget"
    finally:
        w.close()



# -- offline ----------------------------------------------------------------------------------


def _evidence(w: World, run: bytes) -> dict:
    from fleet_ledger.fleet.fold.grant_events import chain_of
    from fleet_ledger.fleet.fold.grant_verify import evidence_events, evidence_json

    grants_id = w.ledger.store.load_run(run).state.grants_id
    chain = chain_of(w.ledger.grants, grants_id)
    return evidence_json(run, evidence_events(w.ledger.store.grant_events(), chain, run),
                         w.ledger.store.segment_times(run))


def test_an_auditor_recomputes_the_grant_decisions_offline(tmp_path: Path) -> None:
    """From the run's record file and its grant evidence alone, every segment is judged
    again under the minted child's grant, its parent's amendment and ledger time; a record
    holding a segment the grant would not allow, or evidence with an event removed, is
    refused by name."""
    from fleet_ledger.fleet.fold.grant_verify import verify_grant_evidence
    from fleet_ledger.fleet.grants.grant_errors import OverBudget, UnknownTrigger

    w = World(tmp_path / "l")
    try:
        sid = _standing(w)
        assert w.event(trigger_event(TRIGGERS, "go")) == "accepted"
        child = child_grant(sid, terms(budget_uj=5_000))
        assert w.event(mint_event(AGENT, sid, "go", child)) == "accepted"
        r = run_under(grant_address(child))
        for n in range(2):
            assert w.rule(r.subject, r.execute(n, uj=1_500), T0 + 2000 + n) == "accepted"
        assert w.event(amend_event(ISSUER, sid, 1, NO_AMENDMENT,
                                   terms(mint=policy(), budget_uj=4_000))) == "accepted"
        head = w.ledger.store.head_at(r.run, 2)
        cp = checkpoint_event(CHILD_AGENT, r.run, 2, head, digest(b"s"), "n")
        assert w.event(cp) == "accepted"
        assert w.rule(r.subject, r.execute(2, uj=1_000), T0 + 3000) == "accepted"
        evidence = _evidence(w, r.run)
        check = verify_grant_evidence(r.builder.to_record(), evidence)
        assert (check.segments, check.energy_uj, check.effective.budget_uj) == (3, 4_000, 4_000)
        assert check.events == 5  # issue, trigger, mint, amendment, checkpoint

        # The ledger refuses the next interval; a record that holds it anyway fails offline.
        over = r.execute(3, uj=1)
        assert w.rule(r.subject, over, T0 + 4000) == "OverBudget"
        evidence["segments"].append({"index": 4, "stream_seq": w.seq, "at_ms": T0 + 4000,
                                     "host": "h1"})
        with pytest.raises(OverBudget):
            verify_grant_evidence(r.builder.to_record(), evidence)
        stripped = {**_evidence(w, r.run)}
        stripped["events"] = [e for e in stripped["events"]
                              if decode_event(base64.b64decode(e["event"])).kind_name
                              != "trigger"]
        with pytest.raises(UnknownTrigger):
            verify_grant_evidence(_record_upto(r, 3), stripped)
    finally:
        w.close()


def _record_upto(r: SealedRun, n: int) -> RecordWire:
    record = r.builder.to_record()
    record.segments = record.segments[:n]
    return record


def test_signatures_checked_beside_the_fold_decide_as_in_line() -> None:
    """Every event of the vector file (valid, refused, in streams), decided with its
    signatures' verdict from :func:`signature_items` (as the seal worker gives it), is
    decided exactly as when the decision checks them itself; a forged event signature or
    grant signature is BadGrantSignature either way."""
    import json

    from nacl.exceptions import BadSignatureError
    from nacl.signing import VerifyKey

    from fleet_ledger.fleet.errors import FleetError
    from fleet_ledger.fleet.fold.grant_events import GrantBook, apply, check_event, signature_items

    def verdict(data: bytes) -> bool | None:
        items = signature_items(data)
        if items is None:
            return None
        try:
            for key, message, signature in items:
                VerifyKey(key).verify(message, signature)
        except (BadSignatureError, ValueError, TypeError):
            return False
        return True

    def outcomes(events: list[tuple[int, bytes]], beside: bool) -> list[str]:
        book, out = GrantBook(), []
        for n, (at_ms, data) in enumerate(events, start=1):
            try:
                d = check_event(book, data, n, at_ms, (), lambda _r, _i: None,
                                verdict(data) if beside else None)
            except FleetError as exc:
                out.append(exc.rule)
                continue
            apply(book, d)
            out.append("accepted")
        return out

    doc = json.loads((Path(__file__).parent.parent / "docs/spec/vectors/standing.json")
                     .read_text())
    valid = {e["hex"] for e in doc["events"]}
    singles = [bytes.fromhex(e["hex"]) for e in doc["events"] + doc["refused_events"]]
    for data in singles:
        if len(data) < 100:  # too short to hold a signature: decided without one
            assert outcomes([(T0, data)], True) == outcomes([(T0, data)], False)
            continue
        forged = [data[:-1] + bytes([data[-1] ^ 1])]
        if len(data) > 200:  # an issued or minted grant: break the grant's signature
            forged.append(data[:-80] + bytes([data[-80] ^ 1]) + data[-79:])
        for case in (data, *forged):
            assert outcomes([(T0, case)], True) == outcomes([(T0, case)], False)
        if data.hex() in valid:  # (a refused vector's flipped bit may repair it)
            assert all(outcomes([(T0, f)], True) == ["BadGrantSignature"] for f in forged)
    for stream in doc["streams"]:
        events = [(s["at_ms"], bytes.fromhex(s["event"])) for s in stream["steps"]
                  if "event" in s]
        assert outcomes(events, True) == outcomes(events, False)
