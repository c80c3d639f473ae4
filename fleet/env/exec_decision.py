"""The exec guard's decisions, as functions of values.

The guard (``agents/exec_guard.py``) is a shell: it reads a fanotify event, finds out
whether the opening thread is inside an exec, hashes the file through the event's
descriptor and tries to pin it with a lease. What it then answers, and what of that the
exec journal keeps, is decided here, once:

* :func:`judge`: the verdict for bytes under a policy, given how an exec's file was held
  (its lease) and whether the bytes held still while hashed: the policy's verdict, except
  that bytes that could not be pinned (a writer held the file open at the exec, or they
  changed while hashed) are denied unverified (cause ``unpinned``); a filesystem without
  leases is judged without one. Its :class:`Verdict` says how it is journaled:
  a denial always; in allow-listed mode (default ``deny``) an allow the first time its
  (content, access, verdict, policy) is seen in an interval; in deny-listed mode an
  allow never.
* :class:`JournalBook`: one journal's running state (the next ``seq``, the interval, its
  chain and the first allows it holds): which verdicts it admits, each admitted one's
  entry and canonical bytes, and the interval's root when sealed. The store
  (``agents/exec_journal_store.py``) adds the lock, the clock and the file.
* :func:`is_exec_syscall`: which system calls make an open an exec's.

``docs/spec/exec-policy.md`` §4 is the normative text for what is journaled.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from fleet_ledger.fleet.env.exec_journal import (
    ACCESSES,
    DEFAULT_LABEL,
    EXEC,
    OPEN,
    POLICY,
    UNPINNED,
    JournalChain,
    JournalEntry,
    clip_path,
)
from fleet_ledger.fleet.env.exec_policy import ALLOW, DENY, ExecPolicy
from fleet_ledger.fleet.errors import ValueOutOfRange

__all__ = [
    "EXEC",
    "EXEC_SYSCALLS",
    "JOURNAL_ALWAYS",
    "JOURNAL_FIRST",
    "JOURNAL_NEVER",
    "LEASES",
    "LEASE_HELD",
    "LEASE_NONE",
    "LEASE_UNSUPPORTED",
    "LEASE_WRITER",
    "OPEN",
    "UNPINNED",
    "JournalBook",
    "Verdict",
    "is_exec_syscall",
    "judge",
]

LEASE_HELD: Final = "held"  # an exec's file leased: writers wait until the exec denies them
LEASE_WRITER: Final = "writer"  # an exec's file someone holds open for writing: not leasable
LEASE_UNSUPPORTED: Final = "unsupported"  # an exec's file on a filesystem without leases
LEASE_NONE: Final = "none"  # not an exec: no lease is taken
LEASES: Final = (LEASE_HELD, LEASE_WRITER, LEASE_UNSUPPORTED, LEASE_NONE)
JOURNAL_ALWAYS: Final = "always"
JOURNAL_FIRST: Final = "first"  # the first of its kind in an interval
JOURNAL_NEVER: Final = "never"

# execve and execveat, as /proc/TID/syscall numbers them: an open made inside one is the
# exec's (the program's, its loader's or a script's interpreter's).
EXEC_SYSCALLS: Final = {"x86_64": (b"59", b"322"), "aarch64": (b"221", b"281")}


@dataclass(frozen=True, slots=True)
class Verdict:
    """The answer to one event, and how it is journaled."""

    access: str
    allow: bool
    cause: str
    content: bytes
    policy: bytes
    label: str
    journal: str

    @property
    def verdict(self) -> str:
        return ALLOW if self.allow else DENY

    def kind(self) -> tuple[bytes, str, str, bytes]:
        """What makes two verdicts the same for :data:`JOURNAL_FIRST`."""
        return (self.content, self.access, self.verdict, self.policy)


def judge(policy: ExecPolicy, access: str, content: bytes, *, lease: str,
          stable: bool) -> Verdict:
    """The verdict for an ``access`` (``exec`` or ``open``) of the bytes whose BLAKE3 is
    ``content`` under ``policy``; ``lease``: how the file was held from before it was
    hashed (one of :data:`LEASES`); ``stable``: the bytes did not change while hashed."""
    if access not in ACCESSES:
        raise ValueOutOfRange(f"access is {access!r}, not one of {sorted(ACCESSES)}")
    if lease not in LEASES:
        raise ValueOutOfRange(f"lease is {lease!r}, not one of {list(LEASES)}")
    pinned = stable and lease != LEASE_WRITER
    decision = policy.decide(content)
    allow = decision.allowed and pinned
    if not allow:
        journal = JOURNAL_ALWAYS
    elif policy.default == DENY:
        journal = JOURNAL_FIRST
    else:
        journal = JOURNAL_NEVER
    return Verdict(access, allow, POLICY if pinned else UNPINNED, content, policy.address,
                   decision.label or DEFAULT_LABEL, journal)


def is_exec_syscall(syscall: bytes, machine: str) -> bool:
    """Whether a thread whose ``/proc/TID/syscall`` reads ``syscall`` is inside an exec on
    a ``machine`` (``os.uname().machine``); an unknown machine has none."""
    return syscall.split(b" ", 1)[0] in EXEC_SYSCALLS.get(machine, ())


class JournalBook:
    """The running state of one exec journal: entries are numbered from ``seq + 1``, the
    current interval is ``interval``, and ``entries`` are those it already holds (resuming
    a journal mid-interval)."""

    def __init__(self, seq: int = 0, interval: int = 1,
                 entries: Iterable[JournalEntry] = ()) -> None:
        self.seq = seq
        self.interval = interval
        self._chain = JournalChain()
        for e in entries:
            self._chain.add(e)
        self._first: set[tuple[bytes, str, str, bytes]] = set()

    @property
    def root(self) -> bytes:
        """The root of the current interval's entries so far."""
        return self._chain.root

    def wants(self, v: Verdict) -> bool:
        """Whether :meth:`admit` would journal ``v`` now."""
        if v.journal == JOURNAL_FIRST:
            return v.kind() not in self._first
        return v.journal == JOURNAL_ALWAYS

    def admit(self, v: Verdict, time_ns: int, path: str) -> tuple[JournalEntry, bytes] | None:
        """Journal ``v`` if it is to be (``None`` if not): its entry, numbered and chained
        into the current interval, and the entry's canonical bytes."""
        if not self.wants(v):
            return None
        entry = JournalEntry(self.seq + 1, time_ns, v.access, v.verdict, v.cause, v.content,
                             v.policy, v.label, clip_path(path))
        body = self._chain.add(entry)  # refuses a malformed entry before it counts
        self.seq += 1
        if v.journal == JOURNAL_FIRST:
            self._first.add(v.kind())
        return entry, body

    def seal(self) -> tuple[int, bytes, int]:
        """End the current interval: (its number, root, entry count); a new one begins, in
        which every first allow is journaled again."""
        sealed = (self.interval, self._chain.root, self._chain.count)
        self.interval += 1
        self._chain = JournalChain()
        self._first.clear()
        return sealed
