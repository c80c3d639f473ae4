"""Signal → resumed step latency for ``fleet bench runtime --signals N``.

A real nats-server (a free loopback port, a temporary store), a host whose worker waits
(``Worker.run_forever`` as ``fleet runtime worker``: woken by the signals stream's push,
a full pass every ``poll`` seconds; with ``push`` off, only the passes),
and a run that parks on a signal N times. Each round sends the signal the way ``fleet
signal`` does (``FleetStore.send_signal``) and times until the step after the wait runs
in the worker's interval: the worker's pass, the claim, resumption precondition 1, the
replay, the step, all included.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path
from typing import Any

MARKS: dict[int, float] = {}  # round -> perf_counter when its step ran (same process)


def mark(i: int) -> int:
    MARKS[i] = time.perf_counter()
    return i


async def signalled(ctx: Any, inp: dict[str, Any]) -> int:
    """``n`` rounds of: wait for signal "go", then a step that marks the time."""
    for i in range(int(inp["n"])):
        await ctx.signal("go")
        await ctx.step("mark", mark, i)
    return int(inp["n"])


async def _measure(folder: Path, url: str, rounds: int, poll: float, push: bool
                   ) -> list[float]:
    from fleet_ledger.agents.host import Host
    from fleet_ledger.agents.runtime import Runtime
    from fleet_ledger.agents.runtime.fleet_store import FleetStore
    from fleet_ledger.agents.runtime.runtime import workflow_name
    from fleet_ledger.agents.runtime.worker import Worker, running_doc
    from fleet_ledger.cli.runtime_cmds import _drain
    from fleet_ledger.fleet.subjects import run_token
    from fleet_ledger.ledger.stream import ensure_stream
    from fleet_ledger.plumbing.nats_connect import connect

    nc = await connect([url], name="bench-runtime-signal", wait_s=10.0)
    host = Host("bench", folder)
    rt = Runtime(folder, host=host)
    try:
        js = nc.jetstream(timeout=10.0)
        await ensure_stream(js, names=host.names)
        store = await FleetStore(js, host.names).open()

        async def no_adopt(run: str) -> Any:
            raise RuntimeError(f"bench: run {run} is not held here")

        worker = Worker(rt, store, no_adopt, _drain(host, nc))
        run = rt.start(signalled, "signal-bench", {"n": rounds})
        await store.announce(running_doc(run, "signal-bench", workflow_name(signalled),
                                         host.name))
        await worker.publish(await rt.advance(run))
        stop = asyncio.Event()
        loop = asyncio.create_task(worker.run_forever(stop, lambda _r: None, poll, push))
        took = []
        for i in range(rounds):
            sent = time.perf_counter()
            await store.send_signal(run, "go", {"i": i}, f"go-{i}")
            while i not in MARKS:
                await asyncio.sleep(0.001)
            took.append((MARKS[i] - sent) * 1000)
            while i < rounds - 1 and ((await store.get(run_token(run))) or ({},))[0].get(
                    "status") != "parked":
                await asyncio.sleep(0.005)
        stop.set()
        await loop
        return took
    finally:
        rt.close()
        host.close()
        await nc.close()


def signal_latency(folder: Path, rounds: int, poll: float, push: bool = True
                   ) -> dict[str, Any]:
    """p50 / p99 / max ms from a signal sent to the step after its wait running."""
    from fleet_ledger.plumbing.testing import running_server

    MARKS.clear()
    with running_server(folder / "nats") as server:
        took = asyncio.run(_measure(folder / "host", server.url, rounds, poll, push))
    ordered = sorted(took)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"signal_rounds": rounds, "signal_worker_poll_s": poll,
            "signal_worker_wake": "push" if push else "poll",
            "signal_to_step_p50_ms": round(statistics.median(took), 1),
            "signal_to_step_p99_ms": round(p99, 1),
            "signal_to_step_max_ms": round(ordered[-1], 1)}
