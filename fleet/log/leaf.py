"""Fleet-log leaf bytes: one leaf per accepted segment.

Layout (84 bytes, fixed)::

    "fleet.leaf/1"   12 ASCII bytes, domain tag and version
    run              32 bytes, the run's genesis head
    index             8 bytes, unsigned big-endian, the segment's 1-based index in its run
    head             32 bytes, the run head after that segment

The tag keeps a fleet leaf from ever being read as another structure hashed with the same
function (a seal message has a different tag), and its version suffix lets a later layout
coexist in the same log. Decoding is strict: any other length, tag or an index of 0 is a
:class:`~fleet.log.log_errors.MalformedLeaf`.

A job's receipt is a leaf of a second kind (76 bytes, fixed; ``docs/spec/jobs.md``)::

    "fleet.jobr/1"   12 ASCII bytes, domain tag and version
    job              32 bytes, the job id
    receipt          32 bytes, BLAKE3 of the receipt's canonical bytes

Its tag and its length both differ from a run leaf's, so neither can be read as the other;
:func:`leaf_kind` tells them apart.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from fleet_ledger.fleet.log.log_errors import MalformedLeaf
from fleet_ledger.fleet.record.kinds import index_in_range

__all__ = [
    "JOB_LEAF_DOMAIN",
    "JOB_LEAF_SIZE",
    "LEAF_DOMAIN",
    "LEAF_SIZE",
    "JobLeaf",
    "Leaf",
    "decode_job_leaf",
    "decode_leaf",
    "encode_job_leaf",
    "encode_leaf",
    "leaf_kind",
]


LEAF_DOMAIN = b"fleet.leaf/1"
LEAF_SIZE = 84
_LAYOUT = struct.Struct(">12s32sQ32s")
JOB_LEAF_DOMAIN = b"fleet.jobr/1"
JOB_LEAF_SIZE = 76
_JOB_LAYOUT = struct.Struct(">12s32s32s")


class Leaf(NamedTuple):
    """A decoded fleet-log leaf."""

    run: bytes
    index: int  # type: ignore[assignment]  # the spec's field name: it shadows tuple.index
    head: bytes


def encode_leaf(run: bytes, index: int, head: bytes) -> bytes:
    """The 84 leaf bytes binding segment ``index`` of ``run`` to the ``head`` after it."""
    if len(run) != 32 or len(head) != 32:
        raise MalformedLeaf("run and head are 32 bytes each")
    if not index_in_range(index):
        raise MalformedLeaf(f"segment index {index} is not in 1 .. 2**63 - 1")
    return _LAYOUT.pack(LEAF_DOMAIN, run, index, head)


def decode_leaf(data: bytes) -> Leaf:
    """The run, index and head a leaf binds, or :class:`MalformedLeaf`."""
    if len(data) != LEAF_SIZE:
        raise MalformedLeaf(f"a fleet leaf is {LEAF_SIZE} bytes, got {len(data)}")
    domain, run, index, head = _LAYOUT.unpack(data)
    if domain != LEAF_DOMAIN:
        raise MalformedLeaf(f"leaf domain tag is {domain!r}, expected {LEAF_DOMAIN!r}")
    if index == 0:
        raise MalformedLeaf("segment indexes start at 1")
    return Leaf(run, index, head)


class JobLeaf(NamedTuple):
    """A decoded job-receipt leaf."""

    job: bytes
    receipt: bytes


def encode_job_leaf(job: bytes, receipt_digest: bytes) -> bytes:
    """The 76 leaf bytes binding ``job`` to the BLAKE3 digest of its receipt's bytes."""
    if len(job) != 32 or len(receipt_digest) != 32:
        raise MalformedLeaf("a job leaf's job id and receipt digest are 32 bytes each")
    return _JOB_LAYOUT.pack(JOB_LEAF_DOMAIN, job, receipt_digest)


def decode_job_leaf(data: bytes) -> JobLeaf:
    """The job and receipt digest a job leaf binds, or :class:`MalformedLeaf`."""
    if len(data) != JOB_LEAF_SIZE or not data.startswith(JOB_LEAF_DOMAIN):
        raise MalformedLeaf(f"a job leaf is {JOB_LEAF_SIZE} bytes starting "
                            f"{JOB_LEAF_DOMAIN!r}, got {len(data)} bytes")
    _domain, job, receipt = _JOB_LAYOUT.unpack(data)
    return JobLeaf(job, receipt)


def leaf_kind(data: bytes) -> str:
    """``"run"`` or ``"job"``: which kind of leaf ``data`` is (by its tag and length), or
    :class:`MalformedLeaf`; decode it with that kind's decoder."""
    if len(data) == LEAF_SIZE and data.startswith(LEAF_DOMAIN):
        return "run"
    if len(data) == JOB_LEAF_SIZE and data.startswith(JOB_LEAF_DOMAIN):
        return "job"
    raise MalformedLeaf(f"not a fleet leaf of any kind ({len(data)} bytes)")
