"""Canonical bytes of the runtime's journal (docs/spec/runtime.md).

A journal is a hash chain of entries. Each entry hash commits to the previous hash, its
position, its kind, its call id and its canonical JSON body; values (step results, signal
data, inputs) are never in a body, only their salted blob addresses, so deleting a blob's
key (crypto-shred) leaves every hash valid and a short value unguessable.

    genesis   = BLAKE3("fleet.runtime.journal/1" || text(run) || text(workflow))
    entry[n]  = BLAKE3("fleet.runtime.entry/1" || entry[n-1] || u64(n) || text(kind)
                       || text(call) || text(body))            entry[-1] = genesis
    blob      = BLAKE3("fleet.runtime.blob/1" || salt32 || value)
    args      = BLAKE3("fleet.runtime.args/1" || canon([args, kwargs]))
    interval  = BLAKE3("fleet.runtime.interval/1" || u64(first) || u64(end) || head)
    projected = BLAKE3("fleet.runtime.projection/1" || text(name) || canon(view))
    unit id   = BLAKE3("fleet.runtime.unit/1" || text(name))       (run_ids: the record's
    grants id = BLAKE3("fleet.runtime.grants/1" || text(workflow))  identity of a run)
    manifest  = BLAKE3("fleet.runtime.manifest/1" || text(workflow))
    signal    = BLAKE3("fleet.runtime.signal/1" || text(run) || text(id) || text(name)
                       || canon(data))        (what one signal id was first sent with)

An interval's call account (:func:`interval_account`) is read off its entries: its
``dispatch`` entries are dispatched, its ``resolve`` entries resolved, and a step whose
``dispatch`` lies in an earlier interval but whose result this interval produced (a retry
after a lost interval) is dispatched and resolved here as the attempt ``CALL/retry``.

``text(s)`` is u32 big-endian length || UTF-8; ``canon`` is JSON with sorted keys, no
spaces, UTF-8 (``ensure_ascii`` off).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from nacl.exceptions import CryptoError
from nacl.secret import SecretBox

from fleet_ledger.fleet.address import digest, format_address
from fleet_ledger.fleet.runtime.runtime_errors import JournalTampered

__all__ = [
    "ATTEMPT",
    "COMMANDS",
    "CONTINUE",
    "DISPATCH",
    "DUPLICATE",
    "EFFECTS",
    "END",
    "FIRED",
    "KINDS",
    "NOW",
    "PATCH",
    "RANDOM",
    "RESOLUTIONS",
    "RESOLVE",
    "RETRY",
    "SIGNAL",
    "START",
    "TIMEOUT",
    "TIMER",
    "UNKEYED",
    "WAIT",
    "account_marks",
    "args_hash",
    "blob_address",
    "canon",
    "chain_hashes",
    "entry_hash",
    "genesis",
    "handed_off",
    "interval_account",
    "interval_root",
    "open_blob",
    "projection_hash",
    "run_ids",
    "runtime_manifest",
    "signal_digest",
    "text",
    "value_addresses",
]

# The entry kinds, each named once here. Commands (issued by workflow code, matched in
# order on replay) and resolutions (results, matched by call id); a run's journal opens
# with ``start``.
START = "start"
DISPATCH, NOW, RANDOM, WAIT, TIMER, PATCH, END = (
    "dispatch", "now", "random", "wait", "timer", "patch", "end")
RESOLVE, SIGNAL, TIMEOUT, FIRED = "resolve", "signal", "timeout", "fired"
# A failed attempt of a step (neither command nor resolution: replay skips it; it carries
# the retry account: which attempt, its outcome, the backoff before the next).
ATTEMPT = "attempt"
# ``continue`` ends an epoch: the workflow function is entered again with the value it
# carries as its input, and a resume may start replaying there (ctx.continue_as_new).
CONTINUE = "continue"
COMMANDS = frozenset({DISPATCH, NOW, RANDOM, WAIT, TIMER, PATCH, END, CONTINUE})
RESOLUTIONS = frozenset({RESOLVE, SIGNAL, TIMEOUT, FIRED})
KINDS = frozenset({START, ATTEMPT}) | COMMANDS | RESOLUTIONS
# The account id of a step re-run in a later interval than the one that dispatched it.
RETRY = "/retry"
# Effect classes a step declares (seed 004 §8), and the marks its account ids carry on the
# record: an effectful step without an idempotency key, and one of those run again after
# an attempt whose outcome is unknown (the process died in it, or it timed out).
EFFECTS = ("pure", "idempotent", "effectful")
UNKEYED = "!unkeyed"
DUPLICATE = "!dup"


def text(value: str) -> bytes:
    raw = value.encode()
    return struct.pack(">I", len(raw)) + raw


def canon(value: Any) -> bytes:
    """Canonical JSON: sorted keys, no spaces, UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode()


def genesis(run: str, workflow: str) -> bytes:
    return digest(b"fleet.runtime.journal/1" + text(run) + text(workflow))


def entry_hash(prev: bytes, seq: int, kind: str, call: str, body: str) -> bytes:
    if len(prev) != 32:
        raise ValueError("a previous hash holds 32 bytes")
    return digest(b"fleet.runtime.entry/1" + prev + struct.pack(">Q", seq) + text(kind)
                  + text(call) + text(body))


def chain_hashes(run: str, workflow: str,
                 entries: Iterable[tuple[int, str, str, str]]) -> Iterator[bytes]:
    """Each entry's hash, in order, chained from the run's genesis; the entries
    ``(seq, kind, call, body)`` are numbered 0, 1, 2, ... (``JournalTampered`` at the first
    that is not)."""
    prev = genesis(run, workflow)
    for i, (seq, kind, call, body) in enumerate(entries):
        if seq != i:
            raise JournalTampered(f"journal entry {i} is numbered {seq}")
        prev = entry_hash(prev, seq, kind, call, body)
        yield prev


def blob_address(salt: bytes, value: bytes) -> bytes:
    if len(salt) != 32:
        raise ValueError("a blob salt holds 32 bytes")
    return digest(b"fleet.runtime.blob/1" + salt + value)


def args_hash(args: Any, kwargs: Any) -> bytes:
    return digest(b"fleet.runtime.args/1" + canon([args, kwargs]))


def projection_hash(name: str, view: Any) -> bytes:
    """The argument hash of a model call: its named projection's output."""
    return digest(b"fleet.runtime.projection/1" + text(name) + canon(view))


def interval_root(first: int, end: int, head: bytes) -> bytes:
    """What an executed segment's journal root is: the entries ``first`` .. ``end - 1`` (an
    empty interval has ``first == end``) and the chain head after them."""
    return digest(b"fleet.runtime.interval/1" + struct.pack(">QQ", first, end) + head)


def run_ids(name: str, workflow: str) -> tuple[bytes, bytes]:
    """The record's unit and grant ids of a runtime run: its name and its workflow."""
    return (digest(b"fleet.runtime.unit/1" + text(name)),
            digest(b"fleet.runtime.grants/1" + text(workflow)))


def runtime_manifest(workflow: str) -> bytes:
    """The environment manifest a runtime park names: the workflow's code identity."""
    return digest(b"fleet.runtime.manifest/1" + text(workflow))


def handed_off(body: str) -> bool:
    """Whether a ``dispatch`` entry's body hands its call off (``ctx.handoff``): its result
    comes from outside, in a later interval, and is never run by the runtime."""
    try:
        ask = json.loads(body).get("ask")
    except (ValueError, AttributeError):
        raise JournalTampered("a dispatch entry's body is not a JSON object") from None
    return isinstance(ask, dict) and ask.get("handoff") is True


def _unkeyed(body: str) -> bool:
    """Whether a ``dispatch`` body is of an effectful step without an idempotency key."""
    if '"effectful"' not in body:  # most dispatches: no JSON to read
        return False
    ask = json.loads(body).get("ask") or {}
    return ask.get("effect") == "effectful" and ask.get("keyed") is False


def interval_account(entries: Sequence[tuple[str, str, str]], first: int, end: int
                     ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(dispatched, resolved)`` of the interval holding entries ``first .. end - 1`` of
    ``entries`` (``(kind, call, body)`` each, from entry 0), in journal order.

    A ``dispatch`` is dispatched; a ``resolve`` of a call this interval dispatched, of a
    call handed off earlier, or of a call never dispatched is resolved as it is. A
    ``resolve`` of a step dispatched in an earlier interval means this interval ran the
    step again (the interval that dispatched it was lost before its result was
    journaled): the work was done and waited for here, so the attempt ``CALL/retry`` is
    both dispatched and resolved (the earlier dispatch stays outstanding: that attempt's
    result was never seen). The wait proof then says ``Blocked`` exactly where an interval
    waited for its own work.

    Effect marks: the id of a call whose dispatch declares an effectful step without an
    idempotency key carries ``!unkeyed`` (``CALL!unkeyed``); where this interval's
    ``resolve`` of such a call says ``"duplicate": true`` (it ran again after an unknown
    outcome), the interval's ids of it carry ``!dup`` too (``CALL!unkeyed!dup``, before
    any ``/retry``). Journals without effect classes have no marks.
    """
    earlier: dict[str, bool] = {}
    unkeyed: set[str] = set()
    for kind, call, body in entries[:first]:
        if kind == DISPATCH:
            earlier[call] = handed_off(body)
            if _unkeyed(body):
                unkeyed.add(call)
    dup: set[str] = set()
    for kind, call, body in entries[first:end]:
        if kind == DISPATCH and _unkeyed(body):
            unkeyed.add(call)
        elif (kind == RESOLVE and '"duplicate"' in body
              and json.loads(body).get("duplicate") is True):
            dup.add(call)

    def mark(call: str) -> str:
        if call not in unkeyed:  # a "duplicate" flag counts only on such a step
            return call
        return call + UNKEYED + (DUPLICATE if call in dup else "")

    dispatched: list[str] = []
    resolved: list[str] = []
    own: set[str] = set()
    for kind, call, _body in entries[first:end]:
        if kind == DISPATCH:
            dispatched.append(mark(call))
            own.add(call)
        elif kind == RESOLVE:
            if call in own or earlier.get(call, True):
                resolved.append(mark(call))
            else:
                dispatched.append(mark(call) + RETRY)
                resolved.append(mark(call) + RETRY)
    return tuple(dispatched), tuple(resolved)


def account_marks(call_id: str) -> tuple[bool, bool]:
    """``(unkeyed, duplicate)`` of an account id: an effectful step without an idempotency
    key, and one run again after an unknown outcome (a possible duplicate effect)."""
    base = call_id.split("/", 1)[0]
    return UNKEYED in base, DUPLICATE in base


def value_addresses(body: str) -> list[str]:
    """The blob addresses an entry's body commits to (its ``value``, ``input`` and
    ``request``), in that order."""
    try:
        data = json.loads(body)
    except ValueError:
        raise JournalTampered("an entry's body is not JSON") from None
    if not isinstance(data, dict):
        raise JournalTampered("an entry's body is not a JSON object")
    return [data[k] for k in ("value", "input", "request") if isinstance(data.get(k), str)]


def open_blob(address: bytes, box: bytes, key: bytes, salt: bytes) -> bytes:
    """A blob's plaintext, checked to hash to ``address``; JournalTampered if it does not
    decrypt under ``key`` or hash to its address with ``salt``."""
    try:
        raw = SecretBox(key).decrypt(box)
    except (CryptoError, ValueError, TypeError):
        raise JournalTampered(f"the blob at {format_address(address)} does not decrypt"
                              ) from None
    if len(salt) != 32 or blob_address(salt, raw) != address:
        raise JournalTampered(f"the blob at {format_address(address)} does not hash to its"
                              " address")
    return raw


def signal_digest(run: str, signal_id: str, name: str, data: Any) -> bytes:
    """What a signal id was first sent with: a resend under the same id with the same name
    and data is a duplicate, with anything else a conflict (seed 003)."""
    return digest(b"fleet.runtime.signal/1" + text(run) + text(signal_id) + text(name)
                  + canon(data))
