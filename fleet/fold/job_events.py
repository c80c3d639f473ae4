"""Job events in the stream (open, seal): their bytes and the one decision on each.

Every event has the envelope all signed events share (:mod:`fleet.grants.signed_event`),
on ``<fleet>.ctl.job`` (``docs/spec/jobs.md``)::

    event = "fleet.jev/1" || kind:u8 || signer[32] || body || signature[64]

    OPEN  0x01  body = len:u32 || terms     the job's terms (fleet.jobs.job_id); the job id
                                            is their id
    SEAL  0x02  body = job[32]              the job to seal now, its missing items listed

signed by ``signer`` (Ed25519) over everything before the signature.

Who may sign: an open is signed by the issuer its terms name (``terms.issuer``, part of the
job id, so nobody can open someone else's job first); a job that names a grant is opened by
that grant's issuer. A seal is signed by the job's issuer or by a trusted operator.

:func:`check_job_event` decides one event against a :class:`JobView` and raises the first
refusal, in this order: the bytes (``MalformedJobEvent``, ``MalformedJobTerms``), the
signature (``BadJobSignature``); for an open: the signer is the terms' issuer
(``NotJobIssuer``), the job has at most :data:`fleet.jobs.job_id.MAX_JOB_ITEMS` items
(``JobTooLarge``), the grant it names is folded (``UnknownGrant``) and issued by that
issuer (``NotIssuer``), the job is not open already (``JobExists``) and no other job holds
its tag (``JobTagTaken``); for a seal: the job is known (``UnknownJob``), not sealed
(``JobSealed``), and the signer its issuer or an operator (``NotJobOwner``).
:func:`decide_job_event` returns the refusal as a value.
"""

from __future__ import annotations

import struct
from collections.abc import Collection
from dataclasses import dataclass
from typing import Final, Protocol

from nacl.signing import SigningKey

from fleet_ledger.fleet.errors import FleetError
from fleet_ledger.fleet.fold.job_event_errors import (
    BadJobSignature,
    MalformedJobEvent,
    NotJobIssuer,
    NotJobOwner,
)
from fleet_ledger.fleet.fold.reference import Refused
from fleet_ledger.fleet.grants import signed_event
from fleet_ledger.fleet.grants.grant_book import GrantView
from fleet_ledger.fleet.grants.grant_errors import NotIssuer, UnknownGrant
from fleet_ledger.fleet.jobs.job_errors import (
    JobExists,
    JobSealed,
    JobTagTaken,
    JobTooLarge,
    UnknownJob,
)
from fleet_ledger.fleet.jobs.job_id import MAX_JOB_ITEMS, JobTerms, decode_terms, job_id, job_tag

__all__ = ["JOB_DOMAIN", "KINDS", "OPEN", "SEAL", "JobAccepted", "JobEvent", "JobView",
           "check_job_event", "decide_job_event", "decode_job_event", "event_id",
           "open_event", "seal_event"]

JOB_DOMAIN: Final = b"fleet.jev/1"
OPEN, SEAL = 1, 2
KINDS: Final = {OPEN: "open", SEAL: "seal"}
_U32 = struct.Struct(">I")
_MIN = len(JOB_DOMAIN) + 1 + signed_event.KEY + signed_event.SIGNATURE


@dataclass(frozen=True, slots=True)
class JobEvent:
    """A decoded event: ``job`` the job it opens or seals; ``terms`` an open's terms (their
    bytes in ``terms_bytes``)."""

    kind: int
    signer: bytes
    job: bytes
    signed: bytes
    signature: bytes
    terms: JobTerms | None = None
    terms_bytes: bytes = b""

    @property
    def kind_name(self) -> str:
        return signed_event.kind_name(KINDS, self.kind)


def open_event(key: SigningKey, terms: bytes) -> bytes:
    """The OPEN event of ``terms`` (the core's open terms bytes), signed by ``key``."""
    return signed_event.sign(key, JOB_DOMAIN, OPEN, _U32.pack(len(terms)) + terms)


def seal_event(key: SigningKey, job: bytes) -> bytes:
    """The SEAL event of ``job``, signed by ``key``."""
    if len(job) != 32:
        raise MalformedJobEvent("a job id is 32 bytes")
    return signed_event.sign(key, JOB_DOMAIN, SEAL, job)


def event_id(data: bytes) -> str:
    """The event's ``Nats-Msg-Id``: ``jev-`` and hex of 16 bytes of BLAKE3 of it."""
    return signed_event.event_id("jev", data)


def decode_job_event(data: bytes, verify: bool = True) -> JobEvent:
    """The event in ``data`` (its signature checked unless ``verify=False``), or the named
    refusal; an open's terms are decoded by the core (its refusal when they do not)."""
    if type(data) is not bytes or not data.startswith(JOB_DOMAIN) or len(data) < _MIN:
        raise MalformedJobEvent("not a fleet.jev/1 job event")
    kind, signer, body, signed, signature = signed_event.split(data, JOB_DOMAIN)
    if kind not in KINDS:
        raise MalformedJobEvent(f"unknown job event kind {kind}")
    if kind == SEAL:
        if len(body) != 32:
            raise MalformedJobEvent("a seal's body is the 32-byte job id")
        ev = JobEvent(kind, signer, body, signed, signature)
    else:
        if len(body) < 4 or len(body) != 4 + _U32.unpack_from(body)[0]:
            raise MalformedJobEvent("an open's body is len:u32 || terms")
        raw = body[4:]
        terms = decode_terms(raw)
        ev = JobEvent(kind, signer, job_id(terms), signed, signature, terms, raw)
    # The bytes first, then the signature: the order of the spec's checks.
    if verify and not signed_event.signature_valid(signer, signed, signature):
        raise BadJobSignature("the event's signature does not verify under its signer")
    return ev


class JobView(Protocol):
    """What job events are decided against: the jobs folded so far (``owner``: the key
    that opened a job; ``sealed``: whether it is) and the tags their item units carry."""

    def job_state(self, job: bytes) -> tuple[bytes, bool] | None:
        """(owner, sealed) of ``job``, or ``None``: never opened."""
        ...

    def tag_job(self, tag: bytes) -> bytes | None:
        """The job whose item units carry ``tag``, if one was opened."""
        ...


@dataclass(frozen=True, slots=True)
class JobAccepted:
    """An accepted event at ``stream_seq`` (ledger time ``at_ms``)."""

    event: JobEvent
    data: bytes
    stream_seq: int
    at_ms: int

    @property
    def job(self) -> bytes:
        return self.event.job


def decide_job_event(view: JobView, data: bytes, stream_seq: int, at_ms: int,
                     grants: GrantView | None, operators: Collection[bytes]
                     ) -> JobAccepted | Refused:
    """:func:`check_job_event`'s acceptance, or its first refusal as a value."""
    try:
        return check_job_event(view, data, stream_seq, at_ms, grants, operators)
    except FleetError as exc:
        return Refused(exc.rule, str(exc), None, None, None)


def check_job_event(view: JobView, data: bytes, stream_seq: int, at_ms: int,
                    grants: GrantView | None, operators: Collection[bytes]) -> JobAccepted:
    """Accept one job event or raise the first rule it breaks (the module's docstring
    gives the order); nothing is changed."""
    ev = decode_job_event(data)
    held = view.job_state(ev.job)
    if ev.kind == OPEN:
        terms = ev.terms
        assert terms is not None
        if ev.signer != terms.issuer:
            raise NotJobIssuer("an open is signed by the issuer its terms name")
        if terms.items > MAX_JOB_ITEMS:
            raise JobTooLarge(f"a job has at most {MAX_JOB_ITEMS} items here, got "
                              f"{terms.items}: split the work into several jobs")
        if terms.grant is not None:
            entry = None if grants is None else grants.entry(terms.grant)
            if entry is None:
                raise UnknownGrant("the job names a grant the ledger has not folded")
            if terms.issuer != entry.grant.issuer:
                raise NotIssuer("a job under a grant is opened by the grant's issuer")
        if held is not None:
            raise JobExists("this job is already open" + (" (sealed)" if held[1] else ""))
        if view.tag_job(job_tag(ev.job)) is not None:
            raise JobTagTaken("another job's id starts with the same 20 bytes")
        return JobAccepted(ev, data, stream_seq, at_ms)
    if held is None:
        raise UnknownJob("no such job is open here")
    owner, sealed = held
    if sealed:
        raise JobSealed("the job is sealed already")
    if ev.signer != owner and ev.signer not in operators:
        raise NotJobOwner("a job is sealed by the key that opened it or by an operator")
    return JobAccepted(ev, data, stream_seq, at_ms)
