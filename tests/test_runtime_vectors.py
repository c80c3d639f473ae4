"""docs/spec/vectors/runtime.json both ways: the code reproduces the file, and the file's
inputs behave as the spec says (a changed body breaks its hash and every later one)."""

from __future__ import annotations

import json

from gen_vectors_runtime import PATH, build

from fleet_ledger.fleet.address import format_address, parse_address
from fleet_ledger.fleet.record.segment import CallAccount
from fleet_ledger.fleet.record.wait_proof import WaitTracker, verdict_json
from fleet_ledger.fleet.runtime.runtime_journal import (
    account_marks,
    blob_address,
    entry_hash,
    genesis,
    interval_account,
    interval_root,
)


def test_the_code_reproduces_the_runtime_vectors():
    """Generating the vectors from their inputs gives the committed file."""
    assert json.loads(PATH.read_text()) == build()


def test_the_vector_entries_chain_from_the_genesis_and_a_changed_body_breaks_it():
    """Recomputing the chain from the file's text alone gives its hashes; one changed byte
    in a body changes that entry's hash and every later one."""
    data = json.loads(PATH.read_text())
    prev = parse_address(data["genesis"])
    assert prev == genesis(data["run"], data["workflow"])
    for e in data["entries"]:
        prev = entry_hash(prev, e["seq"], e["kind"], e["call"], e["body"])
        assert format_address(prev) == e["hash"]
    first = data["entries"][1]
    changed = entry_hash(parse_address(data["entries"][0]["hash"]), 1, first["kind"],
                         first["call"], first["body"].replace("classify", "classifY"))
    assert format_address(changed) != first["hash"]
    for blob in data["blobs"]:
        salt = bytes.fromhex(blob["salt"])
        assert format_address(blob_address(salt, blob["value_json"].encode())) == blob["address"]
        assert format_address(blob_address(bytes(32), blob["value_json"].encode())) != \
            blob["address"]


def _verdict(intervals: list[dict], rows: list[tuple[str, str, str]],  # type: ignore[type-arg]
             account: object) -> dict[str, object]:
    tracker = WaitTracker()
    for i in intervals:
        tracker.add(i["segment"], CallAccount(*account(rows, i["first"], i["end"])))  # type: ignore[operator]
    return verdict_json(tracker.verdict())


def _resolved_only(rows: list[tuple[str, str, str]], first: int, end: int
                   ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The accounting before the retry rule: a resolve counts only as resolved."""
    part = rows[first:end]
    return (tuple(c for k, c, _b in part if k == "dispatch"),
            tuple(c for k, c, _b in part if k == "resolve"))


def _intervals_as_written(case: dict) -> list[tuple[str, str, str]]:  # type: ignore[type-arg]
    """The case's entry rows, after checking each interval's account and root from them."""
    rows = [(e["kind"], e["call"], e["body"]) for e in case["entries"]]
    for i in case["intervals"]:
        dispatched, resolved = interval_account(rows, i["first"], i["end"])
        assert (list(dispatched), list(resolved)) == (i["dispatched"], i["resolved"])
        head = parse_address(case["entries"][i["end"] - 1]["hash"])
        assert format_address(interval_root(i["first"], i["end"], head)) == i["root"]
    return rows


def test_the_retried_step_vector_is_blocked_at_the_retrying_interval():
    """From the file's entries alone, each interval's account and root and the run's verdict
    (Blocked at the retrying segment) come out as written; the handed-off call resolved
    after the park stays outside the blocked set."""
    case = json.loads(PATH.read_text())["retried"]
    rows = _intervals_as_written(case)
    assert _verdict(case["intervals"], rows, interval_account) == case["verdict"] == {
        "verdict": "Blocked", "segment": 2}
    blocked = set(case["intervals"][1]["dispatched"]) & set(case["intervals"][1]["resolved"])
    assert blocked == {"c0/retry"}


def test_without_the_retry_rule_the_retried_step_reads_non_blocking():
    """The attack the rule closes: counting the retrying interval's resolve only as resolved
    turns the same journal into a NonBlocking run, though that interval ran and awaited the
    step itself."""
    case = json.loads(PATH.read_text())["retried"]
    rows = [(e["kind"], e["call"], e["body"]) for e in case["entries"]]
    assert _verdict(case["intervals"], rows, _resolved_only) == {"verdict": "NonBlocking"}
    # Marking c0 as handed off (it was not) would make its late resolve honest again.
    forged = [(k, c, b.replace('"name":"classify"', '"handoff":true,"name":"classify"'))
              for k, c, b in rows]
    assert _verdict(case["intervals"], forged, interval_account) == {"verdict": "NonBlocking"}


def test_a_handoff_dispatched_in_a_lost_interval_resolves_as_itself():
    """A handed-off call whose dispatch was in a lost interval is not retried by the
    runtime: its later resolve is listed as resolved only, so the run stays NonBlocking."""
    rows = [("start", "", "{}"),
            ("dispatch", "c0", '{"ask":{"args":"x","handoff":true,"name":"build"}}'),
            ("resolve", "c0", '{"id":"r","value":"v"}'), ("end", "c1", '{"ask":{}}')]
    lost = interval_account(rows, 0, 2)
    later = interval_account(rows, 2, 4)
    assert lost == (("c0",), ()) and later == ((), ("c0",))
    tracker = WaitTracker()
    tracker.add(1, CallAccount(*lost))
    tracker.add(4, CallAccount(*later))
    assert verdict_json(tracker.verdict()) == {"verdict": "NonBlocking"}


def test_the_effects_vector_marks_the_unkeyed_step_and_its_possible_duplicate():
    """From the file's entries alone: the lost interval shows ``c0!unkeyed`` outstanding,
    the next ``c0!unkeyed!dup/retry`` (and the keyed, timed-out-then-answered c1 unmarked);
    the marks read back as (no key, duplicate); without the dispatch's effect class the
    same journal carries no marks (a journal from before effect classes is unchanged)."""
    case = json.loads(PATH.read_text())["effects"]
    rows = _intervals_as_written(case)
    assert case["intervals"][1]["resolved"] == ["c0!unkeyed!dup/retry", "c1"]
    assert _verdict(case["intervals"], rows, interval_account) == case["verdict"]
    assert [account_marks(c) for c in case["intervals"][1]["resolved"]] == [
        (True, True), (False, False)]
    plain = [(k, c, b.replace('"effect":"effectful",', "")) for k, c, b in rows]
    assert interval_account(plain, 2, 8) == (("c0/retry", "c1"), ("c0/retry", "c1"))
