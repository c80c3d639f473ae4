"""Answers the ledger gives (status, run status, proofs, exports), read from its store.

The request/reply API and the offline CLI (``--data DIR``) both call these, so a script
sees the same JSON whether it asks a running ledger or reads a stopped one's folder.
Anchor receipts and progress come from a :class:`plumbing.anchoring.ReceiptStore` (none:
no anchors in the answers).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from typing import Any

import msgspec

from fleet_ledger.fleet.address import parse_address
from fleet_ledger.fleet.errors import FleetError
from fleet_ledger.fleet.fold.grant_events import GrantBook
from fleet_ledger.fleet.log.anchor_bundle import anchor_fields
from fleet_ledger.fleet.log.checkpoint import parse_checkpoint
from fleet_ledger.fleet.log.leaf import encode_leaf
from fleet_ledger.fleet.log.note import parse_note
from fleet_ledger.fleet.log.proof_bundle import build_bundle
from fleet_ledger.fleet.record.record_file import join_pages
from fleet_ledger.fleet.record.run_codec import state_from_json
from fleet_ledger.fleet.record.wait_proof import verdict_json
from fleet_ledger.fleet.record.wire import EnvelopeWire, RecordWire, encode_record, envelope_wire
from fleet_ledger.fleet.runtime.runtime_journal import account_marks
from fleet_ledger.ledger import job_store
from fleet_ledger.ledger.audit_rows import effect_calls
from fleet_ledger.ledger.grant_views import run_grant
from fleet_ledger.ledger.store import LedgerStore
from fleet_ledger.plumbing.anchoring import ReceiptStore


class NotFound(Exception):
    """The run, segment or size asked for is not in this ledger."""


def status(store: LedgerStore, *, origin: str | None, vkey: str | None, lag: int | None = None,
           healthy: bool = True, detail: str = "ok",
           receipts: ReceiptStore | None = None,
           puller: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ledger's status; ``puller`` is a running ledger's (``PullerState.as_json``:
    ``kind``, ``mode``, ``fallbacks``, ``reason``, ``nats_py``), None read offline (as
    ``origin`` and ``vkey`` are from a folder without its keys)."""
    size = store.tree.size()
    last = store.last_checkpoint()
    counts = store.counts()
    return {
        "origin": origin,
        "vkey": vkey,
        "tree_size": size,
        "root": store.tree.root(size).hex(),
        "runs": counts["runs"],
        "segments_folded": counts["segments_folded"],
        "rejected": counts["rejected"],
        "stream_seq": store.watermark(),
        "lag": lag,
        "checkpoint_size": None if last is None else last[0],
        "hosts": store.host_rows(),
        "healthy": healthy,
        "health": detail,
        "anchors": anchor_status(store, receipts),
        "puller": puller,
    }


def anchor_status(store: LedgerStore, receipts: ReceiptStore | None) -> list[dict[str, Any]]:
    """Per anchor: kind, last anchored size and time, lag behind the last checkpoint (leaves
    and seconds since the first checkpoint it has not anchored), last error."""
    states = [] if receipts is None else receipts.anchor_states()
    if not states:
        return []
    last = store.last_checkpoint()
    last_size = 0 if last is None else last[0]
    now = time.time()
    out = []
    for state in states:
        anchored = state.anchored_size or 0
        pending = store.first_checkpoint_time_after(anchored)
        out.append({
            "name": state.name, "kind": state.kind, "anchored_size": state.anchored_size,
            "anchored_at": state.anchored_at, "lag": max(0, last_size - anchored),
            "lag_s": None if pending is None else round(now - pending, 3),
            "error": state.error, "error_at": state.error_at, "failures": state.failures,
        })
    return out


def run_status(store: LedgerStore, run: str, grants: GrantBook | None = None
               ) -> dict[str, Any]:
    """A run's document; ``grants``: the ledger's grant book (None: rebuilt from the store)
    for its ``"grant"`` (:func:`ledger.grant_views.run_grant`)."""
    row = store.run_row(run)
    if row is None:
        raise NotFound(f"no run {run} in this ledger")
    state = state_from_json(row["state"])
    book = store.grant_book() if grants is None else grants
    return {
        "run": row["run"], "host": row["host"], "segments": row["segments"],
        "head": row["head"], "phase": row["phase"],
        "energy": state.energy.as_json(), "wait_proof": verdict_json(state.wait_proof()),
        "holders": holders(store, run),
        "grant": run_grant(store, book, row["state"]["grants_id"], row["run"],
                           state.energy.total_uj),
        "effects": [{"segment": idx, "call": call, "unkeyed": True,
                     "possible_duplicate": account_marks(call)[1]}
                    for idx, call in dict.fromkeys(effect_calls(store, run).get(run, []))],
        "job": job_store.item_of_unit(store.conn, state.unit_id, row["run"]),
    }


class CheckpointWanted(Exception):
    """No signed checkpoint holds the leaf yet: the proof waits for one of ``size``."""

    def __init__(self, size: int) -> None:
        super().__init__(f"no signed checkpoint holds leaf {size - 1} yet")
        self.size = size


def prove(store: LedgerStore, run: str, index: int | None,
          checkpoint_for: Callable[[int], tuple[int, bytes, str] | None] | None = None,
          receipts: ReceiptStore | None = None) -> dict[str, Any]:
    """The proof bundle of segment ``index`` (default: the latest) of ``run``, against the
    checkpoint ``checkpoint_for(leaf_index)`` gives (default: the first signed one whose
    tree holds the leaf), with the anchors' receipts covering that checkpoint. A read never
    signs: :class:`CheckpointWanted` when no signed checkpoint holds the leaf yet."""
    row = store.run_row(run)
    if row is None:
        raise NotFound(f"no run {run} in this ledger")
    idx = row["segments"] if index is None else index
    seg = store.segment(run, idx)
    if seg is None:
        raise NotFound(f"run {run} has no segment {idx}")
    head, leaf_index = seg
    found = (store.checkpoint_at_least(leaf_index + 1) if checkpoint_for is None
             else checkpoint_for(leaf_index))
    if found is None:
        raise CheckpointWanted(leaf_index + 1)
    size, _root, note = found
    leaf = encode_leaf(parse_address(run), idx, parse_address(head))
    bundle = build_bundle(
        origin=parse_checkpoint(parse_note(note)[0]).origin, tree_size=size,
        leaf_index=leaf_index, leaf=leaf,
        inclusion=store.tree.inclusion_proof(leaf_index, size), checkpoint=note,
    )
    if receipts is not None:
        bundle.update(anchor_fields(size, receipts.receipts_covering(size),
                                    store.checkpoint_notes, store.tree.consistency_proof))
    return bundle


def consistency(store: LedgerStore, old: int, new: int) -> dict[str, Any]:
    size = store.tree.size()
    if not 0 <= old <= new <= size:
        raise NotFound(f"sizes must satisfy 0 <= old <= new <= {size}")
    proof = [] if old in (0, new) else store.tree.consistency_proof(old, new)
    return {"old": old, "new": new, "old_root": store.tree.root(old).hex(),
            "new_root": store.tree.root(new).hex(), "proof": [h.hex() for h in proof]}


def export_record(store: LedgerStore, run: str) -> bytes:
    """The run's record file (``fleet verify`` reads it), rebuilt from the folded messages:
    sealed under one ``host_key``, or, for a run that moved between hosts, with each host's
    key in ``hosts`` and each segment naming the host that sealed it: the whole record as
    one page, joined (:func:`fleet.record.record_file.join_pages`)."""
    return encode_record(join_pages([_page(store, run, 1, -1)]))


def export_page(store: LedgerStore, run: str, first: int, limit: int) -> bytes:
    """Segments ``first`` .. ``first + limit - 1`` of the run's record, each naming the host
    that sealed it, with those hosts' keys: a page of the record, for records too large for
    one reply (:func:`fleet.record.record_file.join_pages` puts the pages back together)."""
    return encode_record(_page(store, run, first, limit))


def _page(store: LedgerStore, run: str, first: int, limit: int) -> RecordWire:
    # The folded messages' own wire forms: they decoded once to be folded, so each segment
    # is taken as it is (no objects, no attestation hashed again), naming its host.
    row = store.run_row(run)
    if row is None:
        raise NotFound(f"no run {run} in this ledger")
    wires = [_wire(p) for p in store.payloads(run, first, limit)]
    keys = store.host_keys_at(run)
    return RecordWire(
        unit_id=row["state"]["unit_id"], grants_id=row["state"]["grants_id"], run=run,
        hosts={name: keys[name] for name in sorted({w.host for w in wires})},
        segments=[msgspec.structs.replace(w.segment, host=w.host) for w in wires])


def _wire(payload: bytes) -> EnvelopeWire:
    wire = envelope_wire(payload)
    assert wire is not None, "a folded message always decodes"
    return wire


def holders(store: LedgerStore, run: str) -> list[dict[str, Any]]:
    """Which host held the run for which segments, in order: ``{"host", "first", "last"}``."""
    out: list[dict[str, Any]] = []
    for index, payload in enumerate(store.payloads(run), start=1):
        host = _wire(payload).host
        if out and out[-1]["host"] == host:
            out[-1]["last"] = index
        else:
            out.append({"host": host, "first": index, "last": index})
    return out


def checkpoint_json(checkpoint: tuple[int, bytes, str] | None) -> dict[str, Any]:
    if checkpoint is None:
        raise NotFound("the ledger has signed no checkpoint yet")
    size, root, note = checkpoint
    return {"size": size, "root": bytes(root).hex(),
            "root_base64": base64.b64encode(root).decode(), "checkpoint": note}


def encode(doc: Any) -> bytes:
    return msgspec.json.encode(doc)


__all__ = ["CheckpointWanted", "FleetError", "NotFound", "checkpoint_json", "consistency", "encode",
           "export_page", "export_record", "holders", "prove", "run_status", "status"]
