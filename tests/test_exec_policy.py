"""Exec policies and the exec journal without the kernel: canonical bytes, vectors both
ways, deny beats allow, the CLI's policy commands, the journal file, the seccomp program."""

from __future__ import annotations

import json
import sqlite3
import struct
from pathlib import Path

import gen_vectors_exec as gv
import pytest
from blake3 import blake3
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet_ledger.agents.exec_guard import ExecGuard, reachable_filesystems
from fleet_ledger.agents.exec_journal_store import ExecJournal, read_journal
from fleet_ledger.agents.seccomp_filter import ARCHES, RET_ALLOW, RET_KILL_PROCESS, program
from fleet_ledger.agents.unit_cgroup import cgroup2_mount
from fleet_ledger.cli import cli as fleet_cli
from fleet_ledger.fleet.address import digest, format_address, parse_address
from fleet_ledger.fleet.env.exec_decision import LEASE_HELD, judge
from fleet_ledger.fleet.env.exec_journal import JournalEntry, entry_bytes, fold_roots, journal_root
from fleet_ledger.fleet.env.exec_policy import (
    build_policy,
    decode_policy,
    policy_from_json,
    policy_to_json,
)
from fleet_ledger.fleet.errors import FleetError

FILE = json.loads(gv.PATH.read_text())


def test_checked_in_vectors_equal_what_the_code_builds():
    """Regenerating docs/spec/vectors/exec_policy.json from the code changes nothing."""
    assert gv.PATH.read_text() == gv.render()


@pytest.mark.parametrize("case", FILE["policies"], ids=[c["name"] for c in FILE["policies"]])
def test_policy_vectors_build_decode_and_decide_as_stated(case):
    """Each case's rules build its canonical bytes and address; the bytes and the file form
    decode to the same policy; every decision is the stated one."""
    rules = [(parse_address(b), v, label) for b, v, label in case["input"]["rules"]]
    policy = build_policy(case["input"]["default"], rules)
    expect = case["expect"]
    assert policy.canonical.hex() == expect["canonical"]
    assert format_address(policy.address) == expect["address"]
    assert format_address(blake3(bytes.fromhex(expect["canonical"])).digest()) == \
        expect["address"]
    assert decode_policy(bytes.fromhex(expect["canonical"])) == policy
    assert policy_from_json(expect["file"]) == policy
    assert policy.mode == expect["mode"]
    for d in expect["decisions"]:
        got = policy.decide(parse_address(d["bytes"]))
        assert (got.verdict, got.label, got.policy) == (d["verdict"], d["label"],
                                                         policy.address)


@pytest.mark.parametrize("case", FILE["byte_refusals"],
                         ids=[c["name"] for c in FILE["byte_refusals"]])
def test_policy_byte_vectors_are_refused_by_name(case):
    """Each malformed byte string is refused with its stated rule; the control decodes."""
    raw = bytes.fromhex(case["canonical"])
    if "refused" not in case:
        assert format_address(decode_policy(raw).address) == case["address"]
        return
    with pytest.raises(FleetError) as caught:
        decode_policy(raw)
    assert caught.value.rule == case["refused"]


@pytest.mark.parametrize("case", FILE["file_refusals"],
                         ids=[c["name"] for c in FILE["file_refusals"]])
def test_policy_file_vectors_are_refused_by_name(case):
    """Each broken policy file is refused with its stated rule."""
    with pytest.raises(FleetError) as caught:
        policy_from_json(case["file"])
    assert caught.value.rule == case["refused"]


def test_journal_vectors_chain_as_stated():
    """Each entry's canonical bytes, the root after every entry and the folded root are the
    stated ones, recomputed from the hex bytes with BLAKE3 alone."""
    j = FILE["journal"]
    entries = [JournalEntry(e["seq"], e["time_ns"], e["access"], e["verdict"], e["cause"],
                            parse_address(e["bytes"]), parse_address(e["policy"]), e["label"],
                            e["path"]) for e in j["entries"]]
    assert [entry_bytes(e).hex() for e in entries] == [e["canonical"] for e in j["entries"]]
    root = blake3(b"fleet.execjournal/1").digest()
    assert format_address(root) == j["roots"][0]
    for e, stated in zip(j["entries"], j["roots"][1:], strict=True):
        root = blake3(root + bytes.fromhex(e["canonical"])).digest()
        assert format_address(root) == stated
    assert format_address(journal_root(entries)) == j["roots"][-1]
    folded = blake3(b"fleet.journalroots/1" + parse_address(j["fold"]["replay_root"])
                    + root).digest()
    assert format_address(folded) == j["fold"]["journal_root"]
    assert fold_roots(parse_address(j["fold"]["replay_root"]), root) == folded


_digests = st.binary(min_size=32, max_size=32)
_labels = st.text(st.characters(codec="utf-8", categories=("L", "N")), min_size=1,
                  max_size=20)
_rules = st.lists(st.tuples(_digests, st.sampled_from(["allow", "deny"]), _labels),
                  max_size=12)


@settings(max_examples=150, deadline=None)
@given(default=st.sampled_from(["allow", "deny"]), rules=_rules, data=st.data())
def test_building_is_order_free_and_deny_beats_allow(default, rules, data):
    """Any order of the same rules builds the same bytes; bytes named by any deny rule are
    denied; the canonical bytes decode back to the policy."""
    policy = build_policy(default, rules)
    shuffled = data.draw(st.permutations(rules))
    assert build_policy(default, shuffled).canonical == policy.canonical
    assert decode_policy(policy.canonical) == policy
    assert policy_from_json(policy_to_json(policy)) == policy
    for content, _, _ in rules:
        denied = any(c == content and v == "deny" for c, v, _ in rules)
        assert policy.decide(content).verdict == ("deny" if denied else "allow")


def _fleet(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(fleet_cli, list(args))
    return result.exit_code, result.output


def test_cli_policy_build_show_verify(tmp_path):
    """``fleet exec policy build`` hashes files and folders into a canonical file whose
    address ``show`` and ``verify`` report; a tampered file or another --address fails
    verify with exit 1; a missing or malformed file is a user mistake (exit 2)."""
    tools = tmp_path / "tools"
    tools.mkdir()
    for name, body in (("a", b"#!/bin/sh\necho a\n"), ("b", b"#!/bin/sh\necho b\n")):
        (tools / name).write_bytes(body)
        (tools / name).chmod(0o755)
    (tools / "notes.txt").write_text("not executable")
    evil = tmp_path / "evil"
    evil.write_bytes(b"evil bytes")
    out = tmp_path / "p.json"
    code, text = _fleet("exec", "policy", "build", "--default", "deny", "--allow-dir",
                        str(tools), "--deny", f"{evil}#very evil", "--allow", str(evil),
                        "--out", str(out), "--json")
    assert code == 0, text
    summary = json.loads(text)
    doc = json.loads(out.read_text())
    assert summary["address"] == doc["address"] and summary["mode"] == "allowlist"
    assert (summary["allow"], summary["deny"]) == (2, 1)
    assert {r["label"] for r in doc["rules"]} == {"a", "b", "very evil"}
    assert {r["bytes"] for r in doc["rules"] if r["verdict"] == "deny"} == {
        format_address(digest(b"evil bytes"))}
    code, text = _fleet("exec", "policy", "show", str(out))
    assert code == 0 and doc["address"] in text and "very evil" in text
    code, text = _fleet("exec", "policy", "verify", str(out), "--address", doc["address"])
    assert code == 0 and text.startswith("valid: ")
    code, text = _fleet("exec", "policy", "verify", str(out), "--address",
                        format_address(digest(b"other")))
    assert code == 1 and "not b3:" in text
    tampered = {**doc, "rules": [{**doc["rules"][0], "label": "renamed"}, *doc["rules"][1:]]}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(tampered))
    code, text = _fleet("exec", "policy", "verify", str(bad), "--json")
    assert code == 1 and json.loads(text.splitlines()[0])["rule"] == "PolicyMismatch"
    code, text = _fleet("exec", "policy", "show", str(tmp_path / "missing.json"))
    assert code == 2 and "no such file" in text
    (tmp_path / "junk.json").write_text("{")
    code, text = _fleet("exec", "policy", "show", str(tmp_path / "junk.json"))
    assert code == 2 and "not JSON" in text
    code, text = _fleet("exec", "policy", "build", "--deny", str(tmp_path / "nope"), "--out",
                        str(tmp_path / "x.json"))
    assert code == 2 and "no such file" in text
    # Extending a policy keeps its rules and default; a deny added for allowed bytes wins.
    ext = tmp_path / "ext.json"
    code, text = _fleet("exec", "policy", "build", "--from", str(out), "--deny",
                        str(tools / "a"), "--out", str(ext), "--json")
    assert code == 0
    extended = policy_from_json(json.loads(ext.read_text()))
    assert extended.default == "deny"
    assert extended.decide(digest((tools / "a").read_bytes())).verdict == "deny"


def test_the_journal_file_keeps_intervals_and_shows_tampering(tmp_path):
    """Entries chain per interval; a reopened journal continues numbering; ``fleet exec
    journal`` recomputes each sealed root and exits 1 once a stored entry is altered."""
    path = tmp_path / "exec.db"
    policy = digest(b"policy")
    j = ExecJournal(path, run="b3:" + "A" * 43)
    for name in ("x", "y"):
        j.append(access="exec", verdict="deny", cause="policy", content=digest(name.encode()),
                 policy=policy, label=name, path=f"/u/{name}")
    first = j.seal_interval()
    j.close()
    j = ExecJournal(path)
    assert j.interval == 2
    e = j.append(access="open", verdict="deny", cause="unpinned", content=digest(b"z"),
                 policy=policy, label="z", path="/u/z")
    assert e.seq == 3 and j.root() == journal_root([e])
    j.close()
    j = ExecJournal(path)  # resumed mid-interval: the chain is rebuilt from the fields
    assert j.interval == 2 and j.root() == journal_root([e])
    j.close()
    doc = read_journal(path)
    assert [i["interval"] for i in doc["intervals"]] == [1, 2]
    assert doc["intervals"][0]["root"] == format_address(first[1]) and first[2] == 2
    assert doc["intervals"][0]["root_matches"] is True
    assert doc["intervals"][1]["sealed"] is False
    code, text = _fleet("exec", "journal", str(path))
    assert code == 0 and "/u/x" in text and "(unpinned)" in text
    db = sqlite3.connect(path)
    db.execute("UPDATE entries SET label = 'innocent' WHERE seq = 1")
    db.commit()
    db.close()
    code, text = _fleet("exec", "journal", str(path), "--json")
    assert code == 1 and "do not match" in text


def test_the_first_allow_is_journaled_again_in_each_interval_however_it_is_sealed(tmp_path):
    """In allow-listed mode the guard journals the first allow of each address per
    interval: sealing through the journal itself (as ``fleet exec run`` does) starts the
    next interval with its first allow journaled again, as sealing through the guard does;
    a new policy journals it again too."""
    ok = digest(b"ok")
    policy = build_policy("deny", [(ok, "allow", "ok")])
    j = ExecJournal(tmp_path / "exec.db")
    guard = ExecGuard(policy, marks=[], journal=j)
    with open(tmp_path / "exec.db", "rb") as f:
        def allow() -> None:
            guard._record(judge(guard.policy, "exec", ok, lease=LEASE_HELD, stable=True),
                          f.fileno())
        allow()
        allow()
        assert j.seal_interval()[2] == 1
        allow()
        allow()
        assert j.seal_interval()[2] == 1
        allow()
        guard.seal_interval()
        guard.update_policy(build_policy("deny", [(ok, "allow", "ok2")]))
        allow()
        allow()
    j.close()
    counts = [i["entries"] for i in read_journal(tmp_path / "exec.db")["intervals"]]
    assert counts == [1, 1, 1, 1]


@pytest.mark.parametrize("arch", sorted(ARCHES))
def test_the_seccomp_program_checks_the_architecture_first(arch):
    """The filter loads the architecture, kills on a mismatch, refuses every listed call
    number and ends in its four returns; every jump lands inside the program."""
    a = ARCHES[arch]
    ins = [struct.unpack("=HBBI", i) for i in program(a)]
    assert ins[0] == (0x20, 0, 0, 4) and ins[1] == (0x15, 1, 0, a.audit)
    assert ins[2] == (0x06, 0, 0, RET_KILL_PROCESS)
    compared = {k for code, _, _, k in ins if code == 0x15}
    assert set(a.refused.values()) | {a.clone, a.clone3} <= compared
    assert ins[-4] == (0x06, 0, 0, RET_ALLOW)
    for i, (code, jt, jf, _) in enumerate(ins):
        if code in (0x15, 0x35, 0x45):
            assert i + 1 + max(jt, jf) < len(ins)


def test_reachable_filesystems_leave_out_pseudo_filesystems(tmp_path):
    """One mount point per filesystem that can hold files, pseudo filesystems left out."""
    info = tmp_path / "mountinfo"
    info.write_text(
        "22 1 253:0 / / rw - ext4 /dev/vda rw\n"
        "23 22 0:5 / /proc rw - proc proc rw\n"
        "24 22 0:21 / /dev/shm rw - tmpfs tmpfs rw\n"
        "25 22 253:0 /srv /mnt/bind rw - ext4 /dev/vda rw\n"
        "26 22 0:30 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
        "27 22 0:40 / /mnt/with\\040space rw - tmpfs x rw\n")
    assert reachable_filesystems(str(info)) == ["/", "/dev/shm", "/mnt/with space"]
    # The cgroup2 lookup reads the same table through the same parser (escapes undone).
    assert cgroup2_mount(str(info)) == Path("/sys/fs/cgroup/unified")
    info.write_text("26 22 0:30 / /sys/fs/c\\134g\\040v2 rw - cgroup2 cgroup2 rw\n")
    assert cgroup2_mount(str(info)) == Path("/sys/fs/c\\g v2")


def test_journaled_paths_are_utf8_cut_at_a_character_boundary():
    """A path that is not UTF-8 is journaled with \\xNN escapes; a long one is cut to 1024
    bytes without splitting a character, so every entry encodes."""
    import os

    from fleet_ledger.fleet.env.exec_journal import MAX_PATH, clip_path

    assert clip_path(os.fsdecode(b"/u/\xff\xfe/x")) == "/u/\\xff\\xfe/x"
    long = clip_path("/é" * 600)
    assert len(long.encode()) <= MAX_PATH and long.endswith("/")
    e = JournalEntry(1, 0, "open", "deny", "policy", digest(b"a"), digest(b"p"), "l", long)
    assert entry_bytes(e).endswith(long.encode())


def test_a_record_commits_to_its_exec_journal_intervals(tmp_path):
    """The root of a sealed journal interval, used as an executed segment's journal root,
    shows in ``fleet exec journal --record`` against that segment (with the interval's
    denials); a segment whose root is no interval's is shown as such; a tampered record is
    refused (exit 1) before anything is matched."""
    from nacl.signing import SigningKey

    from fleet_ledger.fleet.record.builder import RecordBuilder
    from fleet_ledger.fleet.record.wire import encode_record

    path = tmp_path / "exec.db"
    j = ExecJournal(path)
    j.append(access="exec", verdict="deny", cause="policy", content=digest(b"nc"),
             policy=digest(b"policy"), label="netcat", path="/u/nc")
    _, root, _ = j.seal_interval()
    j.close()
    b = RecordBuilder(SigningKey(bytes(32)), digest(b"unit"), digest(b"grants"))
    b.execute(uj=10, provenance="measured", meter="rapl", journal_root=root)
    b.execute(uj=10, provenance="measured", meter="rapl", journal_root=digest(b"other"))
    record = tmp_path / "record.json"
    record.write_bytes(encode_record(b.to_record()))
    code, text = _fleet("exec", "journal", str(path), "--record", str(record), "--json")
    assert code == 0, text
    assert json.loads(text)["record"] == [
        {"segment": 1, "journal_root": format_address(root), "interval": 1, "entries": 1,
         "denied": 1},
        {"segment": 2, "journal_root": format_address(digest(b"other")), "interval": None,
         "entries": None, "denied": None}]
    code, text = _fleet("exec", "journal", str(path), "--record", str(record))
    assert "segment 1: journal root" in text and "interval 1 (1 denied)" in text
    doc = json.loads(record.read_text())
    doc["segments"][0]["attestation_object"]["journal_root"] = format_address(digest(b"x"))
    record.write_text(json.dumps(doc))
    code, text = _fleet("exec", "journal", str(path), "--record", str(record))
    assert code == 1 and "invalid" in text
