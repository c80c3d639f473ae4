"""The pure fold: deterministic decisions, and seal pre-verification changes none of them."""

from __future__ import annotations

import base64
import json
import random

from nacl.signing import SigningKey

from fleet_ledger.cli._bench_ingest_run import make_segments
from fleet_ledger.fleet.fold import (
    Accepted,
    Admission,
    BatchRuns,
    HostEntry,
    Message,
    Refused,
    decide,
    decide_envelope,
    decode,
    seal_valid,
)


def hosts_for(keys: dict[str, SigningKey]) -> dict[str, HostEntry]:
    return {n: HostEntry(n, k.verify_key) for n, k in keys.items()}


def hostile_stream(seed: int) -> tuple[list[tuple[str, bytes]], dict[str, SigningKey]]:
    """Valid segments interleaved with replays, bad seals, gaps and edited copies."""
    messages, keys = make_segments(120, hosts=3, per_run=6)
    rng = random.Random(seed)
    out: list[tuple[str, bytes]] = []
    for subject, _mid, payload, _run, _idx in messages:
        out.append((subject, payload))
        roll = rng.random()
        if roll < 0.08:
            out.append((subject, payload))  # replay
        elif roll < 0.14:
            doc = json.loads(payload)
            sig = bytearray(base64.b64decode(doc["segment"]["seal"]))
            sig[0] ^= 1
            doc["segment"]["seal"] = base64.b64encode(bytes(sig)).decode()
            out.append((subject, json.dumps(doc).encode()))
        elif roll < 0.18:
            doc = json.loads(payload)
            doc["segment"]["index"] += 2
            out.append((subject, json.dumps(doc).encode()))
        elif roll < 0.22:
            out.append((subject.replace("bench0", "bench1"), payload))
    rng.shuffle(out[len(out) // 2:])  # the second half arrives out of order
    return out, keys


def fold_all(stream, keys, precheck: bool) -> list[tuple]:
    hosts = hosts_for(keys)
    runs = BatchRuns(lambda _run: None)
    heads: dict = {}

    def head_at(run: bytes, index: int):
        return heads.get((run, index))

    ctx = Admission(hosts, runs, head_at)
    out = []
    for seq, (subject, data) in enumerate(stream, start=1):
        if precheck:
            env = decode(subject, data)
            d = env if isinstance(env, Refused) else decide_envelope(
                ctx, Message(subject, data, seq, seal_ok=seal_valid(env, hosts)), env)
        else:
            d = decide(ctx, Message(subject, data, seq))
        if isinstance(d, Accepted):
            runs.take(d)
            heads[(d.run, d.index)] = d.head
            out.append(("ok", d.leaf))
        else:
            out.append((d.rule, d.index))
    return out


def test_precomputed_seals_give_identical_decisions():
    """Folding with seals verified up front decides every message exactly as inline."""
    for seed in range(3):
        stream, keys = hostile_stream(seed)
        inline = fold_all(stream, keys, precheck=False)
        pre = fold_all(stream, keys, precheck=True)
        assert inline == pre
        rules = {r for r, _ in inline}
        assert "ok" in rules and "BadSeal" in rules and "Replay" in rules


def test_fold_is_deterministic_and_refuses_by_name():
    """Two folds of one stream accept the same leaves; every refusal has a rule name."""
    stream, keys = hostile_stream(7)
    a = fold_all(stream, keys, precheck=False)
    b = fold_all(stream, keys, precheck=False)
    assert a == b
    for rule, _ in a:
        assert rule == "ok" or rule[0].isupper()
    assert {"SubjectMismatch", "IndexGap"} & {r for r, _ in a}
