"""Builds docs/spec/vectors/runtime_verify.json: a runtime run's sealed record and exported
journal, and one tampered journal (or record) per rule of ``fleet runtime verify``
(``python tests/gen_vectors_runtime_verify.py`` rewrites it; tests/test_runtime_verify.py
checks the file both ways)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nacl.secret import SecretBox
from nacl.signing import SigningKey

from fleet_ledger.fleet.address import format_address
from fleet_ledger.fleet.errors import FleetError
from fleet_ledger.fleet.record.builder import RecordBuilder
from fleet_ledger.fleet.record.segment import CallAccount, make_snapshot
from fleet_ledger.fleet.record.wire import decode_record, encode_record
from fleet_ledger.fleet.runtime.runtime_journal import (
    blob_address,
    canon,
    chain_hashes,
    interval_account,
    interval_root,
    run_ids,
    runtime_manifest,
)
from fleet_ledger.fleet.runtime.runtime_verify import (
    journal_json,
    parse_journal,
    report_json,
    verify_runtime,
)

PATH = Path(__file__).resolve().parent.parent / "docs" / "spec" / "vectors" / \
    "runtime_verify.json"

SEED = bytes([3]) * 32
NAME = "ticket-42"
WORKFLOW = "examples.triage:triage"
RUN = format_address(RecordBuilder(SigningKey(SEED), *run_ids(NAME, WORKFLOW)).run)
# (value, salt byte, key byte, nonce byte): each value's blob, made deterministic here.
VALUES = {"INPUT": ({"ticket": 42}, 1, 11, 21), "LABEL": ("bug", 2, 12, 22),
          "REQUEST": (["abc"], 3, 13, 23), "BUILD": ({"ok": 1}, 4, 14, 24),
          "RESULT": ({"label": "bug"}, 5, 15, 25)}
# The retried-step run of runtime.json's "retried" case: interval 0 lost inside step c0,
# interval 1 retries it and hands c1 off, interval 2 takes c1's result and ends.
ENTRIES: list[tuple[str, str, dict[str, Any]]] = [
    ("start", "", {"input": "INPUT", "workflow": WORKFLOW}),
    ("dispatch", "c0", {"ask": {"args": "b3:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
                                "name": "classify"}, "site": "triage.py:30"}),
    ("resolve", "c0", {"value": "LABEL"}),
    ("dispatch", "c1", {"ask": {"args": "b3:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE",
                                "handoff": True, "name": "build"},
                        "request": "REQUEST", "site": "triage.py:31"}),
    ("resolve", "c1", {"id": "r-1", "value": "BUILD"}),
    ("end", "c2", {"ask": {}, "site": "end", "value": "RESULT"}),
]


def blobs() -> tuple[dict[str, str], dict[str, bytes], dict[str, tuple[bytes, bytes]]]:
    names, boxes, keys = {}, {}, {}
    for label, (value, s, k, n) in VALUES.items():
        raw, salt, key = canon(value), bytes([s]) * 32, bytes([k]) * 32
        address = format_address(blob_address(salt, raw))
        names[label] = address
        boxes[address] = bytes(SecretBox(key).encrypt(raw, bytes([n]) * 24))
        keys[address] = (key, salt)
    return names, boxes, keys


def rows(run: str = RUN) -> list[tuple[int, str, str, str, bytes]]:
    names, _b, _k = blobs()
    bodies = []
    for seq, (kind, call, body) in enumerate(ENTRIES):
        text = canon(body).decode()
        for label, address in names.items():
            text = text.replace(f'"{label}"', f'"{address}"')
        bodies.append((seq, kind, call, text))
    return [(*b, h) for b, h in zip(bodies, chain_hashes(run, WORKFLOW, bodies), strict=True)]


def journal(run: str = RUN, entries: list[tuple[int, str, str, str, bytes]] | None = None
            ) -> dict[str, Any]:
    _n, boxes, keys = blobs()
    return journal_json(run, NAME, WORKFLOW, rows(run) if entries is None else entries,
                        boxes, keys)


def record(account: Callable[[int, int], CallAccount] | None = None,
           park_at: int = 3) -> dict[str, Any]:
    """The run's record as its host seals it (``account`` and ``park_at``: what a lying
    host would seal instead)."""
    entries = rows()
    flat = [(k, c, b) for _s, k, c, b, _h in entries]
    b = RecordBuilder(SigningKey(SEED), *run_ids(NAME, WORKFLOW))

    def execute(first: int, end: int, outcome: str, uj: int) -> None:
        calls = account(first, end) if account else CallAccount(
            *interval_account(flat, first, end))
        b.execute(uj=uj, provenance="estimated" if outcome == "lost" else "measured",
                  meter="estimate:lost-interval" if outcome == "lost" else "rapl:package-0",
                  journal_root=interval_root(first, end, entries[end - 1][4]),
                  outcome=outcome, calls=calls)

    execute(0, 2, "lost", 1)
    execute(2, 4, "ok", 5000)
    park = make_snapshot(transcript=entries[park_at][4])
    b.suspend(park, runtime_manifest(WORKFLOW))
    b.resume(park, runtime_manifest(WORKFLOW), 40, "estimated", "estimate:transcript-store")
    execute(4, 6, "ok", 3000)
    b.close()
    return json.loads(encode_record(b.to_record()))


def _rehash(entries: list[list[Any]], run: str = RUN) -> list[list[Any]]:
    plain = [tuple(e[:4]) for e in entries]
    return [[*e[:4], format_address(h)] for e, h in zip(
        entries, chain_hashes(run, WORKFLOW, plain), strict=True)]  # type: ignore[arg-type]


def _resolved_only(first: int, end: int) -> CallAccount:
    """The accounting a host used before the retry rule (resolves count as resolved only)."""
    part = ENTRIES[first:end]
    return CallAccount(tuple(c for k, c, _b in part if k == "dispatch"),
                       tuple(c for k, c, _b in part if k == "resolve"))


def cases() -> list[tuple[str, str, dict[str, Any] | None, dict[str, Any] | None]]:
    """(name, note, journal or None for the clean one, record or None for the clean one)."""
    clean = journal()
    names, _b, _k = blobs()
    out: list[tuple[str, str, dict[str, Any] | None, dict[str, Any] | None]] = [
        ("clean", "the run as sealed and exported", None, None)]

    edited = copy.deepcopy(clean)
    edited["entries"][2][3] = edited["entries"][2][3].replace(names["LABEL"], names["BUILD"])
    out.append(("entry-edited", "a value address edited, the stored hashes kept", edited, None))

    renumbered = copy.deepcopy(clean)
    renumbered["entries"][3][0] = 4
    out.append(("entry-renumbered", "entries not numbered 0, 1, 2, ...", renumbered, None))

    rehashed = copy.deepcopy(clean)
    rehashed["entries"][2][3] = rehashed["entries"][2][3].replace(names["LABEL"],
                                                                  names["BUILD"])
    rehashed["entries"] = _rehash(rehashed["entries"])
    out.append(("value-edited-rehashed", "a value address edited and the chain re-hashed: "
                "the retrying interval's root no longer matches", rehashed, None))

    deleted = copy.deepcopy(clean)
    deleted["entries"] = deleted["entries"][:-1]
    out.append(("entry-deleted", "the last entry (end) deleted", deleted, None))

    other = journal(format_address(bytes(range(32))))
    out.append(("other-run", "another run's journal (its chain is whole)", other, None))

    appended = copy.deepcopy(clean)
    appended["entries"].append([6, "now", "c3", canon({"ask": {}, "now": 1.0,
                                                       "site": "x.py:1"}).decode()])
    appended["entries"] = _rehash(appended["entries"])
    out.append(("entry-appended", "an entry after the closed record's last interval",
                appended, None))

    swapped = copy.deepcopy(clean)
    swapped["blobs"][names["LABEL"]] = swapped["blobs"][names["BUILD"]]
    out.append(("blob-swapped", "a value's ciphertext replaced by another value's",
                swapped, None))

    shredded = copy.deepcopy(clean)
    del shredded["keys"][names["LABEL"]]
    del shredded["blobs"][names["LABEL"]]
    out.append(("value-shredded", "a value shredded (key and ciphertext gone): valid, "
                "reported as shredded", shredded, None))

    out.append(("account-resolved-only", "the record sealed with the old accounting: the "
                "retry listed as resolved only", None, record(account=_resolved_only)))
    out.append(("park-elsewhere", "the record parks at the head after entry 2, not 3", None,
                record(park_at=2)))

    bad_seal = record()
    seal = bad_seal["segments"][4]["seal"]
    bad_seal["segments"][4]["seal"] = ("B" if seal[0] == "A" else "A") + seal[1:]
    out.append(("bad-seal", "segment 5's seal altered", None, bad_seal))

    unsealed = record()
    del unsealed["host_key"]
    out.append(("unsealed", "the record names no host key", None, unsealed))
    return out


def expect(journal_doc: dict[str, Any], record_doc: dict[str, Any]) -> dict[str, Any]:
    try:
        report = verify_runtime(decode_record(json.dumps(record_doc).encode()),
                                parse_journal(json.dumps(journal_doc).encode()))
    except FleetError as exc:
        out: dict[str, Any] = {"rule": exc.rule}
        if getattr(exc, "segment", None) is not None:
            out["segment"] = exc.segment  # type: ignore[attr-defined]
        return out
    return report_json(report)


def build() -> dict[str, Any]:
    base_journal, base_record = journal(), record()
    out = []
    for name, note, j, r in cases():
        case: dict[str, Any] = {"name": name, "note": note}
        if j is not None:
            case["journal"] = j
        if r is not None:
            case["record"] = r
        case["expect"] = expect(j or base_journal, r or base_record)
        out.append(case)
    return {"format": "fleet.vectors.runtime-verify/1",
            "about": "fleet runtime verify (docs/spec/runtime.md §5): a case replaces the "
                     "journal and/or the record; expect is the report or the rule.",
            "seal_key": {"seed_hex": SEED.hex()},
            "run": RUN, "record": base_record, "journal": base_journal, "cases": out}


if __name__ == "__main__":
    PATH.write_text(json.dumps(build(), indent=1, ensure_ascii=False) + "\n")
