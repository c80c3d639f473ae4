"""The HTTP benchmark's load: ``python -m fleet_ledger.cli._bench_http_load URL CLIENTS`` runs
CLIENTS
concurrent followers of the log at URL until a line (or end of file) arrives on stdin, then
prints one JSON line of what they got. A separate process, so its work never shares the
ledger's interpreter lock.

Each follower loops: GET /checkpoint (its latency is recorded), then three hash tiles and
one entry bundle that the checkpoint's size has (random full level-0 tiles, the partial
level-0 tile, a level-1 tile), each with ``Accept-Encoding: gzip``, as a monitor catching
up would. Everything is counted by status.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from typing import Any

import aiohttp

from fleet_ledger.fleet.log.tiles import TILE_WIDTH, Tile


def _tiles(size: int, rng: random.Random) -> list[str]:
    full = size // TILE_WIDTH
    paths = []
    for _ in range(2):
        if full:
            paths.append(Tile(0, rng.randrange(full)).path())
    if size % TILE_WIDTH:
        paths.append(Tile(0, full, size % TILE_WIDTH).path())
    if size >= TILE_WIDTH:
        level1 = size // TILE_WIDTH
        paths.append(Tile(1, 0, min(level1, TILE_WIDTH)).path())
    if full:
        paths.append(Tile(None, rng.randrange(full)).path())
    return paths


async def follower(session: aiohttp.ClientSession, base: str, stop: asyncio.Event,
                   stats: dict[str, Any], seed: int) -> None:
    rng = random.Random(seed)
    while not stop.is_set():
        t0 = time.perf_counter()
        async with session.get(base + "/checkpoint") as resp:
            body = await resp.read()
            status = resp.status
        stats["checkpoint_ms"].append((time.perf_counter() - t0) * 1000)
        stats["codes"][str(status)] = stats["codes"].get(str(status), 0) + 1
        if status != 200:
            await asyncio.sleep(0.01)
            continue
        size = int(body.split(b"\n")[1])
        for path in _tiles(size, rng):
            async with session.get(f"{base}/{path}",
                                   headers={"Accept-Encoding": "gzip"}) as resp:
                await resp.read()
                stats["codes"][str(resp.status)] = stats["codes"].get(str(resp.status), 0) + 1
                if resp.status == 200:
                    stats["tiles"] += 1


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


async def main(base: str, clients: int) -> dict[str, Any]:
    stats: dict[str, Any] = {"checkpoint_ms": [], "codes": {}, "tiles": 0}
    stop = asyncio.Event()
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector) as session:
        started = time.perf_counter()
        tasks = [asyncio.create_task(follower(session, base, stop, stats, n))
                 for n in range(clients)]
        print("started", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        stop.set()
        elapsed = time.perf_counter() - started
        await asyncio.gather(*tasks, return_exceptions=True)
    lat = stats["checkpoint_ms"]
    return {"clients": clients, "seconds": round(elapsed, 3), "tiles": stats["tiles"],
            "tiles_per_s": round(stats["tiles"] / elapsed, 1),
            "checkpoints": len(lat), "checkpoint_p50_ms": _pct(lat, 0.50),
            "checkpoint_p99_ms": _pct(lat, 0.99), "codes": stats["codes"]}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], int(sys.argv[2])))), flush=True)
