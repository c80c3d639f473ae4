"""What the runtime keeps in JetStream so that nobody has to be running while a run waits.

* stream ``RUNTIME_SIGNALS`` (``fleet.runtime.signal.<run>``): signals, kept on file until
  read; a signal's id is its ``Nats-Msg-Id``, so the server drops a resend within the
  duplicate window, and the journal (which records every delivered id) drops it after.
* key-value bucket ``RUNTIME_RUNS`` (key: the run's token): where each run stands: its
  name, workflow, status (``parked``/``claimed``/``done``/``failed``/``refused``), the wait
  it parked on (a signal name and deadline, a timer's due time, a handed-off call), the
  journal head it parked at and the host that holds it. Timers live here: a due time in a
  file-backed bucket survives every restart, and a worker fires it by claiming the entry.
* object store ``RUNTIME_JOURNALS`` (name: the journal head's token): each parked journal's
  export (entries and encrypted blobs), which another host imports after checking it
  chains to the head recorded in the run record's park (Journal.import_run);
* key-value bucket ``RUNTIME_KEYS`` (key: a blob address's token): each blob's key and
  salt, apart from the ciphertexts, so that ``fleet runtime shred`` deletes one value
  everywhere by purging one key.
* key-value bucket ``RUNTIME_SIGNAL_IDS`` (key: ``<run token>.<BLAKE3(id) token>``): what
  each signal id was first sent with (``fleet.runtime.runtime_journal.signal_digest``), created
  once, so a resend under a used id with other data is refused (SignalConflict) however
  late, not dropped as a duplicate.

A worker *claims* a run by a compare-and-set on its key's revision: of two workers racing
for one wait, exactly one update succeeds, and only that one continues the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from typing import Any

from nats.js.api import (
    DeliverPolicy,
    KeyValueConfig,
    ObjectStoreConfig,
    StorageType,
    StreamConfig,
)
from nats.js.errors import BadRequestError, KeyWrongLastSequenceError, NotFoundError

from fleet_ledger.fleet.address import digest, format_address
from fleet_ledger.fleet.runtime.runtime_errors import SignalConflict
from fleet_ledger.fleet.runtime.runtime_journal import signal_digest
from fleet_ledger.fleet.subjects import DEFAULT_FLEET, FleetNames, run_token
from fleet_ledger.plumbing.nats_connect import bucket_keys
from fleet_ledger.plumbing.runtime_keys import IN_FLIGHT, held_keys

# A claim that has not turned into a new state within this long (the worker died) may be
# claimed again.
CLAIM_LEASE_S = 60.0
# Where a run has ended: nothing continues it.
ENDED = frozenset({"done", "failed", "refused"})


class FleetStore:
    """The runtime's streams and buckets of fleet ``names`` on one JetStream connection."""

    def __init__(self, js: Any, names: FleetNames = DEFAULT_FLEET) -> None:
        self.js = js
        self.names = names
        self.signals_stream = names.runtime_signals
        self.signal_subject = names.runtime_signal_subject
        self.kv: Any = None
        self.keys: Any = None
        self.obs: Any = None
        self.ids: Any = None

    async def open(self) -> FleetStore:
        try:
            await self.js.stream_info(self.signals_stream)
        except NotFoundError:
            await self.js.add_stream(StreamConfig(
                name=self.signals_stream, subjects=[f"{self.signal_subject}.>"],
                storage=StorageType.FILE, duplicate_window=3600.0))
        try:
            self.kv = await self.js.key_value(self.names.runtime_runs)
        except (NotFoundError, BadRequestError):
            self.kv = await self.js.create_key_value(KeyValueConfig(
                bucket=self.names.runtime_runs, storage=StorageType.FILE, history=1))
        try:
            self.keys = await self.js.key_value(self.names.runtime_keys)
        except (NotFoundError, BadRequestError):
            self.keys = await self.js.create_key_value(KeyValueConfig(
                bucket=self.names.runtime_keys, storage=StorageType.FILE, history=1))
        try:
            self.ids = await self.js.key_value(self.names.runtime_signal_ids)
        except (NotFoundError, BadRequestError):
            self.ids = await self.js.create_key_value(KeyValueConfig(
                bucket=self.names.runtime_signal_ids, storage=StorageType.FILE, history=1))
        try:
            self.obs = await self.js.object_store(self.names.runtime_journals)
        except (NotFoundError, BadRequestError):
            self.obs = await self.js.create_object_store(
                self.names.runtime_journals, ObjectStoreConfig(storage=StorageType.FILE))
        return self

    # -- signals -------------------------------------------------------------------------

    async def send_signal(self, run: str, name: str, data: Any, signal_id: str) -> bool:
        """Store a signal; False when this id was sent before with the same name and data
        (a duplicate: stored and delivered once), SignalConflict when it was sent with
        anything else (nothing stored). The id's record is created first and only once
        (a compare-and-set), so of two senders racing with one id and different data one
        is refused; a sender that died between the record and the publish is completed by
        its resend."""
        digest_text = format_address(signal_digest(run, signal_id, name, data))
        key = _id_key(run, signal_id)
        fresh = True
        try:
            await self.ids.create(key, digest_text.encode())
        except KeyWrongLastSequenceError:
            fresh = False
            held = await self.ids.get(key)
            if held.value is not None and held.value.decode() != digest_text:
                raise SignalConflict(f"signal id {signal_id!r} was sent to {run} before with"
                                     " another name or other data: refused, nothing"
                                     " delivered (send it under a new id)") from None
        body = json.dumps({"name": name, "id": signal_id, "data": data}).encode()
        ack = await self.js.publish(f"{self.signal_subject}.{run_token(run)}", body,
                                    headers={"Nats-Msg-Id": f"{run_token(run)}/{signal_id}"})
        return fresh and not ack.duplicate

    async def sent_as(self, run: str, signal: dict[str, Any]) -> bool:
        """Whether a stored signal is what its id was first sent with (one published
        around :meth:`send_signal` under a used id with other data is not: it is never
        delivered). An id without a record was sent before records were kept."""
        try:
            held = await self.ids.get(_id_key(run, signal["id"]))
        except NotFoundError:
            return True
        if held.value is None:
            return True
        sent = signal_digest(run, signal["id"], signal["name"], signal.get("data"))
        return bool(held.value.decode() == format_address(sent))

    async def signals(self, run: str) -> list[dict[str, Any]]:
        """Every signal stored for ``run``, oldest first."""
        subject = f"{self.signal_subject}.{run_token(run)}"
        out: list[dict[str, Any]] = []
        try:
            info = await self.js.stream_info(self.signals_stream, subjects_filter=subject)
        except NotFoundError:
            return out
        count = (info.state.subjects or {}).get(subject, 0)
        if not count:
            return out
        sub = await self.js.subscribe(subject, stream=self.signals_stream, ordered_consumer=True)
        try:
            while len(out) < count:
                msg = await sub.next_msg(timeout=5.0)
                out.append({**json.loads(msg.data), "seq": msg.metadata.sequence.stream})
        finally:
            await sub.unsubscribe()
        return out

    async def watch_signals(self, woken: Callable[[str], None]) -> Any:
        """Call ``woken(run token)`` for each signal the stream stores from now on: a push
        subscription (an ordered consumer delivering new messages' headers only, each after
        the stream has stored it, so a reader woken by it finds the signal). Returns the
        subscription (``await sub.unsubscribe()`` to stop)."""
        prefix = f"{self.signal_subject}."

        async def ring(msg: Any) -> None:
            woken(msg.subject[len(prefix):])

        return await self.js.subscribe(f"{prefix}>", stream=self.signals_stream, cb=ring,
                                       ordered_consumer=True, headers_only=True,
                                       deliver_policy=DeliverPolicy.NEW)

    async def forget_signals(self, seqs: list[int]) -> None:
        """Delete delivered signals from the stream: once journaled (encrypted, shreddable)
        their plaintext has no reason to stay in JetStream."""
        for seq in seqs:
            with contextlib.suppress(NotFoundError):
                await self.js.delete_msg(self.signals_stream, seq)

    # -- runs ------------------------------------------------------------------------------

    async def runs(self) -> list[tuple[dict[str, Any], int]]:
        keys = await bucket_keys(self.js, self.names.runtime_runs)
        out = []
        for key in keys:
            got = await self.get(key)
            if got is not None:
                out.append(got)
        return out

    async def get(self, key: str) -> tuple[dict[str, Any], int] | None:
        try:
            entry = await self.kv.get(key)
        except NotFoundError:
            return None
        if entry.value is None:
            return None
        return json.loads(entry.value), entry.revision

    async def put(self, doc: dict[str, Any]) -> None:
        await self.kv.put(run_token(doc["run"]), json.dumps(doc).encode())

    async def claim(self, doc: dict[str, Any], revision: int, host: str
                    ) -> tuple[dict[str, Any], int] | None:
        """Take the run for ``host`` if nobody changed it since ``revision``: the claimed
        document and its revision, or None if another worker got there first."""
        claimed = {**doc, "status": "claimed", "by": host, "claimed_at": time.time()}
        return await self.update(claimed, revision)

    async def claim_run(self, doc: dict[str, Any], host: str
                        ) -> tuple[dict[str, Any], int] | None:
        """Claim a run whatever its state (``doc`` is written if the bucket holds none):
        for a local run whose interval died, which only its host can continue. None if
        another worker changed it first, or the bucket says it has ended."""
        got = await self.get(run_token(doc["run"]))
        if got is None:
            try:
                revision = await self.kv.create(run_token(doc["run"]), json.dumps(doc).encode())
            except KeyWrongLastSequenceError:
                return None
            got = doc, revision
        if got[0].get("status") in ENDED:
            return None
        return await self.claim(got[0], got[1], host)

    async def announce(self, doc: dict[str, Any]) -> dict[str, Any] | None:
        """Write a new run's first state; the state already there (another start of the
        run, on this host or another) if there is one, unless it is this host's own
        ``running`` state (a start that died before its run existed here)."""
        try:
            await self.kv.create(run_token(doc["run"]), json.dumps(doc).encode())
            return None
        except KeyWrongLastSequenceError:
            got = await self.get(run_token(doc["run"]))
        if got is None:
            return await self.announce(doc)
        held, revision = got
        if held.get("status") == "running" and held.get("host") == doc["host"]:
            return None if await self.update(doc, revision) is not None else held
        return held

    async def update(self, doc: dict[str, Any], revision: int
                     ) -> tuple[dict[str, Any], int] | None:
        """Write ``doc`` only if its key is still at ``revision``."""
        try:
            new = await self.kv.update(run_token(doc["run"]), json.dumps(doc).encode(),
                                       last=revision)
        except (KeyWrongLastSequenceError, BadRequestError):
            return None
        return doc, new

    # -- journals ------------------------------------------------------------------------

    async def put_journal(self, head: str, export: dict[str, Any],
                          keys: dict[str, list[str]] | None = None) -> None:
        """Store a parked journal (ciphertexts only) and its blobs' keys, each key under its
        blob's address so that shredding one value deletes one key."""
        await self.put_keys(keys or {})
        await self.obs.put(run_token(head), json.dumps(export).encode())

    async def put_keys(self, keys: dict[str, list[str]]) -> None:
        """Store blobs' keys, each under its blob's address, only where the bucket never
        held one (a compare-and-set against no history): a key already there stays, and
        a shredded one (its purge marker) is never written again by a host that held a
        copy for its interval."""
        async def put(address: str, key: list[str]) -> None:
            with contextlib.suppress(KeyWrongLastSequenceError, BadRequestError):
                await self.keys.update(run_token(address), json.dumps(key).encode(), last=0)

        items = list(keys.items())
        for i in range(0, len(items), IN_FLIGHT):  # a batch per round trip, not a key
            await asyncio.gather(*(put(a, k) for a, k in items[i:i + IN_FLIGHT]))

    async def blob_keys(self, addresses: list[str]) -> dict[str, list[str]]:
        """The keys still held for ``addresses`` (a shredded one is absent)."""
        return await held_keys(self.keys, addresses)

    async def shred(self, address: str) -> None:
        """Delete a blob's key everywhere JetStream holds it (history included)."""
        with contextlib.suppress(NotFoundError):
            await self.keys.purge(run_token(address))

    async def journal(self, head: str) -> dict[str, Any] | None:
        try:
            got = await self.obs.get(run_token(head))
        except NotFoundError:
            return None
        return json.loads(got.data)


def _id_key(run: str, signal_id: str) -> str:
    """A signal id's key in its bucket (ids are any text; keys are not)."""
    return f"{run_token(run)}.{run_token(format_address(digest(signal_id.encode())))}"


def wait_over(doc: dict[str, Any], signals: list[dict[str, Any]], now: float) -> bool:
    """Whether a parked run's wait has ended: a signal it waits for that was not delivered
    yet, a handed-off call's result, or a timer or deadline that is due."""
    wait = doc.get("wait") or {}
    delivered = set(doc.get("delivered") or [])
    fresh = [s for s in signals if s["id"] not in delivered]
    if "signal" in wait:
        if any(s["name"] == wait["signal"] for s in fresh):
            return True
        return wait.get("deadline") is not None and now >= float(wait["deadline"])
    if "result" in wait:
        return any(s["name"] == f"result:{wait['result']}" for s in fresh)
    if "timer" in wait:
        return now >= float(wait["due"])
    return False


def claim_stale(doc: dict[str, Any], now: float) -> bool:
    return doc.get("status") == "claimed" and now - float(doc.get("claimed_at", 0)) > \
        CLAIM_LEASE_S


__all__ = ["CLAIM_LEASE_S", "FleetStore", "claim_stale", "wait_over"]
