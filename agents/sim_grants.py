"""The simulator's grants: each simulated run is opened under a real grant of its own.

A simulated fleet has one issuer key and one agent key, both derived from the simulation's
seed (``fleet host simulate --seed``), so every host process of one simulation issues under
the same issuer, and that issuer is never a host's key nor the agent it grants to. Run
``number`` of host ``h`` gets the grant

    scopes    ["/sim/<h>/<number>"]     (what makes each run's grant its own)
    budget    SIM_BUDGET_UJ             (far above any simulated plan: executes, two parks)
    window    [epoch - 1 h, epoch + 30 days)  epoch: the host folder's first simulation
    hosts     the simulation's hosts    (a moved run's adopter holds it under the same grant)
    manifests [the environment the run parks and resumes in]

signed by the issuer for the agent; its address is the run's ``grants_id``. The grant's
bytes are a function of the seed, the host's folder and the run's number, so a restarted
simulator opens the same runs under the same grants. Before the first segment of any run is
written, the host publishes each grant's ISSUE event on the fleet's grant subject
(``Nats-Msg-Id`` = :func:`fleet.fold.grant_events.event_id`) and remembers it in
``sim.grants.issued``, so a restart does not present a grant twice.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from nacl.signing import SigningKey

from fleet_ledger.agents.publisher import TRANSIENT, Backoff
from fleet_ledger.fleet.address import digest
from fleet_ledger.fleet.fold.grant_events import event_id, issue_event
from fleet_ledger.fleet.grants.grant import grant_address, make_terms, sign_grant

__all__ = ["DEFAULT_SEED", "SIM_BUDGET_UJ", "SimGrants", "sim_keys"]

DEFAULT_SEED: Final = "fleet-sim"
# A simulated plan spends at most two image parks of 5 h (16.6e9 µJ each) and a few
# measured intervals: 100 kJ is generous, and still a budget.
SIM_BUDGET_UJ: Final = 10**11
_SKEW_MS: Final = 3_600_000  # host and broker clocks may differ
_LIFETIME_MS: Final = 30 * 24 * 3_600_000
_EPOCH_FILE: Final = "sim.epoch"
_ISSUED_FILE: Final = "sim.grants.issued"


def sim_keys(seed: str) -> tuple[SigningKey, SigningKey]:
    """(issuer, agent) of the simulated fleet with ``seed``."""
    base = b"fleet-sim/" + seed.encode()
    return SigningKey(digest(base + b"/issuer")), SigningKey(digest(base + b"/agent"))


def _epoch(host_dir: Path) -> int:
    path = host_dir / _EPOCH_FILE
    if not path.exists():
        path.write_text(str(int(time.time() * 1000)))
    return int(path.read_text().strip())


class SimGrants:
    """The grants of one simulated host's runs (see the module text)."""

    def __init__(self, host: str, host_dir: Path, hosts: Sequence[str],
                 seed: str = DEFAULT_SEED) -> None:
        self.host = host
        self.dir = host_dir
        self.issuer, self.agent = sim_keys(seed)
        self.hosts = sorted(set(hosts) | {host})
        epoch = _epoch(host_dir)
        self.window = (max(0, epoch - _SKEW_MS), epoch + _LIFETIME_MS)
        self._grants: dict[int, bytes] = {}

    def grant(self, number: int, manifest: bytes) -> bytes:
        """The bytes of run ``number``'s grant (it parks under ``manifest``)."""
        held = self._grants.get(number)
        if held is None:
            terms = make_terms([f"/sim/{self.host}/{number}"], SIM_BUDGET_UJ, *self.window,
                               hosts=self.hosts, manifests=[manifest])
            held = sign_grant(self.issuer, bytes(self.agent.verify_key), terms)
            self._grants[number] = held
        return held

    def grants_id(self, number: int, manifest: bytes) -> bytes:
        return grant_address(self.grant(number, manifest))

    def _issued(self) -> set[str]:
        path = self.dir / _ISSUED_FILE
        return set(path.read_text().split()) if path.exists() else set()

    async def publish(self, js: Any, subject: str, stream: str,
                      runs: Sequence[tuple[int, bytes]], window: int = 64) -> int:
        """Publish the ISSUE event of each ``(number, manifest)``'s grant not yet issued,
        each acknowledged before this returns; how many were published."""
        done = self._issued()
        todo = []
        for number, manifest in runs:
            event = issue_event(self.issuer, self.grant(number, manifest))
            if event_id(event) not in done:
                todo.append(event)
        for first in range(0, len(todo), window):
            chunk = todo[first:first + window]
            await asyncio.gather(*(_publish_acked(js, subject, stream, ev) for ev in chunk))
            with (self.dir / _ISSUED_FILE).open("a") as out:
                out.write("".join(event_id(ev) + "\n" for ev in chunk))
        return len(todo)


async def _publish_acked(js: Any, subject: str, stream: str, event: bytes,
                         patience_s: float = 120.0) -> None:
    """Publish ``event`` until the stream acknowledges it, through what the outbox's
    publisher rides out (a leader election, a lost quorum: :data:`TRANSIENT`), with its
    backoff; the event's message id makes a retry of an event that did land a duplicate
    the stream drops."""
    backoff = Backoff()
    deadline = time.monotonic() + patience_s
    attempt = 0
    while True:
        try:
            await js.publish(subject, event, stream=stream,
                             headers={"Nats-Msg-Id": event_id(event)})
            return
        except TRANSIENT:
            if time.monotonic() >= deadline:
                raise
        await asyncio.sleep(backoff.delay(attempt))
        attempt += 1
