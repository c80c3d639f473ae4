"""compose/compose.yaml brought up with testcontainers on podman, service by service.

There is no Docker engine (nor `docker compose`) on the machines this runs on, so the
services are read from compose.yaml and started as testcontainers containers through
podman's Docker-compatible socket (`podman system service`): the same images, commands,
mounts, ulimits, restart policies and health checks; named volumes get a per-run prefix
and published ports free loopback ports. Health is asked with `podman healthcheck run`
(podman runs health checks by systemd timers, which these machines do not have).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "compose"
# runc and cgroupfs (crun refuses hybrid cgroups), ulimits under the machine's hard limits.
CONTAINERS_CONF = COMPOSE / "podman" / "containers.conf"
REQUIRE = os.environ.get("FLEET_REQUIRE_CONTAINERS") == "1"
NATS_URLS = "nats://nats1:4222,nats://nats2:4222,nats://nats3:4222"
# Images without a registry: the Debian-built base and nats-server from the pinned wheel.
LOCAL_IMAGES = {"FLEET_BASE": "localhost/fleet-base:bookworm",
                "FLEET_NATS_IMAGE": "localhost/fleet-nats:2.14.0"}


def why_not_here() -> str | None:
    """Why the container tests cannot run on this machine, or None."""
    if os.geteuid() != 0:
        return "the container tests run podman as root (rootless podman is not set up here)"
    for tool in ("podman", "runc", "mmdebstrap"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (.ci/run installs podman, runc, mmdebstrap as root)"
    try:
        import testcontainers  # noqa: F401
    except ImportError:
        return "testcontainers is not installed (pip install -e '.[test]')"
    return None


def podman_env() -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}


def podman(*args: str, check: bool = True, timeout: float = 120.0
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], env=podman_env(), capture_output=True, text=True,
                          check=check, timeout=timeout, stdin=subprocess.DEVNULL)


def build_images() -> None:
    """compose/build-images.sh --local-base: the base once per machine, the images from the
    layer cache when the sources did not change."""
    subprocess.run([str(COMPOSE / "build-images.sh"), "--local-base"], env=podman_env(),
                   check=True, timeout=900, stdin=subprocess.DEVNULL)


@contextmanager
def podman_service() -> Iterator[str]:
    """`podman system service` on a socket of its own; yields its DOCKER_HOST."""
    folder = Path(tempfile.mkdtemp(prefix="fleet-podman-"))  # short: socket paths are
    sock = folder / "podman.sock"                               # limited to 108 bytes
    proc = subprocess.Popen(["podman", "system", "service", "--time=0", f"unix://{sock}"],
                            env=podman_env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not sock.exists():
            assert proc.poll() is None, "podman system service exited"
            assert time.monotonic() < deadline, "podman system service made no socket"
            time.sleep(0.1)
        yield f"unix://{sock}"
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        shutil.rmtree(folder, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_VAR = re.compile(r"\$\$|\$\{(\w+):-([^}]*)\}")


def expand(text: str) -> str:
    """Compose's interpolation: ``${NAME:-default}`` from the environment, ``$$`` a ``$``."""
    return _VAR.sub(lambda m: "$" if m.group(0) == "$$"
                    else os.environ.get(m.group(1)) or m.group(2), text)


def _nanos(text: str) -> int:
    return int(float(text.rstrip("s")) * 1e9)


class Stack:
    """The services of compose.yaml, ``folder`` holding what compose/setup.sh writes."""

    def __init__(self, folder: Path) -> None:
        from testcontainers.core.network import Network

        self.folder = folder
        self.doc = yaml.safe_load((COMPOSE / "compose.yaml").read_text())
        self.prefix = f"fleetct-{uuid.uuid4().hex[:8]}"
        self.network = Network()
        self.network.create()
        self.containers: dict[str, Any] = {}
        # published "127.0.0.1:H:C" -> a free loopback port for H, kept across restarts
        self.ports: dict[tuple[str, int], int] = {}

    def name(self, service: str) -> str:
        return f"{self.prefix}-{service}"

    def port(self, service: str, container_port: int) -> int:
        return self.ports[(service, container_port)]

    def start(self, service: str) -> Any:
        from docker.types import Ulimit
        from testcontainers.core.container import DockerContainer

        svc = self.doc["services"][service]
        c = DockerContainer(expand(svc["image"]), name=self.name(service))
        c.with_command([expand(arg) for arg in svc["command"]])
        c.with_network(self.network).with_network_aliases(service)
        for volume in svc.get("volumes", []):
            source, target, *mode = volume.split(":")
            rw = mode[0] if mode else "rw"  # compose's default (testcontainers' is ro)
            if source.startswith("./"):
                c.with_volume_mapping(str(self.folder / source[2:]), target, rw)
            else:
                c.with_volume_mapping(f"{self.prefix}-{source}", target, rw)
        for spec in svc.get("ports", []):
            _ip, _host, inner = spec.split(":")
            port = self.ports.setdefault((service, int(inner)), free_port())
            c.ports[f"{inner}/tcp"] = ("127.0.0.1", port)  # loopback only (docker-py form)
        kwargs: dict[str, Any] = {
            "ulimits": [Ulimit(name=k, soft=v["soft"], hard=v["hard"])
                        for k, v in svc.get("ulimits", {}).items()],
            "restart_policy": {"Name": svc.get("restart", "no")},
        }
        check = svc.get("healthcheck")
        if check:
            kwargs["healthcheck"] = {"test": check["test"], "interval": _nanos(check["interval"]),
                                     "timeout": _nanos(check["timeout"]),
                                     "retries": check["retries"]}
        c.with_kwargs(**kwargs)
        c.start()
        self.containers[service] = c
        return c

    def healthy(self, service: str) -> bool:
        """The service's own health check, run once now."""
        return podman("healthcheck", "run", self.name(service), check=False).returncode == 0

    def wait_healthy(self, services: list[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        waiting = list(services)
        while waiting:
            waiting = [s for s in waiting if not self.healthy(s)]
            if waiting and time.monotonic() > deadline:
                raise AssertionError(f"not healthy after {timeout:.0f} s: {waiting}\n"
                                     + self.logs(waiting[0])[-3000:])
            time.sleep(0.5)

    def wait_exit(self, service: str, timeout: float) -> int:
        """The one-shot service's exit code."""
        return int(podman("wait", self.name(service), timeout=timeout).stdout.strip())

    def logs(self, service: str) -> str:
        out = podman("logs", self.name(service), check=False)
        return out.stdout + out.stderr

    def kill(self, service: str) -> None:
        podman("kill", self.name(service))

    def remove(self, service: str) -> None:
        # -v: its anonymous volumes too (the image declares /data); named ones stay
        podman("rm", "-f", "-v", "-t", "5", self.name(service), check=False)
        self.containers.pop(service, None)

    def close(self) -> None:
        for service in list(self.containers):
            self.remove(service)
        for volume in self.doc.get("volumes", {}):
            podman("volume", "rm", "-f", f"{self.prefix}-{volume}", check=False)
        self.network.remove()
