"""``fleet bench adopt``: what a host pays to take over a long parked run.

A run of N segments (intervals, then a park) is published to a real nats-server and folded
by a real ledger; then another host adopts it through the ledger's API, as `fleet run adopt`
does: fetch the record (``export``), verify it from genesis with every seal, fetch and check
a proof of its head under the ledger's key. Each phase is timed, over several adoptions
(median), beside a baseline measured in the same run: bare Ed25519 checks of the same seals
(the floor any verification of the record pays).
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import click

from fleet_ledger.cli._app import CheckFailed, bench
from fleet_ledger.cli._common import emit_result


class _Timed:
    """A record source that times each call of the one it wraps."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.fetch_s = 0.0
        self.prove_s = 0.0

    def record(self, run: str) -> bytes:
        t = time.perf_counter()
        try:
            return self.inner.record(run)
        finally:
            self.fetch_s += time.perf_counter() - t

    def proof(self, run: str, index: int) -> dict[str, Any]:
        t = time.perf_counter()
        try:
            return self.inner.proof(run, index)
        finally:
            self.prove_s += time.perf_counter() - t


async def _measure(workdir: Path, segments: int, repeats: int) -> dict[str, Any]:
    from nacl.signing import SigningKey

    from fleet_ledger.agents.host import Host
    from fleet_ledger.cli._embedded import embedded_ledger
    from fleet_ledger.cli._wiring import LedgerRecordSource
    from fleet_ledger.fleet.address import digest, format_address
    from fleet_ledger.fleet.record.builder import RecordBuilder
    from fleet_ledger.fleet.record.seal import encode_key, seal_message
    from fleet_ledger.fleet.record.segment import make_snapshot
    from fleet_ledger.fleet.record.wire import encode_envelope, segment_id
    from fleet_ledger.fleet.subjects import segment_subject

    key = SigningKey(bytes([7]) * 32)
    b = RecordBuilder(key, digest(b"bench-adopt/unit"), digest(b"bench-adopt/grants"))
    for i in range(segments - 1):
        b.execute(uj=1000 + i, provenance="measured", meter="rapl:package-0",
                  journal_root=digest(b"j%d" % i))
    b.suspend(make_snapshot(transcript=digest(b"transcript")), digest(b"manifest"))
    run = format_address(b.run)
    async with embedded_ledger(workdir) as (server, ledger):
        ledger.store.enroll("origin", encode_key(bytes(key.verify_key)))
        assert ledger.js is not None
        subject = segment_subject("origin", run)
        messages = [encode_envelope("origin", b.run, b.state.unit_id, b.state.grants_id, s)
                    for s in b.sealed]
        acks = [ledger.js.publish(subject, m, headers={"Nats-Msg-Id": segment_id(m)})
                for m in messages]
        for first in range(0, len(acks), 500):
            await asyncio.gather(*acks[first:first + 500])
        deadline = time.monotonic() + 120
        while ledger.store.watermark() < segments:
            if time.monotonic() > deadline:
                raise CheckFailed("bench adopt: the ledger did not fold the run in time")
            await asyncio.sleep(0.05)
        await ledger.sign_checkpoint_now()
        keys = [ledger.signer.verifier()]
        source = LedgerRecordSource(server.url, timeout=60.0)
        rounds = []
        for n in range(repeats):
            host = Host(f"adopter{n}", workdir / f"adopter{n}")
            timed = _Timed(source)
            t = time.perf_counter()
            held = await asyncio.to_thread(host.adopt_run, run, timed, keys)
            total = time.perf_counter() - t
            host.close()
            assert held.state.index == segments and held.state.phase == "parked"
            rounds.append((total, timed.fetch_s, timed.prove_s))
        seals = [(seal_message(b.run, s.index, s.head), s.seal) for s in b.sealed]
        t = time.perf_counter()
        for message, signature in seals:
            key.verify_key.verify(message, signature)
        bare = time.perf_counter() - t
        size = len(await asyncio.to_thread(source.record, run))

    def med(i: int) -> float:
        return statistics.median(r[i] for r in rounds)

    verify = statistics.median(r[0] - r[1] - r[2] for r in rounds)
    return {
        "segments": segments, "repeats": repeats, "record_bytes": size,
        "adopt_ms": round(med(0) * 1e3, 1), "fetch_ms": round(med(1) * 1e3, 1),
        "verify_ms": round(verify * 1e3, 1), "prove_ms": round(med(2) * 1e3, 1),
        "bare_ed25519_ms": round(bare * 1e3, 1),
        "verify_over_bare_ed25519": round(verify / bare, 3),
        "statistic": "wall time, median of the adoptions; fetch and prove are API round "
                     "trips through nats-server (prove includes checking the bundle)",
    }


@bench.command("adopt")
@click.option("--segments", default=10_000, show_default=True, type=click.IntRange(2))
@click.option("--repeats", default=5, show_default=True, type=click.IntRange(1))
@click.option("--json", "as_json", is_flag=True, help="Print JSON only.")
def bench_adopt(segments: int, repeats: int, as_json: bool) -> None:
    """Adopting a parked run of N segments: fetch, verify from genesis, prove."""
    with tempfile.TemporaryDirectory(prefix="fleet-bench-adopt-") as tmp:
        result = asyncio.run(_measure(Path(tmp), segments, repeats))
    emit_result(result, as_json)
