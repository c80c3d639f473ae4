"""The ledger's operations port: /metrics (Prometheus text), /healthz, /readyz, and the
structured logs (``--log-format json``), on a real ``fleet ledger serve``."""

from __future__ import annotations

import json

from http_helpers import enroll_h1, http_get, publish_runs, serving
from prometheus_client.parser import text_string_to_metric_families

from pipeline_helpers import wait_for


def scrape(ops_url: str) -> dict[str, float]:
    """Every sample of /metrics (name{labels} -> value), through prometheus_client's parser."""
    status, headers, body = http_get(ops_url + "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


def test_metrics_parse_and_move_when_segments_arrive(nats_server, tmp_path):
    """/metrics parses with prometheus_client's parser; after segments arrive the tree and
    signed sizes, runs, fold batch and publish-to-commit histograms and the HTTP request
    counters have moved, and a refused segment is counted under its rule."""
    data = tmp_path / "ledger"
    enroll_h1(data)
    with serving(nats_server.url, data, "--checkpoint-ms", "100") as served:
        before = scrape(served.ops_url)
        assert before["fleet_tree_size"] == 0 and before["fleet_signed_size"] == 0
        assert before["fleet_fold_batch_seconds_count"] == 0
        publish_runs(nats_server.url, ["eee", "eprc"], "metrics")
        wait_for(lambda: scrape(served.ops_url)["fleet_signed_size"] == 7, 30,
                 "a checkpoint of 7")
        assert http_get(served.log_url + "/tile/0/000.p/7")[0] == 200
        assert http_get(served.log_url + "/tile/0/000.p/8")[0] == 404
        after = scrape(served.ops_url)
        assert after["fleet_tree_size"] == 7 and after["fleet_runs"] == 2
        assert after["fleet_fold_batch_seconds_count"] >= 1
        assert after["fleet_publish_to_commit_seconds_count"] >= 1
        assert 0 < after["fleet_publish_to_commit_seconds_sum"] < 30
        assert after["fleet_checkpoint_timestamp_seconds"] > before[
            "fleet_checkpoint_timestamp_seconds"]
        assert after["fleet_unsigned_leaf_age_seconds"] == 0
        assert after["fleet_http_requests_total{code=200,kind=tile}"] == 1
        assert after["fleet_http_requests_total{code=404,kind=tile}"] == 1
        assert after["fleet_http_requests_total{code=200,kind=metrics}"] >= 2
        publish_runs(nats_server.url, ["eee"], "metrics")  # the same run again: refused
        refused = wait_for(lambda: (r := {k: v for k, v in scrape(served.ops_url).items()
                                          if k.startswith("fleet_refusals_total")})
                           and sum(r.values()) == 3 and r, 30, "three refusals")
        assert set(refused) == {"fleet_refusals_total{rule=Replay}"}


def test_health_and_readiness(nats_server, tmp_path):
    """/healthz answers 200; /readyz is 200 with every check passing while checkpoints
    keep up, and 503 naming the unsigned-leaf check once a leaf waits past the bound."""
    data = tmp_path / "ledger"
    enroll_h1(data)
    with serving(nats_server.url, data, "--checkpoint-ms", "100") as served:
        assert http_get(served.ops_url + "/healthz")[0] == 200
        status, _, body = http_get(served.ops_url + "/readyz")
        doc = json.loads(body)
        assert status == 200 and doc["ready"] is True
        assert set(doc["checks"]) == {"nats", "fold", "store", "unsigned_leaf_age"}
    slow = tmp_path / "slow"
    enroll_h1(slow)
    with serving(nats_server.url, slow, "--checkpoint-ms", "100000000", "--checkpoint-every",
                 "1000000", "--ready-max-unsigned", "0.3", "--name", "slow") as served:
        publish_runs(nats_server.url, ["ee"], "ready")
        status, _, body = wait_for(
            lambda: (r := http_get(served.ops_url + "/readyz"))[0] == 503 and r, 30,
            "readiness to fail")
        doc = json.loads(body)
        assert doc["ready"] is False and doc["checks"]["unsigned_leaf_age"]["ok"] is False
        assert all(c["ok"] for name, c in doc["checks"].items() if name != "unsigned_leaf_age")


def test_json_logs(nats_server, tmp_path):
    """With --log-format json every log line the ledger writes is one JSON object, the HTTP
    access lines among them."""
    data = tmp_path / "ledger"
    enroll_h1(data)
    with serving(nats_server.url, data, "--log-format", "json") as served:
        assert http_get(served.log_url + "/checkpoint")[0] in (200, 404)
        wait_for(lambda: "ledger.http.access" in served.log.read_text(), 10, "an access line")
    lines = [ln for ln in served.log.read_text().splitlines()
             if ln and not ln.startswith(("log http:", "ops http:", "ledger "))]
    docs = [json.loads(ln) for ln in lines]
    assert any(d["logger"] == "ledger.http.access" and "GET /checkpoint" in d["msg"]
               for d in docs)
    assert all({"ts", "level", "logger", "msg"} <= d.keys() for d in docs)


def test_standby_keeps_no_unsigned_leaves_and_is_ready():
    """A replica that does not sign keeps nothing per batch (it would never drop it) and
    its readiness reports it a standby instead of an ever older unsigned leaf."""
    from fleet_ledger.ledger.http import Readiness, ready_checks
    from fleet_ledger.ledger.metrics import FoldMetrics, new_registry

    metrics = FoldMetrics(new_registry())
    for size in range(1, 1001):
        metrics.batch_committed(0.0, size, None, now=1000.0, signing=False)
    assert not metrics._unsigned and metrics.unsigned_age(0, now=5000.0) == 0.0
    metrics.batch_committed(0.0, 1001, None, now=1000.0)
    assert metrics.unsigned_age(0, now=1010.0) == 10.0
    metrics.batch_committed(0.0, 1002, None, now=1000.0, signing=False)  # lost the lead
    assert metrics.unsigned_age(0, now=5000.0) == 0.0

    class Reader:
        def refresh_signed(self) -> int:
            return 0

    checks = ready_checks(Reader(), Readiness(unsigned_age=lambda signed: 1e9,
                                              signs=lambda: False))
    assert checks["unsigned_leaf_age"] == {"ok": True, "detail": "standby (does not sign)"}
    checks = ready_checks(Reader(), Readiness(unsigned_age=lambda signed: 1e9))
    assert not checks["unsigned_leaf_age"]["ok"]
