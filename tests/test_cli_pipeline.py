"""Every pipeline command run as the installed `fleet` program against a real ledger: its
output, its JSON and its exit code, including an unreachable ledger (one line, exit 2),
`fleet up` stopped with SIGINT and the progress shown on a terminal only."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import pty
import random
import shutil
import signal
import sqlite3
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nats
import pytest
from test_nats_config import running

from fleet_ledger.agents.simulate import plan
from fleet_ledger.fleet.log.merkle import verify_consistency
from fleet_ledger.ledger.nats_config import write_config
from fleet_ledger.ledger.stream import ensure_stream
from fleet_ledger.plumbing.natsd import NatsServer
from fleet_ledger.plumbing.testing import running_server

from fault_helpers import store_summary, stream_state
from pipeline_helpers import (
    FLEET_BIN,
    api,
    cli,
    cli_json,
    closed_port,
    outbox_rows,
    port_open,
    spawn,
    stop,
    wait_folded,
    wait_for,
    wait_proc,
)

pytestmark = pytest.mark.timeout(120)
FREE_HTTP = ("--http", "127.0.0.1:0", "--ops", "127.0.0.1:0")  # not the fixed default ports


@dataclass
class Stack:
    url: str
    data: Path  # the ledger's folder
    hosts: Path
    tmp: Path
    runs: list[dict]

    @property
    def vkey(self) -> Path:
        return self.data / "ledger.vkey"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A nats-server, `fleet ledger serve` and two simulated hosts' runs, for the module."""
    tmp = tmp_path_factory.mktemp("stack")
    data, hosts = tmp / "ledger", tmp / "hosts"
    with running_server(tmp / "nats") as server:
        log = tmp / "ledger.log"
        ledger = spawn("ledger", "serve", "--nats", server.url, "--data", str(data),
                       "--name", "cli", "--checkpoint-ms", "200", log=log)
        try:
            wait_for(lambda: b"serving" in log.read_bytes() or ledger.poll() is not None, 30,
                     "the ledger to start")
            assert ledger.poll() is None, log.read_text()
            out = cli_json("host", "simulate", "--hosts", "2", "--runs", "4", "--nats",
                           server.url, "--data", str(hosts), "--enroll-into", str(data),
                           "--json")
            assert out["failed"] == [] and len(out["hosts"]) == 2
            wait_folded(server.url, data)
            runs = api(server.url, "runs")["runs"]
            yield Stack(server.url, data, hosts, tmp, runs)
        finally:
            assert stop(ledger) == 0, log.read_text()[-2000:]


# -- an unreachable ledger ---------------------------------------------------------------

API_COMMANDS = [
    ["status"], ["status", "--json"], ["prove", "b3:x"], ["consistency", "0", "1"],
    ["run", "show", "b3:x"], ["run", "list", "--json"], ["run", "export", "b3:x", "--out", "x"],
    ["rejections", "--json"], ["checkpoint"], ["checkpoint", "--json"],
]


@pytest.mark.parametrize("args", API_COMMANDS, ids=" ".join)
def test_unreachable_nats_is_one_line_and_exit_2(args: list[str], tmp_path: Path) -> None:
    """With nothing listening at --nats, an API command exits 2 with one line on stderr,
    nothing on stdout and no traceback (and promptly)."""
    url = f"nats://127.0.0.1:{closed_port()}"
    r = subprocess.run([FLEET_BIN, *args, "--nats", url], capture_output=True, text=True,
                       timeout=20, cwd=tmp_path, stdin=subprocess.DEVNULL, check=False)
    assert r.returncode == 2, r
    assert r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        f"Error: cannot reach NATS at {url}: connection refused"]


def test_no_ledger_on_a_live_server_is_one_line(nats_server: NatsServer) -> None:
    """NATS answers but no ledger serves the API: exit 2, one line saying so."""
    r = cli("status", "--nats", nats_server.url, check=False)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        f"Error: no ledger is serving its API on {nats_server.url}"]


def test_serve_and_simulate_give_up_on_unreachable_nats(tmp_path: Path) -> None:
    """`fleet ledger serve` and `fleet host simulate` wait FLEET_NATS_WAIT seconds for a
    server that is not there, then exit 2 with an error line and no traceback."""
    url = f"nats://127.0.0.1:{closed_port()}"
    env = {"FLEET_NATS_WAIT": "1"}
    for args in (["ledger", "serve", "--nats", url, "--data", str(tmp_path / "l")],
                 ["host", "simulate", "--nats", url, "--data", str(tmp_path / "h")]):
        r = cli(*args, check=False, timeout=30, env=env)
        assert r.returncode == 2, r
        assert "Traceback" not in r.stderr
        assert r.stderr.strip().splitlines()[-1].startswith(
            f"Error: cannot reach NATS at {url} (tried for 1s)")


# -- reading the ledger ------------------------------------------------------------------


def test_status_online_and_offline_agree(stack: Stack) -> None:
    """`fleet status --json` over NATS and `--data DIR` offline give the same log, with
    every documented key; the text form shows the same numbers."""
    online = cli_json("status", "--json", "--nats", stack.url)
    offline = cli_json("status", "--data", str(stack.data), "--json")
    for doc in (online, offline):
        assert {"origin", "vkey", "tree_size", "root", "runs", "segments_folded", "rejected",
                "stream_seq", "lag"} <= set(doc)
        assert isinstance(doc["rejected"], dict)
        assert all(isinstance(v, int) for v in doc["rejected"].values())
    keys = ("origin", "vkey", "tree_size", "root", "runs", "segments_folded", "stream_seq")
    assert {k: online[k] for k in keys} == {k: offline[k] for k in keys}
    assert online["lag"] == 0 and offline["lag"] is None
    assert online["vkey"] == stack.vkey.read_text().strip()
    assert online["runs"] == len(stack.runs) == 8
    assert online["tree_size"] == store_summary(stack.data).size
    text = cli("status", "--nats", stack.url).stdout
    assert f"tree size   {online['tree_size']}   root {online['root']}" in text
    # The running ledger's puller: the lean one on the pinned nats-py; none offline.
    assert {k: online["puller"][k] for k in ("kind", "mode", "fallbacks", "reason")} == {
        "kind": "lean", "mode": "auto", "fallbacks": 0, "reason": None}
    assert offline["puller"] is None
    assert "puller      lean   fallbacks 0\n" in text
    # An auditor's copy: the database and the public vkey, no secret key.
    copy = stack.tmp / "audit"
    copy.mkdir(exist_ok=True)
    src, dst = sqlite3.connect(stack.data / "ledger.db"), sqlite3.connect(copy / "ledger.db")
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()
    shutil.copy(stack.vkey, copy / "ledger.vkey")
    audit = cli_json("status", "--data", str(copy), "--json")
    assert {k: audit[k] for k in keys} == {k: offline[k] for k in keys}
    missing = cli("status", "--data", str(stack.tmp / "nowhere"), check=False)
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1


def test_prove_then_verify_proof_offline(stack: Stack, tmp_path: Path) -> None:
    """`fleet prove` (stdout, --out, --index) gives bundles `fleet verify-proof` accepts
    with the vkey; a flipped hash or an unknown run fails with exit 1."""
    run = next(r for r in stack.runs if r["segments"] >= 2)
    out = tmp_path / "proof.json"
    r = cli("prove", run["run"], "--out", str(out), "--nats", stack.url)
    assert r.stdout == "" and r.stderr.startswith(f"wrote {out}: leaf ")
    bundle = json.loads(out.read_text())
    assert (bundle["run"], bundle["index"], bundle["head"]) == (
        run["run"], run["segments"], run["head"])
    ok = cli("verify-proof", str(out), "--vkey", str(stack.vkey))
    assert ok.stdout.startswith(f"proof verified: {run['run']} segment {run['segments']}")
    first = json.loads(cli("prove", run["run"], "--index", "1", "--json", "--nats",
                           stack.url).stdout)
    assert first["index"] == 1 and first["leaf_index"] < bundle["leaf_index"]
    (tmp_path / "first.json").write_text(json.dumps(first))
    cli("verify-proof", str(tmp_path / "first.json"), "--vkey", str(stack.vkey))

    bad = dict(bundle)
    h = bytearray(bytes.fromhex(bad["inclusion"][0]))
    h[0] ^= 1
    bad["inclusion"] = [h.hex(), *bad["inclusion"][1:]]
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    r = cli("verify-proof", str(tmp_path / "bad.json"), "--vkey", str(stack.vkey), check=False)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1
    r = cli("prove", "b3:" + "A" * 43, "--nats", stack.url, check=False)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [
        f"the ledger refused: no run b3:{'A' * 43} in this ledger (code 404)"]


def test_checkpoint_fetch_and_verify(stack: Stack, tmp_path: Path) -> None:
    """Bare `fleet checkpoint` prints the latest signed note (`--json`: size, root,
    checkpoint); `fleet checkpoint verify` accepts it with the vkey and not with another."""
    note = cli("checkpoint", "--nats", stack.url).stdout
    doc = cli_json("checkpoint", "--json", "--nats", stack.url)
    assert set(doc) == {"size", "root", "checkpoint"}
    assert note == doc["checkpoint"]
    lines = note.splitlines()
    assert lines[0] == stack.vkey.read_text().split("+")[0]
    assert int(lines[1]) == doc["size"] > 0
    assert base64.b64decode(lines[2]).hex() == doc["root"]
    (tmp_path / "cp.txt").write_text(note)
    got = cli_json("checkpoint", "verify", str(tmp_path / "cp.txt"), "--vkey", str(stack.vkey),
                   "--json")
    assert (got["size"], got["root"]) == (doc["size"], lines[2])
    cli("keygen", "someone-else", "--out", str(tmp_path / "keys"))
    r = cli("checkpoint", "verify", str(tmp_path / "cp.txt"), "--vkey",
            str(tmp_path / "keys" / "someone-else.vkey"), check=False)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1


def test_consistency_proof_verifies(stack: Stack) -> None:
    """`fleet consistency OLD NEW --json` gives a proof that verifies between the two roots;
    a size beyond the tree is refused with exit 1."""
    size = cli_json("status", "--json", "--nats", stack.url)["tree_size"]
    doc = cli_json("consistency", "3", str(size), "--json", "--nats", stack.url)
    verify_consistency(3, size, [bytes.fromhex(h) for h in doc["proof"]],
                       bytes.fromhex(doc["old_root"]), bytes.fromhex(doc["new_root"]))
    text = cli("consistency", "3", str(size), "--nats", stack.url).stdout
    assert text.splitlines()[0] == f"3 -> {size}: {len(doc['proof'])} hashes"
    r = cli("consistency", "1", str(size + 1), "--nats", stack.url, check=False)
    assert r.returncode == 1 and "code 404" in r.stderr


def test_run_list_show_export_verify(stack: Stack, tmp_path: Path) -> None:
    """`fleet run list/show/export` and `fleet verify` agree on each run; an unknown run is
    exit 1 and an empty refusal list prints nothing."""
    listed = cli_json("run", "list", "--json", "--nats", stack.url)
    assert listed == stack.runs
    text = cli("run", "list", "--nats", stack.url).stdout.splitlines()
    assert len(text) == len(listed) and all(r["run"] in t for r, t in zip(listed, text,
                                                                            strict=True))
    run = listed[0]
    shown = cli("run", "show", run["run"], "--nats", stack.url).stdout
    assert shown.splitlines()[1].strip().startswith(
        f"{run['segments']} segments, phase {run['phase']}, head {run['head']}")
    out = tmp_path / "rec.json"
    r = cli("run", "export", run["run"], "--out", str(out), "--nats", stack.url)
    assert r.stderr.strip() == f"wrote {out}"
    verdict = cli("verify", str(out)).stdout
    assert verdict.splitlines()[0] == f"valid: run {run['run']}"
    assert f"segments {run['segments']}, phase {run['phase']}" in verdict
    r = cli("run", "show", "b3:" + "B" * 43, "--nats", stack.url, check=False)
    assert r.returncode == 1 and "code 404" in r.stderr
    assert cli("rejections", "--nats", stack.url).stdout == ""
    assert cli_json("rejections", "--json", "--nats", stack.url) == []


def test_enroll_and_revoke_mistakes_are_one_line(stack: Stack) -> None:
    """`fleet host enroll` with a bad key or name, or on a missing folder, exits 2 with one
    line and changes no enrollment."""
    before = (stack.data / "hosts.json").read_text()
    for args in (["enroll", "h9", "--pubkey", "not-a-key"],
                 ["enroll", "bad.name", "--pubkey", base64.b64encode(b"k" * 32).decode()],
                 ["revoke", "nobody"]):
        r = cli("host", *args, "--data", str(stack.data), check=False)
        assert r.returncode == 2 and r.stdout == "", r
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    r = cli("host", "enroll", "h9", "--pubkey", "x", "--data", str(stack.tmp / "no"),
            check=False)
    assert r.returncode == 2
    assert (stack.data / "hosts.json").read_text() == before


def test_enroll_offline_takes_the_key_from_a_file(stack: Stack) -> None:
    """`fleet host enroll --data --pubkey FILE` reads the key text from the file, as every
    key option does."""
    data = stack.tmp / "offline-enroll"
    data.mkdir()
    key = base64.b64encode(b"k" * 32).decode()
    (data / "h8.pub").write_text(key + "\n")
    cli("host", "enroll", "h8", "--pubkey", str(data / "h8.pub"), "--data", str(data))
    hosts = json.loads((data / "hosts.json").read_text())["hosts"]
    assert [(h["name"], h["public_key"]) for h in hosts] == [("h8", key)]


# -- progress on a terminal only ---------------------------------------------------------


def _with_tty_stderr(args: list[str]) -> tuple[int, str, str]:
    """Run ``fleet`` with stderr on a pseudo-terminal, stdout on a pipe."""
    master, slave = pty.openpty()
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:
                return
            if not data:
                return
            chunks.append(data)

    proc = subprocess.Popen([FLEET_BIN, *args], stdout=subprocess.PIPE, stderr=slave,
                            stdin=subprocess.DEVNULL)
    os.close(slave)
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        out, _ = proc.communicate(timeout=90)
    finally:
        stop(proc, signal.SIGKILL)
        reader.join(5)
        os.close(master)
    return proc.returncode, out.decode(), b"".join(chunks).decode(errors="replace")


def _make_stream(url: str) -> None:
    async def go() -> None:
        nc = await nats.connect(url)
        try:
            await ensure_stream(nc.jetstream(timeout=10.0))
        finally:
            await nc.close()

    asyncio.run(go())


def test_progress_on_a_terminal_only_and_never_in_json(nats_server: NatsServer,
                                                       tmp_path: Path) -> None:
    """A long `fleet host simulate --json` shows progress on a terminal's stderr and erases
    it before exiting; stdout is only the JSON, and with stderr on a pipe there is none."""
    _make_stream(nats_server.url)
    args = ["host", "simulate", "--hosts", "2", "--runs", "6", "--name", "tty", "--nats",
            nats_server.url, "--json"]
    code, out, tty = _with_tty_stderr([*args, "--data", str(tmp_path / "a")])
    assert code == 0, tty
    assert len(out.splitlines()) == 1 and json.loads(out)["failed"] == []
    assert "simulated hosts: 0 of 2 done" in tty
    assert tty.endswith("\r\x1b[K")
    piped = cli(*args, "--data", str(tmp_path / "b"))
    assert piped.stderr == "" and json.loads(piped.stdout)["failed"] == []


# -- fleet up and fleet demo -------------------------------------------------------------


def test_up_serves_then_sigint_stops_it_and_its_nats_server(tmp_path: Path) -> None:
    """`fleet up --nats-port P --simulate 1 --grants require` serves the API (queried with
    `fleet status`), folding the simulated runs under the grants they were issued; SIGINT
    makes it exit 0, and its nats-server is gone (the port closes)."""
    port = closed_port()
    url = f"nats://127.0.0.1:{port}"
    log = tmp_path / "up.log"
    up = spawn("up", "--data", str(tmp_path / "d"), "--nats-port", str(port), "--simulate",
               "1", "--runs", "2", "--checkpoint-ms", "200", "--grants", "require", *FREE_HTTP,
               log=log)
    try:
        wait_for(lambda: b"up; Ctrl-C" in log.read_bytes() or up.poll() is not None, 30,
                 "fleet up to be ready")
        assert up.poll() is None, log.read_text()
        status = wait_for(lambda: (s := cli_json("status", "--json", "--nats", url))["runs"]
                          == 2 and s["lag"] == 0 and s, 60, "the simulated host's runs")
        assert status["origin"] == "fleet-ledger.local/ledger"
        assert status["grants"] == {"mode": "require", "folded": 2}
        assert (tmp_path / "d" / "ledger" / "ledger.vkey").read_text().strip() == status["vkey"]
        assert port_open(port)
        os.kill(up.pid, signal.SIGINT)
        assert wait_proc(up, 30, "fleet up after SIGINT") == 0, log.read_text()
    finally:
        stop(up, signal.SIGKILL)
    assert not port_open(port), "the nats-server fleet up started is still listening"
    assert "Traceback" not in log.read_text()
    assert (tmp_path / "d" / "nats" / "jetstream").is_dir()
    sim = json.loads((tmp_path / "d" / "hosts" / "host1.log").read_text().splitlines()[-1])
    assert (sim["host"], sim["runs"], sim["remaining"]) == ("host1", 2, 0)


def test_demo_json_reports_a_consistent_pipeline(tmp_path: Path) -> None:
    """`fleet demo --json` exits 0 and reports numbers that fit together."""
    doc = json.loads(cli("demo", "--hosts", "2", "--runs", "3", "--json", "--keep",
                         str(tmp_path / "demo"), timeout=120).stdout)
    assert doc["hosts"] == 2 and doc["runs"] == 6 + 1  # and the one whose grant is amended
    assert doc["segments"] == doc["tree_size"] == doc["checkpoint_size"] >= 6
    assert doc["rejected"] == {"AttestationMismatch": 1, "OverBudget": 1}
    assert doc["record_verdict"] in doc["wait_proofs"] and doc["record_segments"] == doc[
        "proved_index"] >= 3
    assert sum(doc["wait_proofs"].values()) == doc["runs"]
    # The first run of each host that parks moves to the other host: at least one did,
    # and the one proved was sealed by two hosts.
    assert doc["moved_runs"] >= 1
    assert [h["host"] for h in doc["moved_holders"]] in (["host1", "host2"],
                                                         ["host2", "host1"])
    assert doc["moved_record_segments"] == doc["moved_holders"][-1]["last"]
    assert set(doc["wait_proofs"]) <= {"NonBlocking", "Blocked", "Unproved"}
    assert 0 < doc["proof_hashes"] <= doc["tree_size"].bit_length()
    assert len(doc["root"]) == 64
    offline = cli_json("status", "--data", str(tmp_path / "demo" / "ledger"), "--json")
    # The job demo runs last: the ledger's final tree is the one it reports.
    job = doc["job"]
    assert (offline["tree_size"], offline["root"]) == (job["tree_size"], job["root"])
    assert job["tree_size"] == job["checkpoint_size"] == job["receipt_leaf"] + 1
    assert job["duplicate_rule"] == "DuplicateItem" and job["missing"] == []
    assert sum(job["verdicts"].values()) == job["items"] == 6
    env = doc["environment_refusal"]
    assert env["rule"] == "EnvironmentMismatch" and env["recorded"] != env["offered"]
    g = doc["grant_refusal"]
    assert (g["rule"], g["refused_index"], g["segments_standing"]) == ("OverBudget", 3, 2)
    assert g["spent_uj"] <= g["amended_budget_uj"] < g["budget_uj"]
    assert g["spent_uj"] == 6000  # what the ledger holds of the two intervals it folded
    assert g["run"] != doc["proved_run"]


def test_nkey_users_run_the_pipeline(tmp_path: Path) -> None:
    """Under the `fleet nats-config` permissions, `fleet ledger serve --nkey` (ledger user),
    `fleet host simulate --nkey --name` (its own host user) and `fleet status`/`fleet
    checkpoint --nkey` (reader) fold and read a host's runs."""
    conf = write_config(tmp_path / "nats", ["host1"], host_address="127.0.0.1", port=-1,
                        store_dir=str(tmp_path / "js")).configs[0]
    led, log = tmp_path / "ledger", tmp_path / "ledger.log"
    with running(conf) as (server, _proc):
        creds = server.creds
        ledger = spawn("ledger", "serve", "--nats", server.url, "--data", str(led), "--nkey",
                       str(creds / "ledger.nk"), "--checkpoint-ms", "200", log=log)
        try:
            wait_for(lambda: b"serving" in log.read_bytes() or ledger.poll() is not None, 30,
                     "the ledger to start")
            assert ledger.poll() is None, log.read_text()
            out = cli_json("host", "simulate", "--nats", server.url, "--nkey",
                           str(creds / "host1.nk"), "--name", "host1", "--runs", "2",
                           "--data", str(tmp_path / "h1"), "--enroll-into", str(led), "--json")
            assert out["remaining"] == 0
            reader = ("--nats", server.url, "--nkey", str(creds / "reader.nk"))
            status = wait_for(lambda: (s := cli_json("status", "--json", *reader))["runs"] == 2
                              and s["lag"] == 0 and s, 30, "the host's runs to fold")
            assert status["tree_size"] == out["segments_written"] and status["rejected"] == {}
            assert cli_json("checkpoint", "--json", *reader)["size"] > 0
        finally:
            assert stop(ledger) == 0, log.read_text()[-2000:]


def test_demo_with_only_a_short_run(tmp_path: Path) -> None:
    """`fleet demo --hosts 1 --runs 1` works when that one run has fewer than 3 segments
    (its host's salt is chosen so): the run is tampered with, proved and verified anyway."""
    for n in range(1000):  # a salt whose run 0 plans one execute and a close, or less
        salt = n.to_bytes(16, "big")
        if len(plan(random.Random(salt + b"0"))) < 3:
            break
    host = tmp_path / "demo" / "hosts" / "host1"
    host.mkdir(parents=True)
    (host / "sim.salt").write_text(salt.hex())
    doc = json.loads(cli("demo", "--hosts", "1", "--runs", "1", "--json", "--keep",
                         str(tmp_path / "demo")).stdout)
    standing = doc["grant_refusal"]["segments_standing"]
    assert doc["runs"] == 1 + 1 and doc["segments"] - standing == doc["record_segments"] < 3
    assert doc["rejected"] == {"AttestationMismatch": 1, "OverBudget": 1}


def _children(pid: int) -> list[int]:
    """Pids whose parent is ``pid`` (read from /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


def test_sigterm_to_host_simulate_stops_its_host_processes(nats_server: NatsServer,
                                                           tmp_path: Path) -> None:
    """SIGTERM to `fleet host simulate --hosts 2` stops both host processes with it; run
    again, every segment the hosts wrote, and each run's grant, reaches the stream exactly
    once."""
    _make_stream(nats_server.url)
    args = ["host", "simulate", "--hosts", "2", "--runs", "60", "--nats", nats_server.url,
            "--data", str(tmp_path / "hosts"), "--json"]
    sim = spawn(*args, log=tmp_path / "sim.log")
    try:
        kids = wait_for(lambda: len(k := _children(sim.pid)) == 2 and k, 30, "two hosts")
        wait_for(lambda: all((tmp_path / "hosts" / f"host{i}" / "outbox.db").exists()
                             for i in (1, 2)), 30, "both hosts to record")
        assert stop(sim, signal.SIGTERM) == 128 + signal.SIGTERM
        wait_for(lambda: all(_gone(k) for k in kids), 15, "the host processes to stop")
    finally:
        stop(sim, signal.SIGKILL)
    again = cli_json(*args, timeout=120)
    assert again["failed"] == []
    rows = [r for i in (1, 2) for r in outbox_rows(tmp_path / "hosts" / f"host{i}")]
    assert rows and all(r[3] == "acked" for r in rows)
    grants = 2 * 60  # one ISSUE event per run, before its first segment
    assert asyncio.run(stream_state(nats_server.url)) == (len(rows) + grants,
                                                          len(rows) + grants)


def test_up_on_a_busy_port_fails_with_one_line(tmp_path):
    """`fleet up` on a port already taken exits 2 with one line naming the bind failure."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        out = subprocess.run([FLEET_BIN, "up", "--data", str(tmp_path / "d"), "--nats-port",
                              str(port), *FREE_HTTP], capture_output=True, text=True,
                             timeout=60)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "address already in use" in lines[0], out.stderr


def test_up_sigkilled_takes_its_nats_server_with_it(tmp_path):
    """A SIGKILLed `fleet up` leaves no nats-server behind: its port closes."""
    import socket
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    up = subprocess.Popen([FLEET_BIN, "up", "--data", str(tmp_path / "d"), "--nats-port",
                           str(port), *FREE_HTTP], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as c:
                if c.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        else:
            raise AssertionError("fleet up never listened")
        up.kill()
        up.wait(10)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            with socket.socket() as c:
                if c.connect_ex(("127.0.0.1", port)) != 0:
                    return
            time.sleep(0.2)
        raise AssertionError("nats-server still listens after its fleet up was SIGKILLed")
    finally:
        if up.poll() is None:
            up.kill()
