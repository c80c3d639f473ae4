"""The host API a program on a host uses to record its runs.

    host = Host("build-7", Path("/var/lib/fleet/host"))
    run = host.open_run(unit_id, grants_id)
    run.execute(uj=..., provenance="measured", meter="rapl:package-0", journal_root=...)
    run.suspend(make_snapshot(transcript=...), manifest)
    run.resume(snapshot, environment=devcontainer_json, idle_uj=..., provenance="estimated",
               meter="...")    # or the manifest's 32 bytes in place of environment=
    run.close()

Every call checks the segment with the pure core first (a refused segment raises its named
rule and never leaves the host), seals it with the host's Ed25519 key and writes it to the
durable outbox before anything is sent. The publisher (``agents.publisher``) drains the
outbox to JetStream.

Crash safety: each segment is one durable step. The builder *prepares* it as a value (the
sealed segment and the run's state after it; nothing is changed), the outbox *puts* both in
one SQLite transaction (one file, one fsync: the commit point), and only then does the run
*apply* it in memory. Killed before the put, nothing happened; after it, the outbox holds the
segment and the state that follows it, so :meth:`Host.open_run` continues at the right index
(never sealing a second, different segment there, which the ledger would refuse as a fork).
A failed put leaves nothing to roll back. A folder written before this (run states in a
second file, ``runs.db``) is moved over once when opened (agents.host_migration).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from nacl.signing import SigningKey

from fleet_ledger.agents.adoption import (
    NotParked,
    RecordSource,
    RecordUnavailable,
    parse_run,
    verify_adoption,
    verify_local,
)
from fleet_ledger.agents.environment import Environment, resume_manifest
from fleet_ledger.agents.host_migration import migrate_runs_db
from fleet_ledger.agents.outbox import (
    DEFAULT_KEEP_ACKED_BYTES,
    DEFAULT_LIMIT_BYTES,
    DEFAULT_RESERVE,
    Outbox,
)
from fleet_ledger.fleet.address import format_address
from fleet_ledger.fleet.env.manifest import Manifest
from fleet_ledger.fleet.env.manifest_errors import EnvironmentMismatch
from fleet_ledger.fleet.errors import ManifestMismatch
from fleet_ledger.fleet.jobs.job_id import item_unit
from fleet_ledger.fleet.log.note import Verifier
from fleet_ledger.fleet.record.attestation import Attestation
from fleet_ledger.fleet.record.builder import RecordBuilder, execute_segment
from fleet_ledger.fleet.record.record import RunState
from fleet_ledger.fleet.record.run_codec import decode_state, encode_state
from fleet_ledger.fleet.record.seal import encode_key
from fleet_ledger.fleet.record.segment import (
    CallAccount,
    Claimed,
    Closed,
    Evicted,
    Segment,
    Snapshot,
    resumed,
    suspended,
)
from fleet_ledger.fleet.record.verify import verify_state
from fleet_ledger.fleet.record.wire import (
    SealedSegment,
    decode_envelope,
    decode_record,
    encode_envelope,
    segment_id,
)
from fleet_ledger.fleet.subjects import check_host_name, fleet_names, run_token
from fleet_ledger.plumbing.files import read_key_file, write_atomically, write_key_file

KEY_FILE = "host.key"
PUB_FILE = "host.pub"


class HostKeyError(ValueError):
    """A host key file that does not hold a key."""


def load_or_create_key(data_dir: Path) -> SigningKey:
    """The host's sealing key (base64 seed in ``host.key``, mode 0600), created once."""
    path = data_dir / KEY_FILE
    if path.exists():
        try:
            return read_key_file(path)
        except ValueError as exc:
            raise HostKeyError(f"{path} does not hold a base64 Ed25519 seed: {exc}") from None
    key = SigningKey.generate()
    write_key_file(path, key)
    (data_dir / PUB_FILE).write_text(encode_key(bytes(key.verify_key)) + "\n")
    return key


class Host:
    """One host: its key, its outbox and the state of the runs it records."""

    def __init__(self, name: str, data_dir: Path | str, *,
                 outbox_limit: int = DEFAULT_LIMIT_BYTES, reserve: float = DEFAULT_RESERVE,
                 keep_acked_bytes: int = DEFAULT_KEEP_ACKED_BYTES, fleet: str = "fleet") -> None:
        self.name = check_host_name(name)
        self.names = fleet_names(fleet)  # the fleet's subjects (fleet.subjects.fleet_names)
        self.dir = Path(data_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.key = load_or_create_key(self.dir)
        self.outbox = Outbox(self.dir / "outbox.db", limit_bytes=outbox_limit, reserve=reserve,
                             keep_acked_bytes=keep_acked_bytes)
        migrate_runs_db(self.dir, self.outbox, self.key.verify_key)
        # Where to fetch a run's record (and the ledger's keys to check its proofs under)
        # when this host no longer holds all of it: set by the program that wires the host.
        self.ledger: tuple[RecordSource, list[Verifier]] | None = None

    @property
    def public_key(self) -> str:
        return encode_key(bytes(self.key.verify_key))

    def close(self) -> None:
        self.outbox.close()

    def open_run(self, unit_id: bytes, grants_id: bytes) -> HostRun:
        """Start a run, or pick up the one already recorded for this unit and grant set."""
        builder = RecordBuilder(self.key, unit_id, grants_id)
        run = format_address(builder.run)
        saved = self.outbox.state(run)
        if saved is not None:
            builder.state = decode_state(saved)
        return HostRun(self, builder)

    def open_item_run(self, job: bytes, index: int, grants_id: bytes) -> HostRun:
        """Start (or pick up) item ``index`` of ``job`` as a run of this host: its unit is
        the item's (:func:`fleet.jobs.job_id.item_unit`), so its genesis binds the job and
        the index, and the ledger holds it to the job (``docs/jobs.md``)."""
        return self.open_run(item_unit(job, index), grants_id)

    @contextmanager
    def starting_run(self, unit_id: bytes, grants_id: bytes) -> Iterator[HostRun]:
        """:meth:`open_run` for a first step that may still be refused (a warm slot evicted
        since it was checked). Opening writes nothing: the run's row is written by the one
        transaction that puts its first segment with its state, so if the block raises, or
        the process dies inside it before that put, a refused start leaves no run row."""
        yield self.open_run(unit_id, grants_id)

    def adopt_run(self, run: str, source: RecordSource, ledger_keys: Iterable[Verifier]
                  ) -> HostRun:
        """Take over a run parked on another host: fetch its record and a proof of its head
        from ``source``, verify both (:func:`agents.adoption.verify_adoption`: every seal,
        the head in the ledger's log under ``ledger_keys``, parked), keep the record, and
        hold the run from its next segment (a resume or a close with the recorded snapshot
        and manifest; anything else is refused by the record's rules, nothing sealed).

        A run this host held before comes back only with a record past its saved state (it
        moved on elsewhere and parked again): the record replaces the saved state and an
        outbox stop of the run is lifted; otherwise NotParked (open it instead)."""
        run = parse_run(run)
        data = source.record(run)
        state = verify_adoption(run, data, lambda index: source.proof(run, index),
                                list(ledger_keys))
        held = self.outbox.state(run)
        saved = decode_state(held).index if held is not None else 0
        if (held is not None or self.outbox.payloads_after(run, 0)) and (
                state.index <= saved or self.outbox.payloads_after(run, state.index)):
            # Only a record that went on past what this host holds (the run left and came
            # back parked: A -> B -> A) replaces its saved state.
            raise NotParked(f"run {run} already has segments on this host up to its record:"
                            " open it instead")
        path = self._adopted_path(run)
        path.parent.mkdir(exist_ok=True)
        write_atomically(path, data)
        builder = RecordBuilder(self.key, state.unit_id, state.grants_id)
        builder.state = state
        # A run stopped here before takes segments again, from the adopted state.
        self.outbox.save_state(run, encode_state(state), restart=True)
        hr = HostRun(self, builder)
        hr.verified = True
        return hr

    def _adopted_path(self, run: str) -> Path:
        return self.dir / "adopted" / f"{run_token(run)}.json"

    def verified_state(self, hr: HostRun) -> RunState:
        """Rebuild ``hr``'s run from what this host holds (the record it adopted, then its
        own sealed segments) and require its saved state to equal it
        (:func:`agents.adoption.verify_local`)."""
        run = hr.run
        path = self._adopted_path(run)
        if path.exists():
            start, _sealed = verify_state(decode_record(path.read_bytes()))
        else:
            start = RunState.open(hr.state.unit_id, hr.state.grants_id)
        payloads = self.outbox.payloads_after(run, start.index)
        if payloads and decode_envelope(payloads[0]).sealed.index != start.index + 1:
            if self.ledger is None:
                raise RecordUnavailable(f"this host no longer holds segment {start.index + 1}"
                                        f" of run {run} (its outbox was pruned) and has no "
                                        "ledger to fetch the record from")
            # The ledger's record instead, checked as an adoption would check it (it must
            # be parked where this host parked it, under the ledger's signed log).
            source, keys = self.ledger
            data = source.record(run)
            start = verify_adoption(run, data, lambda index: source.proof(run, index), keys)
            payloads = self.outbox.payloads_after(run, start.index)
        return verify_local(hr.state, start, payloads, {self.name: self.key.verify_key})


class HostRun:
    """One run on its host. Methods return the sealed segment they wrote to the outbox."""

    def __init__(self, host: Host, builder: RecordBuilder) -> None:
        self.host = host
        self.builder = builder
        self.run = format_address(builder.run)
        self.subject = host.names.segment_subject(host.name, self.run)
        # Whether this run's state was verified from its record in this process (a new run
        # is, by construction): a resume verifies it first, once.
        self.verified = builder.state.index == 0

    @property
    def state(self):  # noqa: ANN201 - RunState, kept loose to avoid a cycle in docs
        return self.builder.state

    def _emit(self, segment: Segment, attestation: Attestation | None = None) -> SealedSegment:
        b = self.builder
        prepared = b.prepare(segment, attestation)  # a value: a refusal raises, nothing moved
        sealed = prepared.sealed
        payload = encode_envelope(self.host.name, b.run, b.state.unit_id, b.state.grants_id,
                                  sealed)
        # The one durable step: the segment and the state after it, one transaction.
        self.host.outbox.put(self.run, sealed.index, sealed.segment.kind, self.subject,
                             segment_id(payload), payload, encode_state(prepared.state))
        return b.apply(prepared, keep=False)  # the outbox holds it; the host keeps only state

    def execute(self, *, uj: int, provenance: str, meter: str, journal_root: bytes,
                outcome: str = "ok", calls: CallAccount | None = None) -> SealedSegment:
        return self._emit(*execute_segment(uj=uj, provenance=provenance, meter=meter,
                                           journal_root=journal_root, outcome=outcome,
                                           calls=calls))

    def suspend(self, snapshot: Snapshot, manifest: bytes) -> SealedSegment:
        return self._emit(suspended(snapshot, manifest))

    def resume(self, snapshot: Snapshot, manifest: bytes | None = None, *, idle_uj: int,
               provenance: str, meter: str,
               environment: Environment | None = None) -> SealedSegment:
        """Resume the parked run with the recorded snapshot, after verifying the run's record
        (once per process: :meth:`Host.verified_state`). With ``environment`` (the
        devcontainer.json or manifest file it resumes in, or a Manifest) its manifest address
        must be the park's, else EnvironmentMismatch and nothing is sealed (precondition 2,
        agents.environment)."""
        if not self.verified:
            self.builder.state = self.host.verified_state(self)
            self.verified = True
        address = resume_manifest(manifest, environment)
        recorded = self.builder.state.parked_manifest
        try:
            return self._emit(resumed(snapshot, address, idle_uj, provenance, meter))
        except ManifestMismatch as exc:
            # The record's rule (snapshot first, then manifest) decided; with an environment
            # given, its refusal is named for precondition 2 and carries both addresses.
            if environment is None or recorded is None:
                raise
            given = ("the manifest given" if isinstance(environment, Manifest)
                     else os.fspath(environment))
            raise EnvironmentMismatch(
                f"the run parked in the environment {format_address(recorded)}; "
                f"{given} is {format_address(address)}",
                recorded=format_address(recorded), offered=format_address(address),
                segment=exc.segment) from exc

    def close(self, *, idle_uj: int | None = None, provenance: str | None = None,
              meter: str | None = None) -> SealedSegment:
        """Close the run; a parked run's close carries the idle energy its park drew."""
        return self._emit(Closed(idle_uj, provenance, meter))

    def claim(self, claimed: Claimed) -> SealedSegment:
        """Start this (fresh) run from a warm slot: agents.pool_records."""
        return self._emit(claimed)

    def evict(self, evicted: Evicted) -> SealedSegment:
        """Record an evicted slot in this pool's own run: agents.pool_records."""
        return self._emit(evicted)


__all__ = ["Host", "HostKeyError", "HostRun", "load_or_create_key"]
