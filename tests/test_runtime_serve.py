"""``fleet runtime serve --http``: a request without the bearer token changes nothing; with
it, POST /runs starts a run (as ``fleet runtime start``), a signal sent twice under one id is
stored once, the id with other data is refused 409, GET /runs/{run} says where it stands."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from test_moving_runs import fleet as fleet  # the same three enrolled hosts and a ledger

from pipeline_helpers import FLEET_BIN, cli

pytestmark = pytest.mark.timeout(240)

TESTS = str(Path(__file__).resolve().parent)
TOKEN = "serve-test-token-0123456789"


def call(base: str, method: str, path: str, doc: Any = None, token: str | None = TOKEN
         ) -> tuple[int, dict[str, Any]]:
    data = None if doc is None else json.dumps(doc).encode()
    req = urllib.request.Request(base + path, data=data, method=method)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def listed(url: str) -> list[dict[str, Any]]:
    return json.loads(cli("runtime", "list", "--json", "--nats", url).stdout)["runs"]


def test_the_endpoint_refuses_without_the_token_and_works_with_it(
        fleet, tmp_path: Path):  # type: ignore[no-untyped-def]
    """No token or a wrong one: 401 on every route, no run started, no signal stored. With
    the token: start parks at the approval wait (201), the same start again 409, a signal
    sent twice is stored once, its id with other data 409 SignalConflict, and the status
    shows the run parked with its wait, head and verdict."""
    url, _led, base = fleet
    (tmp_path / "token").write_text(TOKEN + "\n")
    env = {**os.environ, "RUNTIME_EFFECTS": str(tmp_path / "fx.db")}
    proc = subprocess.Popen([FLEET_BIN, "runtime", "serve", "--http", "127.0.0.1:0",
                             "--token-file", str(tmp_path / "token"), "--path", TESTS,
                             "--data", str(base / "A"), "--name", "A", "--nats", url],
                            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("serving http://127.0.0.1:"), proc.stderr.read()  # type: ignore
        http = line.split()[1]
        start = {"workflow": "runtime_flows:approval", "name": "web-1", "input": {"ticket": 7}}
        for token in (None, "wrong-token-0123456789", TOKEN[:-1]):
            assert call(http, "POST", "/runs", start, token)[0] == 401
            assert call(http, "POST", "/runs/web-1/signals/approve",
                        {"id": "evil", "data": {"ok": False}}, token)[0] == 401
            assert call(http, "GET", "/runs/web-1", None, token)[0] == 401
        assert listed(url) == []
        assert not (base / "A" / "runtime.db").exists() or b"web-1" not in (
            base / "A" / "runtime.db").read_bytes()

        status, doc = call(http, "POST", "/runs", start)
        assert status == 201 and doc["status"] == "parked", doc
        assert doc["wait"]["signal"] == "approve"
        run = doc["run"]
        assert call(http, "POST", "/runs", start)[0] == 409
        sent = [call(http, "POST", f"/runs/{who}/signals/approve",
                     {"id": "evil", "data": {"ok": True}}) for who in ("web-1", run)]
        assert [(s, d["duplicate"]) for s, d in sent] == [(200, False), (200, True)]
        status, doc = call(http, "POST", "/runs/web-1/signals/approve",
                           {"id": "evil", "data": {"ok": False}})
        assert status == 409 and doc["error"] == "SignalConflict", doc
        assert call(http, "POST", "/runs/web-1/signals/approve", {"data": 1})[0] == 400
        assert call(http, "GET", "/runs/nobody")[0] == 404
        status, doc = call(http, "GET", "/runs/web-1")
        assert status == 200 and doc["status"] == "parked" and doc["run"] == run
        assert doc["wait"]["signal"] == "approve" and doc["head"].startswith("b3:")
        assert "verdict" in doc
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert proc.returncode == 0
    assert [(d["name"], d["status"]) for d in listed(url)] == [("web-1", "parked")]
