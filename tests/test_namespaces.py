"""Two fleets on one NATS server (``fleet --fleet NAME``): each ledger folds only its own
fleet's stream and answers only its own fleet's API."""

from __future__ import annotations

import json
from pathlib import Path

from http_helpers import publish
from replica_helpers import enroll, operator

from fleet_ledger.fleet.record.seal import encode_key
from fleet_ledger.fleet.subjects import DEFAULT_FLEET, fleet_names
from fleet_ledger.plumbing.natsd import NatsServer

from fault_helpers import LedgerProc, fleet, sealed_run, store_summary, wait_until


def test_the_default_fleet_keeps_todays_names() -> None:
    """The default fleet's names are exactly the fixed names of before namespaces."""
    names = fleet_names()
    assert (names.stream, names.segments, names.checkpoints, names.api_service,
            names.api_queue, names.api_subject("status"), names.rejection_subject("h"),
            names.control_subject("enroll"), names.cosigned, names.lease_bucket,
            names.replicas_bucket) == (
        "FLEET", "fleet.seg", "fleet.checkpoint", "fleet-ledger", "fleet-ledger",
        "fleet.api.status", "fleet.rej.h", "fleet.ctl.host", "fleet.checkpoint.cosigned",
        "fleet-ledger-lease", "fleet-ledger-replicas")
    assert names == DEFAULT_FLEET
    assert (names.runtime_signals, names.runtime_signal_subject, names.runtime_runs,
            names.runtime_journals, names.runtime_keys) == (
        "RUNTIME_SIGNALS", "fleet.runtime.signal", "RUNTIME_RUNS", "RUNTIME_JOURNALS",
        "RUNTIME_KEYS")
    blue = fleet_names("blue")
    assert (blue.runtime_signals, blue.runtime_signal_subject, blue.runtime_runs) == (
        "BLUE_RUNTIME_SIGNALS", "blue.runtime.signal", "BLUE_RUNTIME_RUNS")
    assert fleet_names("blue").cosigned == "blue.checkpoint.cosigned"


def test_two_fleets_on_one_server_do_not_see_each_other(nats_server: NatsServer,
                                                         tmp_path: Path) -> None:
    """A ledger of fleet ``blue`` and one of the default fleet, on one server, fold only
    their own fleet's segments and control events and answer only their own API."""
    url = nats_server.url
    vkey, op = operator(tmp_path)
    plain = LedgerProc(url, tmp_path / "plain", "--operator-vkey", vkey)
    blue = LedgerProc(url, tmp_path / "blue", "--operator-vkey", vkey,
                      "--origin", "fleet-ledger.local/blue", fleet_name="blue")
    with plain, blue:
        plain.start()
        blue.start()
        enroll(url, op, "h1")
        out = fleet("--fleet", "blue", "host", "enroll", "h1", "--pubkey",
                    json.loads(fleet("status", "--json", "--nats", url).stdout)["hosts"][0][
                        "public_key"], "--nats", url, *op, "--json")
        assert json.loads(out.stdout)["subject"] == "blue.ctl.host"
        mine = sealed_run("h1", "plain-run", "eec")
        theirs = sealed_run("h1", "blue-run", "ee")
        publish(url, mine.messages + [("blue" + s.removeprefix("fleet"), d)
                                      for s, d in theirs.messages])
        wait_until(lambda: store_summary(plain.data).size == 3
                   and store_summary(blue.data).size == 2, 30, "both fleets folded")
        for data, run in ((plain.data, mine), (blue.data, theirs)):
            s = store_summary(data)
            assert {r[0] for r in s.segments} == {"b3:" + r for r in [
                run.subject.split(".")[-1]]}
            assert s.rejections == []
        a = json.loads(fleet("status", "--json", "--nats", url).stdout)
        b = json.loads(fleet("--fleet", "blue", "status", "--json", "--nats", url).stdout)
        assert (a["origin"], a["tree_size"]) == ("fleet-ledger.local/ledger", 3)
        assert (b["origin"], b["tree_size"]) == ("fleet-ledger.local/blue", 2)
        none = fleet("--fleet", "green", "status", "--nats", url, check=False)
        assert none.returncode == 2 and "no ledger" in none.stderr
        # A simulated host of fleet blue publishes on blue's subjects, into blue's stream.
        from fleet_ledger.agents.host import load_or_create_key

        sim = tmp_path / "sim"
        sim.mkdir()
        pub = encode_key(bytes(load_or_create_key(sim).verify_key))
        fleet("--fleet", "blue", "host", "enroll", "sim", "--pubkey", pub, "--nats", url, *op)
        done = json.loads(fleet("--fleet", "blue", "host", "simulate", "--runs", "2",
                                "--nats", url, "--data", str(sim), "--name", "sim",
                                "--json").stdout)
        assert done["remaining"] == 0 and done["segments_written"] > 0
        wait_until(lambda: store_summary(blue.data).size == 2 + done["segments_written"], 30,
                   "blue folded the simulated host")
        assert store_summary(plain.data).size == 3
