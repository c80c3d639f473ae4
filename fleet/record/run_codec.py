"""The state of a run as JSON, so the ledger can keep it between batches and restarts."""

from __future__ import annotations

from typing import Any

import msgspec

from fleet_ledger.fleet.address import format_address, parse_address
from fleet_ledger.fleet.record.kernel import Energy
from fleet_ledger.fleet.record.record import RunState
from fleet_ledger.fleet.record.segment import ImageSnapshot, Snapshot, make_snapshot

__all__ = ["decode_state", "encode_state", "snapshot_json", "state_from_json",
           "state_to_json"]
from fleet_ledger.fleet.record.wait_proof import WaitTracker


def snapshot_json(snapshot: Snapshot | None) -> dict[str, str] | None:
    if snapshot is None:
        return None
    if isinstance(snapshot, ImageSnapshot):
        out = {"fs_root": format_address(snapshot.fs_root)}
        if snapshot.mem_image is not None:
            out["mem_image"] = format_address(snapshot.mem_image)
        return out
    return {"transcript": format_address(snapshot.transcript)}


def state_to_json(state: RunState) -> dict[str, Any]:
    w = state.wait
    return {
        "unit_id": format_address(state.unit_id),
        "grants_id": format_address(state.grants_id),
        "index": state.index,
        "head": format_address(state.head),
        "phase": state.phase,
        "parked": snapshot_json(state.parked),
        "parked_manifest": None if state.parked_manifest is None
        else format_address(state.parked_manifest),
        "manifest": None if state.manifest is None else format_address(state.manifest),
        "receipts": state.energy.receipts,
        "idle": state.energy.idle,
        "claim": state.energy.claim,
        "overhead": state.energy.overhead,
        "wait": {
            "dispatched": sorted(w.dispatched), "resolved": sorted(w.resolved),
            "accounted": w.accounted, "unaccounted": w.unaccounted,
            "first_malformed": w.first_malformed, "first_blocked": w.first_blocked,
        },
    }


def state_from_json(doc: dict[str, Any]) -> RunState:
    state = RunState.open(parse_address(doc["unit_id"]), parse_address(doc["grants_id"]))
    state.index = doc["index"]
    state.head = parse_address(doc["head"])
    state.phase = doc["phase"]
    parked = doc["parked"]
    if parked is not None:
        snapshot = make_snapshot(**{k: parse_address(v) for k, v in parked.items()})
        state.park = snapshot.canonical() + parse_address(doc["parked_manifest"])
    # States stored before the first park pinned the run's manifest: the park held, if any.
    pinned = doc.get("manifest", doc["parked_manifest"])
    state.manifest = None if pinned is None else parse_address(pinned)
    # States stored before warm pools had no claim or overhead energy.
    zero = {"measured": 0, "estimated": 0}
    state.energy = Energy(dict(doc["receipts"]), dict(doc["idle"]),
                          dict(doc.get("claim", zero)), dict(doc.get("overhead", zero)))
    w = doc["wait"]
    state.wait = WaitTracker(set(w["dispatched"]), set(w["resolved"]), w["accounted"],
                             w["unaccounted"], w["first_malformed"], w["first_blocked"])
    return state


def encode_state(state: RunState) -> bytes:
    """The state as the JSON bytes a host stores beside its newest segment."""
    return msgspec.json.encode(state_to_json(state))


def decode_state(data: bytes) -> RunState:
    return state_from_json(msgspec.json.decode(data))
