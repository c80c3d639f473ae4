"""The rules of a run record, each written once, over plain values.

This module is the record's one statement of:

* **canonical bytes** of the six segment kinds, of both park forms and of attestations
  (``snapshot_bytes``, ``attestation_bytes``, ``executed_bytes``, ``suspended_bytes``,
  ``resumed_bytes``, ``closed_bytes``, ``claimed_bytes``, ``evicted_bytes``), each input
  checked before anything is hashed;
* **the rules** a segment must meet against the run it extends (:func:`next_phase`,
  :func:`executed_step`, :func:`suspended_step`, :func:`resumed_step`,
  :func:`closed_step`, :func:`claimed_step`, :func:`evicted_step`) and against the host
  that sealed it (:func:`check_holder`), each raising its named refusal and changing
  nothing;
* **the state** of a run (:class:`RunState`, :class:`Energy`) and **the state change** a
  segment makes once accepted (:func:`apply`), with the head check (:func:`check_head`)
  and the holder change (:func:`next_holder`) every decoder runs.

Everything here takes plain values (bytes, ints, strings, sequences of call ids): no
decoded object of any one form. Two decoders feed it: the object API
(:mod:`fleet.record.segment`, :class:`fleet.record.record.RunState`, :mod:`fleet.record.builder`)
and the wire
fast path (:mod:`fleet.record.verify_fast`, :mod:`fleet.fold.fast`), which reads the values
straight out of msgspec structs. A rule added here therefore binds both, and ``fleet
verify`` (fast or ``--reference``) and the ledger's fold decide alike.

A *park* is held as plain bytes, ``snapshot_bytes || manifest[32]``; a *step* is the value
:func:`apply` needs (a tuple, one per segment on the hot path)::

    (body, phase, park, receipt, idle, executed, calls, pool)

    body      canonical bytes; the head after the segment is BLAKE3(previous head || body)
    phase     the phase after it
    park      the park held after it (None: not parked)
    receipt   (provenance, uj) of an executed interval, else None
    idle      (provenance, uj) of a resume's idle energy (or a close's that ends a park),
              else None
    executed  whether it is an executed interval (it then feeds the wait proof)
    calls     an executed interval's call account (None: unaccounted); anything with
              ``dispatched`` and ``resolved`` sequences of call ids
    pool      a warm slot's energy: ``(source, manifest, ((provenance, uj), ...))``,
              source ``claim`` (a claimed segment; ``manifest`` becomes the run's) or
              ``overhead`` (an evicted segment; ``manifest`` None), else None

``docs/spec/run-record.md`` is the normative text of these layouts and rules.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final, Protocol, Self

from blake3 import blake3

from fleet_ledger.fleet import text
from fleet_ledger.fleet.address import digest
from fleet_ledger.fleet.errors import (
    AttestationMismatch,
    ForeignRun,
    HeadMismatch,
    MalformedCallAccount,
    MalformedSegment,
    MalformedSnapshot,
    ManifestMismatch,
    PhaseViolation,
    RecordClosed,
    SnapshotMismatch,
    ValueOutOfRange,
    ZeroClaimEnergy,
    ZeroIdleEnergy,
    ZeroOverheadEnergy,
)
from fleet_ledger.fleet.record.kinds import (
    CLAIMED,
    CLOSED,
    EVICTED,
    EXECUTED,
    KINDS,
    MAX_INDEX,
    RESUMED,
    SUSPENDED,
    TABLE,
    TAGS,
    Kind,
    index_in_range,
)
from fleet_ledger.fleet.record.phases import CLOSED as PHASE_CLOSED
from fleet_ledger.fleet.record.phases import FRESH, TRANSITIONS
from fleet_ledger.fleet.record.phases import PARKED as PHASE_PARKED
from fleet_ledger.fleet.record.wait_proof import Calls, Verdict, WaitTracker

__all__ = [
    "ACCOUNT_PRESENT",
    "ATTESTATION_DOMAIN",
    "BODIES",
    "CLAIM",
    "CLAIMED",
    "CLOSED",
    "CLOSED_BYTES",
    "DIGEST",
    "EVICTED",
    "EXECUTED",
    "FORM_IMAGE",
    "FORM_IMAGE_WITH_MEMORY",
    "FORM_TRANSCRIPT",
    "GENESIS_DOMAIN",
    "KINDS",
    "MAX_CALLS",
    "MAX_CALL_ID",
    "MAX_INDEX",
    "MAX_TEXT",
    "MAX_U64",
    "NO_GRANTS",
    "OVERHEAD",
    "POOL_DOMAIN",
    "PROVENANCES",
    "RESUMED",
    "SUSPENDED",
    "TABLE",
    "TAG_CLAIMED",
    "TAG_CLOSED",
    "TAG_EVICTED",
    "TAG_EXECUTED",
    "TAG_RESUMED",
    "TAG_SUSPENDED",
    "Calls",
    "Energy",
    "Kind",
    "Position",
    "RunState",
    "Step",
    "apply",
    "attestation_bytes",
    "check_digest",
    "check_head",
    "check_holder",
    "check_provenance",
    "check_u64",
    "claimed_bytes",
    "claimed_step",
    "closed_bytes",
    "closed_step",
    "encode_ids",
    "encode_text",
    "evicted_bytes",
    "evicted_step",
    "executed_bytes",
    "executed_step",
    "genesis",
    "index_in_range",
    "next_holder",
    "next_phase",
    "park_parts",
    "pool_unit",
    "resumed_bytes",
    "resumed_step",
    "snapshot_bytes",
    "snapshot_parts",
    "step_manifest",
    "step_uj",
    "suspended_bytes",
    "suspended_step",
]

# -- the vocabulary -------------------------------------------------------------------------

# The kinds, their tags, fields, address order and the index bound: fleet.record.kinds's table.
TAG_EXECUTED: Final = TAGS[EXECUTED]
TAG_SUSPENDED: Final = TAGS[SUSPENDED]
TAG_RESUMED: Final = TAGS[RESUMED]
TAG_CLOSED: Final = TAGS[CLOSED]
TAG_CLAIMED: Final = TAGS[CLAIMED]
TAG_EVICTED: Final = TAGS[EVICTED]

# The energy sources a warm slot's energy is counted under (beside receipts and idle).
CLAIM: Final = "claim"
OVERHEAD: Final = "overhead"

FORM_IMAGE: Final = 0x00
FORM_IMAGE_WITH_MEMORY: Final = 0x01
FORM_TRANSCRIPT: Final = 0x02
ACCOUNT_PRESENT: Final = 0x01

PROVENANCES: Final = {"measured": 1, "estimated": 2}
DIGEST: Final = 32
MAX_U64: Final = 2**64 - 1
MAX_TEXT: Final = 128
MAX_CALL_ID: Final = 256
MAX_CALLS: Final = 4096

GENESIS_DOMAIN: Final = b"sandbox.runrecord/1"
ATTESTATION_DOMAIN: Final = b"fleet.attestation/1"
POOL_DOMAIN: Final = b"fleet.warmpool/1"
# A pool's own run is held under no grant set: its grants id is 32 zero bytes.
NO_GRANTS: Final = bytes(DIGEST)

_U32 = struct.Struct(">I")
# u64 energy in microjoules, then its provenance byte: an attestation's receipt and a
# resume's idle energy share this layout.
_ENERGY = struct.Struct(">QB")

_B_EXECUTED = bytes((TAG_EXECUTED,))
_B_SUSPENDED = bytes((TAG_SUSPENDED,))
_B_RESUMED = bytes((TAG_RESUMED,))
_B_CLAIMED = bytes((TAG_CLAIMED,))
_B_EVICTED = bytes((TAG_EVICTED,))
_B_ACCOUNT = bytes((ACCOUNT_PRESENT,))
_B_IMAGE = bytes((FORM_IMAGE,))
_B_IMAGE_MEM = bytes((FORM_IMAGE_WITH_MEMORY,))
_B_TRANSCRIPT = bytes((FORM_TRANSCRIPT,))
CLOSED_BYTES: Final = bytes((TAG_CLOSED,))


Step = tuple[bytes, str, bytes | None, tuple[str, int] | None, tuple[str, int] | None, bool,
             Any, tuple[str, bytes | None, tuple[tuple[str, int], ...]] | None]

# -- field checks ---------------------------------------------------------------------------


def check_digest(value: object, what: str) -> bytes:
    if type(value) is not bytes or len(value) != DIGEST:
        raise ValueOutOfRange(f"{what} must be {DIGEST} bytes")
    return value


def check_u64(value: object, what: str) -> int:
    if type(value) is not int or not 0 <= value <= MAX_U64:
        raise ValueOutOfRange(f"{what} must be an integer in 0..2^64-1, got {value!r}")
    return value


def check_provenance(value: object) -> str:
    if value not in PROVENANCES:
        raise ValueOutOfRange(f"provenance must be 'measured' or 'estimated', got {value!r}")
    return value


def _energy(uj: object, provenance: object, what: str) -> bytes:
    """``uj:u64 || provenance:u8``."""
    code = PROVENANCES.get(provenance) if type(provenance) is str else None
    if code is None:
        check_provenance(provenance)
    if type(uj) is not int or not 0 <= uj <= MAX_U64:
        check_u64(uj, what)
    return _ENERGY.pack(uj, code)


# ``len:u16 || utf8`` of a non-empty printable text of at most ``MAX_TEXT`` bytes, else
# ``ValueOutOfRange``: the one text codec (fleet.text), with the record's limit and refusal.
encode_text: Final = partial(text.encode_text, error=ValueOutOfRange, limit=MAX_TEXT)


_NO_IDS = _U32.pack(0)


def encode_ids(ids: Sequence[str], what: str) -> bytes:
    """``count:u32 || (len:u32 || utf8)*`` of a call-id list, each id checked."""
    count = len(ids)
    if not count:
        return _NO_IDS
    if count > MAX_CALLS:
        raise MalformedCallAccount(f"{what} holds {count} ids, the limit is {MAX_CALLS}")
    parts = [_U32.pack(count)]
    for call_id in ids:
        if not isinstance(call_id, str) or not call_id or not call_id.isprintable():
            raise MalformedCallAccount(f"{what} ids must be non-empty printable text")
        raw = call_id.encode()
        if len(raw) > MAX_CALL_ID:
            raise MalformedCallAccount(f"a call id is {len(raw)} bytes, limit {MAX_CALL_ID}")
        parts += (_U32.pack(len(raw)), raw)
    return b"".join(parts)


# -- canonical bytes ------------------------------------------------------------------------


def genesis(unit_id: bytes, grants_id: bytes) -> bytes:
    """``BLAKE3(GENESIS_DOMAIN || unit_id || grants_id)``: the genesis head and run id."""
    return digest(GENESIS_DOMAIN + check_digest(unit_id, "unit_id")
                  + check_digest(grants_id, "grants_id"))


def snapshot_bytes(fs_root: bytes | None, mem_image: bytes | None,
                   transcript: bytes | None) -> bytes:
    """A park reference in exactly one form, or :class:`MalformedSnapshot`::

        fs_root[32] || 0x00                    image park, no memory image
        fs_root[32] || 0x01 || mem_image[32]   image park with a memory image
        transcript[32] || 0x02                 transcript park
    """
    if transcript is not None:
        if mem_image is not None:
            raise MalformedSnapshot(
                "a transcript park beside a memory image claims to retain nothing on the host "
                "while holding an image on it")
        if fs_root is not None:
            raise MalformedSnapshot("a snapshot reference names both an image and a transcript")
        return _snapshot_digest(transcript, "transcript") + _B_TRANSCRIPT
    if fs_root is None:
        if mem_image is not None:
            raise MalformedSnapshot("an image park needs a filesystem root")
        raise MalformedSnapshot("a snapshot reference names neither an image nor a transcript")
    fs = _snapshot_digest(fs_root, "fs_root")
    if mem_image is None:
        return fs + _B_IMAGE
    return fs + _B_IMAGE_MEM + _snapshot_digest(mem_image, "mem_image")


def snapshot_parts(raw: bytes) -> tuple[bytes | None, bytes | None, bytes | None]:
    """``(fs_root, mem_image, transcript)`` of a park reference's canonical bytes (the
    inverse of :func:`snapshot_bytes`), or :class:`MalformedSnapshot`."""
    form = raw[DIGEST:DIGEST + 1]
    if len(raw) == DIGEST + 1 and form == _B_TRANSCRIPT:
        return None, None, raw[:DIGEST]
    if len(raw) == DIGEST + 1 and form == _B_IMAGE:
        return raw[:DIGEST], None, None
    if len(raw) == 2 * DIGEST + 1 and form == _B_IMAGE_MEM:
        return raw[:DIGEST], raw[DIGEST + 1:], None
    raise MalformedSnapshot("not the canonical bytes of a snapshot")


def _snapshot_digest(value: object, what: str) -> bytes:
    # A reference that is not a 32-byte address is a malformed snapshot, whichever path
    # built it: an empty filesystem root must never hash like another form.
    if type(value) is not bytes or len(value) != DIGEST:
        raise MalformedSnapshot(f"a snapshot's {what} must be a 32-byte address")
    return value


def park_parts(park: bytes) -> tuple[bytes, bytes]:
    """(snapshot bytes, manifest) of a park."""
    return park[:-DIGEST], park[-DIGEST:]


def attestation_bytes(uj: int, provenance: str, meter: str, journal_root: bytes,
                      outcome: str) -> bytes:
    """``ATTESTATION_DOMAIN || uj:u64 || provenance:u8 || text(meter) || journal_root[32]
    || text(outcome)``; its BLAKE3 is the attestation's address."""
    if type(journal_root) is not bytes or len(journal_root) != DIGEST:
        check_digest(journal_root, "journal_root")
    return (ATTESTATION_DOMAIN + _energy(uj, provenance, "receipt uj")
            + encode_text(meter, "meter") + journal_root + encode_text(outcome, "outcome"))


def executed_bytes(attestation: bytes, calls: Calls | None) -> bytes:
    """``0x01 || attestation[32]``, then ``0x01 || ids(dispatched) || ids(resolved)`` when
    the interval keeps a call account (absent and empty accounts hash differently)."""
    if type(attestation) is not bytes or len(attestation) != DIGEST:
        check_digest(attestation, "attestation")
    body = _B_EXECUTED + attestation
    if calls is None:
        return body
    return (body + _B_ACCOUNT + encode_ids(calls.dispatched, "dispatched")
            + encode_ids(calls.resolved, "resolved"))


def suspended_bytes(snapshot: bytes, manifest: bytes) -> bytes:
    """``0x02 || snapshot || manifest[32]``."""
    return _B_SUSPENDED + snapshot + check_digest(manifest, "manifest")


def resumed_bytes(snapshot: bytes, manifest: bytes, idle_uj: int, idle_provenance: str,
                  idle_meter: str) -> bytes:
    """``0x03 || snapshot || manifest[32] || idle_uj:u64 || provenance:u8 || text(meter)``."""
    return (_B_RESUMED + snapshot + check_digest(manifest, "manifest")
            + _energy(idle_uj, idle_provenance, "idle_uj") + encode_text(idle_meter, "meter"))


def closed_bytes(idle_uj: int | None = None, idle_provenance: str | None = None,
                 idle_meter: str | None = None) -> bytes:
    """``0x04`` (a bare close), or ``0x04 || idle_uj:u64 || provenance:u8 || text(meter)``:
    a close that ends a park, with the idle energy the park drew until the close. The three
    idle fields come together or not at all (``MalformedSegment``)."""
    if idle_uj is None and idle_provenance is None and idle_meter is None:
        return CLOSED_BYTES
    if idle_uj is None or idle_provenance is None or idle_meter is None:
        raise MalformedSegment("a close gives its idle energy, provenance and meter together"
                               " or none of them")
    return (CLOSED_BYTES + _energy(idle_uj, idle_provenance, "idle_uj")
            + encode_text(idle_meter, "meter"))


def pool_unit(host: str, pool: str) -> bytes:
    """``BLAKE3(POOL_DOMAIN || text(host) || text(pool))``: the unit of a pool's own run
    (its run id is :func:`genesis` of this unit and :data:`NO_GRANTS`)."""
    return digest(POOL_DOMAIN + encode_text(host, "host") + encode_text(pool, "pool name"))


def _slot_energy(warm_uj: int, warm_provenance: str, warm_meter: str, idle_uj: int,
                 idle_provenance: str, idle_meter: str) -> bytes:
    """``warm_uj:u64 || warm_provenance:u8 || text(warm_meter) || idle_uj:u64 ||
    idle_provenance:u8 || text(idle_meter)``: a warm slot's energy, warm-up then idle."""
    return (_energy(warm_uj, warm_provenance, "warm_uj") + encode_text(warm_meter, "warm_meter")
            + _energy(idle_uj, idle_provenance, "idle_uj") + encode_text(idle_meter, "idle_meter"))


def claimed_bytes(slot: bytes, warm_uj: int, warm_provenance: str, warm_meter: str,
                  idle_uj: int, idle_provenance: str, idle_meter: str, snapshot: bytes,
                  manifest: bytes) -> bytes:
    """``0x05 || slot[32] || snapshot || manifest[32] || slot energy``; the snapshot is an
    image park's (a transcript retains no sandbox to start from: ``MalformedSnapshot``).
    The arguments come in the table's order of the fields (:data:`BODIES`)."""
    if snapshot[DIGEST:DIGEST + 1] == _B_TRANSCRIPT:
        raise MalformedSnapshot("a warm slot is an image park: a transcript holds no sandbox")
    return (_B_CLAIMED + check_digest(slot, "slot") + snapshot
            + check_digest(manifest, "manifest")
            + _slot_energy(warm_uj, warm_provenance, warm_meter, idle_uj, idle_provenance,
                           idle_meter))


def evicted_bytes(slot: bytes, warm_uj: int, warm_provenance: str, warm_meter: str,
                  idle_uj: int, idle_provenance: str, idle_meter: str) -> bytes:
    """``0x06 || slot[32] || slot energy``."""
    return (_B_EVICTED + check_digest(slot, "slot")
            + _slot_energy(warm_uj, warm_provenance, warm_meter, idle_uj, idle_provenance,
                           idle_meter))


# Each kind's canonical bytes, called with its fields in the table's order, its parameters
# named as they are (:data:`fleet.record.kinds.TABLE`; a snapshot as its canonical bytes, the
# attestation object, which travels beside the segment, left out): how the object API
# builds them.
BODIES: Final[dict[str, Callable[..., bytes]]] = {
    EXECUTED: executed_bytes, SUSPENDED: suspended_bytes, RESUMED: resumed_bytes,
    CLOSED: closed_bytes, CLAIMED: claimed_bytes, EVICTED: evicted_bytes,
}


# -- the rules ------------------------------------------------------------------------------


def next_phase(phase: str, kind: str, index: int) -> str:
    """The phase after a segment of ``kind`` (``index``: its position), or the refusal."""
    nxt = TRANSITIONS.get((phase, kind))
    if nxt is not None:
        return nxt
    if phase == PHASE_CLOSED:
        raise RecordClosed("the record is closed; nothing may follow", segment=index)
    raise PhaseViolation(f"a {kind} segment is not allowed in phase {phase}", segment=index)


class Position(Protocol):
    """What the rules read of a run: its phase, the park it holds, and the manifest its
    claim or first park fixed (``None`` before either)."""

    phase: str
    park: bytes | None
    manifest: bytes | None


def executed_step(run: Position, index: int, body: bytes, claimed: bytes,
                  attested: bytes | None, uj: int, provenance: str,
                  calls: Calls | None) -> Step:
    """An executed interval: allowed in this phase, and its attestation object (whose
    address is ``attested``; ``None``: missing) hashes to the address it records."""
    nxt = next_phase(run.phase, EXECUTED, index)
    if attested is None:
        raise AttestationMismatch("the attestation object is missing", segment=index)
    if attested != claimed:
        raise AttestationMismatch(
            "the attestation object does not hash to the recorded address", segment=index)
    return body, nxt, run.park, (provenance, uj), None, True, calls, None


def suspended_step(run: Position, index: int, body: bytes, snapshot: bytes,
                   manifest: bytes) -> Step:
    """A park: allowed only after the run has executed; it holds ``snapshot || manifest``.
    The environment manifest is the one the run was created from: its claim or else its
    first park fixes it, and a later park naming another is ``ManifestMismatch``."""
    nxt = next_phase(run.phase, SUSPENDED, index)
    if run.manifest is not None and manifest != run.manifest:
        raise ManifestMismatch(
            "the park names another environment manifest than the run's first park",
            segment=index)
    return body, nxt, snapshot + manifest, None, None, False, None, None


def resumed_step(run: Position, index: int, body: bytes, snapshot: bytes,
                 manifest: bytes, idle_uj: int, provenance: str) -> Step:
    """A resume: offers exactly the snapshot and manifest recorded at the park, and says
    what the park drew (never zero)."""
    nxt = next_phase(run.phase, RESUMED, index)
    park = run.park
    held_snapshot, held_manifest = park_parts(park) if park is not None else (None, None)
    if snapshot != held_snapshot:
        raise SnapshotMismatch(
            "the offered snapshot is not the one recorded at suspension", segment=index)
    if manifest != held_manifest:
        raise ManifestMismatch(
            "the resuming environment's manifest differs from the recorded one", segment=index)
    if idle_uj == 0:
        raise ZeroIdleEnergy(
            "a park is never free: idle_uj must be the energy its retained state drew",
            segment=index)
    return body, nxt, None, None, (provenance, idle_uj), False, None, None


def closed_step(run: Position, index: int, body: bytes = CLOSED_BYTES,
                idle_uj: int | None = None, provenance: str | None = None) -> Step:
    """A close: allowed in any phase but closed; the park (if any) stays on the record. A
    close that carries idle energy (``body`` from :func:`closed_bytes`) ends a park: only
    a parked run's (``PhaseViolation``), never zero (``ZeroIdleEnergy``), and it counts as
    the run's idle energy, as a resume's would: abandoning a week-long park does not drop
    the week's draw from the record."""
    nxt = next_phase(run.phase, CLOSED, index)
    if idle_uj is None:
        return CLOSED_BYTES, nxt, run.park, None, None, False, None, None
    if run.phase != PHASE_PARKED:
        raise PhaseViolation(f"a close carries idle energy only when it ends a park, not in"
                             f" phase {run.phase}", segment=index)
    if idle_uj == 0:
        raise ZeroIdleEnergy(
            "a park is never free: idle_uj must be the energy its retained state drew",
            segment=index)
    # A body from closed_bytes carries all three idle fields or none: this only narrows.
    return body, nxt, run.park, None, (check_provenance(provenance), idle_uj), False, None, None


def claimed_step(run: Position, index: int, body: bytes, manifest: bytes, warm_uj: int,
                 warm_provenance: str, idle_uj: int, idle_provenance: str) -> Step:
    """A claim: only as a run's first segment; its warm-up and idle are each at least
    1 µJ (a fast start is never free), counted as the run's ``claim`` energy; the slot's
    manifest is the run's (a later park naming another is ``ManifestMismatch``)."""
    return _slot_step(run, index, body, CLAIMED, manifest, (warm_provenance, warm_uj),
                      (idle_provenance, idle_uj))


def evicted_step(run: Position, index: int, body: bytes, warm_uj: int, warm_provenance: str,
                 idle_uj: int, idle_provenance: str) -> Step:
    """An eviction: only in a pool's own run (fresh or already holding evictions); its
    warm-up and idle are each at least 1 µJ, counted as the run's ``overhead`` energy."""
    return _slot_step(run, index, body, EVICTED, None, (warm_provenance, warm_uj),
                      (idle_provenance, idle_uj))


def _slot_step(run: Position, index: int, body: bytes, kind: str, manifest: bytes | None,
               warm: tuple[str, int], idle: tuple[str, int]) -> Step:
    nxt = next_phase(run.phase, kind, index)
    if warm[1] == 0 or idle[1] == 0:
        refusal = ZeroClaimEnergy if kind == CLAIMED else ZeroOverheadEnergy
        raise refusal(f"a {'claimed' if kind == CLAIMED else 'evicted'} warm slot is never "
                      "free: warm_uj and idle_uj must each be what it drew", segment=index)
    source = CLAIM if kind == CLAIMED else OVERHEAD
    return body, nxt, None, None, None, False, None, (source, manifest, (warm, idle))


def check_holder(holder: str, host: str, phase: str, kind: str, index: int,
                 next_index: int) -> None:
    """A run is held by one host at a time: the host that opened it, until it parks. While
    it is parked, its next segment (a resume or a close) may come from any host, which then
    holds it. Any other segment from a host that does not hold the run is ``ForeignRun``."""
    if host == holder:
        return
    if phase == PHASE_PARKED and index == next_index and kind in (RESUMED, CLOSED):
        return
    raise ForeignRun(f"the run is held by host {holder!r}", segment=index)


def next_holder(holder: str | None, host: str, phase: str, kind: str, index: int,
                next_index: int) -> str:
    """The host that holds the run after ``host`` sealed its segment ``index``: ``host``
    itself, if :func:`check_holder` allows it to seal it (``ForeignRun`` otherwise).
    ``holder`` ``None``: no host holds the run yet (it is new), and its opener holds it."""
    if holder is not None and holder != host:  # the common case, without a second call
        check_holder(holder, host, phase, kind, index, next_index)
    return host


def check_head(previous: bytes, body: bytes, stated: bytes, index: int) -> bytes:
    """The head after a segment: ``BLAKE3(previous || body)`` (``body``: its canonical
    bytes), or ``HeadMismatch`` unless it is the ``stated`` head."""
    head = blake3(previous + body).digest()
    if head != stated:
        raise HeadMismatch("the stated head is not the head recomputed from the run",
                           segment=index)
    return head


# -- what a step spends and where it runs ---------------------------------------------------


def step_uj(step: Step) -> int:
    """The energy (µJ) ``step`` adds to its run: an interval's receipt, a resume's idle, a
    warm slot's warm-up and idle; 0 for the others."""
    receipt, idle, pool = step[3], step[4], step[7]
    if receipt is not None:
        return receipt[1]
    if idle is not None:
        return idle[1]
    if pool is not None:
        return sum(uj for _provenance, uj in pool[2])
    return 0


def step_manifest(held_park: bytes | None, kind: str, step: Step) -> bytes | None:
    """The environment manifest ``step`` runs or parks under (``held_park``: the run's park
    before it): a park's, the resumed park's, a claimed slot's; ``None`` for the others."""
    if kind == SUSPENDED:
        park = step[2]
        return None if park is None else park[-DIGEST:]
    if kind == RESUMED:
        return None if held_park is None else held_park[-DIGEST:]
    if kind == CLAIMED:
        pool = step[7]
        return None if pool is None else pool[1]
    return None


# -- the state ------------------------------------------------------------------------------


def _zero() -> dict[str, int]:
    return {"measured": 0, "estimated": 0}


@dataclass(slots=True)
class Energy:
    """Microjoules of a run by source, each split by provenance: active receipts, idle
    parks, the warm slot a claim started it from (``claim``) and, in a pool's own run, the
    slots it evicted (``overhead``)."""

    receipts: dict[str, int] = field(default_factory=_zero)
    idle: dict[str, int] = field(default_factory=_zero)
    claim: dict[str, int] = field(default_factory=_zero)
    overhead: dict[str, int] = field(default_factory=_zero)
    # The sum of the four accounts: counted from them when made, then kept beside them by
    # apply (the one state change), so a grant's budget check on every segment reads it
    # instead of summing.
    spent: int = field(default=-1, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.spent < 0:
            self.spent = sum(sum(s.values()) for s in self._sources())

    def _sources(self) -> tuple[dict[str, int], ...]:
        return self.receipts, self.idle, self.claim, self.overhead

    @property
    def total_uj(self) -> int:
        return self.spent

    def by_provenance(self) -> dict[str, int]:
        return {p: sum(s[p] for s in self._sources()) for p in self.receipts}

    def copy(self) -> Energy:
        return Energy(dict(self.receipts), dict(self.idle), dict(self.claim),
                      dict(self.overhead), self.spent)

    def as_json(self) -> dict[str, Any]:
        return {
            "total_uj": self.total_uj,
            "receipts_uj": dict(self.receipts),
            "idle_uj": dict(self.idle),
            "claim_uj": dict(self.claim),
            "overhead_uj": dict(self.overhead),
            "by_provenance_uj": self.by_provenance(),
        }


@dataclass(slots=True)
class RunState:
    """Where a run stands after the segments folded so far (``park``: the
    ``snapshot || manifest`` bytes while parked; ``manifest``: the environment manifest its
    claim or first park fixed); only :func:`apply` changes it. The object API's
    :class:`fleet.record.record.RunState` adds the steps of segment objects."""

    unit_id: bytes
    grants_id: bytes
    run: bytes
    head: bytes
    index: int = 0
    phase: str = FRESH
    park: bytes | None = None
    manifest: bytes | None = None
    energy: Energy = field(default_factory=Energy)
    wait: WaitTracker = field(default_factory=WaitTracker)

    @classmethod
    def open(cls, unit_id: bytes, grants_id: bytes) -> Self:
        head0 = genesis(unit_id, grants_id)
        return cls(unit_id, grants_id, head0, head0)

    @property
    def parked_manifest(self) -> bytes | None:
        return None if self.park is None else park_parts(self.park)[1]

    def copy(self) -> Self:
        """An independent copy (a ledger's batch changes copies, never committed state)."""
        return type(self)(self.unit_id, self.grants_id, self.run, self.head, self.index,
                          self.phase, self.park, self.manifest, self.energy.copy(),
                          self.wait.copy())

    def apply(self, step: Step, head: bytes) -> None:
        """:func:`apply` of ``step`` as the run's next segment, ending at ``head``."""
        apply(self, self.index + 1, head, step)

    def after(self, index: int, head: bytes, step: Step) -> Self:
        """The state :func:`apply` of ``step`` (segment ``index``, ending at ``head``) leads
        to, as a new state, leaving this one unchanged. Only what apply may change is
        copied: the energy, and the call accounts when the step executed (a look ahead at
        a step, e.g. at a job item's close, at a fraction of :meth:`copy`'s cost)."""
        _body, _phase, _park, _receipt, _idle, executed, _calls, _pool = step
        probe = type(self)(self.unit_id, self.grants_id, self.run, self.head, self.index,
                           self.phase, self.park, self.manifest, self.energy.copy(),
                           self.wait.copy() if executed else self.wait)
        apply(probe, index, head, step)
        return probe

    def wait_proof(self) -> Verdict:
        return self.wait.verdict()


# -- the state change -----------------------------------------------------------------------


def apply(state: RunState, index: int, head: bytes, step: Step) -> None:
    """Move ``state`` past an accepted segment: position, phase, park, energy, calls."""
    _body, phase, park, receipt, idle, executed, calls, pool = step
    state.index = index
    state.head = head
    state.phase = phase
    state.park = park
    if park is not None and state.manifest is None:
        state.manifest = park[-DIGEST:]
    energy = state.energy
    if receipt is not None:
        energy.receipts[receipt[0]] += receipt[1]
        energy.spent += receipt[1]
    elif idle is not None:
        energy.idle[idle[0]] += idle[1]
        energy.spent += idle[1]
    elif pool is not None:
        source, manifest, parts = pool
        account = energy.claim if source == CLAIM else energy.overhead
        for provenance, uj in parts:
            account[provenance] += uj
            energy.spent += uj
        if manifest is not None and state.manifest is None:
            state.manifest = manifest
    if executed:
        state.wait.add(index, calls)
