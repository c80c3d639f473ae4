"""Builds and replays ``docs/spec/vectors/durable.json``.

Run ``python tests/durable_vectors.py`` to rewrite the file; the tests check that the
checked-in file equals what this builds (the code reproduces every vector) and replay each
case's inputs through the core (every input verifies or fails as stated).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from nacl.signing import SigningKey

from fleet_ledger.fleet.address import digest, format_address, parse_address
from fleet_ledger.fleet.errors import RecordError
from fleet_ledger.fleet.record.attestation import make_attestation
from fleet_ledger.fleet.record.kernel import NO_GRANTS, pool_unit
from fleet_ledger.fleet.record.record import RunState, genesis
from fleet_ledger.fleet.record.seal import encode_key, seal
from fleet_ledger.fleet.record.segment import (
    CallAccount,
    Claimed,
    Closed,
    Evicted,
    Segment,
    executed,
    make_snapshot,
    resumed,
    suspended,
)
from fleet_ledger.fleet.record.wait_proof import verdict_json

PATH = Path(__file__).resolve().parent.parent / "docs" / "spec" / "vectors" / "durable.json"
SEAL_SEED = bytes(range(32))


def addr(label: str) -> str:
    return format_address(digest(label.encode()))


def att(uj: int, journal: str, provenance: str = "measured", outcome: str = "ok") -> dict:
    return {"receipt": {"uj": uj, "provenance": provenance, "meter": "rapl:package-0"},
            "journal_root": addr(journal), "outcome": outcome}


def ex(uj: int, journal: str, calls: dict | None = None, **extra: Any) -> dict:
    step: dict[str, Any] = {"kind": "executed", "attestation_object": att(uj, journal)}
    if calls is not None:
        step["calls"] = calls
    step.update(extra)
    return step


IMAGE = {"fs_root": addr("fs-root"), "mem_image": addr("mem-image")}
IMAGE_NO_MEM = {"fs_root": addr("fs-root")}
TRANSCRIPT = {"transcript": addr("transcript")}
SAME_INNER_IMAGE = {"fs_root": addr("transcript")}
MANIFEST = addr("manifest")


def sus(snapshot: dict, manifest: str = MANIFEST) -> dict:
    return {"kind": "suspended", "snapshot": snapshot, "manifest": manifest}


def res(snapshot: dict, idle: int = 5_000_000, manifest: str = MANIFEST,
        provenance: str = "estimated", meter: str = "estimate:storage@1.2W/TB") -> dict:
    return {"kind": "resumed", "snapshot": snapshot, "manifest": manifest, "idle_uj": idle,
            "idle_provenance": provenance, "idle_meter": meter}


CLOSE = {"kind": "closed"}


def close_idle(idle: int, provenance: str = "estimated",
               meter: str = "estimate:storage@1.2W/TB") -> dict:
    """A close that ends a park, with the idle energy the park drew."""
    return {"kind": "closed", "idle_uj": idle, "idle_provenance": provenance,
            "idle_meter": meter}


def slot_energy(warm: int, idle: int) -> dict:
    return {"warm_uj": warm, "warm_provenance": "measured", "warm_meter": "rapl:package-0",
            "idle_uj": idle, "idle_provenance": "estimated",
            "idle_meter": "estimate:volume@6W/TB"}


def claim(slot: str = "slot-1", snapshot: dict = IMAGE_NO_MEM, manifest: str = MANIFEST,
          warm: int = 3_000_000, idle: int = 21_600_000) -> dict:
    return {"kind": "claimed", "slot": addr(slot), "snapshot": snapshot, "manifest": manifest,
            **slot_energy(warm, idle)}


def evict(slot: str, warm: int = 3_000_000, idle: int = 86_400_000) -> dict:
    return {"kind": "evicted", "slot": addr(slot), **slot_energy(warm, idle)}


def calls(dispatched: list[str], resolved: list[str]) -> dict:
    return {"dispatched": dispatched, "resolved": resolved}


CASES: list[tuple[str, str, list[dict]]] = [
    ("chain-execute-suspend-resume-execute", "image park with memory image, closed at the end",
     [ex(1000, "j1"), sus(IMAGE), res(IMAGE, provenance="measured", meter="rapl:dram"),
      ex(2000, "j2"), CLOSE]),
    ("image-park-without-memory", "image park with a filesystem root only",
     [ex(1000, "j1"), sus(IMAGE_NO_MEM), res(IMAGE_NO_MEM), ex(10, "j2")]),
    ("transcript-park", "transcript park chains, verifies and accumulates idle energy",
     [ex(1000, "j1"), sus(TRANSCRIPT), res(TRANSCRIPT, idle=42), ex(2000, "j2")]),
    ("transcript-park-accounted",
     "transcript-park with a call account on each interval and nothing else changed: an "
     "implementation that dropped the accounts would produce transcript-park's heads",
     [ex(1000, "j1", calls=calls(["c1"], [])), sus(TRANSCRIPT), res(TRANSCRIPT, idle=42),
      ex(2000, "j2", calls=calls([], ["c1"]))]),
    ("refuse-manifest-change-at-later-park",
     "the first park fixes the run's environment manifest; a later park naming another is "
     "refused",
     [ex(1000, "j1"), sus(TRANSCRIPT), res(TRANSCRIPT), ex(10, "j2"),
      sus(TRANSCRIPT, manifest=addr("other")), sus(TRANSCRIPT)]),
    ("close-while-parked", "a record may be closed while parked",
     [ex(1000, "j1"), sus(TRANSCRIPT), CLOSE]),
    ("close-parked-with-idle", "a close that ends a park carries the idle energy the park "
     "drew (a week of a transcript's storage): it is the run's idle energy, as a resume's",
     [ex(1000, "j1"), sus(TRANSCRIPT), close_idle(604_800)]),
    ("refuse-close-idle-not-parked", "a close carries idle energy only when it ends a park "
     "(PhaseViolation); never zero (ZeroIdleEnergy); all three fields or none "
     "(MalformedSegment); a close with the park's idle energy then closes the run",
     [ex(1000, "j1"), close_idle(5), sus(TRANSCRIPT), close_idle(0),
      {"kind": "closed", "idle_uj": 5}, close_idle(7, "measured", "rapl:dram")]),
    ("refuse-snapshot-mismatch", "resuming with another snapshot is refused",
     [ex(1000, "j1"), sus(IMAGE), res({"fs_root": addr("forked")}), res(IMAGE)]),
    ("refuse-image-for-transcript", "an image and a transcript over one address differ",
     [ex(1000, "j1"), sus(TRANSCRIPT), res(SAME_INNER_IMAGE), res(TRANSCRIPT)]),
    ("refuse-manifest-mismatch", "resuming in another environment is refused",
     [ex(1000, "j1"), sus(TRANSCRIPT), res(TRANSCRIPT, manifest=addr("other")),
      res(TRANSCRIPT)]),
    ("refuse-phase-violation", "executing while parked, parking twice, resuming unparked",
     [{"kind": "suspended", "snapshot": TRANSCRIPT, "manifest": MANIFEST},
      ex(1000, "j1"), res(TRANSCRIPT), sus(TRANSCRIPT), ex(5, "while-parked"),
      sus(TRANSCRIPT), res(TRANSCRIPT), sus(TRANSCRIPT)]),
    ("refuse-after-close", "nothing may follow close",
     [ex(1000, "j1"), CLOSE, ex(5, "after"), CLOSE]),
    ("refuse-malformed-snapshot", "neither form, both forms, transcript beside memory image",
     [ex(1000, "j1"), sus({}), sus({"fs_root": addr("a"), "transcript": addr("b")}),
      sus({"transcript": addr("b"), "mem_image": addr("c")}),
      sus({"mem_image": addr("c")}), sus(TRANSCRIPT)]),
    ("refuse-zero-idle-energy", "a park's idle energy is never zero",
     [ex(1000, "j1"), sus(TRANSCRIPT), res(TRANSCRIPT, idle=0), res(TRANSCRIPT, idle=1)]),
    ("refuse-attestation-mismatch", "the attestation object must hash to the recorded address",
     [ex(1000, "j1", attestation=addr("not-the-attestation")), ex(1000, "j1")]),
    ("accounted-absent-vs-empty", "an empty account hashes differently from no account",
     [ex(1000, "j1", calls=calls([], []))]),
    ("wait-nonblocking", "dispatch, end the interval, park, resolve later",
     [ex(1000, "j1", calls=calls(["c1", "c2"], [])), sus(TRANSCRIPT), res(TRANSCRIPT),
      ex(2000, "j2", calls=calls([], ["c1", "c2"]))]),
    ("wait-blocked", "an interval resolving its own dispatch waited inside its receipt",
     [ex(1000, "j1", calls=calls(["c1"], [])), ex(2000, "j2", calls=calls(["c2"], ["c1", "c2"]))]),
    ("wait-malformed-never-dispatched", "a result for a call never dispatched",
     [ex(1000, "j1", calls=calls(["c1"], [])), ex(2000, "j2", calls=calls([], ["c9"]))]),
    ("wait-malformed-resolved-twice", "a call resolved twice",
     [ex(1000, "j1", calls=calls(["c1"], [])), ex(2000, "j2", calls=calls([], ["c1"])),
      ex(3000, "j3", calls=calls([], ["c1"]))]),
    ("wait-malformed-dispatched-twice", "one id dispatched twice",
     [ex(1000, "j1", calls=calls(["c1"], [])), ex(2000, "j2", calls=calls(["c1"], []))]),
    ("wait-unproved-unaccounted", "an unaccounted interval proves nothing",
     [ex(1000, "j1", calls=calls(["c1"], [])), ex(2000, "j2"),
      ex(3000, "j3", calls=calls([], ["c1"]))]),
    ("wait-unproved-nothing-accounted", "a property of no intervals is not a property",
     [ex(1000, "j1"), CLOSE]),
    ("claim-then-execute",
     "a run started from a warm slot: the claim's warm-up and idle are the run's claim "
     "energy; it executes, parks under the slot's manifest, resumes and closes",
     [claim(), ex(1000, "j1"), sus(IMAGE_NO_MEM), res(IMAGE_NO_MEM), CLOSE]),
    ("claim-with-memory-image", "a warm slot keeping a resident memory image",
     [claim(snapshot=IMAGE), ex(1000, "j1")]),
    ("refuse-claim-after-first-segment",
     "a claim is a first segment only: after an execution, or a second claim, it is refused",
     [ex(1000, "j1"), claim(), CLOSE, claim()]),
    ("refuse-second-claim", "a claimed run cannot claim another slot",
     [claim(), claim(slot="slot-2"), ex(1000, "j1")]),
    ("refuse-zero-claim-energy", "a warm slot's warm-up and idle are each never zero",
     [claim(warm=0), claim(idle=0), claim(warm=1, idle=1)]),
    ("refuse-transcript-claim", "a warm slot is an image park, never a transcript",
     [claim(snapshot=TRANSCRIPT), claim()]),
    ("refuse-manifest-change-after-claim",
     "the claimed slot's manifest is the run's: a park naming another is refused",
     [claim(), ex(1000, "j1"), sus(TRANSCRIPT, manifest=addr("other")), sus(TRANSCRIPT)]),
    ("refuse-eviction-in-a-work-run", "an eviction belongs to a pool's own run only",
     [ex(1000, "j1"), evict("slot-1"), CLOSE]),
]

POOL_HOST, POOL_NAME = "host-1", "py311"

# A pool's own run: unit BLAKE3("fleet.warmpool/1" || text(host) || text(pool)), no grants.
POOL_CASES: list[tuple[str, str, list[dict]]] = [
    ("pool-evictions",
     "a pool's own run: two evicted slots are its overhead energy, then it is closed",
     [evict("slot-1"), evict("slot-2", warm=1_500_000, idle=1), CLOSE]),
    ("refuse-zero-overhead-energy", "an evicted slot's warm-up and idle are each never zero",
     [evict("slot-1", warm=0), evict("slot-1", idle=0), evict("slot-1")]),
    ("refuse-work-in-a-pool-run",
     "a pool's run holds evictions only: an execution, a claim or a park is refused",
     [evict("slot-1"), ex(1000, "j1"), claim(), sus(TRANSCRIPT), evict("slot-2")]),
]


def step_segment(step: dict) -> tuple[Segment, Any]:
    """Core segment (and attestation object) for a vector step; refusals raise."""
    kind = step["kind"]
    if kind == "executed":
        o = step["attestation_object"]
        r = o["receipt"]
        attestation = make_attestation(r["uj"], r["provenance"], r["meter"],
                                       parse_address(o["journal_root"]), o["outcome"])
        address = (parse_address(step["attestation"]) if "attestation" in step
                   else attestation.address())
        c = step.get("calls")
        account = None if c is None else CallAccount(tuple(c["dispatched"]), tuple(c["resolved"]))
        return executed(address, account), attestation
    if kind in ("suspended", "resumed"):
        s = step["snapshot"]
        snapshot = make_snapshot(
            fs_root=parse_address(s["fs_root"]) if "fs_root" in s else None,
            mem_image=parse_address(s["mem_image"]) if "mem_image" in s else None,
            transcript=parse_address(s["transcript"]) if "transcript" in s else None,
        )
        manifest = parse_address(step["manifest"])
        if kind == "suspended":
            return suspended(snapshot, manifest), None
        return resumed(snapshot, manifest, step["idle_uj"], step["idle_provenance"],
                       step["idle_meter"]), None
    if kind in ("claimed", "evicted"):
        energy = {f"{part}_{field}": step[f"{part}_{field}"] for part in ("warm", "idle")
                  for field in ("uj", "provenance", "meter")}
        if kind == "evicted":
            return Evicted(slot=parse_address(step["slot"]), **energy), None
        s = step["snapshot"]
        snapshot = make_snapshot(**{k: parse_address(v) for k, v in s.items()})
        return Claimed(slot=parse_address(step["slot"]), snapshot=snapshot,  # type: ignore[arg-type]
                       manifest=parse_address(step["manifest"]), **energy), None
    return Closed(step.get("idle_uj"), step.get("idle_provenance"), step.get("idle_meter")), None


def run_steps(unit: str, grants: str, steps: list[dict]) -> dict:
    """Replay ``steps`` through the core and return the expectations they produce."""
    key = SigningKey(SEAL_SEED)
    state = RunState.open(parse_address(unit), parse_address(grants))
    results = []
    for step in steps:
        before = (state.index, state.head, state.phase)
        try:
            segment, attestation = step_segment(step)
            head = state.advance(segment, attestation)
        except RecordError as exc:
            assert (state.index, state.head, state.phase) == before, "a refusal changed state"
            results.append({"refused": exc.rule})
            continue
        out: dict[str, Any] = {"canonical": segment.canonical().hex(),
                               "head": format_address(head)}
        if attestation is not None:
            out["attestation"] = format_address(attestation.address())
            out["attestation_canonical"] = attestation.canonical().hex()
        out["seal"] = seal(key, state.run, state.index, head).hex()
        results.append(out)
    return {"results": results, "final_head": format_address(state.head),
            "segments": state.index, "phase": state.phase,
            "energy": state.energy.as_json(), "wait_proof": verdict_json(state.wait_proof())}


def build() -> dict:
    unit, grants = addr("unit-1"), addr("grants-1")
    pool = (format_address(pool_unit(POOL_HOST, POOL_NAME)), format_address(NO_GRANTS))
    cases = []
    for name, note, steps, (unit, grants) in (
            [(*c, (unit, grants)) for c in CASES] + [(*c, pool) for c in POOL_CASES]):
        case = {"name": name, "note": note, "unit_id": unit, "grants_id": grants,
                "genesis": format_address(genesis(parse_address(unit), parse_address(grants))),
                "steps": steps}
        case["expect"] = run_steps(unit, grants, steps)
        cases.append(case)
    return {
        "format": "fleet.vectors.durable/1",
        "about": "Run-record chain vectors; see docs/spec/run-record.md. Steps are replayed in "
                 "order; a refused step leaves the record unchanged and the next step continues.",
        "seal_key": {"seed_hex": SEAL_SEED.hex(),
                     "public_key": encode_key(bytes(SigningKey(SEAL_SEED).verify_key))},
        "cases": cases,
    }


def render() -> str:
    return json.dumps(build(), indent=1, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    PATH.write_text(render())
    sys.stdout.write(f"wrote {PATH}\n")
