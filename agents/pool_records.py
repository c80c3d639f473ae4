"""A warm pool's energy on the record (docs/warm-pools.md).

    run, got = start_from_slot(host, pool, slot_id, unit_id, grants_id)
    sealed, got = evict_to_record(host, pool, slot_id)

A **claim** starts a run: the slot is ended for the run in the pool's SQLite file, then the
run's first segment, ``claimed``, carries the slot's image park, manifest and accrued energy
(warm-up plus idle, each at least 1 µJ), sealed and put in the host's outbox like any
segment. If the host dies between the two, claiming the same slot for the same run again
seals the segment from the figures the pool stored (another run is refused, ``SlotClaimed``).
A refused claim leaves nothing on the host: it is asked before the run is opened, and a slot
ended in between (evicted, or claimed by another run) is refused before the run's first
segment is put (:meth:`agents.host.Host.starting_run`): opening a run writes nothing, and its
row is written only by the transaction that puts that segment with the run's state.

An **eviction** ends the slot unclaimed, then appends an ``evicted`` segment to the pool's
own run, whose unit is ``BLAKE3("fleet.warmpool/1" || text(host) || text(pool))`` and whose
grant set is none (32 zero bytes): its total is the pool's overhead. The slot row notes the
index of the segment meant to record it *before* it is sealed, so a host that dies in
between records it on its next eviction (:func:`record_evictions`), once: a noted index the
run already reached was sealed (the outbox is the commit point), one past its end was not.
One process at a time records a given pool's evictions.
"""

from __future__ import annotations

from typing import Any

from fleet_ledger.agents.host import Host, HostRun
from fleet_ledger.agents.warm_pool import Accrued, Slot, WarmPool
from fleet_ledger.fleet.address import format_address, parse_address
from fleet_ledger.fleet.env.pool_errors import SlotClaimed
from fleet_ledger.fleet.record import kernel
from fleet_ledger.fleet.record.kernel import NO_GRANTS, pool_unit
from fleet_ledger.fleet.record.record import RunState
from fleet_ledger.fleet.record.segment import Claimed, Evicted, ImageSnapshot
from fleet_ledger.fleet.record.wire import SealedSegment

__all__ = ["claimed_segment", "evict_to_record", "evicted_segment", "pool_run",
           "record_evictions", "start_from_slot"]


def pool_run(host: Host, pool: str) -> HostRun:
    """The pool's own run on ``host`` (opened on first use)."""
    return host.open_run(pool_unit(host.name, pool), NO_GRANTS)


def _energy(got: Accrued) -> dict[str, Any]:
    return {"warm_uj": got.warm.uj, "warm_provenance": got.warm.provenance,
            "warm_meter": got.warm.meter, "idle_uj": got.idle.uj,
            "idle_provenance": got.idle.provenance, "idle_meter": got.idle.meter}


def claimed_segment(slot: Slot, got: Accrued) -> Claimed:
    """The claimed segment of ``slot`` with its accrued energy."""
    snapshot = ImageSnapshot(parse_address(slot.fs_root),
                             None if slot.mem_image is None else parse_address(slot.mem_image))
    return Claimed(slot=parse_address(slot.id), snapshot=snapshot,
                   manifest=parse_address(slot.manifest), **_energy(got))


def evicted_segment(slot: Slot, got: Accrued) -> Evicted:
    return Evicted(slot=parse_address(slot.id), **_energy(got))


def start_from_slot(host: Host, pool: WarmPool, sid: str, unit_id: bytes, grants_id: bytes
                    ) -> tuple[HostRun, Accrued]:
    """Claim ``sid`` for the run of ``unit_id`` and ``grants_id`` and seal its first
    segment. A run that already has segments is refused (``PhaseViolation``) before the
    slot is touched; a slot another run claimed, ``SlotClaimed``; evicted, ``SlotEvicted``."""
    # A slot that cannot be claimed is refused before the run is opened: nothing is left
    # on the host for a run that never started.
    pool.check_claim(sid, format_address(RunState.open(unit_id, grants_id).run))
    # The slot may still be evicted or claimed between that check and the claim: the run is
    # opened in one transaction with its claim, so a refusal there leaves no run row either.
    with host.starting_run(unit_id, grants_id) as run:
        # The kernel's phase rule, asked before the slot is touched (a claim cannot be undone).
        kernel.next_phase(run.state.phase, kernel.CLAIMED, run.state.index + 1)
        try:
            got = pool.claim(sid, run.run)
        except SlotClaimed:
            if pool.slot(sid).run != run.run:
                raise
            got = pool.accrued(sid)  # this run's claim whose segment was never sealed
        run.claim(claimed_segment(pool.slot(sid), got))
    return run, got


def record_evictions(host: Host, pool: WarmPool) -> list[SealedSegment]:
    """Seal every eviction of ``pool`` not yet in its run (see the module docstring)."""
    run = pool_run(host, pool.name)
    out = []
    for slot in pool.evictions_to_record(run.state.index):
        pool.mark_recorded(slot.id, run.state.index + 1)
        out.append(run.evict(evicted_segment(slot, pool.accrued(slot.id))))
    return out


def evict_to_record(host: Host, pool: WarmPool, sid: str) -> tuple[SealedSegment, Accrued]:
    """Evict ``sid`` and seal its ``evicted`` segment in the pool's run."""
    got = pool.evict(sid)
    slot = parse_address(sid)
    mine = [s for s in record_evictions(host, pool)
            if isinstance(s.segment, Evicted) and s.segment.slot == slot]
    return mine[0], got
