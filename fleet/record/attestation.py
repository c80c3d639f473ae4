"""Attestations of executed intervals and the energy receipts they bind.

An executed segment records only the content address of its attestation. The attestation
object travels beside the segment (on the wire and in record files) so that a verifier can
recompute the address and read the interval's energy. Canonical bytes::

    "fleet.attestation/1" || uj:u64 || provenance:u8 || text(meter)
                          || journal_root[32] || text(outcome)

with ``text(t) = len:u16 || utf8`` and provenance 1 = measured, 2 = estimated.
"""

from __future__ import annotations

import msgspec
from msgspec.structs import force_setattr

from fleet_ledger.fleet.address import digest
from fleet_ledger.fleet.record import kernel
from fleet_ledger.fleet.record.kernel import ATTESTATION_DOMAIN as DOMAIN

__all__ = ["DOMAIN", "Attestation", "EnergyReceipt", "make_attestation"]


class EnergyReceipt(msgspec.Struct, frozen=True):
    """Microjoules drawn by one interval, how they were obtained, and by which meter."""

    uj: int
    provenance: str
    meter: str


class Attestation(msgspec.Struct, frozen=True):
    receipt: EnergyReceipt
    journal_root: bytes
    outcome: str
    # Canonical bytes and address, computed (and so checked) once, by the kernel: the fold
    # checks the address of every one.
    _raw: bytes = b""
    _address: bytes = b""

    def __post_init__(self) -> None:
        r = self.receipt
        raw = kernel.attestation_bytes(r.uj, r.provenance, r.meter, self.journal_root,
                                       self.outcome)
        force_setattr(self, "_raw", raw)
        force_setattr(self, "_address", digest(raw))

    def canonical(self) -> bytes:
        return self._raw

    def address(self) -> bytes:
        return self._address


def make_attestation(
    uj: int, provenance: str, meter: str, journal_root: bytes, outcome: str
) -> Attestation:
    """An attestation with every field checked against what its canonical bytes can carry."""
    return Attestation(EnergyReceipt(uj, provenance, meter), journal_root, outcome)
