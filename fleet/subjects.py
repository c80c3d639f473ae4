"""Names on the wire: NATS subjects, the stream, host names. Pure constants and checks.

    fleet.seg.<host>.<run>    a host's sealed segments of one run (stream FLEET)
    fleet.ctl.host            operator control events: enroll, revoke, re-key (stream FLEET)
    fleet.ctl.operator        operator key rotations (stream FLEET)
    fleet.ctl.grant           grant events: issue, trigger, mint, amend, checkpoint (stream FLEET)
    fleet.ctl.job             job events: open, seal (stream FLEET)
    fleet.rej.<host>          refusals the ledger publishes for that host
    fleet.checkpoint          every checkpoint the ledger signs (the signed note text)
    fleet.checkpoint.cosigned a checkpoint with its witnesses' cosignatures
    fleet.api.<endpoint>      the ledger's request/reply API (nats.micro, queue group)

``<run>`` is the run identity without its ``b3:`` prefix (43 base64url characters), so a
subject token never holds a dot or a wildcard.

Those are the names of the default fleet, ``fleet``. Several fleets share one NATS cluster
under their own names (:func:`fleet_names`): fleet ``blue`` has stream ``BLUE``, subjects
``blue.seg.<host>.<run>``, ``blue.ctl.*``, ``blue.rej.<host>``, ``blue.checkpoint``,
``blue.checkpoint.cosigned``, ``blue.api.<endpoint>``, the API service and queue group
``blue-ledger`` and KV buckets ``blue-ledger-*``, and the durable runtime's stream
``BLUE_RUNTIME_SIGNALS`` (subjects ``blue.runtime.signal.<run>``) and buckets
``BLUE_RUNTIME_*`` (the default fleet's are ``RUNTIME_*``); the module's constants are the
default fleet's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

__all__ = [
    "API",
    "API_SERVICE",
    "CHECKPOINTS",
    "DEFAULT_FLEET",
    "FLEET_NAME",
    "HOST_NAME",
    "REJECTIONS",
    "SEGMENTS",
    "STREAM",
    "FleetNames",
    "api_subject",
    "check_host_name",
    "control_subject",
    "fleet_names",
    "parse_segment_subject",
    "rejection_subject",
    "run_token",
    "segment_subject",
]


HOST_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")


def check_host_name(name: str) -> str:
    if not HOST_NAME.match(name):
        raise ValueError(
            f"a host name is 1 to 64 letters, digits, '-' or '_', got {name!r}"
        )
    return name


def run_token(run_address: str) -> str:
    """The subject token of a run (its address without ``b3:``)."""
    return run_address.removeprefix("b3:")


# The token after the fleet's name in its segment subjects.
_SEG: Final = "seg"

FLEET_NAME: Final = re.compile(r"[a-z][a-z0-9_-]{0,31}\Z")


@dataclass(frozen=True, slots=True)
class FleetNames:
    """Every name one fleet uses on a shared NATS cluster (see the module docstring)."""

    fleet: str

    @property
    def stream(self) -> str:
        return self.fleet.upper()

    @property
    def segments(self) -> str:
        return f"{self.fleet}.{_SEG}"

    @property
    def control(self) -> str:
        return f"{self.fleet}.ctl"

    @property
    def rejections(self) -> str:
        return f"{self.fleet}.rej"

    @property
    def checkpoints(self) -> str:
        return f"{self.fleet}.checkpoint"

    @property
    def cosigned(self) -> str:
        """Checkpoints with their witnesses' cosignatures (``<fleet>.checkpoint.cosigned``)."""
        return f"{self.checkpoints}.cosigned"

    @property
    def api(self) -> str:
        return f"{self.fleet}.api"

    @property
    def api_service(self) -> str:
        return f"{self.fleet}-ledger"

    @property
    def api_queue(self) -> str:
        return f"{self.fleet}-ledger"

    @property
    def lease_bucket(self) -> str:
        """The KV bucket of the replicas' lease (:mod:`ledger.replica`)."""
        return f"{self.fleet}-ledger-lease"

    @property
    def replicas_bucket(self) -> str:
        """The KV bucket of the replicas' heartbeats."""
        return f"{self.fleet}-ledger-replicas"

    # The durable runtime's JetStream names (agents.runtime.fleet_store): the default
    # fleet's are today's ``RUNTIME_*`` and ``fleet.runtime.signal``; fleet ``blue`` has
    # ``BLUE_RUNTIME_*`` and ``blue.runtime.signal``.
    @property
    def _runtime(self) -> str:
        return "RUNTIME" if self.fleet == "fleet" else f"{self.stream}_RUNTIME"

    @property
    def runtime_signals(self) -> str:
        return f"{self._runtime}_SIGNALS"

    @property
    def runtime_signal_subject(self) -> str:
        return f"{self.fleet}.runtime.signal"

    @property
    def runtime_runs(self) -> str:
        return f"{self._runtime}_RUNS"

    @property
    def runtime_journals(self) -> str:
        return f"{self._runtime}_JOURNALS"

    @property
    def runtime_keys(self) -> str:
        return f"{self._runtime}_KEYS"

    @property
    def runtime_signal_ids(self) -> str:
        return f"{self._runtime}_SIGNAL_IDS"

    def segment_subject(self, host: str, run_address: str) -> str:
        return f"{self.segments}.{host}.{run_token(run_address)}"

    def rejection_subject(self, host: str) -> str:
        return f"{self.rejections}.{host}"

    def api_subject(self, endpoint: str) -> str:
        return f"{self.api}.{endpoint}"

    def control_subject(self, kind: str) -> str:
        """``<fleet>.ctl.host`` for host events, ``<fleet>.ctl.operator`` for rotations."""
        return f"{self.control}.{'operator' if kind == 'operator' else 'host'}"

    @property
    def grant_subject(self) -> str:
        """``<fleet>.ctl.grant``: grant events (fleet.fold.grant_events), in the fleet's stream."""
        return f"{self.control}.grant"

    @property
    def job_subject(self) -> str:
        """``<fleet>.ctl.job``: job events (fleet.fold.job_events), in the fleet's stream."""
        return f"{self.control}.job"

    def is_control(self, subject: str) -> bool:
        return subject.startswith(self.control + ".")


def parse_segment_subject(subject: str) -> tuple[str, str] | None:
    """(host, run address) of any fleet's segment subject ``<fleet>.seg.<host>.<token>``,
    or ``None`` for a subject of another shape."""
    parts = subject.split(".")
    if len(parts) == 4 and parts[1] == _SEG:
        return parts[2], "b3:" + parts[3]
    return None


def is_grant_subject(subject: str) -> bool:
    """Whether ``subject`` is any fleet's grant subject, ``<fleet>.ctl.grant`` (a fleet's
    name holds no dot, so the suffix decides)."""
    return subject.endswith(".ctl.grant")


def fleet_names(name: str = "fleet") -> FleetNames:
    """The names of fleet ``name`` (1 to 32 of lowercase letters, digits, '-', '_',
    starting with a letter); ``fleet``: today's names exactly."""
    if not FLEET_NAME.match(name):
        raise ValueError(f"a fleet name is 1 to 32 lowercase letters, digits, '-' or '_', "
                         f"starting with a letter; got {name!r}")
    return FleetNames(name)


DEFAULT_FLEET: Final = fleet_names()

# The default fleet's names, as constants and functions (every layout is FleetNames's).
STREAM: Final = DEFAULT_FLEET.stream
SEGMENTS: Final = DEFAULT_FLEET.segments
REJECTIONS: Final = DEFAULT_FLEET.rejections
CHECKPOINTS: Final = DEFAULT_FLEET.checkpoints
API: Final = DEFAULT_FLEET.api
API_SERVICE: Final = DEFAULT_FLEET.api_service
segment_subject = DEFAULT_FLEET.segment_subject
rejection_subject = DEFAULT_FLEET.rejection_subject
api_subject = DEFAULT_FLEET.api_subject
control_subject = DEFAULT_FLEET.control_subject

