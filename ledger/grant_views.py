"""What the ledger answers about grants (``fleet grant show``, ``fleet grant amend`` and the
``"grant"`` key of ``fleet run show``), read from its store and its grant book.

The API passes the running ledger's committed book; the offline CLI rebuilds one from the
store (:meth:`ledger.store.LedgerStore.grant_book`), so both give the same JSON.
"""

from __future__ import annotations

import base64
from typing import Any

from fleet_ledger.fleet.address import format_address, parse_address
from fleet_ledger.fleet.errors import FleetError
from fleet_ledger.fleet.fold.grant_events import NO_AMENDMENT, GrantBook, chain_of, event_json
from fleet_ledger.fleet.fold.grant_verify import evidence_events, evidence_json
from fleet_ledger.fleet.grants.grant import grant_json, terms_json
from fleet_ledger.fleet.record.kernel import NO_GRANTS
from fleet_ledger.ledger.store import LedgerStore


class GrantNotFound(Exception):
    """No grant at that address is folded (or the text is no address)."""


def _history(store: LedgerStore, refs: list[bytes]) -> list[dict[str, Any]]:
    return [{"kind": ev["kind"], "stream_seq": seq, "at_ms": at_ms, **ev}
            for seq, at_ms, payload in store.grant_history(refs)
            for ev in (event_json(payload),)]


def _address(text: str) -> bytes:
    try:
        return parse_address(text)
    except FleetError as exc:
        raise GrantNotFound(str(exc)) from None


def grant_status(store: LedgerStore, book: GrantBook, text: str) -> dict[str, Any]:
    """A folded grant: its bytes (base64), its fields, its own terms after amendments,
    the effective terms a run under it is held to, the last amendment's number and
    address (what the next amendment names), the children minted from it, its chain and
    the events about it (its issue or mint, its amendments, the mints of its children)."""
    address = _address(text)
    entry = book.entry(address)
    if entry is None:
        raise GrantNotFound(f"no grant {text} is folded in this ledger")
    effective = book.effective(address)
    assert effective is not None
    return {
        **grant_json(entry.data),
        "grant": base64.b64encode(entry.data).decode(),
        "stream_seq": entry.stream_seq,
        "terms": terms_json(entry.terms),
        "effective": terms_json(effective),
        "amended": entry.amended,
        "last_amendment": None if entry.last == NO_AMENDMENT else format_address(entry.last),
        "minted": len(entry.minted),
        "chain": [format_address(a) for a in chain_of(book, address)],
        "history": _with_mints(store, book, address),
    }


def _with_mints(store: LedgerStore, book: GrantBook, address: bytes) -> list[dict[str, Any]]:
    """The events about a grant, and (a standing grant) the MINT of each child minted from
    it, in stream order: a mint is kept under its child, so it is looked up by the child."""
    children = [a for a, e in book.entries.items() if e.grant.parent == address]
    mints = [ev for ev in _history(store, children) if ev["kind"] == "mint"]
    return sorted(_history(store, [address]) + mints, key=lambda ev: ev["stream_seq"])


def run_grant(store: LedgerStore, book: GrantBook, grants_id: str, run: str,
              energy_uj: int) -> dict[str, Any] | None:
    """The ``"grant"`` of a run's document: ``None`` for a run under no presented grant,
    else its address, effective terms, chain, the chain's events and the run's
    checkpoints (``energy_uj``: what the run has used of the budget)."""
    address = parse_address(grants_id)
    if address == NO_GRANTS or book.entry(address) is None:
        return None
    effective = book.effective(address)
    assert effective is not None
    above = chain_of(book, address)
    return {
        "id": grants_id,
        "effective": terms_json(effective),
        "used_uj": energy_uj,
        "chain": [format_address(a) for a in above],
        "history": _history(store, above),
        "checkpoints": _history(store, [parse_address(run)]),
    }


def grant_evidence(store: LedgerStore, book: GrantBook, run_text: str) -> dict[str, Any]:
    """The run's grant evidence (:mod:`fleet.fold.grant_verify`): what an auditor needs beside
    its record file to recompute every grant decision the ledger made about it."""
    run = _address(run_text)
    slot = store.load_run(run)
    if slot is None:
        raise GrantNotFound(f"no run {run_text} is folded in this ledger")
    chain = chain_of(book, slot.state.grants_id)
    return evidence_json(run, evidence_events(store.grant_events(), chain, run),
                         store.segment_times(run))


__all__ = ["GrantNotFound", "grant_evidence", "grant_status", "run_grant"]
