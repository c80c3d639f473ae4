"""Hostile messages through a real ledger: it keeps running, names every refusal, and the
good segments after them fold; refusals are counted in ``fleet status --json`` and listed
by ``fleet rejections --json``."""

from __future__ import annotations

import asyncio
import json
import os
import random
from pathlib import Path

import nats
import pytest
from test_fuzz_fold import mutate, reseal

from fleet_ledger.fleet.record.seal import encode_key
from fleet_ledger.fleet.subjects import REJECTIONS
from fleet_ledger.ledger.store import LedgerStore
from fleet_ledger.ledger.stream import ensure_stream
from fleet_ledger.plumbing.natsd import NatsServer

from fault_helpers import (
    RULES,
    LedgerProc,
    fleet,
    fold_in_random_batches,
    host_key,
    host_rows,
    reference_fold,
    sealed_run,
    store_summary,
    stream_messages,
    wait_until,
)

pytestmark = pytest.mark.timeout(180)

HOSTILE = 300


def _valid_subject(subject: str) -> bool:
    tokens = subject.split(".")
    return (subject.startswith("fleet.seg.") and all(tokens)
            and not any(c in subject for c in "*> \t\r\n"))


def _hostile(rng: random.Random, genuine: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    """``HOSTILE`` mutants of already-folded genuine messages, garbage and strangers."""
    out: list[tuple[str, bytes]] = []
    ghost = sealed_run("ghost", "unit-of-ghost", "ec")  # a host nobody enrolled
    out += ghost.messages
    out.append((genuine[0][0], rng.randbytes(250 * 1024)))  # large garbage under the limit
    while len(out) < HOSTILE:
        subject, data = rng.choice(genuine)
        if rng.random() < 0.3:
            subject, data, _ = reseal(rng, subject, data)
        else:
            subject, data = mutate(rng, subject, data)
        out.append((subject if _valid_subject(subject) else genuine[0][0], data))
    return out


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def test_hostile_stream_is_refused_by_rule_and_good_segments_still_fold(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """300 hostile messages between genuine runs: the ledger stays up and healthy, refuses
    each with a named rule (counted in status, listed by `fleet rejections`, sent to the
    host), and folds every genuine segment before and after them."""
    rng = random.Random(4242)
    data = tmp_path / "ledger"
    store = LedgerStore(data)
    for name in ("h1", "h2"):
        store.enroll(name, encode_key(bytes(host_key(name).verify_key)))
    store.close()
    first = sealed_run("h1", "unit-first", "eprepreec")
    hostile = _hostile(rng, first.messages)
    after = [sealed_run("h1", "unit-after", "eprec"), sealed_run("h2", "unit-h2", "epreec")]
    genuine_after = [m for r in after for m in r.messages]
    seqs: dict[str, list[int]] = {"first": [], "hostile": [], "after": []}
    notified: list[dict] = []

    async def publish(ledger: LedgerProc) -> None:
        nc = await nats.connect(nats_server.url)
        try:
            js = nc.jetstream(timeout=10.0)
            await ensure_stream(js)

            async def on_refusal(msg: nats.aio.msg.Msg) -> None:
                notified.append(json.loads(msg.data))

            await nc.subscribe(f"{REJECTIONS}.>", cb=on_refusal)
            for part, msgs in (("first", first.messages), ("hostile", hostile),
                               ("after", genuine_after)):
                for subject, body in msgs:
                    seqs[part].append((await js.publish(subject, body)).seq)
                if part == "first":
                    rss_before.append(_rss_kib(ledger.pid))
            for _ in range(600):  # until the ledger has decided everything (30 s at most)
                if store_summary(data).watermark >= seqs["after"][-1]:
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)  # refusals are sent right after their batch commits
        finally:
            await nc.close()

    rss_before: list[int] = []
    with LedgerProc(nats_server.url, data) as ledger:
        ledger.start()
        asyncio.run(publish(ledger))
        total = len(first.messages) + len(genuine_after)
        status = wait_until(lambda: (s := ledger.status())["stream_seq"] >= seqs["after"][-1]
                            and s, 60, "the ledger to fold the whole stream")
        listed = json.loads(fleet("rejections", "--json", "--limit", "1000",
                                  "--nats", nats_server.url).stdout)
        rss_after = _rss_kib(ledger.pid)
        assert ledger.alive()
        assert ledger.stop() == 0
    # The ledger stayed healthy and folded every genuine segment, before and after.
    assert status["healthy"] is True, status["health"]
    assert status["tree_size"] == status["segments_folded"] == total
    # Every hostile message is refused with a named rule, counted and listed.
    assert sum(status["rejected"].values()) == HOSTILE
    assert set(status["rejected"]) <= RULES
    assert sorted(r["stream_seq"] for r in listed) == seqs["hostile"]
    assert {r["rule"] for r in listed} <= RULES
    counted: dict[str, int] = {}
    for r in listed:
        counted[r["rule"]] = counted.get(r["rule"], 0) + 1
    assert counted == status["rejected"]
    # The refusals naming a host were sent to that host's rejection subject.
    with_host = [r for r in listed if r["host"]]
    assert sorted(n["stream_seq"] for n in notified) == sorted(r["stream_seq"]
                                                               for r in with_host)
    # The same stream folded fault-free in-process reaches the same log and refusals.
    reference = reference_fold(stream_messages(nats_server.url), host_rows(data),
                               tmp_path / "reference")
    mine = store_summary(data)
    assert (mine.size, mine.root, mine.segments, mine.rejections) == (
        reference.size, reference.root, reference.segments, reference.rejections)
    mine.check_leaves()
    # 300 refusals do not balloon the ledger (a loose bound: refusals live on disk).
    assert rss_after - rss_before[0] < 64 * 1024, (rss_before, rss_after)


STORE_CASES = int(os.environ.get("FLEET_FUZZ_STORE_CASES", "20000"))


def test_mutants_through_the_ledgers_fold_and_store(tmp_path: Path) -> None:
    """STORE_CASES mutants and the genuine runs folded by the ledger's own fold_messages into
    its SQLite store, in batches of random size: every message is decided and committed
    (none fails a batch), refusals carry named rules, and the leaves are exactly the
    genuine segments."""
    from test_fuzz_fold import GENUINE

    from fault_helpers import RULES as rules

    rng = random.Random(777)
    data = tmp_path / "ledger"
    store = LedgerStore(data)
    for name in ("h1", "h2"):
        store.enroll(name, encode_key(bytes(host_key(name).verify_key)))
    store.close()
    msgs: list[tuple[str, bytes]] = []
    queue = list(GENUINE)
    while len(msgs) < STORE_CASES + len(GENUINE):
        if queue and rng.random() < 0.05:
            msgs.append(queue.pop(0))
            continue
        subject, body = rng.choice(GENUINE)
        if rng.random() < 0.3:
            subject, body, _ = reseal(rng, subject, body)
        else:
            subject, body = mutate(rng, subject, body)
        msgs.append((subject, body))
    msgs += queue
    stream = [(i, s, d) for i, (s, d) in enumerate(msgs, start=1)]
    fold_in_random_batches(stream, data, rng, 600)
    summary = store_summary(data)
    assert summary.watermark == len(stream)
    assert summary.size + len(summary.rejections) == len(stream)
    assert {rule for _, rule in summary.rejections} <= rules
    summary.check_leaves()
    # Every run the ledger holds verifies offline from genesis under its host's key: only
    # segments a host sealed, obeying every rule, became leaves.
    from fleet_ledger.fleet.record.verify import verify_record
    from fleet_ledger.fleet.record.wire import decode_record
    from fleet_ledger.ledger.views import export_record

    store = LedgerStore(data)
    try:
        for run, host, segments, head, _phase in summary.runs:
            report = verify_record(decode_record(export_record(store, run)),
                                   encode_key(bytes(host_key(host).verify_key)))
            assert (report.segments, report.head) == (segments, head)
    finally:
        store.close()
    # ... and every genuine run of an enrolled host is there (the fold was not stopped).
    from test_fuzz_fold import RUNS

    from fleet_ledger.fleet.address import format_address

    assert {r[0] for r in summary.runs} >= {format_address(r.run) for r in RUNS
                                            if r.host in ("h1", "h2")}
