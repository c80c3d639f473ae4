"""docs/spec/vectors/standing.json is reproduced by the code, and its inputs behave as
stated: decoded, ordered and met by the core, decided by the pure rules, and folded by a
real ledger (its SQLite store, its own batch fold) at the stated ledger times."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
from blake3 import blake3
from nacl.signing import VerifyKey

from fleet_ledger.fleet.address import digest, format_address, parse_address
from fleet_ledger.fleet.fold.grant_events import (
    amend_event,
    checkpoint_event,
    decode_event,
    event_id,
    event_json,
    issue_event,
    mint_event,
    trigger_event,
)
from fleet_ledger.fleet.grants.grant import (
    check_narrows,
    decode_grant,
    grant_json,
    is_void,
    meet,
    nothing,
    sign_grant,
    terms_bytes,
    terms_from_json,
    terms_json,
)
from fleet_ledger.fleet.record.segment import Claimed, ImageSnapshot

import grant_vectors as gv
from fault_helpers import host_key
from grant_helpers import GRANT_SUBJECT, World, run_under

FILE = json.loads(gv.PATH.read_text(encoding="utf-8"))
GRANTS = {c["name"]: c for c in FILE["grants"]}


def ids(cases: list[dict[str, Any]]) -> list[str]:
    return [c["name"] for c in cases]


def test_checked_in_vectors_equal_what_the_code_builds() -> None:
    """Regenerating the vector file from the code changes nothing."""
    assert gv.PATH.read_text(encoding="utf-8") == gv.render()


def test_the_keys_are_the_stated_seeds_and_the_hosts_the_ledger_tests_enroll() -> None:
    """Each key is Ed25519 of its seed; the host keys are tests/fault_helpers.py's."""
    for k in FILE["keys"].values():
        assert gv.SigningKey(bytes.fromhex(k["seed_hex"])).verify_key.encode().hex() == (
            k["public_hex"])
    assert FILE["host_keys"] == [bytes(host_key(h).verify_key).hex() for h in gv.HOSTS]


# -- grants ----------------------------------------------------------------------------------


def _layout(case: dict[str, Any]) -> bytes:
    """The grant's bytes from its JSON alone, by the spec's layout (not fleet.grants.grant)."""
    t = case["terms"]

    def text(s: str) -> bytes:
        return struct.pack(">H", len(s.encode())) + s.encode()

    def items(xs: list[Any] | None, enc: Any) -> bytes:
        return b"\x00" if xs is None else b"\x01" + struct.pack(">H", len(xs)) + b"".join(
            enc(x) for x in xs)

    m = t["mint"]
    terms = (struct.pack(">QQQH", t["budget_uj"], t["not_before_ms"], t["expires_ms"],
                         len(t["scopes"])) + b"".join(text(s) for s in t["scopes"])
             + items(t["hosts"], text) + items(t["manifests"], parse_address)
             + (b"\x00" if m is None else b"\x01" + struct.pack(
                 ">IIQ", m["max_children"], m["max_per_window"], m["window_ms"])
                + bytes.fromhex(m["trigger_key"])))
    parent = case["parent"]
    keys = FILE["keys"]
    return (b"fleet.grant/1" + bytes.fromhex(keys[case["issuer"]]["public_hex"])
            + bytes.fromhex(keys[case["subject"]]["public_hex"])
            + (b"\x00" if parent is None else b"\x01" + parse_address(GRANTS[parent]["address"]))
            + terms)


@pytest.mark.parametrize("case", FILE["grants"], ids=ids(FILE["grants"]))
def test_each_grant_is_its_terms_and_keys(case: dict[str, Any]) -> None:
    """The code signs the stated terms to the stated bytes, which decode back to them, hash
    to the address and verify under the issuer; the layout alone gives the same bytes."""
    t = terms_from_json(case["terms"])
    assert terms_bytes(t).hex() == case["terms_hex"]
    parent = None if case["parent"] is None else parse_address(GRANTS[case["parent"]]["address"])
    data = sign_grant(gv.KEYS[case["issuer"]], gv.pub(case["subject"]), t, parent)
    assert data.hex() == case["hex"]
    assert terms_json(decode_grant(data).terms) == case["terms"]
    assert grant_json(data)["address"] == case["address"]
    assert format_address(blake3(data).digest()) == case["address"]
    signed = _layout(case)
    assert signed == data[:-64]
    VerifyKey(data[len("fleet.grant/1"):][:32]).verify(signed, data[-64:])
    # The JSON form carries the signature: with the layout, it alone verifies (§2.5).
    as_json = grant_json(data)
    assert as_json["signature_hex"] == case["hex"][-128:]
    VerifyKey(bytes.fromhex(as_json["issuer"])).verify(signed,
                                                       bytes.fromhex(as_json["signature_hex"]))


@pytest.mark.parametrize("case", FILE["refused_grants"], ids=ids(FILE["refused_grants"]))
def test_each_refused_grant_is_refused_by_its_rule(case: dict[str, Any]) -> None:
    """Decoding and verifying the bytes fails with the stated rule."""
    assert gv.grant_outcome(bytes.fromhex(case["hex"])) == case["rule"]


def test_non_canonical_grants_carry_valid_signatures() -> None:
    """Every NonCanonicalGrant vector is signed by its issuer over what it holds, so it is
    the encoding, not the signature, that is refused."""
    cases = [c for c in FILE["refused_grants"] if c["rule"] == "NonCanonicalGrant"]
    assert len(cases) >= 10
    for case in cases:
        data = bytes.fromhex(case["hex"])
        issuer = data[len("fleet.grant/1"):][:32]
        VerifyKey(issuer).verify(data[:-64], data[-64:])


# -- the order and meet ----------------------------------------------------------------------


@pytest.mark.parametrize("case", FILE["order"], ids=ids(FILE["order"]))
def test_each_order_case_narrows_or_names_the_field(case: dict[str, Any]) -> None:
    """check_narrows(child, parent) passes, or raises GrantWidens naming the stated field."""
    child, parent = terms_from_json(case["child"]), terms_from_json(case["parent"])
    assert gv.order_outcome(child, parent) == {"rule": case["rule"], "field": case["field"]}


@pytest.mark.parametrize("case", FILE["meet"], ids=ids(FILE["meet"]))
def test_each_meet_is_stated_and_below_both(case: dict[str, Any]) -> None:
    """meet(a, b) is the stated terms, below both a and b, and void as stated."""
    a, b = terms_from_json(case["a"]), terms_from_json(case["b"])
    m = meet(a, b)
    assert terms_json(m) == case["meet"]
    assert terms_json(meet(b, a)) == case["meet"]
    assert is_void(m) == case["void"]
    check_narrows(m, a)
    check_narrows(m, b)


# -- events ----------------------------------------------------------------------------------


def _rebuild(case: dict[str, Any]) -> bytes:
    """The event from its stated inputs, by the builders."""
    i = case["inputs"]
    key = gv.KEYS[i["signer"]]
    kind = case["name"].split("-")[0]
    if kind == "issue":
        return issue_event(key, bytes.fromhex(GRANTS[i["grant"]]["hex"]))
    if kind == "trigger":
        return trigger_event(key, i["name"])
    if kind == "mint":
        return mint_event(key, parse_address(i["standing"]), i["trigger"],
                          bytes.fromhex(GRANTS[i["child"]]["hex"]))
    if kind == "amend":
        return amend_event(key, parse_address(i["grant"]), i["seq"],
                           parse_address(i["previous"]), terms_from_json(i["terms"]))
    return checkpoint_event(key, parse_address(i["run"]), i["index"], parse_address(i["head"]),
                            parse_address(i["state"]), i["note"])


@pytest.mark.parametrize("case", FILE["events"], ids=ids(FILE["events"]))
def test_each_event_is_its_inputs(case: dict[str, Any]) -> None:
    """The builders turn the inputs into exactly the stated bytes, id, address and JSON."""
    data = _rebuild(case)
    assert data.hex() == case["hex"]
    assert event_id(data) == case["id"] == "gev-" + blake3(data).digest()[:16].hex()
    assert format_address(digest(data)) == case["address"]
    assert event_json(data) == case["json"]
    assert decode_event(data).signer.hex() == FILE["keys"][case["inputs"]["signer"]][
        "public_hex"]


def test_the_second_amendment_names_the_first_by_the_hash_of_its_bytes() -> None:
    """previous = BLAKE3 of the previous amendment's whole event (signature included)."""
    by = {c["name"]: c for c in FILE["events"]}
    first, second = by["amend-first"], by["amend-second-revokes"]
    assert second["inputs"]["previous"] == first["address"]
    assert second["inputs"]["terms"] == terms_json(nothing(terms_from_json(
        first["inputs"]["terms"])))


@pytest.mark.parametrize("case", FILE["refused_events"], ids=ids(FILE["refused_events"]))
def test_each_refused_event_is_refused_by_its_rule(case: dict[str, Any]) -> None:
    """Decoding the event fails with the stated rule."""
    assert gv.event_outcome(bytes.fromhex(case["hex"])) == case["rule"]


# -- streams ---------------------------------------------------------------------------------


def _steps(stream: dict[str, Any]) -> list[tuple[int, bytes | gv.Seg]]:
    return [(s["at_ms"], gv.parse_seg(s["segment"]) if "segment" in s
             else bytes.fromhex(s["event"])) for s in stream["steps"]]


def _runs(stream: dict[str, Any]) -> dict[bytes, tuple[bytes, list[bytes]]]:
    return {parse_address(r["run"]): (parse_address(r["grant"]),
                                      [parse_address(h) for h in r["heads"]])
            for r in stream["runs"]}


@pytest.mark.parametrize("stream", FILE["streams"], ids=ids(FILE["streams"]))
def test_each_stream_is_decided_as_stated_by_the_pure_rules(stream: dict[str, Any]) -> None:
    """decide_event/apply and check_segment over a GrantBook reach every stated decision."""
    assert gv.decide_stream(_steps(stream), _runs(stream)) == [
        s["expect"] for s in stream["steps"]]


def _segment(w: World, stream: str, n: int, seg: gv.Seg, at: int) -> str:
    """Fold the step as one segment of a new run: an interval of the stated energy, or,
    under a manifest, a claim of a warm slot under it drawing that energy."""
    r = run_under(seg.grant, host=seg.host, unit=f"{stream}/{n}")
    if seg.manifest is None:
        data = r.execute(n, uj=seg.energy_after_uj)
    else:
        data = r.add(r.builder.claim(Claimed(
            slot=digest(b"slot%d" % n), snapshot=ImageSnapshot(digest(b"fs%d" % n)),
            manifest=seg.manifest, warm_uj=seg.energy_after_uj - 1, warm_provenance="measured",
            warm_meter="rapl:package-0", idle_uj=1, idle_provenance="estimated",
            idle_meter="estimate:volume@6W/TB")))
    return w.rule(r.subject, data, at)


@pytest.mark.parametrize("fast_path", [True, False], ids=["fast", "reference"])
@pytest.mark.parametrize("stream", FILE["streams"], ids=ids(FILE["streams"]))
def test_each_stream_is_decided_as_stated_by_a_real_ledger(stream: dict[str, Any],
                                                           fast_path: bool,
                                                           tmp_path: Path) -> None:
    """A ledger that requires grants, folding the stream's events on the grant subject and
    each segment as a real sealed segment at the stated ledger time, decides every step as
    stated (checkpoints name runs the file only describes: the pure test decides them)."""
    w = World(tmp_path / "ledger", grants="require", fast_path=fast_path)
    try:
        for n, step in enumerate(stream["steps"]):
            if "segment" in step:
                got = _segment(w, stream["name"], n, gv.parse_seg(step["segment"]),
                               step["at_ms"])
            else:
                data = bytes.fromhex(step["event"])
                if decode_event_kind(data) == "checkpoint":
                    continue
                got = w.event(data, step["at_ms"])
            assert (n, got) == (n, step["expect"]), step["what"]
    finally:
        w.close()


def decode_event_kind(data: bytes) -> str | None:
    try:
        return decode_event(data).kind_name
    except Exception:  # a malformed event: the ledger decides it like any other
        return None


def test_the_streams_cover_every_rule_of_an_event_and_a_segment() -> None:
    """Every grant refusal has a vector (in the streams or the byte cases)."""
    from fleet_ledger.fleet.grants import grant_errors

    named = {n for n in grant_errors.__all__
             if n not in ("GrantError", "GrantEventError", "GrantRefusal")}
    seen = {s["expect"] for st in FILE["streams"] for s in st["steps"]}
    seen |= {c["rule"] for c in FILE["refused_grants"] + FILE["refused_events"]}
    seen |= {c["rule"] for c in FILE["order"] if c["rule"]}
    assert named <= seen, sorted(named - seen)


def test_revoking_a_grant_whose_window_an_amendment_emptied_is_accepted() -> None:
    """nothing(current) stays below current when its expiry is before its not-before (the
    emptied-window stream; before the fix, the revoke was GrantWidens on expires_ms)."""
    t = gv._with(gv.terms(), not_before_ms=gv.T0 + 2000, expires_ms=gv.T0 + 1500)
    check_narrows(nothing(t), t)
    assert is_void(nothing(t))
    stream = {s["name"]: s for s in FILE["streams"]}["emptied-window"]
    assert stream["steps"][-1]["expect"] == "accepted"


def test_grant_subject_is_where_the_ledger_reads_events() -> None:
    """The ledger test feeds events on <fleet>.ctl.grant, the subject the spec names."""
    assert GRANT_SUBJECT == "fleet.ctl.grant"
