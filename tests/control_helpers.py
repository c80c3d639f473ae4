"""Control-event streams for the tests: an operator's signed events interleaved with
hosts' genuine segments, as (stream seq, subject, bytes)."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path
from typing import Any

from nacl.signing import SigningKey

from fleet_ledger.fleet.address import digest
from fleet_ledger.fleet.fold.control import (
    ENROLL,
    OPERATOR,
    REKEY,
    REVOKE,
    encode_event,
    sign_event,
)
from fleet_ledger.fleet.record.builder import RecordBuilder
from fleet_ledger.fleet.subjects import control_subject

from fault_helpers import GRANTS, SealedRun, fold_in_random_batches, sealed_run


def operator_key(name: str = "op") -> SigningKey:
    return SigningKey(digest(b"fleet-test/operator-key/" + name.encode()))


def rekeyed(name: str, generation: int) -> SigningKey:
    return SigningKey(digest(b"fleet-test/host-rekey/%d/" % generation + name.encode()))


def event(op: SigningKey, kind: int, seq: int, host: str = "",
          key: SigningKey | bytes | None = None) -> tuple[str, bytes]:
    raw = key if isinstance(key, bytes | None) else bytes(key.verify_key)
    ev = sign_event(op, kind, seq, host, raw)
    return control_subject("operator" if kind == OPERATOR else "host"), encode_event(ev)


def run_with_key(host: str, key: SigningKey, unit: str, plan: str = "ee") -> SealedRun:
    r = SealedRun(host, RecordBuilder(key, digest(unit.encode()), GRANTS))
    for n, step in enumerate(plan):
        {"e": lambda n=n: r.execute(n), "c": r.close}[step]()
    return r


def lifecycle_stream() -> tuple[list[tuple[int, str, bytes]], dict[str, Any]]:
    """A stream exercising every control event and every control refusal: returns it and
    what each refused position's rule must be."""
    from fault_helpers import host_key

    op, op2, stranger = operator_key("op"), operator_key("op2"), operator_key("stranger")
    msgs: list[tuple[str, bytes]] = []
    expect: dict[int, str] = {}

    def add(item: tuple[str, bytes], rule: str | None = None) -> None:
        msgs.append(item)
        if rule is not None:
            expect[len(msgs)] = rule

    early = sealed_run("a", "before-enroll", "e")
    add(early.messages[0], "UnknownHost")  # before its enrollment
    enroll_a = event(op, ENROLL, 1, "a", host_key("a"))
    add(enroll_a)
    add(enroll_a, "ReplayedControl")
    add(event(op, ENROLL, 2, "b", host_key("b")))
    add(event(op, ENROLL, 3, "a", host_key("a")), "ControlConflict")
    add(event(stranger, ENROLL, 1, "c", host_key("c")), "UnknownOperator")
    forged = bytearray(event(op, ENROLL, 9, "c", host_key("c"))[1])
    forged[-1] ^= 1
    add((control_subject("host"), bytes(forged)), "BadControlSignature")
    add((control_subject("host"), b"fleet.ctl/1\x01short"), "MalformedControl")
    old = run_with_key("a", host_key("a"), "a-old", "eee")
    for m in old.messages[:2]:
        add(m)
    for m in sealed_run("b", "b-run", "ee").messages:
        add(m)
    add(event(op, REKEY, 4, "a", rekeyed("a", 1)))
    add(old.messages[2], "BadSeal")  # the old key no longer seals new segments
    for m in run_with_key("a", rekeyed("a", 1), "a-new", "ee").messages:
        add(m)
    add(event(op, OPERATOR, 5, key=op2))
    add(event(op, REVOKE, 6, "b"), "UnknownOperator")  # op retired by the rotation
    add(event(op2, REVOKE, 1, "b"))
    add(sealed_run("b", "b-late", "e").messages[0], "RevokedHost")
    add(event(op2, REKEY, 2, "b", rekeyed("b", 1)), "ControlConflict")
    return [(n, s, d) for n, (s, d) in enumerate(msgs, start=1)], {
        "rules": expect, "operator": op}


def fold_stream(stream: list[tuple[int, str, bytes]], data: Path, seed: int, largest: int,
                operator: SigningKey, **config: Any) -> None:
    fold_in_random_batches(stream, data, random.Random(seed), largest,
                           operator_vkeys=(bytes(operator.verify_key),), **config)


def table(data: Path, sql: str) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(f"file:{data / 'ledger.db'}?mode=ro", uri=True)
    try:
        return [tuple(r) for r in db.execute(sql)]
    finally:
        db.close()
