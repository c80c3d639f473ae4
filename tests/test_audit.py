"""``fleet audit`` on a simulated fleet whose Blocked and Unproved runs, cheap parks, all-
estimated host and still-parked run are known: it reports exactly those, over the API and
offline alike."""

from __future__ import annotations

import json
import time

from http_helpers import enroll_h1, publish, serving

from fleet_ledger.fleet.address import format_address
from fleet_ledger.fleet.audit import AuditPark, AuditRun, audit
from fleet_ledger.fleet.record.segment import CallAccount

from fault_helpers import MANIFEST, SealedRun, sealed_run
from pipeline_helpers import cli, wait_for

WATTS = 5  # a parked image's idle power on the honest hosts


def resume(run: SealedRun, idle_uj: int, provenance: str) -> None:
    snap = run.builder.state.parked
    assert snap is not None
    meter = "rapl:psys" if provenance == "measured" else "estimate:storage"
    run.add(run.builder.resume(snap, MANIFEST, idle_uj, provenance, meter))


def fleet_runs(park_s: float) -> tuple[dict[str, SealedRun], dict[str, int]]:
    """The fleet: named runs, and per run how many of its messages go before the pause."""
    runs: dict[str, SealedRun] = {}
    cut: dict[str, int] = {}

    def parked(host: str, name: str, idle_uj: int | None, provenance: str = "measured",
               transcript: bool = False) -> None:
        r = sealed_run(host, name, "e")
        r.park(1, transcript=transcript)
        cut[name] = len(r.messages)
        if idle_uj is not None:
            resume(r, idle_uj, provenance)
            r.execute(3)
            r.close()
        runs[name] = r

    honest = int(WATTS * 1e6 * park_s)
    parked("h1", "h1-image", honest)
    parked("h1", "h1-transcript", honest // 10, transcript=True)
    blocked = sealed_run("h1", "h1-blocked", "e")
    blocked.execute(2, calls=CallAccount(("x",), ("x",)))  # waits inside its own receipt
    blocked.close()
    runs["h1-blocked"] = blocked
    unproved = sealed_run("h1", "h1-unproved", "e")
    unproved.execute(2, calls=None)  # an interval without an account
    runs["h1-unproved"] = unproved
    parked("h2", "h2-cheap", 10)  # 10 uJ for a whole park: far too cheap
    parked("h2", "h2-cheap-2", 12)
    parked("h3", "h3-estimated", honest, provenance="estimated")
    parked("h3", "h3-still", None)  # never resumed
    cut.update({"h1-blocked": len(blocked.messages), "h1-unproved": len(unproved.messages)})
    return runs, cut


def test_audit_reports_exactly_the_known_runs_parks_and_hosts(nats_server, tmp_path):
    """Over the API: one Blocked run at its segment, one Unproved, the rest NonBlocking;
    the cheap host and the all-estimated host flagged and no other; the one run still
    parked; energy per host and parks by form add up; offline --data says the same."""
    data = tmp_path / "ledger"
    enroll_h1(data, "h2", "h3")
    park_s = 0.6
    runs, cut = fleet_runs(park_s)
    ids = {name: format_address(r.run) for name, r in runs.items()}
    with serving(nats_server.url, data, "--checkpoint-ms", "100") as served:
        first = [m for name, r in runs.items() for m in r.messages[:cut[name]]]
        publish(nats_server.url, first)
        # The parks last at least this long between their two folds: the first halves are
        # folded before the wait starts (on a loaded machine they could otherwise fold in
        # one batch with the second halves, and the parks would last no time at all).
        wait_for(lambda: json.loads(cli("status", "--json", "--nats", nats_server.url).stdout)
                 ["segments_folded"] == len(first), 30, "the first halves' fold")
        time.sleep(park_s)
        publish(nats_server.url, [m for name, r in runs.items()
                                  for m in r.messages[cut[name]:]])
        total = sum(len(r.messages) for r in runs.values())
        wait_for(lambda: json.loads(cli("status", "--json", "--nats", nats_server.url).stdout)
                 ["segments_folded"] == total, 30, "the fold")
        doc = json.loads(cli("audit", "--json", "--nats", nats_server.url).stdout)
        text = cli("audit", "--nats", nats_server.url).stdout
    assert served.vkey
    assert doc["runs"] == 8
    assert doc["verdicts"] == {"NonBlocking": 6, "Blocked": 1, "Malformed": 0, "Unproved": 1}
    assert doc["blocked_or_malformed"] == [
        {"run": ids["h1-blocked"], "host": "h1", "verdict": "Blocked", "segment": 2}]
    assert doc["unproved"] == [{"run": ids["h1-unproved"], "host": "h1"}]
    suspicious = {s["host"]: s["reasons"] for s in doc["suspicious_hosts"]}
    assert set(suspicious) == {"h2", "h3"}, suspicious
    assert len(suspicious["h2"]) == 1 and suspicious["h2"][0].startswith("image+memory parks")
    assert suspicious["h3"] == ["all 1 parks' idle energy is estimated"]
    assert [(p["run"], p["host"], p["form"]) for p in doc["parked"]] == [
        (ids["h3-still"], "h3", "image+memory")]
    assert doc["parked"][0]["parked_s"] >= park_s
    forms = {p["form"]: p for p in doc["parks"]}
    assert forms["image+memory"]["parks"] == 4 and forms["transcript"]["parks"] == 1
    assert forms["image+memory"]["estimated"] == 1
    assert forms["image+memory"]["hours_parked"] * 3600 >= 4 * park_s * 0.9
    hosts = {h["host"]: h for h in doc["hosts"]}
    honest = int(WATTS * 1e6 * park_s)
    assert hosts["h1"]["idle_uj"] == {"measured": honest + honest // 10, "estimated": 0}
    assert hosts["h2"]["idle_uj"] == {"measured": 22, "estimated": 0}
    assert hosts["h3"]["idle_uj"] == {"measured": 0, "estimated": honest}
    assert "Blocked" in text and "h2: image+memory parks cost" in text
    offline = json.loads(cli("audit", "--json", "--data", str(data)).stdout)
    for key in ("verdicts", "blocked_or_malformed", "unproved", "hosts", "parks",
                "suspicious_hosts"):
        assert offline[key] == doc[key], key
    future = json.loads(cli("audit", "--json", "--data", str(data), "--since",
                            str(time.time() + 3600)).stdout)
    assert future["runs"] == 0 and [p["run"] for p in future["parked"]] == []
    recent = json.loads(cli("audit", "--json", "--data", str(data), "--since", "1h").stdout)
    assert recent["verdicts"] == doc["verdicts"]


def test_a_park_folded_in_one_batch_counts_but_has_no_rate():
    """A park whose suspend and resume were folded at one instant is counted with its
    energy but adds no hours, and a form with no measurable hours has no per-hour rate."""
    run = AuditRun("r", "h", "closed", "NonBlocking", None, {"measured": 5}, {"measured": 9},
                   1.0, 1.0, (AuditPark(2, "image", 1.0, 1.0, 9, "measured"),))
    doc = audit([run], now=2.0)
    assert doc["parks"] == [{"form": "image", "parks": 1, "idle_uj": 9, "hours_parked": 0.0,
                             "idle_uj_per_hour": None, "estimated": 0, "measured": 1}]
    assert doc["suspicious_hosts"] == []


def test_a_park_closed_bare_is_named_and_one_closed_with_its_idle_energy_counts():
    """A parked run closed with its park's idle energy counts as a park (energy and hours);
    one closed bare is neither parked now nor a priced park: it is listed as closed without
    its idle energy and makes its host suspicious."""
    priced = AuditRun("p", "h1", "closed", "NonBlocking", None, {"measured": 5},
                      {"estimated": 7200}, 0.0, 7200.0,
                      (AuditPark(2, "transcript", 0.0, 7200.0, 7200, "estimated"),))
    bare = AuditRun("b", "h2", "closed", "NonBlocking", None, {"measured": 5}, {}, 0.0,
                    7200.0, (AuditPark(2, "transcript", 0.0, 7200.0, closed_bare=True),))
    doc = audit([priced, bare], now=9000.0)
    assert doc["parks"] == [{"form": "transcript", "parks": 1, "idle_uj": 7200,
                             "hours_parked": 2.0, "idle_uj_per_hour": 3600.0,
                             "estimated": 1, "measured": 0}]
    assert doc["parked"] == []
    assert doc["closed_without_idle"] == [{"run": "b", "host": "h2", "form": "transcript",
                                           "segment": 2}]
    assert {"host": "h2", "reasons": [
        "1 parked runs closed without their park's idle energy"]} in doc["suspicious_hosts"]


def test_bad_since_is_a_user_error(tmp_path):
    """--since that is not a duration, a time or a number exits 2 with one line."""
    out = cli("audit", "--data", str(tmp_path), "--since", "yesterday-ish", check=False)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1


def test_a_slot_claimed_by_two_runs_is_named_once_and_only_then():
    """Two runs claiming one slot make one reused-slot entry naming both and a reason on
    the host; slots used once make none."""
    def run(name: str, slot: str) -> AuditRun:
        return AuditRun(name, "h", "ran", "Unproved", None, {}, {}, 1.0, 1.0, (),
                        {"measured": 3}, {}, ((slot, "claimed", 1),))

    doc = audit([run("r1", "b3:s"), run("r2", "b3:s"), run("r3", "b3:t")], now=2.0)
    assert doc["reused_slots"] == [{"slot": "b3:s", "uses": [
        {"run": "r1", "host": "h", "kind": "claimed", "segment": 1},
        {"run": "r2", "host": "h", "kind": "claimed", "segment": 1}]}]
    assert doc["hosts"][0]["claim_uj"] == {"measured": 9, "estimated": 0}
    assert doc["suspicious_hosts"] == [{"host": "h",
                                        "reasons": ["warm slot b3:s is counted 2 times"]}]
    assert audit([run("r1", "b3:s")], now=2.0)["reused_slots"] == []
