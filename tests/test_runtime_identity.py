"""A runtime run's identity is real: its manifest commits to the workflow module's bytes
(or its declared code version) and its environment (a C7 manifest stamped with both), so a
resume under other code or another environment is refused by name before any step runs;
and a run can hold an issued grant, under a ledger that requires one."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from test_moving_runs import fleet as fleet  # the same three enrolled hosts and a ledger

from fleet_ledger.fleet.env.manifest import manifest_of
from fleet_ledger.fleet.runtime.runtime_identity import (
    CODE_VERSION_ENV,
    code_version,
    run_manifest,
    stamped,
)
from fleet_ledger.fleet.runtime.runtime_journal import runtime_manifest

from fault_helpers import LedgerProc
from pipeline_helpers import api, cli, host_keys, wait_folded

pytestmark = pytest.mark.timeout(240)

IMAGE = "ghcr.io/example/agent@sha256:" + "1" * 64

V1 = '''
from fleet_ledger.agents.runtime import Context

def effect(what: str) -> str:
    return "done:" + what

async def flow(ctx: Context, inp: dict) -> dict:
    first = await ctx.step("first", effect, "a")
    sig = await ctx.signal("go")
    last = await ctx.step("last", effect, "b")
    return {"first": first, "sig": sig, "last": last}
'''

# The same workflow with a patched step after the wait, under a declared version.
VERSIONED = V1.replace("    return {", "    if ctx.patched('extra'):\n"
                       "        await ctx.step('extra', effect, 'x')\n    return {") + \
    "\nflow.code_version = 'flow-1'\n"


def test_the_old_nominal_manifest_did_not_see_code_and_the_new_one_does():
    """Without the defence, two different module texts share one manifest (the workflow's
    name only); with it, they differ, a declared version keeps them equal, and an
    environment is a real C7 manifest stamped with the workflow and its version."""
    a, b = V1.encode(), (V1 + "# changed\n").encode()
    assert runtime_manifest("m:flow") == runtime_manifest("m:flow")  # blind to a and b
    assert run_manifest("m:flow", code_version(a)) != run_manifest("m:flow", code_version(b))
    assert run_manifest("m:flow", code_version(a, "v1")) == run_manifest(
        "m:flow", code_version(b, "v1"))
    env = manifest_of({"image": IMAGE})
    other = manifest_of({"image": IMAGE, "remoteUser": "agent"})
    assert run_manifest("m:flow", "v1", env) != run_manifest("m:flow", "v1", other)
    assert run_manifest("m:flow", "v1", env) != run_manifest("m:flow", "v1")
    m = stamped(env, "m:flow", "v1")
    assert manifest_of(m.devcontainer).digest == m.digest == run_manifest("m:flow", "v1", env)
    assert m.devcontainer["containerEnv"][CODE_VERSION_ENV] == "v1"


def _runtime(*args: str, env: dict[str, str], check: bool = True) -> Any:
    out = cli("runtime", *args, "--json", env=env, check=check)
    return [json.loads(line) for line in out.stdout.splitlines()] if check else out


def test_a_resume_under_changed_code_or_environment_is_refused_by_name(
        fleet, tmp_path: Path):  # type: ignore[no-untyped-def]
    """Three runs park on A. The module's bytes change: the first (no declared version) is
    refused CodeChanged; the second (declared version, change marked with ctx.patched)
    continues; the third, started in one environment, is refused EnvironmentChanged by a
    worker in another. Nothing is sealed for a refused run."""
    url, led, base = fleet
    code = tmp_path / "code"
    code.mkdir()
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    (tmp_path / "env1.json").write_text(json.dumps({"image": IMAGE}))
    (tmp_path / "env2.json").write_text(json.dumps({"image": IMAGE, "remoteUser": "x"}))
    host = ["--path", str(code), "--data", str(base / "A"), "--name", "A", "--nats", url]
    runs = {}
    (code / "wfa.py").write_text(V1)
    (code / "wfb.py").write_text(VERSIONED.replace("if ctx.patched", "if False and ctx.patched"))
    runs["code"] = _runtime("start", "wfa:flow", "r-code", *host, env=env)[0]["run"]
    runs["marked"] = _runtime("start", "wfb:flow", "r-marked", *host, env=env)[0]["run"]
    (code / "wfe.py").write_text(V1)  # unchanged
    runs["env"] = _runtime("start", "wfe:flow", "r-env", *host, "--environment",
                           str(tmp_path / "env1.json"), env=env)[0]["run"]
    (code / "wfa.py").write_text(V1 + "# a new line: other bytes\n")
    (code / "wfb.py").write_text(VERSIONED)
    wait_folded(url, led)
    for run in runs.values():
        cli("signal", run, "go", "--data", "1", "--nats", url)
    reports = {r["run"]: r for r in _runtime(
        "worker", "--once", "--vkey", str(led / "ledger.vkey"), "--environment",
        str(tmp_path / "env2.json"), *host, env=env)}
    assert reports[runs["code"]]["refused"] == "CodeChanged", reports
    assert "code version" in reports[runs["code"]]["detail"]
    assert reports[runs["env"]]["refused"] == "EnvironmentChanged", reports
    # (the versioned run needs no environment: this worker's env2 changes its manifest too)
    assert reports[runs["marked"]]["refused"] == "EnvironmentChanged"
    reports = {r["run"]: r for r in _runtime("worker", "--once", "--vkey",
                                             str(led / "ledger.vkey"), *host, env=env)}
    assert reports == {}  # refused runs stay out until someone acts
    wait_folded(url, led)
    for run in runs.values():
        assert api(url, "run", {"run": run})["segments"] == 2


def test_a_declared_code_version_continues_a_run_whose_change_is_marked(
        fleet, tmp_path: Path):  # type: ignore[no-untyped-def]
    """A run of a workflow that declares code_version parks; its module changes (a step
    added behind ctx.patched) under the same version: the worker continues it, the old
    journal takes the old path, and the run ends done."""
    url, led, base = fleet
    code = tmp_path / "code"
    code.mkdir()
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    host = ["--path", str(code), "--data", str(base / "A"), "--name", "A", "--nats", url]
    (code / "wfc.py").write_text(VERSIONED.replace("if ctx.patched", "if False and ctx.patched"))
    run = _runtime("start", "wfc:flow", "r-v", *host, env=env)[0]["run"]
    (code / "wfc.py").write_text(VERSIONED)
    wait_folded(url, led)
    cli("signal", run, "go", "--data", "1", "--nats", url)
    (report,) = _runtime("worker", "--once", "--vkey", str(led / "ledger.vkey"), *host,
                         env=env)
    assert report["status"] == "done", report
    assert report["result"] == {"first": "done:a", "sig": 1, "last": "done:b"}


def test_a_runtime_run_holds_an_issued_grant_under_a_ledger_that_requires_one(
        nats_server, tmp_path: Path):  # type: ignore[no-untyped-def]
    """A ledger with --grants require: a run started without a grant is refused at its
    first segment (UnknownGrant); one started with --grant (an issued grant file) is
    folded, its record's grants_id the grant's address."""
    url, led, base = nats_server.url, tmp_path / "ledger", tmp_path / "hosts"
    keys = host_keys(base, ["A"])
    env = {**os.environ, "TRIAGE_TRACKER": str(tmp_path / "tracker.jsonl")}
    examples = str(Path(__file__).resolve().parent.parent / "examples")
    host = ["--path", examples, "--data", str(base / "A"), "--name", "A", "--nats", url]
    inp = json.dumps({"ticket": 1, "text": "down"})
    with LedgerProc(url, led, "--grants", "require", log=tmp_path / "ledger.log") as ledger:
        ledger.start()
        cli("host", "enroll", "A", "--pubkey", keys["A"], "--data", str(led))
        cli("grant", "keygen", "--out", str(tmp_path / "k"))
        agent = cli("grant", "keygen", "--out", str(tmp_path / "k"), "--name",
                    "agent").stdout.strip()
        grant = json.loads(cli(
            "grant", "issue", "--key", str(tmp_path / "k" / "issuer.key"), "--subject", agent,
            "--scope", "/runtime", "--budget-uj", str(10**15), "--expires-in", "1h",
            "--host", "A", "--out", str(tmp_path / "run.grant"), "--nats", url,
            "--json").stdout)
        bare = _runtime("start", "triage:triage", "no-grant", "--input", inp, *host, env=env)
        granted = _runtime("start", "triage:triage", "granted", "--input", inp, "--grant",
                           str(tmp_path / "run.grant"), *host, env=env)
        wait_folded(url, led)
        assert api(url, "run", {"run": granted[0]["run"]})["segments"] == 2
        shown = cli("run", "show", granted[0]["run"], "--json", "--nats", url).stdout
        assert json.loads(shown)["grant"]["id"] == grant["address"]
        rules = {r["run"]: r["rule"] for r in api(url, "rejections")["rejections"]}
        assert rules == {bare[0]["run"]: "UnknownGrant"}


def test_a_host_adopting_a_run_under_changed_code_refuses_it_by_name(
        fleet, tmp_path: Path):  # type: ignore[no-untyped-def]
    """A parks a run; the workflow's module changes; B adopts it (record and journal
    verified) and refuses CodeChanged before any step runs, naming the code version A
    parked under (from the runs bucket); the ledger still holds two segments."""
    url, led, base = fleet
    code = tmp_path / "code"
    code.mkdir()
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    (code / "wfx.py").write_text(V1)
    run = _runtime("start", "wfx:flow", "r-moved", "--path", str(code), "--data",
                   str(base / "A"), "--name", "A", "--nats", url, env=env)[0]["run"]
    (code / "wfx.py").write_text(V1.replace('"done:"', '"DONE:"'))
    wait_folded(url, led)
    cli("signal", run, "go", "--data", "1", "--nats", url)
    (report,) = _runtime("worker", "--once", "--vkey", str(led / "ledger.vkey"), "--path",
                         str(code), "--data", str(base / "B"), "--name", "B", "--nats", url,
                         env=env)
    assert report["refused"] == "CodeChanged", report
    wait_folded(url, led)
    assert api(url, "run", {"run": run})["segments"] == 2
