"""Attestations of executed intervals and the energy receipts they bind.

An executed segment records only the content address of its attestation. The attestation
object travels beside the segment (on the wire and in record files) so that a verifier can
recompute the address and read the interval's energy. Canonical bytes::

    "fleet.attestation/1" || uj:u64 || provenance:u8 || text(meter)
                          || journal_root[32] || text(outcome)

with ``text(t) = len:u16 || utf8`` and provenance 1 = measured, 2 = estimated.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from fleet.address import digest
from fleet.segment import (
    PROVENANCES,
    check_digest,
    check_provenance,
    check_u64,
    encode_text,
)

DOMAIN = b"fleet.attestation/1"
_RECEIPT = struct.Struct(">QB")


@dataclass(frozen=True, slots=True)
class EnergyReceipt:
    """Microjoules drawn by one interval, how they were obtained, and by which meter."""

    uj: int
    provenance: str
    meter: str


@dataclass(frozen=True, slots=True)
class Attestation:
    receipt: EnergyReceipt
    journal_root: bytes
    outcome: str

    def canonical(self) -> bytes:
        r = self.receipt
        return (
            DOMAIN
            + _RECEIPT.pack(r.uj, PROVENANCES[r.provenance])
            + encode_text(r.meter, "meter")
            + self.journal_root
            + encode_text(self.outcome, "outcome")
        )

    def address(self) -> bytes:
        return digest(self.canonical())


def make_attestation(
    uj: int, provenance: str, meter: str, journal_root: bytes, outcome: str
) -> Attestation:
    """An attestation with every field checked against what its canonical bytes can carry."""
    check_u64(uj, "receipt uj")
    check_provenance(provenance)
    encode_text(meter, "meter")
    encode_text(outcome, "outcome")
    return Attestation(EnergyReceipt(uj, provenance, meter), check_digest(journal_root,
                       "journal_root"), outcome)
