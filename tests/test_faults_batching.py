"""The fold's decisions do not depend on where batches end (no broker needed).

A ledger may fold the same stream in batches of any size (a crash, a slow fetch, another
replica): the log and every refusal must come out the same, byte for byte.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
from test_fuzz_fold import mutate, reseal

from fleet_ledger.fleet.record.seal import encode_key
from fleet_ledger.fleet.subjects import SEGMENTS
from fleet_ledger.ledger.pull import FetchPuller
from fleet_ledger.ledger.puller import Puller
from fleet_ledger.ledger.seal_worker import SealWorker
from fleet_ledger.plumbing.natsd import NatsServer

from fault_helpers import (
    fold_in_random_batches,
    host_key,
    reference_fold,
    running_ledger,
    sealed_run,
    seed_hosts,
    store_summary,
)


def _stream() -> list[tuple[int, str, bytes]]:
    """Genuine runs interleaved with replays, forks-by-mutation and garbage of them."""
    rng = random.Random(99)
    runs = [sealed_run("h1", f"batch-{i}", "eprepreec") for i in range(4)]
    msgs: list[tuple[str, bytes]] = []
    queues = [list(r.messages) for r in runs]
    seen: list[tuple[str, bytes]] = []
    while any(queues):
        q = rng.choice([q for q in queues if q])
        m = q.pop(0)
        msgs.append(m)
        seen.append(m)
        for _ in range(rng.randint(0, 3)):
            subject, data = rng.choice(seen)
            if rng.random() < 0.4:
                msgs.append((subject, data))  # a replay of something just folded
            elif rng.random() < 0.5:
                msgs.append(reseal(rng, subject, data)[:2])
            else:
                msgs.append(mutate(rng, subject, data))
    return [(i, s, d) for i, (s, d) in enumerate(msgs, start=1)]


@pytest.mark.parametrize("batch", [1, 3, 17])
def test_batch_size_does_not_change_any_decision(tmp_path: Path, batch: int) -> None:
    """Folding the same stream in batches of 1, 3 or 17 gives the log and the refusals of
    one single batch (a replay inside its own batch is Replay, not Fork)."""
    stream = _stream()
    hosts = [("h1", encode_key(bytes(host_key("h1").verify_key)), 0, None)]
    whole = reference_fold(stream, hosts, tmp_path / "whole", batch=len(stream))
    split = reference_fold(stream, hosts, tmp_path / "split", batch=batch)
    assert whole.size == 36
    assert (split.size, split.root, split.segments) == (whole.size, whole.root, whole.segments)
    assert split.rejections == whole.rejections
    assert "Replay" in {rule for _, rule in whole.rejections}
    whole.check_leaves()


async def _fold_over_nats(url: str, stream: list[tuple[int, str, bytes]], data: Path,
                          hosts: list[tuple[str, str, int, int | None]], batch: int,
                          puller: str = "auto") -> None:
    async with running_ledger(url, data, hosts, before=stream, name="pipelined",
                               batch=batch, puller=puller) as (led, _js):
        for _ in range(600):
            if led.store.watermark() >= len(stream):
                break
            await asyncio.sleep(0.05)


@pytest.mark.parametrize("puller", [Puller, FetchPuller], ids=["lean", "fetch"])
@pytest.mark.parametrize("batch", [5, 16])
def test_the_pipelined_fold_over_nats_decides_as_one_batch(
        tmp_path: Path, nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch,
        batch: int, puller: type[Puller | FetchPuller]) -> None:
    """The service loop holds each full batch while it fetches the next (the seal worker
    checking the newer one's seals): through a real server, with the worker splitting even
    these small batches, the log and the refusals equal those of a single in-memory batch,
    pulled by the lean puller and by the fallback on nats-py's fetch (forced)."""
    monkeypatch.setattr(SealWorker, "MIN_SPLIT", 2)
    full_batches = []
    fetch = puller.fetch

    async def counting(self, size, timeout, linger=True):  # type: ignore[no-untyped-def]
        got = await fetch(self, size, timeout, linger)
        full_batches.append(len(got) == size)  # a full batch is held while the next comes
        return got

    monkeypatch.setattr(puller, "fetch", counting)
    # What the stream would hold: messages published on its subjects, numbered in order.
    on_subjects = [(s, d) for _, s, d in _stream()
                   if s.startswith(SEGMENTS + ".") and "" not in s.split(".")]
    stream = [(i, s, d) for i, (s, d) in enumerate(on_subjects, start=1)]
    hosts = [("h1", encode_key(bytes(host_key("h1").verify_key)), 0, None)]
    whole = reference_fold(stream, hosts, tmp_path / "whole", batch=len(stream))
    asyncio.run(_fold_over_nats(nats_server.url, stream, tmp_path / "nats-fold", hosts, batch,
                                puller.kind))
    over_nats = store_summary(tmp_path / "nats-fold")
    assert (over_nats.size, over_nats.root, over_nats.segments) == (
        whole.size, whole.root, whole.segments)
    assert over_nats.rejections == whole.rejections
    assert sum(full_batches) >= len(stream) // batch - 1  # the backlog went through pipelined


async def _quiet_checkpoint(url: str, data: Path) -> tuple[int, int | None]:
    run = sealed_run("h1", "quiet-checkpoint", "eprec")
    hosts = [("h1", encode_key(bytes(host_key("h1").verify_key)), 0, None)]
    async with running_ledger(url, data, hosts, name="quiet", checkpoint_every=10**6,
                               checkpoint_ms=200) as (led, js):
        for subject, payload in run.messages:
            await js.publish(subject, payload)
        for _ in range(100):  # the stream stays quiet from here on
            last = led.store.last_checkpoint()
            if last is not None and last[0] == len(run.messages):
                return len(run.messages), last[0]
            await asyncio.sleep(0.05)
    return len(run.messages), None


def test_a_timed_checkpoint_is_signed_while_the_stream_is_quiet(
        tmp_path: Path, nats_server: NatsServer) -> None:
    """checkpoint_ms applies after the last batch too: no later message is needed for the
    leaves already folded to get a signed checkpoint."""
    count, signed = asyncio.run(_quiet_checkpoint(nats_server.url, tmp_path / "quiet"))
    assert signed == count


def test_a_run_cache_smaller_than_a_batch_changes_no_decision(tmp_path: Path) -> None:
    """Run states advanced or created inside a batch are never evicted before the batch is
    stored: with a cache of one run, batches holding four interleaved runs decide as one."""
    stream = _stream()
    hosts = [("h1", encode_key(bytes(host_key("h1").verify_key)), 0, None)]
    whole = reference_fold(stream, hosts, tmp_path / "whole", batch=len(stream))
    seed_hosts(tmp_path / "tiny", hosts)
    fold_in_random_batches(stream, tmp_path / "tiny", random.Random(5), 40, run_cache=1)
    tiny = store_summary(tmp_path / "tiny")
    assert (tiny.size, tiny.root, tiny.segments) == (whole.size, whole.root, whole.segments)
    assert tiny.rejections == whole.rejections


def test_a_checkpoint_asked_from_outside_the_fold_waits_for_the_commit(tmp_path: Path) -> None:
    """A checkpoint signed by someone other than the fold loop (the demo, the bench, the API)
    while a batch's commit is in flight waits for it: it neither fails on the open
    transaction nor signs a tree that is not committed."""
    from fleet_ledger.ledger.service import Ledger, LedgerConfig

    async def scenario(ledger: Ledger) -> tuple[bool, str | None]:
        await ledger.pipeline.lock.acquire()  # as the pipeline holds it from start to settle
        ledger.store.write_batch([], 0)  # the batch's transaction, its commit in flight
        waiter = asyncio.create_task(ledger.sign_checkpoint_now())
        await asyncio.sleep(0.05)
        waited = not waiter.done()
        ledger.store.commit()
        ledger.pipeline.lock.release()
        return waited, await waiter

    ledger = Ledger(LedgerConfig(data_dir=tmp_path / "led", servers=[], seal_workers=0))
    try:
        waited, note = asyncio.run(scenario(ledger))
    finally:
        ledger.store.close()
    assert waited
    assert note is not None and ledger.origin in note
