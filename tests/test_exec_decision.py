"""The exec guard's decisions as pure functions (fleet.env.exec_decision, fleet.env.exec_journal):
the verdict for bytes under a policy and lease state, what the journal keeps, its entries'
bytes and the stored-body check. No root, no fanotify, no files."""

from __future__ import annotations

import pytest

from fleet_ledger.fleet.address import digest, format_address
from fleet_ledger.fleet.env.exec_decision import (
    JOURNAL_ALWAYS,
    JOURNAL_FIRST,
    JOURNAL_NEVER,
    LEASE_HELD,
    LEASE_NONE,
    LEASE_UNSUPPORTED,
    LEASE_WRITER,
    JournalBook,
    Verdict,
    is_exec_syscall,
    judge,
)
from fleet_ledger.fleet.env.exec_errors import JournalEntryMismatch
from fleet_ledger.fleet.env.exec_journal import (
    MAX_PATH,
    check_body,
    entry_bytes,
    interval_report,
    journal_root,
)
from fleet_ledger.fleet.env.exec_policy import ExecPolicy, build_policy
from fleet_ledger.fleet.errors import ValueOutOfRange

EVIL, TOOL, OTHER = digest(b"evil"), digest(b"tool"), digest(b"other")
DENYLIST = build_policy("allow", [(EVIL, "deny", "evil")])
ALLOWLIST = build_policy("deny", [(TOOL, "allow", "tool")])


def _judge(policy: ExecPolicy, access: str, content: bytes) -> Verdict:
    """A verdict for bytes that were pinned (an exec's leased, an open's unchanged)."""
    lease = LEASE_HELD if access == "exec" else LEASE_NONE
    return judge(policy, access, content, lease=lease, stable=True)


@pytest.mark.parametrize(("policy", "content", "pinned", "allow", "cause", "label", "journal"), [
    (DENYLIST, EVIL, True, False, "policy", "evil", JOURNAL_ALWAYS),
    (DENYLIST, OTHER, True, True, "policy", "default", JOURNAL_NEVER),
    (DENYLIST, OTHER, False, False, "unpinned", "default", JOURNAL_ALWAYS),
    (ALLOWLIST, TOOL, True, True, "policy", "tool", JOURNAL_FIRST),
    (ALLOWLIST, OTHER, True, False, "policy", "default", JOURNAL_ALWAYS),
    (ALLOWLIST, TOOL, False, False, "unpinned", "tool", JOURNAL_ALWAYS),
], ids=["denied", "deny-listed allow", "deny-listed unpinned", "allow-listed allow",
        "unlisted", "allow-listed unpinned"])
def test_judge_gives_the_policys_verdict_unless_the_bytes_were_not_pinned(
        policy, content, pinned, allow, cause, label, journal):
    """The policy decides pinned bytes; unpinned bytes (a writer held the exec's file, or
    the bytes changed while hashed) are denied whatever it says, keeping the deciding
    rule's label; denials are always journaled, allow-listed allows first per kind,
    deny-listed allows never."""
    if pinned:
        ways = [("exec", LEASE_HELD, True), ("exec", LEASE_UNSUPPORTED, True),
                ("open", LEASE_NONE, True)]
    else:
        ways = [("exec", LEASE_WRITER, True), ("exec", LEASE_HELD, False),
                ("exec", LEASE_UNSUPPORTED, False), ("open", LEASE_NONE, False)]
    for access, lease, stable in ways:
        v = judge(policy, access, content, lease=lease, stable=stable)
        assert (v.access, v.allow, v.cause, v.label, v.journal) == (
            access, allow, cause, label, journal), (access, lease, stable)
        assert v.content == content and v.policy == policy.address
        assert v.verdict == ("allow" if allow else "deny")


def test_judge_refuses_an_unknown_access_or_lease_state():
    """An access that is neither exec nor open, or an unknown lease state, is a named error,
    not a verdict."""
    with pytest.raises(ValueOutOfRange):
        _judge(DENYLIST, "read", EVIL)
    with pytest.raises(ValueOutOfRange):
        judge(DENYLIST, "exec", EVIL, lease="maybe", stable=True)


def test_exec_syscalls_are_execve_and_execveat():
    """An open inside execve or execveat is an exec's, per architecture; others are not."""
    assert is_exec_syscall(b"59 0x7ffd 0x1 0x2", "x86_64")
    assert is_exec_syscall(b"322 0x3 0x0", "x86_64")
    assert is_exec_syscall(b"221 0x1", "aarch64") and is_exec_syscall(b"281 0x1", "aarch64")
    assert not is_exec_syscall(b"257 0xffffff9c 0x1", "x86_64")  # openat
    assert not is_exec_syscall(b"59 0x1", "aarch64")
    assert not is_exec_syscall(b"59 0x1", "riscv64") and not is_exec_syscall(b"", "x86_64")


def test_the_book_journals_denials_always_and_each_first_allow_once_per_interval():
    """Denials are journaled each time; an allow-listed allow once per (content, access,
    verdict, policy) and interval, again after a seal or under another policy; deny-listed
    allows never; seq runs on across intervals."""
    book = JournalBook()
    other_policy = build_policy("deny", [(TOOL, "allow", "tool2")])
    verdicts = [_judge(ALLOWLIST, "exec", TOOL), _judge(ALLOWLIST, "exec", TOOL),
                _judge(ALLOWLIST, "open", TOOL), _judge(ALLOWLIST, "exec", OTHER),
                _judge(ALLOWLIST, "exec", OTHER), _judge(DENYLIST, "exec", OTHER),
                _judge(other_policy, "exec", TOOL)]
    admitted = [book.admit(v, 1000 + i, f"/p/{i}") for i, v in enumerate(verdicts)]
    assert [a is not None for a in admitted] == [True, False, True, True, True, False, True]
    entries = [a[0] for a in admitted if a is not None]
    assert [e.seq for e in entries] == [1, 2, 3, 4, 5]
    assert [a[1] for a in admitted if a is not None] == [entry_bytes(e) for e in entries]
    assert book.root == journal_root(entries)
    assert book.seal() == (1, journal_root(entries), 5) and book.interval == 2
    assert book.wants(verdicts[0]) and book.root == journal_root([])
    got = book.admit(verdicts[0], 2000, "/p/again")
    assert got is not None and got[0].seq == 6 and got[0].label == "tool"


def test_a_book_resumed_mid_interval_continues_the_chain_and_numbering():
    """A book given the entries already stored for its interval has their root and
    numbers the next entry after the stored seq."""
    first = JournalBook()
    a = first.admit(_judge(DENYLIST, "exec", EVIL), 1, "/x")
    assert a is not None
    again = JournalBook(seq=1, interval=1, entries=[a[0]])
    b = again.admit(_judge(DENYLIST, "open", EVIL), 2, "/y")
    assert b is not None and b[0].seq == 2
    assert again.root == journal_root([a[0], b[0]])


def test_a_malformed_verdict_is_refused_and_takes_no_number():
    """A verdict whose fields cannot be encoded (a label out of bounds) is refused before
    it is numbered or counted as a first allow."""
    book = JournalBook()
    bad = Verdict("exec", True, "policy", TOOL, ALLOWLIST.address, "", JOURNAL_FIRST)
    with pytest.raises(ValueOutOfRange):
        book.admit(bad, 1, "/x")
    assert book.seq == 0 and book.wants(bad) and book.root == journal_root([])


def test_paths_are_clipped_when_admitted():
    """The entry's path is cut to its limit, so any path the kernel names can be journaled."""
    got = JournalBook().admit(_judge(DENYLIST, "exec", EVIL), 1, "/é" * 600)
    assert got is not None and len(got[0].path.encode()) <= MAX_PATH


def test_check_body_accepts_exactly_the_canonical_bytes():
    """A stored body equal to the entry's canonical bytes passes; any other byte string, a
    flipped byte or a truncation, is JournalEntryMismatch."""
    got = JournalBook().admit(_judge(DENYLIST, "exec", EVIL), 1, "/x")
    assert got is not None
    entry, body = got
    check_body(entry, body)
    for edited in (body[:-1], body[:10] + bytes([body[10] ^ 1]) + body[11:], body + b"\0",
                   body.decode("latin-1")):
        with pytest.raises(JournalEntryMismatch):
            check_body(entry, edited)


def test_interval_report_recomputes_the_root_and_compares_root_and_count():
    """A sealed interval matches only if both its stored root and count are the ones its
    entries give; an open one carries no comparison."""
    book = JournalBook()
    entries = []
    for content in (EVIL, OTHER):
        got = book.admit(_judge(ALLOWLIST, "exec", content), 1, "/x")
        assert got is not None
        entries.append(got[0])
    root = format_address(journal_root(entries))
    sealed = interval_report(1, entries, (root, 2))
    assert sealed["root_matches"] is True and sealed["denied"] == 2 and sealed["sealed"]
    assert sealed["decisions"] == [e.to_json() for e in entries]
    assert interval_report(1, entries, (root, 1))["root_matches"] is False
    assert interval_report(1, entries[:1], (root, 2))["root_matches"] is False
    assert "root_matches" not in interval_report(2, entries, None)
