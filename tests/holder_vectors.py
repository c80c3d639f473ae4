"""Builds ``docs/spec/vectors/holders.json``: record files of runs sealed by several hosts.

Run ``python tests/holder_vectors.py`` to rewrite the file; the tests check that the
checked-in file equals what this builds and that every record verifies (or fails) as stated,
through both decoders.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import msgspec
from nacl.signing import SigningKey

from fleet_ledger.fleet.address import format_address, parse_address
from fleet_ledger.fleet.errors import RecordError
from fleet_ledger.fleet.record.record import RunState, chain
from fleet_ledger.fleet.record.seal import encode_key, seal
from fleet_ledger.fleet.record.verify import verify_record
from fleet_ledger.fleet.record.wire import RecordWire, SealedSegment, decode_record, segment_to_wire

import durable_vectors as dv

PATH = Path(__file__).resolve().parent.parent / "docs" / "spec" / "vectors" / "holders.json"
SEEDS = {"A": bytes([0xA1]) * 32, "B": bytes([0xB2]) * 32, "C": bytes([0xC3]) * 32}
KEYS = {name: SigningKey(seed) for name, seed in SEEDS.items()}
OTHER = dv.addr("manifest")

# (name, note, [(host, step)]): each step is sealed by its host whatever the rules say.
CASES: list[tuple[str, str, list[tuple[str, dict]]]] = [
    ("moves-a-b-c", "A opens and parks (image), B resumes and parks (image again), C resumes "
     "and closes: each host takes the run over at a park",
     [("A", dv.ex(1000, "j1")), ("A", dv.sus(dv.IMAGE)), ("B", dv.res(dv.IMAGE)),
      ("B", dv.ex(2000, "j2")), ("B", dv.sus(dv.IMAGE_NO_MEM)), ("C", dv.res(dv.IMAGE_NO_MEM)),
      ("C", dv.ex(3000, "j3")), ("C", dv.CLOSE)]),
    ("moves-at-transcript-park-then-closed-by-another", "B resumes A's transcript park, "
     "parks again, and C closes the parked run",
     [("A", dv.ex(1000, "j1")), ("A", dv.sus(dv.TRANSCRIPT)), ("B", dv.res(dv.TRANSCRIPT)),
      ("B", dv.ex(2000, "j2")), ("B", dv.sus(dv.TRANSCRIPT)), ("C", dv.CLOSE)]),
    ("closed-by-another-with-the-park-idle", "C closes A's parked run (cancelled from "
     "another host) with the idle energy the park drew",
     [("A", dv.ex(1000, "j1")), ("A", dv.sus(dv.TRANSCRIPT)), ("C", dv.close_idle(900))]),
    ("refuse-segment-by-a-host-not-holding-the-run", "B seals an interval of a run A holds "
     "and has not parked",
     [("A", dv.ex(1000, "j1")), ("B", dv.ex(2000, "j2"))]),
    ("refuse-host-change-not-at-a-park", "after B resumed A's park, A seals the next "
     "interval: A no longer holds the run",
     [("A", dv.ex(1000, "j1")), ("A", dv.sus(dv.TRANSCRIPT)), ("B", dv.res(dv.TRANSCRIPT)),
      ("A", dv.ex(2000, "j2"))]),
    ("refuse-interval-by-another-host-at-a-park", "while A's run is parked, B may only "
     "resume or close it",
     [("A", dv.ex(1000, "j1")), ("A", dv.sus(dv.TRANSCRIPT)), ("B", dv.ex(2000, "j2"))]),
]


def build_record(steps: list[tuple[str, dict]]) -> dict[str, Any]:
    """The record file of ``steps``, each segment sealed by its host's key."""
    unit, grants = dv.addr("unit-1"), dv.addr("grants-1")
    state = RunState.open(parse_address(unit), parse_address(grants))
    segments = []
    for host, step in steps:
        segment, attestation = dv.step_segment(step)
        try:
            head = state.advance(segment, attestation)
            index = state.index
        except RecordError:  # a refused last step, sealed all the same: chained by hand
            index, head = state.index + 1, chain(state.head, segment)
        sealed = SealedSegment(index, segment, head, seal(KEYS[host], state.run, index, head),
                               attestation)
        segments.append(segment_to_wire(sealed, host=host))
    used = sorted({host for host, _ in steps})
    record = RecordWire(unit_id=unit, grants_id=grants, run=format_address(state.run),
                        hosts={h: encode_key(bytes(KEYS[h].verify_key)) for h in used},
                        segments=segments)
    return msgspec.to_builtins(record)


def outcome(record: dict[str, Any], fast: bool = True) -> dict[str, Any]:
    """What verifying the record file gives: the report's essentials, or the refusal."""
    try:
        report = verify_record(decode_record(json.dumps(record).encode()), fast=fast)
    except RecordError as exc:
        return {"refused": exc.rule, "segment": exc.segment}
    return {"valid": True, "segments": report.segments, "head": report.head,
            "phase": report.phase, "sealed": report.sealed}


def build() -> dict[str, Any]:
    cases = []
    for name, note, steps in CASES:
        record = build_record(steps)
        cases.append({"name": name, "note": note, "record": record,
                      "expect": outcome(record)})
    return {
        "format": "fleet.vectors.holders/1",
        "about": "Run records sealed by several hosts; see docs/spec/run-record.md (sections "
                 "5 and 8). Each record verifies, or fails with the rule at the segment, as "
                 "expect says. Host keys are Ed25519 keys from the 32-byte seeds given.",
        "host_seeds_hex": {name: seed.hex() for name, seed in SEEDS.items()},
        "cases": cases,
    }


def render() -> str:
    return json.dumps(build(), indent=1, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    PATH.write_text(render())
    sys.stdout.write(f"wrote {PATH}\n")
