"""``fleet bench host``: what one durable segment costs a host (prepare, put, apply).

One round opens a fresh host folder, opens a run and times ``--segments`` executed segments
(each sealed, checked and put in the outbox with its run state: WAL, ``synchronous=FULL``);
rounds report µs per segment, the median across rounds is the figure.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import click

from fleet_ledger.cli._app import bench
from fleet_ledger.cli._common import emit_result


def host_segment_us(folder: Path, segments: int) -> tuple[float, float]:
    """Wall and CPU µs per ``HostRun.execute`` over ``segments`` segments in a fresh host at
    ``folder`` (the wall time includes the fsyncs; the CPU time is what they leave)."""
    from fleet_ledger.agents.host import Host
    from fleet_ledger.fleet.address import digest

    host = Host("bench", folder)
    try:
        run = host.open_run(digest(b"bench-host/unit"), digest(b"bench-host/grants"))
        roots = [digest(b"j%d" % i) for i in range(segments)]
        start, cpu = time.perf_counter(), time.process_time()
        for root in roots:
            run.execute(uj=1000, provenance="measured", meter="rapl:package-0",
                        journal_root=root)
        took, cpu = time.perf_counter() - start, time.process_time() - cpu
    finally:
        host.close()
    return took / segments * 1e6, cpu / segments * 1e6


@bench.command("host")
@click.option("--segments", default=300, show_default=True, help="segments per round")
@click.option("--rounds", default=5, show_default=True, help="rounds (median reported)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def bench_host(segments: int, rounds: int, as_json: bool) -> None:
    """µs per durable host segment (seal, outbox put with the run's state, apply)."""
    if segments < 1 or rounds < 1:
        raise click.BadParameter("--segments and --rounds must be at least 1")
    wall, cpu = [], []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory(prefix="fleet-bench-host-") as tmp:
            w, c = host_segment_us(Path(tmp) / "host", segments)
        wall.append(w)
        cpu.append(c)
    result = {"segments": segments, "rounds": rounds,
              "segment_us": round(statistics.median(wall), 1),
              "segment_cpu_us": round(statistics.median(cpu), 1),
              "rounds_us": [round(x, 1) for x in wall]}
    emit_result(result, as_json)
