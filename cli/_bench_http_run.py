"""The HTTP benchmark: the fold's rate with and without 64 followers reading the log over
HTTP from the same ledger, in one run, and what the followers got.

One nats-server; one stream pre-filled with N sealed segments (those of ``fleet bench
ingest``). Then fresh ledgers fold it in turn, each with its HTTP servers up in its loop
(:func:`cli._wiring.start_ledger_http`), alternately *quiet* (no requests) and *loaded*
(``python -m fleet_ledger.cli._bench_http_load`` running CLIENTS followers against it from the
moment its
fold starts until its watermark reaches the stream's end). The fold rate of each is N over
that time; the medians are compared. Last, the followers run for a few seconds against the
last ledger, caught up and idle, for the server's own capacity. Every ledger must end with
every segment as a leaf (else :class:`BenchError`).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fleet_ledger.cli._bench_ingest_run import (
    BenchError,
    check_all_folded,
    make_segments,
    publish_all,
    wait_folded,
)
from fleet_ledger.cli._wiring import make_ledger, start_ledger_http
from fleet_ledger.fleet.record.seal import encode_key
from fleet_ledger.ledger.service import LedgerConfig
from fleet_ledger.ledger.stream import ensure_stream
from fleet_ledger.plumbing.nats_connect import connect
from fleet_ledger.plumbing.natsd import NatsServer

__all__ = ["BenchError", "run_bench"]


class Load:
    """The followers' process."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(cls, url: str, clients: int) -> Load:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "fleet_ledger.cli._bench_http_load", url, str(clients),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        assert proc.stdout is not None
        if (await proc.stdout.readline()).strip() != b"started":
            proc.kill()
            raise BenchError("the load process did not start")
        return cls(proc)

    async def stop(self) -> dict[str, Any]:
        import json

        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(b"stop\n")
        await self.proc.stdin.drain()
        line = await asyncio.wait_for(self.proc.stdout.readline(), 60)
        await self.proc.wait()
        return json.loads(line)


async def one_fold(url: str, workdir: Path, n: int, count: int, keys: dict[str, Any],
                   js: Any, clients: int) -> tuple[float, dict[str, Any] | None, Any]:
    """A fresh ledger folding the stream, under load when ``clients``; its rate, the
    load's report, and the ledger with its servers (still running, for the caller to close)."""
    ledger = make_ledger(LedgerConfig(data_dir=workdir / f"ledger-{n}", servers=[url],
                                      name=f"http{n}"))
    for name, key in keys.items():
        ledger.store.enroll(name, encode_key(bytes(key.verify_key)))
    await ledger.start()
    servers = await start_ledger_http(ledger, ("127.0.0.1", 0), ("127.0.0.1", 0))
    assert servers is not None
    host, port = servers.addresses["log"]
    load = await Load.start(f"http://{host}:{port}", clients) if clients else None
    stop = asyncio.Event()
    start = time.perf_counter()
    task = asyncio.create_task(ledger.run(stop))
    await wait_folded(ledger, js, last_seq=count)
    rate = count / (time.perf_counter() - start)
    report = await load.stop() if load is not None else None
    stop.set()
    await task
    check_all_folded(ledger.store, count, f"fold {n + 1}")
    return rate, report, (ledger, servers, f"http://{host}:{port}")


async def run_bench(segments: int, clients: int, repeats: int,
                    idle_seconds: float = 3.0) -> dict[str, Any]:
    messages, keys = make_segments(segments)
    quiet: list[float] = []
    loaded: list[float] = []
    reports: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="fleet-bench-http-") as tmp:
        workdir = Path(tmp)
        with NatsServer(store_dir=workdir / "nats") as server:
            nc = await connect([server.url], name="bench-http-fill")
            js = nc.jetstream(timeout=10.0)
            await ensure_stream(js)
            await publish_all(js, messages)
            last = None
            for n in range(2 * repeats):
                under_load = n % 2 == 1
                rate, report, running = await one_fold(
                    server.url, workdir, n, len(messages), keys, js,
                    clients if under_load else 0)
                (loaded if under_load else quiet).append(rate)
                if report is not None:
                    reports.append(report)
                if last is not None:
                    await last[1].close()
                    await last[0].close()
                last = running
            assert last is not None
            idle_load = await Load.start(last[2], clients)
            await asyncio.sleep(idle_seconds)
            idle = await idle_load.stop()
            await last[1].close()
            await last[0].close()
            await nc.drain()
    q, ld = statistics.median(quiet), statistics.median(loaded)
    codes: dict[str, int] = {}
    for r in reports:
        for code, k in r["codes"].items():
            codes[code] = codes.get(code, 0) + k
    return {
        "segments": segments,
        "clients": clients,
        "fold_per_s_quiet": round(q),
        "fold_per_s_loaded": round(ld),
        "fold_runs_quiet": [round(r) for r in quiet],
        "fold_runs_loaded": [round(r) for r in loaded],
        "fold_drop": round(1 - ld / q, 3),
        "fold_drop_within_10pct": ld >= 0.9 * q,
        "tiles_per_s": statistics.median(r["tiles_per_s"] for r in reports),
        "checkpoint_p50_ms": statistics.median(r["checkpoint_p50_ms"] or 0 for r in reports),
        "checkpoint_p99_ms": statistics.median(r["checkpoint_p99_ms"] or 0 for r in reports),
        "http_codes_under_load": codes,
        "idle_tiles_per_s": idle["tiles_per_s"],
        "idle_checkpoint_p99_ms": idle["checkpoint_p99_ms"],
    }
