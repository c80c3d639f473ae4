"""Ledger replicas as child processes sharing one key, and the checks made of them."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any

from fleet_ledger.fleet.log.checkpoint import parse_checkpoint
from fleet_ledger.fleet.log.merkle import verify_consistency
from fleet_ledger.fleet.log.note import parse_note
from fleet_ledger.fleet.record.seal import encode_key

from fault_helpers import LedgerProc, fleet, host_key, store_summary


def replica(url: str, base: Path, name: str, vkey: str, key_from: str | None,
            ttl: float = 2.0, *extra: str) -> LedgerProc:
    """Replica ``name`` in ``base/name`` (not started), with the signing key of
    ``base/key_from`` (None: it creates one)."""
    data = base / name
    if key_from is not None:
        data.mkdir(parents=True, exist_ok=True)
        shutil.copy(base / key_from / "ledger.key", data / "ledger.key")
    return LedgerProc(url, data, "--name", name, "--replica", str(ttl), "--operator-vkey",
                      vkey, "--replicas", "3", *extra)


def start_replicas(url: str, base: Path, names: list[str], vkey: str, ttl: float = 2.0,
                   *extra: str) -> list[LedgerProc]:
    """Replicas ``names``, started: the first creates the signing key, the others copy it."""
    procs: list[LedgerProc] = []
    try:
        for n, name in enumerate(names):
            procs.append(replica(url, base, name, vkey, names[0] if n else None, ttl,
                                 *extra).start())
    except BaseException:
        for p in procs:
            p.kill()
        raise
    return procs


def operator(tmp: Path) -> tuple[str, tuple[str, ...]]:
    """A new operator key: (its verifier key, the options that publish events with it)."""
    vkey = fleet("operator", "keygen", "--out", str(tmp / "op")).stdout.strip()
    return vkey, ("--operator-key", str(tmp / "op" / "operator.key"))


def enroll(url: str, op: tuple[str, ...], name: str) -> None:
    fleet("host", "enroll", name, "--pubkey", encode_key(bytes(host_key(name).verify_key)),
          "--nats", url, *op)


def checkpoints(data: Path) -> list[tuple[int, bytes, str]]:
    db = sqlite3.connect(f"file:{data / 'ledger.db'}?mode=ro", uri=True, timeout=30)
    try:
        return [tuple(r) for r in db.execute(  # type: ignore[misc]
            "SELECT size, root, note FROM checkpoints ORDER BY size")]
    finally:
        db.close()


def check_all_consistent(datas: list[Path], tree_of: Path) -> int:
    """Every checkpoint any replica signed is consistent with every other (consistency
    proofs from ``tree_of``'s tree, which holds the largest); same size, same note. Returns
    how many distinct checkpoints there were."""
    from fleet_ledger.ledger.tree_store import TreeStore

    notes: dict[int, str] = {}
    for data in datas:
        for size, root, note in checkpoints(data):
            assert notes.setdefault(size, note) == note, f"two notes for size {size}"
            body, _ = parse_note(note)
            assert parse_checkpoint(body).root == bytes(root)
    db = sqlite3.connect(f"file:{tree_of / 'ledger.db'}?mode=ro", uri=True, timeout=30)
    try:
        tree = TreeStore(db, create=False)
        sizes = sorted(notes)
        roots = {s: parse_checkpoint(parse_note(notes[s])[0]).root for s in sizes}
        for i, old in enumerate(sizes):
            for new in sizes[i:]:
                verify_consistency(old, new, tree.consistency_proof(old, new) if old else [],
                                   roots[old], roots[new])
    finally:
        db.close()
    return len(notes)


def same_log(datas: list[Path]) -> Any:
    views = [store_summary(d) for d in datas]
    first = views[0]
    for v in views[1:]:
        assert (v.size, v.root, v.segments, v.rejections) == (
            first.size, first.root, first.segments, first.rejections)
    return first
