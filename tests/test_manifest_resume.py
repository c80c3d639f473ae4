"""Resumption precondition 2: a resume in another environment is refused on the host before
anything is sealed (EnvironmentMismatch), and by a running ledger when a host seals one
anyway (ManifestMismatch); the same environment, by declaration or by signed file, resumes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import msgspec
import nats
import pytest

from fleet_ledger.agents.environment import environment_manifest
from fleet_ledger.agents.host import Host, HostRun
from fleet_ledger.agents.simulate import host_environments, record_runs
from fleet_ledger.fleet.address import digest, format_address
from fleet_ledger.fleet.env import jsonc
from fleet_ledger.fleet.env.manifest import manifest_of_text, read_manifest_file, sign
from fleet_ledger.fleet.env.manifest_errors import EnvironmentMismatch, Widening
from fleet_ledger.fleet.errors import ManifestMismatch, SnapshotMismatch
from fleet_ledger.fleet.log.note import signer_from_seed
from fleet_ledger.fleet.record.run_codec import state_to_json
from fleet_ledger.fleet.record.segment import make_snapshot, resumed
from fleet_ledger.fleet.record.wire import decode_envelope, encode_envelope
from fleet_ledger.ledger.stream import ensure_stream
from fleet_ledger.plumbing.natsd import NatsServer

from fault_helpers import LedgerProc, forge
from pipeline_helpers import cli, cli_json, outbox_rows, wait_folded

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "devcontainers"
PYTHON, NODE = EXAMPLES / "python" / "devcontainer.json", EXAMPLES / "node" / "devcontainer.json"
IDLE = {"idle_uj": 7000, "provenance": "estimated", "meter": "estimate:storage"}


def _parked(host: Host, unit: bytes) -> HostRun:
    """A run on ``host`` that executed once and parked in the python sample's environment."""
    run = host.open_run(digest(unit), digest(b"grants"))
    run.execute(uj=10, provenance="measured", meter="rapl:package-0", journal_root=digest(b"j"))
    run.suspend(make_snapshot(transcript=digest(unit + b"/t")),
                environment_manifest(PYTHON).digest)
    return run


def _held(host: Host, run: HostRun) -> tuple[int, bytes]:
    """(segments in the outbox, the run's saved state) - what a refusal must not change."""
    rows = host.outbox.payloads_after(run.run, 0)
    return len(list(rows)), msgspec.json.encode(state_to_json(run.state))


def test_a_resume_in_another_environment_is_refused_on_the_host(tmp_path: Path) -> None:
    """Resuming with the node sample's declaration, its signed manifest file, its Manifest,
    or a declaration the allowlist refuses seals nothing, queues nothing and changes no
    state; the refusal names both addresses."""
    host = Host("h1", tmp_path / "host")
    try:
        run = _parked(host, b"unit-1")
        before = _held(host, run)
        node_file = tmp_path / "node.manifest.json"
        node_file.write_text(sign(manifest_of_text(NODE.read_bytes()),
                                  signer_from_seed("b", bytes(32))).file_text())
        for env in (NODE, str(NODE), node_file, environment_manifest(node_file)):
            with pytest.raises(EnvironmentMismatch) as caught:
                run.resume(run.state.parked, environment=env, **IDLE)
            assert caught.value.recorded == environment_manifest(PYTHON).address
            assert caught.value.offered == environment_manifest(NODE).address
            assert caught.value.rule == "EnvironmentMismatch" and caught.value.segment == 3
            assert _held(host, run) == before
        widened = tmp_path / "devcontainer.json"
        widened.write_text(json.dumps({**jsonc.loads(PYTHON.read_bytes()), "privileged": True}))
        with pytest.raises(Widening):
            run.resume(run.state.parked, environment=widened, **IDLE)
        assert _held(host, run) == before
    finally:
        host.close()


def test_a_wrong_snapshot_is_named_before_a_wrong_environment(tmp_path: Path) -> None:
    """The record's order holds through environment=: a resume offering another snapshot
    in another environment is SnapshotMismatch (the kernel checks the snapshot first), not
    EnvironmentMismatch; nothing is sealed."""
    host = Host("h1", tmp_path / "host")
    try:
        run = _parked(host, b"unit-order")
        before = _held(host, run)
        other = make_snapshot(transcript=digest(b"another transcript"))
        with pytest.raises(SnapshotMismatch) as caught:
            run.resume(other, environment=NODE, **IDLE)
        assert not isinstance(caught.value, ManifestMismatch)
        assert caught.value.rule == "SnapshotMismatch" and caught.value.segment == 3
        assert _held(host, run) == before
        with pytest.raises(EnvironmentMismatch):
            run.resume(run.state.parked, environment=NODE, **IDLE)
        assert _held(host, run) == before
    finally:
        host.close()


def test_the_same_environment_resumes_by_declaration_or_by_file(tmp_path: Path) -> None:
    """The parked environment resumes through its devcontainer.json, through its signed
    manifest file after a host restart, and the resume records the park's address."""
    host = Host("h1", tmp_path / "host")
    try:
        a = _parked(host, b"unit-a")
        sealed = a.resume(a.state.parked, environment=PYTHON, **IDLE)
        assert sealed.segment.manifest == environment_manifest(PYTHON).digest
        b = _parked(host, b"unit-b")
    finally:
        host.close()
    built = tmp_path / "python.manifest.json"
    built.write_text(sign(manifest_of_text(PYTHON.read_bytes()),
                          signer_from_seed("b", bytes(32))).file_text())
    host = Host("h1", tmp_path / "host")
    try:
        b = host.open_run(digest(b"unit-b"), digest(b"grants"))
        with pytest.raises(EnvironmentMismatch):
            b.resume(b.state.parked, environment=NODE, **IDLE)
        assert b.resume(b.state.parked, environment=built, **IDLE).index == 3
        assert b.state.phase == "resumed"
    finally:
        host.close()


def test_old_callers_pass_the_manifest_bytes_and_exactly_one_is_required(
        tmp_path: Path) -> None:
    """The 32-byte manifest still works positionally (the record's rule refuses a wrong
    one as ManifestMismatch); giving both or neither is a TypeError."""
    host = Host("h1", tmp_path / "host")
    try:
        run = _parked(host, b"unit-old")
        snap = run.state.parked
        with pytest.raises(TypeError):
            run.resume(snap, **IDLE)
        with pytest.raises(TypeError):
            run.resume(snap, environment_manifest(PYTHON).digest, environment=PYTHON, **IDLE)
        with pytest.raises(ManifestMismatch) as caught:
            run.resume(snap, digest(b"made up"), **IDLE)
        assert caught.value.rule == "ManifestMismatch"
        assert run.resume(snap, environment_manifest(PYTHON).digest, **IDLE).index == 3
    finally:
        host.close()


@pytest.mark.timeout(120)
def test_the_ledger_refuses_a_hand_sealed_resume_in_another_environment(
        nats_server: NatsServer, tmp_path: Path) -> None:
    """A host that seals a resume under another manifest anyway (bypassing its own check)
    gets ManifestMismatch from a running ledger; the run's genuine resume then folds."""
    url, led = nats_server.url, tmp_path / "ledger"
    led.mkdir()
    host = Host("h1", tmp_path / "host")
    try:
        cli("host", "enroll", "h1", "--pubkey", host.public_key, "--data", str(led))
        run = _parked(host, b"unit-ledger")
        snap = run.state.parked
        assert snap is not None
        node = environment_manifest(NODE).digest
        forged = forge(host.key, run.state, resumed(snap, node, 7000, "estimated", "est"))
        b = run.builder
        bad = encode_envelope("h1", b.run, b.state.unit_id, b.state.grants_id, forged)

        async def publish(payloads: list[bytes]) -> None:
            # Straight into the stream: the forged segment sits on the run's own subject,
            # where the publisher's per-run sequence check would stop the run.
            nc = await nats.connect(url)
            try:
                js = nc.jetstream(timeout=10.0)
                await ensure_stream(js)
                for payload in payloads:
                    await js.publish(run.subject, payload)
            finally:
                await nc.close()

        with LedgerProc(url, led, "--name", "main", log=tmp_path / "ledger.log") as ledger:
            ledger.start()
            asyncio.run(publish([*host.outbox.payloads_after(run.run, 0), bad]))
            wait_folded(url, led)
            run.resume(snap, environment=PYTHON, **IDLE)
            run.close()
            asyncio.run(publish(host.outbox.payloads_after(run.run, 2)))
            wait_folded(url, led)
            status = cli_json("status", "--json", "--nats", url)
            refused = cli_json("rejections", "--json", "--nats", url)
            shown = cli_json("run", "show", run.run, "--json", "--nats", url)
            assert ledger.alive()
    finally:
        host.close()
    assert status["rejected"] == {"ManifestMismatch": 1}
    assert [(r["rule"], r["run"], r["index"]) for r in refused] == [
        ("ManifestMismatch", run.run, 3)]
    assert shown["segments"] == 4 and shown["phase"] == "closed"
    assert run.run == format_address(b.run)


def test_simulated_hosts_park_and_resume_in_the_sample_environments(tmp_path: Path) -> None:
    """Every park and resume a simulated host records names the manifest address of one of
    examples/devcontainers, built and signed into the host's folder; runs use several."""
    host = Host("sim1", tmp_path / "sim1")
    try:
        assert record_runs(host, 12) > 0
        files = host_environments(host)
        segments = [decode_envelope(p).sealed.segment
                    for r in {row[0] for row in outbox_rows(tmp_path / "sim1")}
                    for p in host.outbox.payloads_after(r, 0)]
    finally:
        host.close()
    samples = {manifest_of_text(p.read_bytes()).address
               for p in EXAMPLES.glob("*/devcontainer.json")}
    assert {environment_manifest(f).address for f in files} == samples
    assert all(read_manifest_file(f.read_bytes()).signer.name == "sim1" for f in files)
    used = [format_address(s.manifest) for s in segments if hasattr(s, "manifest")]
    assert len(used) >= 4 and set(used) <= samples and len(set(used)) >= 2



def test_a_deployment_points_the_simulator_at_its_own_declarations(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With FLEET_DEVCONTAINERS (as the compose image sets it), a simulated host builds its
    environments from that folder, not from the source checkout."""
    (tmp_path / "envs" / "only").mkdir(parents=True)
    (tmp_path / "envs" / "only" / "devcontainer.json").write_bytes(NODE.read_bytes())
    monkeypatch.setenv("FLEET_DEVCONTAINERS", str(tmp_path / "envs"))
    host = Host("sim2", tmp_path / "sim2")
    try:
        files = host_environments(host)
    finally:
        host.close()
    assert [environment_manifest(f).address for f in files] == [
        environment_manifest(NODE).address]
    monkeypatch.setenv("FLEET_DEVCONTAINERS", str(tmp_path / "none"))
    host = Host("sim3", tmp_path / "sim3")
    try:
        with pytest.raises(FileNotFoundError, match="FLEET_DEVCONTAINERS"):
            host_environments(host)
    finally:
        host.close()


def test_a_simulated_host_rebuilds_an_environment_whose_declaration_changed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A host's manifest file follows its sample declaration: edited after the first build,
    the file is rebuilt (and signed again) with the declaration's new address; an unchanged
    declaration leaves the file as it is."""
    (tmp_path / "envs" / "only").mkdir(parents=True)
    declaration = tmp_path / "envs" / "only" / "devcontainer.json"
    declaration.write_bytes(NODE.read_bytes())
    monkeypatch.setenv("FLEET_DEVCONTAINERS", str(tmp_path / "envs"))
    host = Host("sim4", tmp_path / "sim4")
    try:
        [built] = host_environments(host)
        first = built.read_bytes()
        assert host_environments(host) == [built] and built.read_bytes() == first
        declaration.write_bytes(PYTHON.read_bytes())
        assert host_environments(host) == [built]
        assert environment_manifest(built).address == environment_manifest(PYTHON).address
        assert read_manifest_file(built.read_bytes()).signer.name == "sim4"
    finally:
        host.close()


def test_the_compose_image_carries_the_samples_it_points_at() -> None:
    """compose/Dockerfile copies examples/devcontainers (admitted by its dockerignore) to
    the folder its FLEET_DEVCONTAINERS names, so the image's simulated hosts find them."""
    compose = EXAMPLES.parent.parent / "compose"
    dockerfile = (compose / "Dockerfile").read_text()
    admitted = (compose / "Dockerfile.dockerignore").read_text().splitlines()
    assert "!examples/devcontainers" in admitted
    assert "cp -r /src/examples/devcontainers /opt/fleet/devcontainers" in dockerfile
    assert "ENV FLEET_DEVCONTAINERS=/opt/fleet/devcontainers" in dockerfile
    assert len(list(EXAMPLES.glob("*/devcontainer.json"))) >= 2
