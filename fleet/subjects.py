"""Names on the wire: NATS subjects, the stream, host names. Pure constants and checks.

    fleet.seg.<host>.<run>    a host's sealed segments of one run (stream FLEET)
    fleet.ctl.host            operator control events: enroll, revoke, re-key (stream FLEET)
    fleet.ctl.operator        operator key rotations (stream FLEET)
    fleet.rej.<host>          refusals the ledger publishes for that host
    fleet.checkpoint          every checkpoint the ledger signs (the signed note text)
    fleet.api.<endpoint>      the ledger's request/reply API (nats.micro, queue group)

``<run>`` is the run identity without its ``b3:`` prefix (43 base64url characters), so a
subject token never holds a dot or a wildcard.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = [
    "API",
    "API_QUEUE",
    "API_SERVICE",
    "CHECKPOINTS",
    "CONTROL",
    "HOST_NAME",
    "REJECTIONS",
    "SEGMENTS",
    "STREAM",
    "api_subject",
    "check_host_name",
    "control_subject",
    "is_control",
    "rejection_subject",
    "run_token",
    "segment_subject",
]


STREAM: Final = "FLEET"
SEGMENTS: Final = "fleet.seg"
CONTROL: Final = "fleet.ctl"
REJECTIONS: Final = "fleet.rej"
CHECKPOINTS: Final = "fleet.checkpoint"
API: Final = "fleet.api"
API_SERVICE: Final = "fleet-ledger"
API_QUEUE: Final = "fleet-ledger"

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


def segment_subject(host: str, run_address: str) -> str:
    return f"{SEGMENTS}.{host}.{run_token(run_address)}"


def rejection_subject(host: str) -> str:
    return f"{REJECTIONS}.{host}"


def api_subject(endpoint: str) -> str:
    return f"{API}.{endpoint}"


def control_subject(kind: str) -> str:
    """``fleet.ctl.host`` for host events, ``fleet.ctl.operator`` for rotations."""
    return f"{CONTROL}.{'operator' if kind == 'operator' else 'host'}"


def is_control(subject: str) -> bool:
    return subject.startswith(CONTROL + ".")
