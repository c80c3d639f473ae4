"""A runtime run's journal for the explorer's run page, read from JetStream where the
runtime publishes it (docs/runtime.md, "What lives in JetStream"): the run's document in
``RUNTIME_RUNS`` names its head, a parked journal is stored in ``RUNTIME_JOURNALS`` under
that head, and each value's key in ``RUNTIME_KEYS`` (absent once shredded). Only fleet/
rules are used (the ledger never imports the runtime): the journal must chain to the
document's head, and each value must decrypt and hash to its address, else it is not
shown.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from nats.js.errors import BucketNotFoundError, NotFoundError, ObjectNotFoundError

from fleet_ledger.fleet.address import format_address, parse_address
from fleet_ledger.fleet.errors import FleetError
from fleet_ledger.fleet.runtime.runtime_journal import chain_hashes, open_blob, value_addresses
from fleet_ledger.fleet.runtime.runtime_verify import parse_journal
from fleet_ledger.fleet.subjects import FleetNames, run_token
from fleet_ledger.plumbing.runtime_keys import held_keys

_MISSING = (NotFoundError, BucketNotFoundError, ObjectNotFoundError)


async def runtime_journal(js: Any, names: FleetNames, run: str) -> dict[str, Any] | None:
    """``{"status", "head", "entries": [...] or None, "note"}`` of ``run`` as JetStream
    holds it, or None for a run the runtime never published. Each entry is ``{"seq",
    "kind", "call", "body", "values": {address: JSON text or "shredded"}}``."""
    try:
        runs = await js.key_value(names.runtime_runs)
        got = await runs.get(run_token(run))
    except _MISSING:
        return None
    if not got.value:
        return None
    doc = json.loads(got.value)
    head = doc.get("head")
    out: dict[str, Any] = {"status": doc.get("status"), "head": head, "entries": None,
                           "note": ""}
    try:
        store = await js.object_store(names.runtime_journals)
        obj = await store.get(run_token(head)) if head else None
    except _MISSING:
        obj = None
    if obj is None or obj.data is None:
        out["note"] = ("no journal published at this head (the runtime publishes a run's"
                       " journal when it parks)")
        return out
    try:
        journal = parse_journal(obj.data)
        hashes = list(chain_hashes(journal.run, journal.workflow,
                                   (e[:4] for e in journal.entries)))
        if journal.run != run or not hashes or hashes[-1] != parse_address(head):
            raise FleetError("the stored journal does not chain to the run's head")
    except FleetError as exc:
        out["note"] = f"the stored journal is not shown: {exc}"
        return out
    try:
        keys = await js.key_value(names.runtime_keys)
    except _MISSING:
        keys = None
    out["entries"] = [
        {"seq": seq, "kind": kind, "call": call, "body": body,
         "values": {a: await _value(keys, journal.blobs.get(a), a)
                    for a in value_addresses(body)}}
        for seq, kind, call, body, _h in journal.entries]
    out["head"] = format_address(hashes[-1])
    return out


async def _value(keys: Any, box: bytes | None, address: str) -> str:
    """A value's JSON text, or ``shredded`` (its key is gone), or why it is not shown."""
    if box is None:
        return "(not stored)"
    held = None if keys is None else (await held_keys(keys, [address])).get(address)
    if held is None:
        return "shredded"
    key, salt = (base64.b64decode(p) for p in held)
    try:
        return open_blob(parse_address(address), box, key, salt).decode()
    except FleetError as exc:
        return f"(not shown: {exc})"
