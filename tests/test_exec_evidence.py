"""The exec guard's evidence reaches an auditor: `fleet run show RUN --exec-journal FILE`
verifies the run's record from the ledger and lists, per executed segment, the exec
decisions its journal root commits to."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from fleet_ledger.agents.exec_journal_store import ExecJournal
from fleet_ledger.agents.host import Host
from fleet_ledger.agents.publisher import Publisher
from fleet_ledger.fleet.address import digest
from fleet_ledger.plumbing.nats_connect import connect
from fleet_ledger.plumbing.natsd import NatsServer

from fault_helpers import LedgerProc
from pipeline_helpers import cli, cli_json, wait_folded


def test_run_show_lists_each_segments_exec_denials(nats_server: NatsServer, tmp_path: Path):
    """Two intervals journaled (one with a denial), each sealed as an executed segment whose
    journal root is the interval's root: run show names the denial at its segment, and a
    journal edited afterwards is refused."""
    url, led = nats_server.url, tmp_path / "ledger"
    host = Host("h1", tmp_path / "h1")
    journal = ExecJournal(tmp_path / "h1" / "exec-journal.db")
    policy, denied = digest(b"policy"), digest(b"miner bytes")
    try:
        run = host.open_run(digest(b"unit-exec"), digest(b"grants"))
        journal.append(access="exec", verdict="allow", cause="policy", content=digest(b"sh"),
                       policy=policy, label="shell", path="/bin/sh")
        _n, first, _count = journal.seal_interval()
        run.execute(uj=10, provenance="measured", meter="m", journal_root=first)
        journal.append(access="exec", verdict="deny", cause="policy", content=denied,
                       policy=policy, label="cryptominer", path="/tmp/x/miner")
        _n, second, _count = journal.seal_interval()
        run.execute(uj=20, provenance="measured", meter="m", journal_root=second)
        run.execute(uj=30, provenance="measured", meter="m", journal_root=digest(b"other"))
        journal.close()
        with LedgerProc(url, led, log=tmp_path / "ledger.log") as ledger:
            ledger.start()
            cli("host", "enroll", "h1", "--pubkey", host.public_key, "--data", str(led))

            async def publish() -> None:
                nc = await connect([url])
                try:
                    report = await Publisher(host.outbox, nc.jetstream()).drain(timeout=30)
                    assert report.remaining == 0
                finally:
                    await nc.close()

            asyncio.run(publish())
            wait_folded(url, led)
            shown = cli_json("run", "show", run.run, "--exec-journal",
                             str(tmp_path / "h1" / "exec-journal.db"), "--json", "--nats", url)
            by_segment = {m["segment"]: m for m in shown["exec"]}
            assert by_segment[1]["interval"] == 1 and by_segment[1]["denials"] == []
            assert by_segment[2]["interval"] == 2
            assert [(d["label"], d["path"]) for d in by_segment[2]["denials"]] == [
                ("cryptominer", "/tmp/x/miner")]
            assert by_segment[3]["interval"] is None
            text = cli("run", "show", run.run, "--exec-journal",
                       str(tmp_path / "h1" / "exec-journal.db"), "--nats", url).stdout
            assert "segment 2: exec journal interval 2, 1 decisions, 1 denied" in text
            assert "cryptominer" in text
            # An auditor handed an edited journal is told so.
            import sqlite3

            db = sqlite3.connect(tmp_path / "h1" / "exec-journal.db")
            db.execute("UPDATE entries SET verdict = 'allow' WHERE verdict = 'deny'")
            db.commit()
            db.close()
            edited = cli("run", "show", run.run, "--exec-journal",
                         str(tmp_path / "h1" / "exec-journal.db"), "--nats", url, check=False)
            assert edited.returncode == 1 and "do not match" in edited.stderr
            assert json.loads(cli("run", "show", run.run, "--json", "--nats", url).stdout)[
                "segments"] == 3
    finally:
        host.close()
