"""Helpers for tests that need a real broker: pytest fixtures around :mod:`plumbing.natsd`.

Why: a user's tests, like ours, should talk to a real nats-server rather than a mock. Use
them from a ``conftest.py``::

    from fleet_ledger.plumbing.testing import nats_cluster as nats_cluster
    from fleet_ledger.plumbing.testing import nats_server as nats_server

``nats_server`` is a fresh JetStream server per test (store under the test's
``tmp_path``); ``nats_cluster`` a fresh 3-node JetStream cluster per test. Both are
stopped, by pid, when the test ends, whether it passed or failed. Tests drive async code
with ``asyncio.run(...)`` inside plain sync tests; no event-loop plugin is needed.

Outside pytest, use the context managers :func:`running_server` / :func:`running_cluster`
(or :class:`~plumbing.natsd.NatsServer` / :class:`~plumbing.natsd.NatsCluster` directly).
This module needs pytest (the ``test`` extra).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from fleet_ledger.plumbing.natsd import NatsCluster, NatsServer

__all__ = ["nats_cluster", "nats_server", "running_cluster", "running_server"]


@contextmanager
def running_server(store_dir: Path | None = None) -> Iterator[NatsServer]:
    """A started JetStream server on a free loopback port, stopped on exit."""
    with NatsServer(store_dir) as server:
        yield server


@contextmanager
def running_cluster(base_dir: Path | None = None, size: int = 3) -> Iterator[NatsCluster]:
    """A started ``size``-node JetStream cluster (n1..n<size>), stopped on exit."""
    with NatsCluster(size, base_dir=base_dir) as cluster:
        yield cluster


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    """A fresh nats-server with JetStream for one test; ``.url``, ``.restart()``, ..."""
    with running_server(tmp_path / "nats") as server:
        yield server


@pytest.fixture
def nats_cluster(tmp_path: Path) -> Iterator[NatsCluster]:
    """A fresh 3-node JetStream cluster for one test; ``.urls``, ``.kill(name)``, ..."""
    with running_cluster(tmp_path / "nats-cluster") as cluster:
        yield cluster
