"""The whole pipeline for real: host processes record and publish, `fleet ledger serve`
folds, the API proves, and offline checks agree with what the ledger says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleet_ledger.fleet.address import format_address
from fleet_ledger.fleet.log.note import parse_verifier_key
from fleet_ledger.fleet.record.verify import verify_record
from fleet_ledger.fleet.record.wait_proof import verdict_json
from fleet_ledger.fleet.record.wire import decode_record
from fleet_ledger.plumbing.natsd import NatsServer

from fault_helpers import LedgerProc, store_summary
from pipeline_helpers import api, cli, cli_json, host_keys, outbox_rows, prove_all, wait_folded

pytestmark = pytest.mark.timeout(240)

HOSTS = ["host1", "host2", "host3"]


def _written(base: Path) -> set[tuple[str, int, str]]:
    """(run, idx, head) of every segment the hosts wrote; each must be acked by the broker."""
    out: set[tuple[str, int, str]] = set()
    for name in HOSTS:
        rows = outbox_rows(base / name)
        assert rows and all(r[3] == "acked" for r in rows), f"{name} left segments unsent"
        out |= {(r[0], r[1], r[2]) for r in rows}
    return out


def _fold_once_each_and_prove(url: str, led: Path, base: Path, runs_each: int
                              ) -> list[dict[str, object]]:
    """Three simulated host processes with ``runs_each`` runs each, against the running
    ledger in ``led``: every written segment is one leaf exactly once, and every run's head
    proves offline against the ledger's vkey. The ledger's runs."""
    summary = cli_json("host", "simulate", "--hosts", "3", "--runs", str(runs_each), "--nats",
                       url, "--data", str(base), "--enroll-into", str(led), "--json",
                       timeout=180)
    assert summary["failed"] == []
    assert sorted(h["host"] for h in summary["hosts"]) == HOSTS
    assert all(h["remaining"] == 0 and h["runs"] == runs_each for h in summary["hosts"])
    top = wait_folded(url, led)

    written = _written(base)
    grants = 3 * runs_each  # each run's grant event precedes its segments in the stream
    assert sum(h["segments_written"] for h in summary["hosts"]) == len(written) == top - grants
    s = store_summary(led)
    assert s.rejections == []
    assert s.size == len(s.segments) == len(written)
    assert {(r, i, h) for r, i, h, _, _ in s.segments} == written
    s.check_leaves()  # leaf indexes 0..n-1 once each; root == MTH of exactly those leaves

    runs = api(url, "runs")["runs"]
    assert len(runs) == 3 * runs_each == len({r for r, _, _ in written})
    vkey = parse_verifier_key((led / "ledger.vkey").read_text().strip())
    leaf_of = {(r, i): li for r, i, _, li, _ in s.segments}
    proved = prove_all(url, [r["run"] for r in runs], [vkey])
    seen = set()
    for row, (bundle, ok) in zip(runs, proved, strict=True):
        run, index = format_address(ok.leaf.run), ok.leaf.index
        assert (run, index, format_address(ok.leaf.head)) == (
            row["run"], row["segments"], row["head"])
        assert ok.leaf_index == leaf_of[(run, index)] == bundle["leaf_index"]
        assert ok.checkpoint.size >= ok.leaf_index + 1
        seen.add(ok.leaf_index)
    assert len(seen) == len(runs)
    return runs


@pytest.mark.slow
def test_three_hosts_fifty_runs_fold_once_each_and_every_run_proves(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """Three host processes x 50 runs: every written segment is one leaf exactly once, every
    run's head proves offline against the vkey, and exported records verify to the ledger's
    own run status."""
    url, led, base = nats_server.url, tmp_path / "ledger", tmp_path / "hosts"
    with LedgerProc(url, led, "--name", "e2e", log=tmp_path / "ledger.log") as ledger:
        ledger.start()
        runs = _fold_once_each_and_prove(url, led, base, 50)

        # Every run: the exported record verifies from genesis to the ledger's run status.
        for row in runs:
            status = api(url, "run", {"run": row["run"]})
            report = verify_record(decode_record(json.dumps(api(url, "export",
                                                                {"run": row["run"]})).encode()))
            assert (report.run, report.segments, report.phase, report.head) == (
                status["run"], status["segments"], status["phase"], status["head"])
            assert report.energy.as_json() == status["energy"]
            assert verdict_json(report.wait_proof) == status["wait_proof"]
            assert report.sealed

        # And through the CLI for one run of each host, an open one among them if any.
        picks = {r["host"]: r for r in sorted(runs, key=lambda r: r["phase"] == "closed")}
        assert sorted(picks) == HOSTS
        for row in picks.values():
            out = tmp_path / f"{row['host']}.json"
            cli("run", "export", row["run"], "--out", str(out), "--nats", url)
            verdict = json.loads(cli("verify", str(out), "--json").stdout)
            shown = cli_json("run", "show", row["run"], "--json", "--nats", url)
            assert verdict["verdict"] == "valid" and verdict["sealed"] is True
            for key in ("run", "segments", "phase", "head", "energy", "wait_proof"):
                assert verdict[key] == shown[key], key
        assert ledger.alive()


def test_two_ledgers_on_one_stream_agree(nats_server: NatsServer, tmp_path: Path) -> None:
    """Two ledgers (own names, own folders) folding the same stream reach the same size,
    root and leaves, and both sign checkpoints of that tree."""
    url, base = nats_server.url, tmp_path / "hosts"
    a, b = tmp_path / "a", tmp_path / "b"
    keys = host_keys(base, HOSTS)
    for data in (a, b):
        data.mkdir()
        for name, pub in keys.items():
            assert cli("host", "enroll", name, "--pubkey", pub, "--data", str(data)
                       ).stdout.strip() == f"enrolled {name}"
    with LedgerProc(url, a, "--name", "a", log=tmp_path / "a.log") as la, \
            LedgerProc(url, b, "--name", "b", log=tmp_path / "b.log") as lb:
        la.start()
        lb.start()
        summary = cli_json("host", "simulate", "--hosts", "3", "--runs", "12", "--nats", url,
                           "--data", str(base), "--json", timeout=120)
        assert summary["failed"] == []
        top = wait_folded(url, a, b)
        sa, sb = store_summary(a), store_summary(b)
        leaves = top - 3 * 12  # the stream also holds each run's grant event
        assert sa.size == sb.size == leaves
        assert sa.root == sb.root
        assert sa.segments == sb.segments
        sa.check_leaves()
        cp = api(url, "checkpoint")  # answered by either ledger of the queue group
        assert 0 < cp["size"] <= top
        vka = (a / "ledger.vkey").read_text().strip()
        vkb = (b / "ledger.vkey").read_text().strip()
        assert vka != vkb and vka.startswith("fleet-ledger.local/a+")
        for data, vk in ((a, vka), (b, vkb)):
            st = cli_json("status", "--data", str(data), "--json")
            assert (st["tree_size"], st["root"], st["vkey"]) == (leaves, sa.root.hex(), vk)


def test_a_ledger_pulling_through_nats_pys_fetch_folds_every_segment_once_and_proves(
    nats_server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fallback puller (nats-py's public fetch, forced with ``FLEET_PULLER=fetch``, as a
    nats-py the lean puller is not tested against would get it): three host processes'
    segments are each one leaf exactly once, every run's head proves offline against the
    vkey, and `fleet status` says which puller runs and why."""
    url, led, base = nats_server.url, tmp_path / "ledger", tmp_path / "hosts"
    monkeypatch.setenv("FLEET_PULLER", "fetch")  # the ledger child inherits it
    with LedgerProc(url, led, "--name", "fetch", log=tmp_path / "ledger.log") as ledger:
        ledger.start()
        _fold_once_each_and_prove(url, led, base, 8)
        status = ledger.status()
        puller = status["puller"]
        assert (puller["kind"], puller["mode"], puller["reason"]) == (
            "fetch", "fetch", "forced by FLEET_PULLER=fetch")
        assert puller["fallbacks"] >= 1 and puller["nats_py"]
        assert status["healthy"] and status["lag"] == 0
        text = cli("status", "--nats", url).stdout
        assert f"puller      fetch   fallbacks {puller['fallbacks']}   (forced by" in text
        assert "pulling with nats-py's fetch (forced by FLEET_PULLER=fetch)" in ledger.log_text()
        assert ledger.alive()
