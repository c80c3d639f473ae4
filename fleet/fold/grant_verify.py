"""Recompute offline what a ledger decided about a run under its grant.

A ledger judges each segment of a run by its grant as the book stood when the segment was
folded, at the segment's ledger time. Its *grant evidence* for a run (``fleet run
grant-evidence``) gives an auditor what that judgement needs beside the run's record file:
the accepted grant events concerning the run's grant chain (the root's issue, each child's
trigger and mint and its standing grant's other mints, every amendment, the run's
checkpoints), and each segment's stream position, ledger time and sealing host::

    {"format": "fleet.grant-evidence/1", "run": "b3:...",
     "events":   [{"stream_seq": 3, "at_ms": 1800000001000, "event": "<base64>"}, ...],
     "segments": [{"index": 1, "stream_seq": 5, "at_ms": 1800000002000, "host": "h1"}, ...]}

:func:`verify_grant_evidence` replays both in stream order through the same decisions the
ledger makes (:func:`fleet.fold.grant_events.check_event`, :func:`fleet.fold.grant_events.apply`,
:func:`fleet.fold.grant_events.check_segment`, the kernel's step) and raises the first refusal
by name; a record and evidence that pass are a run every segment of which its grant
allowed. What it cannot see offline: the hosts the ledger had enrolled beyond those the
record names (an issuer enrolled as a host elsewhere).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from fleet_ledger.fleet.address import format_address, parse_address
from fleet_ledger.fleet.errors import RecordError
from fleet_ledger.fleet.fold.grant_events import (
    GrantBook,
    Mint,
    Trigger,
    apply,
    check_event,
    check_step,
    decode_event,
    event_ref,
)
from fleet_ledger.fleet.grants.grant import Terms
from fleet_ledger.fleet.grants.grant_errors import MalformedGrant
from fleet_ledger.fleet.record import kernel
from fleet_ledger.fleet.record.record import RunState
from fleet_ledger.fleet.record.record_file import sealers
from fleet_ledger.fleet.record.verify import verify_state
from fleet_ledger.fleet.record.wire import RecordWire, segment_from_wire

__all__ = ["EVIDENCE_FORMAT", "GrantCheck", "evidence_events", "evidence_json",
           "verify_grant_evidence"]

EVIDENCE_FORMAT = "fleet.grant-evidence/1"


class _Event(msgspec.Struct, forbid_unknown_fields=True):
    stream_seq: int
    at_ms: int
    event: str


class _Segment(msgspec.Struct, forbid_unknown_fields=True):
    index: int
    stream_seq: int
    at_ms: int
    host: str


class _Evidence(msgspec.Struct, forbid_unknown_fields=True):
    format: str
    run: str
    events: list[_Event]
    segments: list[_Segment]


@dataclass(frozen=True, slots=True)
class GrantCheck:
    """A run whose every segment its grant allowed: the effective terms after the last
    segment, the events replayed, the energy used."""

    run: str
    effective: Terms
    events: int
    segments: int
    energy_uj: int


def evidence_events(events: Iterable[tuple[int, int, bytes]], chain: Sequence[bytes],
                    run: bytes) -> list[tuple[int, int, bytes]]:
    """Of a ledger's accepted grant events (stream seq, ledger time, bytes, in stream
    order), those the decisions about ``run`` depend on, its grant's chain being ``chain``
    (the grant, then each parent): the chain's issues, mints and amendments, every other
    mint of the chain's standing grants (they count against its limits) with the triggers
    the mints used, and the run's checkpoints."""
    held = set(chain) | {run}
    kept: list[tuple[int, int, bytes]] = []
    triggers: list[tuple[int, int, bytes, str]] = []
    used: set[str] = set()
    for seq, at_ms, data in events:
        ev = decode_event(data, verify=False)  # accepted: checked when folded
        f = ev.fields
        if isinstance(f, Trigger):
            triggers.append((seq, at_ms, data, f.name))
            continue
        if isinstance(f, Mint) and f.standing in held:
            used.add(f.trigger)
        elif event_ref(ev) not in held:
            continue
        kept.append((seq, at_ms, data))
    kept += [(seq, at_ms, data) for seq, at_ms, data, name in triggers if name in used]
    return sorted(kept)


def evidence_json(run: bytes, events: list[tuple[int, int, bytes]],
                  segments: list[tuple[int, int, int, str]]) -> dict[str, Any]:
    """The evidence document: ``events`` (stream seq, ledger time, bytes), ``segments``
    (index, stream seq, ledger time, host)."""
    return {
        "format": EVIDENCE_FORMAT, "run": format_address(run),
        "events": [{"stream_seq": s, "at_ms": t, "event": base64.b64encode(d).decode()}
                   for s, t, d in events],
        "segments": [{"index": i, "stream_seq": s, "at_ms": t, "host": h}
                     for i, s, t, h in segments],
    }


def verify_grant_evidence(record: RecordWire, evidence: bytes | dict[str, Any]) -> GrantCheck:
    """Verify ``record`` (as ``fleet verify`` does) and then each of its segments under its
    grant, replaying ``evidence``; the first refusal is raised by name."""
    try:
        ev = (msgspec.json.decode(evidence, type=_Evidence) if isinstance(evidence, bytes)
              else msgspec.convert(evidence, _Evidence))
    except msgspec.ValidationError as exc:
        raise MalformedGrant(f"not grant evidence: {exc}") from None
    if ev.format != EVIDENCE_FORMAT:
        raise MalformedGrant(f"unknown evidence format {ev.format!r}")
    verify_state(record)  # the record itself, first: its chain and seals
    state = RunState.open(parse_address(record.unit_id), parse_address(record.grants_id))
    if parse_address(ev.run) != state.run:
        raise MalformedGrant("the evidence is of another run")
    if [s.index for s in ev.segments] != list(range(1, len(record.segments) + 1)):
        raise MalformedGrant("the evidence does not place every segment of the record")
    _names, keys = sealers(record)
    host_keys = {bytes(k) for k in keys.values() if k is not None}
    heads: list[bytes] = [state.run]
    book = GrantBook()

    def run_at(run: bytes, index: int) -> tuple[bytes, int, bytes | None] | None:
        if run != state.run:
            return None
        return state.grants_id, state.index, heads[index] if 1 <= index <= state.index else None

    items = sorted([(e.stream_seq, 0, e) for e in ev.events]
                   + [(s.stream_seq, 1, s) for s in ev.segments], key=lambda x: x[0])
    if len({seq for seq, _, _ in items}) != len(items):
        raise MalformedGrant("two items of the evidence at one stream position")
    wires = iter(record.segments)
    for seq, _kind, item in items:
        if isinstance(item, _Event):
            try:
                data = base64.b64decode(item.event, validate=True)
            except (binascii.Error, ValueError):
                raise MalformedGrant(f"event at {seq} is not base64") from None
            apply(book, check_event(book, data, seq, item.at_ms, host_keys, run_at))
            continue
        assert isinstance(item, _Segment)
        sealed = segment_from_wire(next(wires))
        try:
            _step_under_grant(state, book, sealed, item)
        except RecordError as exc:
            raise exc.at(item.index) from None
        heads.append(state.head)
    terms = book.effective(state.grants_id)
    assert terms is not None
    return GrantCheck(format_address(state.run), terms, len(ev.events), state.index,
                      state.energy.total_uj)


def _step_under_grant(state: RunState, book: GrantBook, sealed: Any, item: _Segment) -> None:
    step = state.step(sealed.segment, sealed.attestation)
    head = kernel.check_head(state.head, step[0], sealed.head, item.index)  # verify_state saw it
    # Offline, every run's grant must be in the evidence: require it.
    check_step(book, state.grants_id, item.host, state.park, sealed.segment.kind, step,
               state.energy.total_uj, item.at_ms, item.index, True)
    state.apply(step, head)

