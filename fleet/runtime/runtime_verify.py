"""A runtime run's journal checked against its run record, offline (docs/spec/runtime.md §5).

    report = verify_runtime(decode_record(record_bytes), parse_journal(journal_bytes))

``fleet runtime verify`` runs this over an exported record (``fleet run export``) and an
exported journal (``fleet runtime export``). The checks, in order; the first that fails is
raised by name, pinned to the segment (or naming the journal entry) it concerns:

1. the record verifies from genesis (:func:`fleet.record.verify.verify_state`), its seals under
   the host keys it names; a record naming none is ``RecordUnsealed``;
2. the journal is the record's run: its ``run`` is the record's genesis head
   (``JournalRunMismatch``);
3. every entry chains from the run's genesis, numbered ``0, 1, 2, ...``, and each stored
   hash is its own (``JournalTampered``);
4. the record's segments are walked in order with ``first``, where the next interval
   starts (0 at first). An executed segment's ``journal_root`` must be
   ``interval_root(first, end, hash[end-1])`` for some ``end >= first``, the least such
   (``JournalRootMismatch``); its call account must be ``interval_account`` of entries
   ``first .. end-1`` (``CallAccountMismatch``; an absent account never is); then
   ``first = end``. A park must be a transcript park whose address is ``hash[first-1]``,
   the journal's head where the last interval ended (``TranscriptMismatch``);
5. a closed or parked record covers the whole journal: ``first`` is the number of entries
   (``JournalBeyondRecord``); a running one may have entries after its last sealed
   interval (an interval still running, or lost and not yet sealed): reported as
   ``unsealed``;
6. every value an entry commits to (``value``, ``input``, ``request``) whose key the export
   holds decrypts under it and hashes to its address with its salt (``JournalTampered``);
   a value without a key was shredded and is reported as such, never as an error.

Nothing here reads a file: the caller hands in bytes or decoded values.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fleet_ledger.fleet.address import format_address, parse_address
from fleet_ledger.fleet.errors import FleetError
from fleet_ledger.fleet.record.phases import CLOSED, PARKED
from fleet_ledger.fleet.record.verify import verify_state
from fleet_ledger.fleet.record.wait_proof import Verdict, verdict_json
from fleet_ledger.fleet.record.wire import ExecutedWire, RecordWire, SuspendedWire
from fleet_ledger.fleet.runtime.runtime_errors import JournalTampered
from fleet_ledger.fleet.runtime.runtime_journal import (
    chain_hashes,
    genesis,
    interval_account,
    interval_root,
    open_blob,
    value_addresses,
)
from fleet_ledger.fleet.runtime.runtime_verify_errors import (
    CallAccountMismatch,
    JournalBeyondRecord,
    JournalRootMismatch,
    JournalRunMismatch,
    MalformedJournal,
    RecordUnsealed,
    TranscriptMismatch,
)

__all__ = ["JOURNAL_FORMAT", "Interval", "JournalFile", "RuntimeReport", "journal_json",
           "parse_journal", "report_json", "verify_runtime"]

JOURNAL_FORMAT = "fleet.runtime.journal/1"

Row = tuple[int, str, str, str, bytes | None]


@dataclass(frozen=True)
class JournalFile:
    """A run's journal as exported: entries ``(seq, kind, call, body, hash or None)``, the
    ciphertext of each blob and the key and salt of each blob whose key is still held."""

    run: str
    name: str
    workflow: str
    entries: tuple[Row, ...]
    blobs: dict[str, bytes]
    keys: dict[str, tuple[bytes, bytes]]


@dataclass(frozen=True)
class Interval:
    """One executed segment's interval: entries ``first .. end-1`` and its account."""

    segment: int
    first: int
    end: int
    outcome: str
    dispatched: tuple[str, ...]
    resolved: tuple[str, ...]


@dataclass(frozen=True)
class RuntimeReport:
    run: str
    segments: int
    phase: str
    entries: int
    head: str
    intervals: tuple[Interval, ...]
    unsealed: int
    values: int
    shredded: tuple[str, ...]
    wait_proof: Verdict


def _b64(text: object, what: str) -> bytes:
    if not isinstance(text, str):
        raise MalformedJournal(f"{what} is not base64 text")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise MalformedJournal(f"{what} is not base64") from None


def _entry(item: object, i: int) -> Row:
    if not isinstance(item, list) or len(item) not in (4, 5):
        raise MalformedJournal(f"journal entry {i} is not [seq, kind, call, body(, hash)]")
    seq, kind, call, body = item[:4]
    if type(seq) is not int or not all(isinstance(v, str) for v in (kind, call, body)):
        raise MalformedJournal(f"journal entry {i} has a field of the wrong type")
    stated = None
    if len(item) == 5:
        try:
            stated = parse_address(item[4])
        except FleetError:
            raise MalformedJournal(f"journal entry {i}'s hash is not an address") from None
    return seq, kind, call, body, stated


def parse_journal(data: bytes) -> JournalFile:
    """A journal export (:func:`journal_json`, or the ``RUNTIME_JOURNALS`` object form
    without hashes or keys), its shape checked; else ``MalformedJournal``."""
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise MalformedJournal(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise MalformedJournal("a journal export is a JSON object")
    if doc.get("format", JOURNAL_FORMAT) != JOURNAL_FORMAT:
        raise MalformedJournal(f"unknown journal format {doc.get('format')!r}")
    if not all(isinstance(doc.get(k), str) for k in ("run", "name", "workflow")):
        raise MalformedJournal("a journal export names its run, name and workflow as text")
    entries, blobs, keys = doc.get("entries"), doc.get("blobs", {}), doc.get("keys", {})
    if not isinstance(entries, list) or not isinstance(blobs, dict) \
            or not isinstance(keys, dict):
        raise MalformedJournal("entries is a list, blobs and keys are objects")
    parsed_keys = {}
    for address, pair in keys.items():
        if not isinstance(pair, list) or len(pair) != 2:
            raise MalformedJournal(f"the key of {address} is not [key, salt]")
        parsed_keys[address] = (_b64(pair[0], f"the key of {address}"),
                                _b64(pair[1], f"the salt of {address}"))
    return JournalFile(doc["run"], doc["name"], doc["workflow"],
                       tuple(_entry(e, i) for i, e in enumerate(entries)),
                       {a: _b64(b, f"the blob {a}") for a, b in blobs.items()}, parsed_keys)


def journal_json(run: str, name: str, workflow: str, entries: Sequence[Row],
                 blobs: dict[str, bytes], keys: dict[str, tuple[bytes, bytes]]
                 ) -> dict[str, Any]:
    """The export file's JSON: ``{"format", "run", "name", "workflow", "entries": [[seq,
    kind, call, body, hash]], "blobs": {address: base64 ciphertext}, "keys": {address:
    [base64 key, base64 salt]}}``."""
    def b64(raw: bytes) -> str:
        return base64.b64encode(raw).decode()

    return {"format": JOURNAL_FORMAT, "run": run, "name": name, "workflow": workflow,
            "entries": [[s, k, c, b] + ([] if h is None else [format_address(h)])
                        for s, k, c, b, h in entries],
            "blobs": {a: b64(box) for a, box in sorted(blobs.items())},
            "keys": {a: [b64(k), b64(s)] for a, (k, s) in sorted(keys.items())}}


def _chain(journal: JournalFile) -> list[bytes]:
    hashes = list(chain_hashes(journal.run, journal.workflow,
                               (e[:4] for e in journal.entries)))
    for (seq, kind, call, _body, stated), got in zip(journal.entries, hashes, strict=True):
        if stated is not None and stated != got:
            raise JournalTampered(f"journal entry {seq} ({kind} {call}) does not hash to its"
                                  " stored hash")
    return hashes


def _intervals(record: RecordWire, journal: JournalFile, hashes: list[bytes]
               ) -> tuple[list[Interval], int]:
    """Rule 4: each executed segment's interval; and where the last one ended."""
    rows = [(kind, call, body) for _s, kind, call, body, _h in journal.entries]
    gen = genesis(journal.run, journal.workflow)

    def head(end: int) -> bytes:
        return hashes[end - 1] if end > 0 else gen

    out: list[Interval] = []
    first = 0
    for index, wire in enumerate(record.segments, start=1):
        if isinstance(wire, ExecutedWire):
            root = parse_address(wire.attestation_object.journal_root)
            end = next((e for e in range(first, len(hashes) + 1)
                        if interval_root(first, e, head(e)) == root), None)
            if end is None:
                raise JournalRootMismatch(
                    f"segment {index}'s journal root is the root of no interval of the"
                    f" journal starting at entry {first}", segment=index)
            dispatched, resolved = interval_account(rows, first, end)
            calls = wire.calls
            if calls is None or (tuple(calls.dispatched), tuple(calls.resolved)) != (
                    dispatched, resolved):
                said = "no account" if calls is None else \
                    f"{list(calls.dispatched)} / {list(calls.resolved)}"
                raise CallAccountMismatch(
                    f"segment {index} accounts {said}; entries {first}..{end - 1} give"
                    f" dispatched {list(dispatched)} / resolved {list(resolved)}",
                    segment=index)
            out.append(Interval(index, first, end, wire.attestation_object.outcome,
                                dispatched, resolved))
            first = end
        elif isinstance(wire, SuspendedWire):
            transcript = wire.snapshot.transcript
            if transcript is None or parse_address(transcript) != head(first):
                raise TranscriptMismatch(
                    f"segment {index} parks at {transcript or 'an image'}, not at the"
                    f" journal's head after entry {first - 1}", segment=index)
    return out, first


def _values(journal: JournalFile) -> tuple[int, tuple[str, ...]]:
    """Rule 6: values whose key is held open to their address; the others are shredded."""
    held = 0
    shredded: list[str] = []
    for seq, _kind, _call, body, _h in journal.entries:
        for address in value_addresses(body):
            if address not in journal.keys:
                shredded.append(address)
                continue
            box = journal.blobs.get(address)
            if box is None:
                raise JournalTampered(f"entry {seq}'s value {address} has a key but no"
                                      " ciphertext")
            try:
                raw_address = parse_address(address)
            except FleetError:
                raise JournalTampered(f"entry {seq} commits to {address!r}, not an address"
                                      ) from None
            try:
                open_blob(raw_address, box, *journal.keys[address])
            except JournalTampered as exc:
                raise JournalTampered(f"entry {seq}: {exc}") from None
            held += 1
    return held, tuple(shredded)


def verify_runtime(record: RecordWire, journal: JournalFile, host_key: str | None = None
                   ) -> RuntimeReport:
    """Every rule of the module docstring, in order; the report of a journal that matches."""
    state, sealed = verify_state(record, host_key)
    if not sealed:
        raise RecordUnsealed("the record names no host key: its seals cannot be checked")
    if journal.run != format_address(state.run):
        raise JournalRunMismatch(f"the journal is run {journal.run}'s, the record is run"
                                 f" {format_address(state.run)}'s")
    hashes = _chain(journal)
    intervals, covered = _intervals(record, journal, hashes)
    unsealed = len(hashes) - covered
    if unsealed and state.phase in (CLOSED, PARKED):
        raise JournalBeyondRecord(f"the record is {state.phase}, yet the journal holds"
                                  f" {unsealed} entries after its last sealed interval"
                                  f" (from entry {covered})")
    held, shredded = _values(journal)
    head = hashes[-1] if hashes else genesis(journal.run, journal.workflow)
    return RuntimeReport(format_address(state.run), state.index, state.phase, len(hashes),
                         format_address(head), tuple(intervals), unsealed, held, shredded,
                         state.wait_proof())


def report_json(report: RuntimeReport) -> dict[str, Any]:
    return {"verdict": "valid", "run": report.run, "segments": report.segments,
            "phase": report.phase, "entries": report.entries, "head": report.head,
            "intervals": [{"segment": i.segment, "first": i.first, "end": i.end,
                           "outcome": i.outcome, "dispatched": list(i.dispatched),
                           "resolved": list(i.resolved)} for i in report.intervals],
            "unsealed": report.unsealed, "values": report.values,
            "shredded": list(report.shredded), "wait_proof": verdict_json(report.wait_proof)}
