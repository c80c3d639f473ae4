"""docs/spec/vectors/runtime_verify.json both ways: the code reproduces the file; the clean
run's mapping recomputed from the spec's text alone matches the record; and `fleet runtime
verify` over the file's record and journal exits 0 on the clean run and 1, naming the
rule, on each tampered one (shredded values reported, not errors)."""

from __future__ import annotations

import json
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest
from blake3 import blake3
from gen_vectors_runtime_verify import PATH, build
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet_ledger.fleet.address import format_address, parse_address

from pipeline_helpers import FLEET_BIN

VECTORS = json.loads(PATH.read_text())


def test_the_code_reproduces_the_runtime_verify_vectors():
    """Generating the vectors from their inputs gives the committed file."""
    assert build() == VECTORS


def _text(s: str) -> bytes:
    raw = s.encode()
    return struct.pack(">I", len(raw)) + raw


def test_the_clean_mapping_recomputed_from_the_spec_text_matches_the_record():
    """A second implementation written from docs/spec/runtime.md (§1 chain, §3 roots and
    accounts) ties each executed segment of the clean record to its interval: the roots
    and accounts it computes are the ones sealed, and each park is at the journal's head."""
    entries, record = VECTORS["journal"]["entries"], VECTORS["record"]
    run, workflow = VECTORS["journal"]["run"], VECTORS["journal"]["workflow"]
    prev = blake3(b"fleet.runtime.journal/1" + _text(run) + _text(workflow)).digest()
    hashes = []
    for seq, kind, call, body, stated in entries:
        prev = blake3(b"fleet.runtime.entry/1" + prev + struct.pack(">Q", seq) + _text(kind)
                      + _text(call) + _text(body)).digest()
        assert format_address(prev) == stated
        hashes.append(prev)
    first = 0
    for seg in record["segments"]:
        if seg["kind"] == "suspended":
            assert parse_address(seg["snapshot"]["transcript"]) == hashes[first - 1]
        if seg["kind"] != "executed":
            continue
        root = parse_address(seg["attestation_object"]["journal_root"])
        end = next(e for e in range(first, len(hashes) + 1) if blake3(
            b"fleet.runtime.interval/1" + struct.pack(">QQ", first, e) + hashes[e - 1]
        ).digest() == root)
        earlier = {c: json.loads(b)["ask"].get("handoff") is True
                   for _s, k, c, b, _h in entries[:first] if k == "dispatch"}
        dispatched: list[str] = []
        resolved: list[str] = []
        for _s, kind, call, _b, _h in entries[first:end]:
            if kind == "dispatch":
                dispatched.append(call)
            elif kind == "resolve" and (call in dispatched or earlier.get(call, True)):
                resolved.append(call)
            elif kind == "resolve":
                dispatched.append(f"{call}/retry")
                resolved.append(f"{call}/retry")
        assert seg["calls"] == {"dispatched": dispatched, "resolved": resolved}
        first = end
    assert first == len(entries)


def _cli(tmp_path: Path, journal: dict[str, Any], record: dict[str, Any]
         ) -> subprocess.CompletedProcess[str]:
    (tmp_path / "j.json").write_text(json.dumps(journal))
    (tmp_path / "r.json").write_text(json.dumps(record))
    return subprocess.run([FLEET_BIN, "runtime", "verify", VECTORS["run"], "--record",
                           str(tmp_path / "r.json"), "--journal", str(tmp_path / "j.json"),
                           "--json"], capture_output=True, text=True, timeout=60,
                          check=False, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("case", VECTORS["cases"], ids=lambda c: c["name"])
def test_fleet_runtime_verify_gives_each_vector_its_verdict(case: dict[str, Any],
                                                            tmp_path: Path):
    """Each case's journal and record through the command: exit 0 and the report for a
    matching pair (a shredded value listed as shredded), exit 1 naming the rule (and the
    segment) for each tampered one, with one readable line and no traceback."""
    out = _cli(tmp_path, case.get("journal", VECTORS["journal"]),
               case.get("record", VECTORS["record"]))
    got = json.loads(out.stdout.strip().splitlines()[-1])
    expect = case["expect"]
    if "rule" in expect:
        assert out.returncode == 1, out.stderr
        assert {k: got[k] for k in expect} == expect
        (line,) = out.stderr.strip().splitlines()
        assert expect["rule"] in line and "Traceback" not in out.stderr
    else:
        assert out.returncode == 0, out.stderr
        assert got == expect


def test_a_journal_file_that_is_not_one_and_a_missing_journal_are_named(tmp_path: Path):
    """A file that is not a journal export exits 1 with MalformedJournal; no journal at
    all (neither --journal nor --data) is the user's mistake, exit 2; both one line."""
    (tmp_path / "r.json").write_text(json.dumps(VECTORS["record"]))
    for body, rule in (("[1, 2]", "MalformedJournal"), ("{not json", "MalformedJournal"),
                       (json.dumps({**VECTORS["journal"], "keys": {"x": ["%%", "AA=="]}}),
                        "MalformedJournal")):
        (tmp_path / "j.json").write_text(body)
        out = subprocess.run([FLEET_BIN, "runtime", "verify", VECTORS["run"], "--record",
                              str(tmp_path / "r.json"), "--journal", str(tmp_path / "j.json")],
                             capture_output=True, text=True, timeout=60, check=False)
        assert out.returncode == 1 and rule in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1
    out = subprocess.run([FLEET_BIN, "runtime", "verify", VECTORS["run"], "--record",
                          str(tmp_path / "r.json")], capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 2 and "--journal" in out.stderr


def test_without_the_journal_check_every_tampered_journal_passes():
    """The attack without the defence: for each case that tampers only the journal, the
    record alone still verifies, and a journal edited and re-hashed still passes the
    chain-only check `fleet runtime journal` makes; only the check against the record
    refuses them."""
    from fleet_ledger.agents.runtime.journal import Entry, verify_chain
    from fleet_ledger.fleet.record.verify import verify_record
    from fleet_ledger.fleet.record.wire import decode_record
    from fleet_ledger.fleet.runtime.runtime_verify import parse_journal, verify_runtime

    record = decode_record(json.dumps(VECTORS["record"]).encode())
    assert verify_record(record).sealed
    tampered = [c for c in VECTORS["cases"] if "journal" in c and "rule" in c["expect"]]
    assert {c["expect"]["rule"] for c in tampered} >= {
        "JournalTampered", "JournalRootMismatch", "JournalRunMismatch", "JournalBeyondRecord"}
    for case in tampered:
        journal = parse_journal(json.dumps(case["journal"]).encode())
        with pytest.raises(Exception) as refused:
            verify_runtime(record, journal)
        assert type(refused.value).__name__ == case["expect"]["rule"]
    rehashed = next(c for c in VECTORS["cases"] if c["name"] == "value-edited-rehashed")
    j = rehashed["journal"]
    entries = [Entry(s, k, c, b, parse_address(h)) for s, k, c, b, h in j["entries"]]
    assert verify_chain(j["run"], j["workflow"], entries) == entries[-1].hash


@settings(max_examples=40, deadline=None, derandomize=True)
@given(entry=st.integers(min_value=0, max_value=5), at=st.integers(min_value=0),
       char=st.characters(min_codepoint=0x21, max_codepoint=0x7e))
def test_any_one_character_changed_and_rehashed_is_refused(entry: int, at: int, char: str):
    """Changing one character of any entry's kind, call or body and re-hashing the whole
    chain (a forger with the chain's rules but not the host's key) never verifies against
    the record: the first interval holding the entry no longer has its root."""
    from fleet_ledger.fleet.record.wire import decode_record
    from fleet_ledger.fleet.runtime.runtime_journal import chain_hashes
    from fleet_ledger.fleet.runtime.runtime_verify import JournalFile, parse_journal, verify_runtime
    from fleet_ledger.fleet.runtime.runtime_verify_errors import JournalRootMismatch

    clean = parse_journal(json.dumps(VECTORS["journal"]).encode())
    rows = [list(e[:4]) for e in clean.entries]
    field = 1 + at % 3
    text = rows[entry][field]
    pos = at % (len(text) + 1)
    changed = text[:pos] + char + text[pos + 1:]
    if changed == text:
        return
    rows[entry][field] = changed
    hashes = list(chain_hashes(clean.run, clean.workflow, [tuple(r) for r in rows]))  # type: ignore[misc]
    forged = JournalFile(clean.run, clean.name, clean.workflow,
                         tuple((*r, h) for r, h in zip(rows, hashes, strict=True)),  # type: ignore[misc]
                         clean.blobs, clean.keys)
    record = decode_record(json.dumps(VECTORS["record"]).encode())
    with pytest.raises(JournalRootMismatch):
        verify_runtime(record, forged)
