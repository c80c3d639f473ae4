"""The exec journal: the evidence of a unit's exec-policy decisions, and its root.

Each decision a host's exec guard journals (every denial; in allow-listed mode also the
first allow of each content address per access kind) is one entry::

    entry = seq:u64 || time_ns:u64 || access:u8 || verdict:u8 || cause:u8
            || content[32] || policy[32] || text(label) || path(p)

    access   0x01 exec (an open made by execve/execveat), 0x02 open (any other open)
    verdict  0x01 allow, 0x02 deny
    cause    0x01 the policy decided; 0x02 the bytes could not be pinned (a writer held
             the file open at exec, or they changed while being hashed): denied unverified
    content  BLAKE3 of the file's bytes as read through the event's descriptor
    policy   the address of the policy in force
    label    the deciding rule's label, or "default"
    path(p)  = len:u16 || utf8(p), 0..1024 bytes: where the file was, as the kernel named
               the descriptor (informative: the decision never depends on it)

The entries of one interval chain into its root::

    j_0  = BLAKE3("fleet.execjournal/1")
    j_n  = BLAKE3(j_{n-1} || entry_n)          root = j_n (j_0 for an empty interval)

A runtime that keeps no other journal uses the root as the interval's ``journal_root``; one
that keeps its own replay journal commits to both with :func:`fold_roots`. Either way the
interval's attestation, and with it the run record, commits to every decision.
``docs/spec/exec-policy.md`` §4 is the normative text.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Final

from fleet_ledger.fleet.address import digest, format_address
from fleet_ledger.fleet.env.exec_errors import JournalEntryMismatch
from fleet_ledger.fleet.env.exec_policy import DENY, VERDICTS, code_of
from fleet_ledger.fleet.errors import ValueOutOfRange
from fleet_ledger.fleet.record.kernel import check_digest, check_u64, encode_text

__all__ = [
    "ACCESSES",
    "CAUSES",
    "DEFAULT_LABEL",
    "EXEC",
    "JOURNAL_DOMAIN",
    "MAX_PATH",
    "OPEN",
    "POLICY",
    "ROOTS_DOMAIN",
    "UNPINNED",
    "JournalChain",
    "JournalEntry",
    "check_body",
    "clip_path",
    "entry_bytes",
    "fold_roots",
    "interval_report",
    "journal_root",
]

EXEC: Final = "exec"
OPEN: Final = "open"
POLICY: Final = "policy"
UNPINNED: Final = "unpinned"
ACCESSES: Final = {EXEC: 0x01, OPEN: 0x02}
CAUSES: Final = {POLICY: 0x01, UNPINNED: 0x02}
DEFAULT_LABEL: Final = "default"
JOURNAL_DOMAIN: Final = b"fleet.execjournal/1"
ROOTS_DOMAIN: Final = b"fleet.journalroots/1"
MAX_PATH: Final = 1024
_HEAD = struct.Struct(">QQBBB")
_U16 = struct.Struct(">H")


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One journaled decision (see the module docstring for the fields)."""

    seq: int
    time_ns: int
    access: str
    verdict: str
    cause: str
    content: bytes
    policy: bytes
    label: str
    path: str

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "time_ns": self.time_ns, "access": self.access,
                "verdict": self.verdict, "cause": self.cause,
                "bytes": format_address(self.content), "policy": format_address(self.policy),
                "label": self.label, "path": self.path}


def clip_path(path: str) -> str:
    """``path`` as UTF-8 (bytes that are not UTF-8, escaped as ``\\xNN``), cut to at most
    ``MAX_PATH`` bytes at a character boundary."""
    try:
        raw = path.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raw = path.encode("utf-8", "backslashreplace")
    raw = raw.decode("utf-8", "backslashreplace").encode("utf-8")
    if len(raw) <= MAX_PATH:
        return raw.decode("utf-8")
    return raw[:MAX_PATH].decode("utf-8", "ignore")


def entry_bytes(e: JournalEntry) -> bytes:
    """The canonical bytes of one entry."""
    path = e.path.encode("utf-8")
    if len(path) > MAX_PATH:
        raise ValueOutOfRange(f"a journaled path is {len(path)} bytes, the limit is {MAX_PATH}")
    return (_HEAD.pack(check_u64(e.seq, "seq"), check_u64(e.time_ns, "time_ns"),
                       code_of(ACCESSES, e.access, "access"),
                       code_of(VERDICTS, e.verdict, "verdict"),
                       code_of(CAUSES, e.cause, "cause"))
            + check_digest(e.content, "content") + check_digest(e.policy, "policy")
            + encode_text(e.label, "label") + _U16.pack(len(path)) + path)


def check_body(e: JournalEntry, body: object) -> None:
    """Refuse an entry whose stored ``body`` is not exactly its canonical bytes
    (:class:`~fleet.env.exec_errors.JournalEntryMismatch`): with the interval's root over the
    fields, every stored byte of an entry is checked."""
    if entry_bytes(e) != body:
        raise JournalEntryMismatch("the stored body is not the canonical bytes of the "
                                   "entry's fields")


class JournalChain:
    """The running root of one interval's entries."""

    def __init__(self) -> None:
        self.root = digest(JOURNAL_DOMAIN)
        self.count = 0

    def add(self, entry: JournalEntry) -> bytes:
        """Chain ``entry`` in; returns its canonical bytes."""
        body = entry_bytes(entry)
        self.root = digest(self.root + body)
        self.count += 1
        return body


def journal_root(entries: list[JournalEntry]) -> bytes:
    """The root of an interval's entries, in order."""
    chain = JournalChain()
    for e in entries:
        chain.add(e)
    return chain.root


def interval_report(number: int, entries: list[JournalEntry],
                    stored: tuple[str, int] | None) -> dict[str, Any]:
    """One interval of a journal as JSON: its root recomputed from ``entries`` (in order),
    its counts and decisions, and, for a sealed interval (``stored``: the root address and
    entry count stored when it was sealed), whether both match (``root_matches``)."""
    root = format_address(journal_root(entries))
    item: dict[str, Any] = {
        "interval": number, "sealed": stored is not None, "root": root,
        "entries": len(entries), "denied": sum(1 for e in entries if e.verdict == DENY),
        "decisions": [e.to_json() for e in entries]}
    if stored is not None:
        item["root_matches"] = stored == (root, len(entries))
    return item


def fold_roots(replay_root: bytes, exec_root: bytes) -> bytes:
    """``BLAKE3("fleet.journalroots/1" || replay_root[32] || exec_root[32])``: one journal
    root committing to a runtime's own journal and to the exec journal of one interval."""
    return digest(ROOTS_DOMAIN + check_digest(replay_root, "replay_root")
                  + check_digest(exec_root, "exec_root"))
