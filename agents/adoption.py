"""Before a host resumes a run, it verifies the run's record: the spec's resumption
preconditions, checked on the host.

A host **must** refuse to resume unless the offered snapshot is the one recorded at the
park, the resuming environment's manifest is the recorded one, and the record verifies from
genesis. The first two are the record's own rules (:mod:`fleet.record.kernel`, through the host's
builder: ``SnapshotMismatch``, ``ManifestMismatch``, nothing sealed). This module does the
third, in two situations:

* **adopting** a run parked on another host (:func:`verify_adoption`): the record comes
  from the ledger (a :class:`RecordSource`; the CLI wires the ledger's API in), every seal is
  checked under the key of the host that sealed it, the run must be parked, and the record's
  head must be in the ledger's signed log (a proof bundle under the ledger's verifier key),
  so a ledger cannot hand over a record it never logged;
* **resuming its own run** after a restart (:func:`verify_local`): the host rebuilds the
  run from genesis out of what it sealed (its outbox rows, after the record it adopted, if
  any) and refuses when that differs from the state it saved (in ``outbox.db``), so an edited
  state file can never make it seal a resume the record does not allow.

Each refusal is a named :class:`ResumeRefused` and changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from fleet_ledger.fleet.address import format_address, parse_address
from fleet_ledger.fleet.errors import FleetError
from fleet_ledger.fleet.log.log_errors import LogError
from fleet_ledger.fleet.log.note import Verifier
from fleet_ledger.fleet.log.proof_bundle import verify_bundle
from fleet_ledger.fleet.record.phases import PARKED
from fleet_ledger.fleet.record.record import RunState
from fleet_ledger.fleet.record.verify import fold_sealed, verify_state
from fleet_ledger.fleet.record.wire import decode_envelope, decode_record


class RecordSource(Protocol):
    """Where a host gets a run's record and proofs (the ledger's API, wired by the CLI)."""

    def record(self, run: str) -> bytes:
        """The run's record file, as ``fleet run export`` writes it."""
        ...

    def proof(self, run: str, index: int) -> dict[str, Any]:
        """A proof bundle of the run's segment ``index``, as ``fleet prove`` gives it."""
        ...


class ResumeRefused(Exception):
    """A host refuses to adopt or resume a run; the class name is the reason's name."""

    @property
    def rule(self) -> str:
        return type(self).__name__


class RecordInvalid(ResumeRefused):
    """The run's record does not verify from genesis (the record's rule is named)."""


class HeadNotLogged(ResumeRefused):
    """The record's head is not proved to be in the ledger's signed log."""


class NotParked(ResumeRefused):
    """Only a parked run can move to another host."""


class StateMismatch(ResumeRefused):
    """The host's saved state of a run differs from what its record verifies to."""


class RecordUnavailable(ResumeRefused):
    """The host holds too little of the run's record to verify it (its outbox was pruned)
    and has no ledger to fetch it from."""


def verify_adoption(run: str, data: bytes, prove: Callable[[int], dict[str, Any]],
                    ledger_keys: Iterable[Verifier]) -> RunState:
    """The state of the parked run ``run`` after checking its record file ``data`` from
    genesis (every seal) and its head against the proof ``prove(index)`` gives of the
    segment it verified to, under the ledger's keys."""
    try:
        record = decode_record(data)
        if record.run is not None and record.run != run:
            raise RecordInvalid(f"the record is of run {record.run}, not {run}")
        state, sealed = verify_state(record)
    except FleetError as exc:
        raise RecordInvalid(f"{exc.rule}: {exc}") from None
    if not sealed:
        raise RecordInvalid("the record names no host key: its seals cannot be checked")
    if format_address(state.run) != run:
        raise RecordInvalid(f"the record is of run {format_address(state.run)}, not {run}")
    bundle = prove(state.index)
    try:
        proved = verify_bundle(bundle, ledger_keys)
    except (LogError, FleetError) as exc:
        raise HeadNotLogged(f"the proof of the record's head does not verify: {exc}") from None
    if (proved.leaf.run, proved.leaf.index, proved.leaf.head) != (
            state.run, state.index, state.head):
        raise HeadNotLogged(
            f"the ledger's signed log holds segment {proved.leaf.index} with head "
            f"{format_address(proved.leaf.head)}, not the record's head "
            f"{format_address(state.head)} at {state.index}")
    if state.phase != PARKED:
        raise NotParked(f"run {run} is {state.phase}, not parked: only a park can move")
    return state


def verify_local(saved: RunState, start: RunState, payloads: list[bytes],
                 verify_keys: dict[str, Any]) -> RunState:
    """Rebuild a run from ``start`` (its genesis, or the state an adopted record verified
    to) through the sealed messages ``payloads`` (the host's own, in order), every seal
    checked under its host's key in ``verify_keys``, and require ``saved`` to equal it."""
    state = start.copy()
    try:
        for payload in payloads:
            env = decode_envelope(payload)
            key = verify_keys.get(env.host)
            if key is None:
                raise RecordInvalid(f"a segment sealed by {env.host!r}, whose key is unknown")
            fold_sealed(state, env.sealed, key)
    except FleetError as exc:
        raise RecordInvalid(f"{exc.rule}: {exc}") from None
    if state.index < saved.index:
        raise RecordUnavailable(
            f"the host holds segments up to {state.index} of a run it saved at {saved.index}")
    if _position(state) != _position(saved):
        raise StateMismatch(
            f"the saved state (segment {saved.index}, {saved.phase}) is not what the record "
            f"verifies to (segment {state.index}, {state.phase})")
    return state


def _position(state: RunState) -> tuple[object, ...]:
    return (state.run, state.index, state.head, state.phase, state.park, state.manifest)


def parse_run(text: str) -> str:
    """A run id's canonical text (``b3:...``), or :class:`RecordInvalid`."""
    try:
        return format_address(parse_address(text))
    except FleetError as exc:
        raise RecordInvalid(str(exc)) from None


__all__ = ["HeadNotLogged", "NotParked", "RecordInvalid", "RecordSource", "RecordUnavailable",
           "ResumeRefused", "StateMismatch", "parse_run", "verify_adoption", "verify_local"]
