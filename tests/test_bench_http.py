"""``fleet bench http``, small: the keys a script reads are there and the followers were
served real tiles; the log port yields to a backlogged fold and only then."""

from __future__ import annotations

import asyncio
import json
import time

from fleet_ledger.ledger.http import Throttle

from pipeline_helpers import cli


def test_bench_http_prints_the_contract_keys():
    """A small run prints the fold rates quiet and loaded, their drop, tiles/s and checkpoint
    latency under load and idle, and the followers got tiles (200s) during the fold."""
    out = cli("bench", "http", "--segments", "2000", "--clients", "4", "--repeats", "1",
              "--json", timeout=240)
    doc = json.loads(out.stdout)
    for key in ("fold_per_s_quiet", "fold_per_s_loaded", "fold_drop", "fold_drop_within_10pct",
                "tiles_per_s", "checkpoint_p99_ms", "idle_tiles_per_s",
                "idle_checkpoint_p99_ms", "http_codes_under_load"):
        assert key in doc, key
    assert doc["clients"] == 4 and doc["fold_per_s_quiet"] > 0 and doc["fold_per_s_loaded"] > 0
    assert doc["idle_tiles_per_s"] > 0
    assert set(doc["http_codes_under_load"]) <= {"200", "404"}


def _passes_at_once(throttle: Throttle) -> bool:
    """Whether one admission completes without waiting (its coroutine never suspends)."""
    coro = throttle.admit()
    try:
        coro.send(None)
    except StopIteration:
        return True
    coro.close()
    return False


def test_throttle_holds_requests_only_while_the_fold_is_busy():
    """While busy, 60 requests at 200/s take at least 0.15 s (after the burst of 20); while
    not busy, every one of 1000 passes without waiting at all (counted, not timed)."""
    async def admit_all(throttle: Throttle, count: int) -> float:
        start = time.monotonic()
        await asyncio.gather(*(throttle.admit() for _ in range(count)))
        return time.monotonic() - start

    busy = [True]
    throttle = Throttle(200.0, lambda: busy[0])
    took = asyncio.run(admit_all(throttle, 60))
    assert 0.15 <= took < 2.0, took

    # Busy and past the burst, a request waits its turn. A rate of one request every 100 s
    # (its burst a thousandth of one) holds that whatever the machine's load: at 200/s, a
    # 5 ms pause of this process before the check gave the bucket its token back.
    slow = Throttle(0.01, lambda: busy[0])
    assert asyncio.run(_at_once(slow, 1)) == [False]
    busy[0] = False
    assert all(asyncio.run(_at_once(slow, 1000)))
    assert all(asyncio.run(_at_once(throttle, 1000)))


async def _at_once(throttle: Throttle, count: int) -> list[bool]:
    return [_passes_at_once(throttle) for _ in range(count)]
