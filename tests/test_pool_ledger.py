"""Warm pools through a real nats-server and `fleet ledger serve`: a claimed run and the
pool's evictions are folded, shown (``fleet run show``, ``fleet audit``), exported records
verify offline by both decoders and their heads prove; a made-up zero-energy claim is
refused by the ledger by name."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from fleet_ledger.agents.host import Host
from fleet_ledger.agents.pool_records import claimed_segment
from fleet_ledger.agents.publisher import Publisher
from fleet_ledger.agents.warm_pool import WarmPool
from fleet_ledger.fleet.address import digest, format_address
from fleet_ledger.fleet.log.note import parse_verifier_key
from fleet_ledger.fleet.record.builder import RecordBuilder
from fleet_ledger.fleet.record.kernel import NO_GRANTS, genesis, pool_unit
from fleet_ledger.fleet.record.segment import Claimed, ImageSnapshot
from fleet_ledger.fleet.record.wire import encode_envelope
from fleet_ledger.fleet.subjects import segment_subject
from fleet_ledger.plumbing.nats_connect import connect
from fleet_ledger.plumbing.natsd import NatsServer

from fault_helpers import LedgerProc, forge
from pipeline_helpers import api, cli, cli_json, host_keys, prove_all, wait_folded

pytestmark = pytest.mark.timeout(180)

MANIFEST = format_address(digest(b"pool-ledger/manifest"))
ROOT = format_address(digest(b"pool-ledger/fs-root"))
UNIT, GRANTS = digest(b"pool-ledger/unit"), digest(b"pool-ledger/grants")


async def _publish(host: Host, url: str, extra: list[tuple[str, bytes]]) -> None:
    """Drain the host's outbox to the stream, then publish ``extra`` messages as they are."""
    nc = await connect([url], name="test-pool-host")
    try:
        js = nc.jetstream(timeout=5.0)
        report = await Publisher(host.outbox, js).drain(timeout=30.0)
        assert report.remaining == 0, report
        for subject, data in extra:
            await js.publish(subject, data)
    finally:
        await nc.close()


def _zero_claim(host: Host) -> tuple[str, bytes]:
    """A claimed first segment saying its slot drew nothing, validly sealed by the host."""
    b = RecordBuilder(host.key, digest(b"pool-ledger/made-up"), GRANTS)
    made_up = Claimed(slot=digest(b"slot"), snapshot=ImageSnapshot(digest(b"fs")),
                      manifest=digest(b"m"), warm_uj=0, warm_provenance="measured",
                      warm_meter="rapl", idle_uj=0, idle_provenance="estimated",
                      idle_meter="estimate:volume@6W/TB")
    sealed = forge(host.key, b.state, made_up)  # type: ignore[arg-type]
    run = format_address(b.run)
    return (segment_subject(host.name, run),
            encode_envelope(host.name, b.run, b.state.unit_id, b.state.grants_id, sealed))


def test_claims_and_evictions_are_folded_shown_verified_and_proved(
        nats_server: NatsServer, tmp_path: Path) -> None:
    """A run claimed after an idle slot and a pool run of two evictions reach the ledger:
    run show and audit give the claim and overhead energy per host, both records verify
    offline (fast and --reference), both heads prove, a made-up zero-energy claim is
    refused as ZeroClaimEnergy, and an evicted slot claimed anyway is named by the audit."""
    url, led, base = nats_server.url, tmp_path / "ledger", tmp_path / "hosts"
    data = base / "p1"
    key = host_keys(base, ["p1"])["p1"]
    with LedgerProc(url, led, log=tmp_path / "ledger.log") as ledger:
        ledger.start()
        cli("host", "enroll", "p1", "--pubkey", key, "--data", str(led))
        warm = ["pool", "warm", "--data", str(data), "--manifest", MANIFEST, "--fs-root", ROOT,
                "--volume-bytes", str(2**33), "--json"]
        slots = [cli_json(*warm, "--", "true")["slot"] for _ in range(3)]
        claimed = cli_json("pool", "claim", slots[0], "--data", str(data), "--host", "p1",
                           "--unit", format_address(UNIT), "--grants", format_address(GRANTS),
                           "--json")
        run = format_address(genesis(UNIT, GRANTS))
        assert claimed["record"] == {"run": run, "segment": 1, "kind": "claimed",
                                     "energy": claimed["record"]["energy"]}
        evicted = [cli_json("pool", "evict", s, "--data", str(data), "--host", "p1", "--json")
                   for s in slots[1:]]
        pool_run = format_address(genesis(pool_unit("p1", "default"), NO_GRANTS))
        assert [e["record"]["segment"] for e in evicted] == [1, 2]
        assert {e["record"]["run"] for e in evicted} == {pool_run}
        late = cli("pool", "claim", slots[1], "--data", str(data), "--host", "p1",
                   "--unit", format_address(digest(b"late")), "--grants",
                   format_address(GRANTS), check=False)
        assert late.returncode == 1 and "SlotEvicted" in late.stdout + late.stderr

        host = Host("p1", data)
        pool = WarmPool(data / "pool.db")
        try:
            hr = host.open_run(UNIT, GRANTS)
            hr.execute(uj=2000, provenance="measured", meter="rapl:package-0",
                       journal_root=digest(b"j1"))
            hr.close()
            # A dishonest host claims an evicted slot behind its pool's back: the ledger
            # folds each run alone and takes it; the audit names the slot counted twice.
            twice = host.open_run(digest(b"pool-ledger/twice"), GRANTS)
            twice.claim(claimed_segment(pool.slot(slots[1]), pool.accrued(slots[1])))
            asyncio.run(_publish(host, url, [_zero_claim(host)]))
        finally:
            pool.close()
            host.close()
        wait_folded(url, led)

        shown = cli_json("run", "show", run, "--json", "--nats", url)
        claim_uj = claimed["total_uj"]
        assert sum(shown["energy"]["claim_uj"].values()) == claim_uj > 0
        assert shown["energy"]["total_uj"] == claim_uj + 2000
        assert f"claim {claim_uj}" in cli("run", "show", run, "--nats", url).stdout
        overhead = sum(e["total_uj"] for e in evicted)
        pool_shown = cli_json("run", "show", pool_run, "--json", "--nats", url)
        assert pool_shown["phase"] == "pool" and pool_shown["segments"] == 2
        assert sum(pool_shown["energy"]["overhead_uj"].values()) == overhead

        audit = cli_json("audit", "--json", "--nats", url)
        p1, = [h for h in audit["hosts"] if h["host"] == "p1"]
        assert sum(p1["claim_uj"].values()) == claim_uj + evicted[0]["total_uj"]
        assert sum(p1["overhead_uj"].values()) == overhead
        reused, = audit["reused_slots"]
        assert reused["slot"] == slots[1]
        assert sorted((u["kind"], u["run"]) for u in reused["uses"]) == [
            ("claimed", format_address(genesis(digest(b"pool-ledger/twice"), GRANTS))),
            ("evicted", pool_run)]
        assert any(slots[1] in reason for s in audit["suspicious_hosts"] if s["host"] == "p1"
                   for reason in s["reasons"])
        text = cli("audit", "--nats", url).stdout
        assert "warm pools by host" in text and "counted more than once: 1" in text

        rules = [(r["rule"], r["index"]) for r in api(url, "rejections")["rejections"]]
        assert rules == [("ZeroClaimEnergy", 1)]

        for r, segments in ((run, 3), (pool_run, 2)):
            path = tmp_path / f"{r[3:15]}.json"
            path.write_text(json.dumps(api(url, "export", {"run": r})))
            for extra in ([], ["--reference"]):
                got = cli_json("verify", str(path), "--json", *extra)
                assert got["segments"] == segments, got
        verifier = parse_verifier_key((led / "ledger.vkey").read_text().strip())
        proved = prove_all(url, [run, pool_run], [verifier])
        assert [p.leaf.index for _bundle, p in proved] == [3, 2]
