"""A job's terms, its id, and the unit id that binds an item run to (job, index) at genesis.

Terms (canonical bytes)::

    terms  = issuer[32] || nonce[16] || items:u32 || grant_flag:u8 || [grant[32]] || text(name)
    job_id = BLAKE3("fleet.job/1" || terms)

``issuer`` is the Ed25519 key that signs the job's open event, ``nonce`` 16 bytes the opener
chooses (so a job of the same name can be opened again), ``items`` the item count, 1 ..
2**32 - 1, ``grant_flag`` 0 (no grant, nothing follows) or 1 (the 32-byte grant id follows),
``text(name)`` ``len:u16 || utf8`` of 1 .. 128 bytes of printable text, as in the record.

Item units. An item run is an ordinary run whose unit id is::

    unit = "jobitem1" || tag[20] || index:u32      tag = job_id[:20]

so its run id, ``genesis(unit, grants)`` (``docs/spec/run-record.md``), binds the job and the
index: the run cannot be moved to another job or index without changing its id. The 8-byte
mark keeps an ordinary run (whose unit is a digest) from being read as an item except with
probability 2**-64, and lets the ledger refuse an item of an unknown job by name; the ledger
refuses to open a job whose tag another job holds, so a tag names one job.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final, NamedTuple

from fleet_ledger.fleet.address import digest
from fleet_ledger.fleet.jobs.job_errors import MalformedJobTerms
from fleet_ledger.fleet.record.kernel import genesis
from fleet_ledger.fleet.text import encode_text, text_at

__all__ = [
    "ITEM_MARK",
    "JOB_DOMAIN",
    "MAX_ITEMS",
    "MAX_JOB_ITEMS",
    "MAX_NAME",
    "NONCE_SIZE",
    "TAG_SIZE",
    "ItemUnit",
    "JobTerms",
    "decode_terms",
    "encode_terms",
    "item_run",
    "item_unit",
    "job_id",
    "job_tag",
    "parse_item_unit",
    "read_terms",
]

JOB_DOMAIN: Final = b"fleet.job/1"
ITEM_MARK: Final = b"jobitem1"
TAG_SIZE: Final = 20
NONCE_SIZE: Final = 16
MAX_ITEMS: Final = 2**32 - 1
# The most items a ledger folds in one job (an open of more is JobTooLarge): a job's seal
# builds its tree and receipt over every item, present or missing, inside the fold, so
# its cost is the item count's. At 2**20 a seal took 7.5 s and 220 MB here (docs/
# benchmarks.md, `fleet bench jobs --items 1048576`); at the
# encoding's 2**32 - 1 it would never end, and the ledger would stop folding there.
MAX_JOB_ITEMS: Final = 2**20
MAX_NAME: Final = 128

_HEAD = struct.Struct(">32s16sIB")
_U32 = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class JobTerms:
    """What a job's open event states; its id is :func:`job_id` of these."""

    name: str
    items: int
    issuer: bytes
    nonce: bytes
    grant: bytes | None = None


def encode_terms(terms: JobTerms) -> bytes:
    """The canonical bytes of ``terms``, or :class:`MalformedJobTerms`."""
    if type(terms.issuer) is not bytes or len(terms.issuer) != 32:
        raise MalformedJobTerms("a job's issuer is a 32-byte Ed25519 key")
    if type(terms.nonce) is not bytes or len(terms.nonce) != NONCE_SIZE:
        raise MalformedJobTerms(f"a job's nonce is {NONCE_SIZE} bytes")
    if type(terms.items) is not int or not 1 <= terms.items <= MAX_ITEMS:
        raise MalformedJobTerms(f"a job has 1 .. {MAX_ITEMS} items, got {terms.items!r}")
    if terms.grant is not None and (type(terms.grant) is not bytes or len(terms.grant) != 32):
        raise MalformedJobTerms("a job's grant id is 32 bytes")
    name = encode_text(terms.name, "a job name", MalformedJobTerms, MAX_NAME)
    grant = b"\x00" if terms.grant is None else b"\x01" + terms.grant
    return terms.issuer + terms.nonce + _U32.pack(terms.items) + grant + name


def read_terms(data: bytes, at: int = 0) -> tuple[JobTerms, int]:
    """The terms encoded at ``data[at:]`` and the offset just after them (terms are
    self-delimiting, so a receipt can carry them first), or :class:`MalformedJobTerms`."""
    end = at + _HEAD.size
    if len(data) < end:
        raise MalformedJobTerms("job terms are cut short")
    issuer, nonce, items, flag = _HEAD.unpack_from(data, at)
    grant = None
    if flag == 1:
        grant, end = data[end:end + 32], end + 32
        if len(grant) != 32:
            raise MalformedJobTerms("job terms are cut short in the grant id")
    elif flag != 0:
        raise MalformedJobTerms(f"a job's grant flag is 0 or 1, got {flag}")
    if len(data) < end + 2:
        raise MalformedJobTerms("job terms are cut short before the name")
    stop = text_at(data, end)
    if len(data) < stop:
        raise MalformedJobTerms("job terms are cut short in the name")
    try:
        name = data[end + 2:stop].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedJobTerms("a job name is UTF-8 text") from exc
    terms = JobTerms(name, items, issuer, nonce, grant)
    # Re-encoding checks the rest (printable, length, item count) and the canonical form.
    if encode_terms(terms) != data[at:stop]:
        raise MalformedJobTerms("job terms are not in canonical form")
    return terms, stop


def decode_terms(data: bytes) -> JobTerms:
    """The terms of exactly ``data``, or :class:`MalformedJobTerms`."""
    terms, end = read_terms(data)
    if end != len(data):
        raise MalformedJobTerms(f"{len(data) - end} bytes follow the job terms")
    return terms


def job_id(terms: JobTerms) -> bytes:
    """``BLAKE3("fleet.job/1" || terms)``: the job's 32-byte id."""
    return digest(JOB_DOMAIN + encode_terms(terms))


def job_tag(job: bytes) -> bytes:
    """The 20 bytes of a job id its item units carry: its first 20."""
    if type(job) is not bytes or len(job) != 32:
        raise MalformedJobTerms("a job id is 32 bytes")
    return job[:TAG_SIZE]


class ItemUnit(NamedTuple):
    """What an item's unit id names: the tag of its job and its index."""

    tag: bytes
    index: int  # type: ignore[assignment]  # the spec's field name shadows tuple.index


def item_unit(job: bytes, index: int) -> bytes:
    """The 32-byte unit id of item ``index`` of ``job``:
    ``"jobitem1" || job[:20] || index:u32``."""
    if type(index) is not int or not 0 <= index < MAX_ITEMS:
        raise MalformedJobTerms(f"an item index is in 0 .. {MAX_ITEMS - 1}, got {index!r}")
    return ITEM_MARK + job_tag(job) + _U32.pack(index)


def parse_item_unit(unit: bytes) -> ItemUnit | None:
    """The job tag and index an item's unit id names, or ``None`` for an ordinary unit
    (one without the item mark). The ledger looks the tag up among the jobs it opened."""
    if len(unit) != 32 or not unit.startswith(ITEM_MARK):
        return None
    return ItemUnit(unit[8:8 + TAG_SIZE], _U32.unpack_from(unit, 8 + TAG_SIZE)[0])


def item_run(job: bytes, index: int, grants: bytes) -> bytes:
    """The run id (genesis head) of item ``index`` of ``job`` under ``grants``."""
    return genesis(item_unit(job, index), grants)
