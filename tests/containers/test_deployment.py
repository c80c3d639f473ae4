"""The compose deployment run for real: images built with podman, the services of
compose/compose.yaml started by testcontainers, and everything checked from outside the
containers as a user would (the `fleet` CLI over the loopback ports, the reader's seed):
status, streaming hosts, proofs, tiles; then the lease holder's container killed, a NATS
node killed, and the whole deployment restarted from its volumes.

Runs where FLEET_REQUIRE_CONTAINERS=1 (.ci/run sets it as root, after installing podman,
runc and mmdebstrap), and fails there when podman cannot run; elsewhere it skips and says
why. The tests share one deployment and run in file order.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from container_stack import (
    COMPOSE,
    LOCAL_IMAGES,
    REQUIRE,
    Stack,
    build_images,
    podman_service,
    why_not_here,
)
from tlog_client import TileClient

from fault_helpers import fleet, wait_until

pytestmark = [pytest.mark.containers, pytest.mark.timeout(900)]

NATS = ["nats1", "nats2", "nats3"]
LEDGERS = ["ledger1", "ledger2", "ledger3"]
HOSTS = ["host1", "host2"]


@dataclass
class Deployment:
    stack: Stack
    folder: Path
    expected: int = 0  # segments the hosts had acknowledged: every one must be a leaf
    down: set[str] = field(default_factory=set)  # ledger services killed

    @property
    def urls(self) -> str:
        return ",".join(f"nats://127.0.0.1:{self.stack.port(n, 4222)}" for n in NATS)

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """The `fleet` CLI on this machine, as the read-only reader."""
        return fleet(*args, "--nats", self.urls, "--nkey",
                     str(self.folder / "nats" / "creds" / "reader.nk"), check=check)

    def status(self) -> dict:
        return json.loads(self.cli("status", "--json").stdout)

    @property
    def vkey(self) -> Path:
        return self.folder / "keys" / "ledger.vkey"

    def up(self, hosts: bool = True) -> None:
        """The services in compose's dependency order, each waited for as compose would."""
        for s in NATS:
            self.stack.start(s)
        self.stack.wait_healthy(NATS, 120)
        for s in LEDGERS:
            self.stack.start(s)
        self.stack.wait_healthy(LEDGERS, 180)
        self.stack.start("enroll")
        assert self.stack.wait_exit("enroll", 120) == 0, self.stack.logs("enroll")
        if hosts:
            for s in HOSTS:
                self.stack.start(s)
            for s in HOSTS:
                assert self.stack.wait_exit(s, 300) == 0, self.stack.logs(s)
                summary = json.loads(self.stack.logs(s).strip().splitlines()[-1])
                assert summary["remaining"] == 0
                self.expected += summary["segments_written"]

    def simulate(self, host: str, runs: int) -> None:
        """More runs from outside, as ``host`` (its key and seed) in a fresh folder."""
        data = self.folder / f"outside-{host}-{time.monotonic_ns()}"
        data.mkdir()
        shutil.copy(self.folder / "keys" / f"{host}.key", data / "host.key")
        out = fleet("host", "simulate", "--runs", str(runs), "--name", host, "--data",
                    str(data), "--nats", self.urls, "--nkey",
                    str(self.folder / "nats" / "creds" / f"{host}.nk"), "--json",
                    timeout=180).stdout
        summary = json.loads(out.strip().splitlines()[-1])
        assert summary["remaining"] == 0
        self.expected += summary["segments_written"]

    def all_folded(self) -> dict:
        """Wait until every live replica holds exactly the acknowledged segments as leaves."""
        def done() -> dict | None:
            status = self.status()
            live = [r for r in status.get("replicas", []) if r["name"] not in self.down_names]
            return status if (status["tree_size"] == self.expected and len(live) >= 1
                              and all(r["tree_size"] == self.expected for r in live)) else None
        status = wait_until(done, 120, f"every live replica folded {self.expected} leaves",
                            interval=1.0)
        assert status["segments_folded"] == status["tree_size"] == self.expected
        assert status["rejected"] == {}, status["rejected"]
        return status

    @property
    def down_names(self) -> set[str]:
        return {f"r{s[-1]}" for s in self.down}

    def prove_and_verify(self) -> None:
        """`fleet prove` of the newest run, checked offline by `fleet verify-proof`."""
        run = json.loads(self.cli("run", "list", "--json").stdout)[-1]["run"]
        bundle = self.folder / "bundle.json"
        self.cli("prove", run, "--out", str(bundle))
        checked = fleet("verify-proof", str(bundle), "--vkey", str(self.vkey))
        assert checked.stdout.startswith(f"proof verified: {run} "), checked.stdout


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    why = why_not_here()
    if not REQUIRE:
        pytest.skip("container tests run where FLEET_REQUIRE_CONTAINERS=1 (.ci/run sets it "
                    "as root after installing podman)" + (f"; here: {why}" if why else ""))
    if why is not None:
        pytest.fail(f"FLEET_REQUIRE_CONTAINERS=1 but {why}")
    folder = tmp_path_factory.mktemp("deployment")
    bin_dir = str(Path(sys.executable).parent)
    subprocess.run([str(COMPOSE / "setup.sh"), str(folder)], check=True, timeout=120,
                   env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
                        "PYTHON": sys.executable}, stdin=subprocess.DEVNULL)
    started = time.monotonic()
    build_images()
    print(f"images built in {time.monotonic() - started:.0f} s")
    with pytest.MonkeyPatch.context() as mp:
        for name, value in LOCAL_IMAGES.items():
            mp.setenv(name, value)
        mp.setenv("TESTCONTAINERS_RYUK_DISABLED", "true")  # podman has no ryuk
        with podman_service() as docker_host:
            mp.setenv("DOCKER_HOST", docker_host)
            stack = Stack(folder)
            try:
                dep = Deployment(stack, folder)
                dep.up()
                yield dep
            finally:
                stack.close()


def test_hosts_stream_into_three_replicas(deployment: Deployment) -> None:
    """The two sample hosts' runs are all leaves in each of the three replicas, one of which
    holds the lease; `fleet status` says so over the published NATS ports."""
    status = deployment.all_folded()
    assert deployment.expected > 0
    assert status["lease_holder"] in {"r1", "r2", "r3"}
    assert sorted(r["name"] for r in status["replicas"]) == ["r1", "r2", "r3"]
    assert "lease       held by" in deployment.cli("status").stdout


def test_proofs_and_tiles_verify_from_outside(deployment: Deployment) -> None:
    """A run's proof bundle verifies offline; the holder's tiles at /checkpoint verify under
    the log's key and hash to its root; `fleet checkpoint --min-size` reaches the size."""
    deployment.prove_and_verify()
    holder = deployment.status()["lease_holder"]
    port = deployment.stack.port(f"ledger{holder[-1]}", 8080)
    tiles = TileClient(f"http://127.0.0.1:{port}/")
    vkey = deployment.vkey.read_text().strip()
    cp = wait_until(lambda: (c := tiles.checkpoint(vkey)).size == deployment.expected and c,
                    30, "the holder's /checkpoint covers every leaf", interval=0.5)
    assert tiles.root(cp.size) == cp.root
    doc = json.loads(deployment.cli("checkpoint", "--json", "--min-size",
                                    str(deployment.expected)).stdout)
    assert doc["size"] == deployment.expected


def test_killing_the_lease_holder_moves_the_lease(deployment: Deployment) -> None:
    """`podman kill` of the holder's container: another replica takes the lease, folds and
    signs the runs published after, and proofs keep answering and verifying."""
    old = deployment.status()["lease_holder"]
    service = f"ledger{old[-1]}"
    deployment.stack.kill(service)
    deployment.down.add(service)
    status = wait_until(lambda: (s := deployment.status())["lease_holder"] not in (None, old)
                        and s, 60, "another replica holds the lease", interval=1.0)
    deployment.simulate("host1", 2)
    deployment.all_folded()
    deployment.prove_and_verify()
    doc = json.loads(deployment.cli("checkpoint", "--json", "--min-size",
                                    str(deployment.expected)).stdout)
    assert doc["size"] == deployment.expected
    assert status["lease_holder"] != old


def test_killing_a_nats_node_loses_nothing(deployment: Deployment) -> None:
    """With one of three NATS nodes killed, a host still publishes and every acknowledged
    segment becomes a leaf (leaves = accepted segments, no refusal)."""
    deployment.stack.kill("nats3")
    deployment.simulate("host2", 2)
    deployment.all_folded()
    deployment.prove_and_verify()


def test_restart_from_volumes_keeps_the_root(deployment: Deployment) -> None:
    """Every container removed and started again on the same volumes: the replicas come back
    with the same size and root, the hosts are not enrolled twice, and a lease is held."""
    before = deployment.all_folded()
    for service in list(deployment.stack.containers):
        deployment.stack.remove(service)
    deployment.down.clear()
    deployment.up(hosts=False)
    after = deployment.all_folded()
    assert (after["tree_size"], after["root"]) == (before["tree_size"], before["root"])
    assert after["lease_holder"] in {"r1", "r2", "r3"}
    assert "ControlConflict" not in deployment.stack.logs("enroll")
