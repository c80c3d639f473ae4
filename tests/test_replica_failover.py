"""SIGKILL the lease-holding ledger replica under load: the lease moves within its bound,
no two checkpoints conflict, a witness cosigns throughout without a fork, and ``fleet
prove`` keeps answering through a live replica. FLEET_FAILOVER_KILLS sets the number of
kills (2 by default, to stay within CI time; the issue's manual run is 5)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from http_helpers import publish
from replica_helpers import check_all_consistent, enroll, operator, same_log

from fleet_ledger.anchors.witness_server import RunningWitness, Witness
from fleet_ledger.cli._failover import ReplicaProcs, kill_holders
from fleet_ledger.fleet.address import format_address
from fleet_ledger.fleet.log.checkpoint import parse_checkpoint
from fleet_ledger.fleet.log.cosignature import generate_witness_signer
from fleet_ledger.fleet.log.note import parse_note
from fleet_ledger.fleet.log.witness import parse_request
from fleet_ledger.ledger.keys import load_or_create_signer
from fleet_ledger.plumbing.natsd import NatsCluster

from fault_helpers import fleet, sealed_run, store_summary, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

TTL = 2.0
BOUND = TTL * 1.25 + 0.5  # the documented bound (docs/operations.md, running replicas)


class RecordingWitness(Witness):
    """The witness, keeping (old size, size, root, status) of every request it decided."""

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.seen: list[tuple[int, int, bytes, int]] = []

    def add_checkpoint(self, body: bytes) -> tuple[int, str, bytes]:
        status, kind, reply = super().add_checkpoint(body)
        req = parse_request(body)
        cp = parse_checkpoint(parse_note(req.note)[0])
        self.seen.append((req.old_size, cp.size, cp.root, status))
        return status, kind, reply


def test_the_lease_moves_on_sigkill_without_a_fork(nats_cluster: NatsCluster,
                                                   tmp_path: Path) -> None:
    """Each SIGKILL of the holder moves the lease within ttl + ttl/4 + 0.5 s (+1 s of
    polling slack); the witness never sees two roots for one size nor a 422, and cosigns past
    every kill; prove answers after each; all replicas end with one log."""
    kills = int(os.environ.get("FLEET_FAILOVER_KILLS", "2"))
    url, pub_url = nats_cluster.url, nats_cluster.urls[0]
    vkey, op = operator(tmp_path)
    (tmp_path / "r1").mkdir()
    signer = load_or_create_signer(tmp_path / "r1", "fleet-ledger.local/replicated")
    wsigner = generate_witness_signer("witness.test/w1")
    witness = RecordingWitness(wsigner, [signer.verifier()], tmp_path / "w")
    stop = threading.Event()
    runs: list[str] = []

    def load() -> None:
        n = 0
        while not stop.is_set():
            run = sealed_run("h1", f"load-{n}", "eec")
            publish(pub_url, run.messages)
            runs.append(format_address(run.run))
            n += 1
            time.sleep(0.05)

    with RunningWitness(witness) as served:
        anchors = tmp_path / "anchors.toml"
        anchors.write_text(f'[[witness]]\nname = "w1"\nurl = "{served.url}"\n'
                           f'vkey = "{wsigner.key().text()}"\n')
        replicas = ReplicaProcs(url, tmp_path, ["r1", "r2", "r3"], TTL, "--replicas", "3",
                                "--operator-vkey", vkey, "--anchors", str(anchors))
        loader = threading.Thread(target=load, daemon=True)
        try:
            replicas.start_all()
            wait_until(lambda: (tmp_path / "r1" / "ledger.db").exists(), 30, "r1 started")
            wait_until(lambda: _try_enroll(url, op), 30, "the enrollment published")
            loader.start()
            took: list[float] = []
            for _ in range(kills):
                wait_until(lambda: any(s == 200 for *_, s in witness.seen), 60, "a cosign")
                before = max(size for _, size, _, s in witness.seen if s == 200)
                took += kill_holders(nats_cluster.urls, replicas, 1, BOUND)
                assert took[-1] <= BOUND + 1.0, took  # + polling slack on a loaded machine
                proved = fleet("prove", runs[-5], "--nats", url, timeout=60, check=False)
                assert proved.returncode == 0, proved.stderr
                wait_until(lambda b=before: max(size for _, size, _, s in witness.seen
                                                if s == 200) > b, 60,
                           "the witness cosigning past the kill")
        finally:
            stop.set()
            if loader.is_alive():
                loader.join(30)
            time.sleep(1.5)
            datas = [tmp_path / n for n in ("r1", "r2", "r3")]
            try:
                wait_until(lambda: len({store_summary(d).watermark for d in datas}) == 1, 60,
                           "every replica caught up")
            finally:
                replicas.stop_all()
    same_log(datas)
    check_all_consistent(datas, datas[0])
    roots: dict[int, bytes] = {}
    for _old, size, root, status in witness.seen:
        assert roots.setdefault(size, root) == root, f"a fork at size {size}"
        assert status in (200, 409), witness.seen
    print(f"takeover times: {[round(t, 2) for t in took]}")


def _try_enroll(url: str, op: tuple[str, ...]) -> bool:
    try:
        enroll(url, op, "h1")
    except AssertionError:
        return False
    return True
