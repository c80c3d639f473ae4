"""The fold's decisions do not depend on where batches end (no broker needed).

A ledger may fold the same stream in batches of any size (a crash, a slow fetch, another
replica): the log and every refusal must come out the same, byte for byte.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from test_fuzz_fold import mutate, reseal

from fleet.seal import encode_key

from fault_helpers import host_key, reference_fold, sealed_run


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
