"""The ledger's refusals of this host's segments, acted on: a run the ledger refused a segment
of is stopped in the outbox, with the ledger's reason.

The ledger publishes every refusal on ``fleet.rej.<host>`` (:func:`fleet.subjects.
rejection_subject`). Once it refuses one of a run's segments, nothing this host seals after
it can be folded (the next is an ``IndexGap``; after a ``ForeignRun`` another host holds the
run), so the run is stopped (:meth:`agents.outbox.Outbox.stop_run`): its pending rows are
kept, marked ``stopped``, never sent again, and the program's next segment for it raises
:class:`agents.outbox.RunStopped` instead of queueing more. The reason names the rule, the
segment, the stream sequence and the ledger's detail. Only ``Replay`` stops nothing: its
message is a copy of one the ledger folded.

Only runs this host's outbox holds are stopped (a refusal on its subject of a message it
never wrote stops nothing of its own). A refusal published while the host was away is not
lost: :meth:`RefusalWatcher.catch_up` asks the ledger's ``rejections`` endpoint (plain
request/reply on ``<fleet>.api.rejections``, no ledger code) for this host's refusals.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Final

from fleet_ledger.agents.outbox import Outbox
from fleet_ledger.fleet.subjects import DEFAULT_FLEET, FleetNames, parse_segment_subject

log = logging.getLogger(__name__)

# Refusals that leave a run as it was: the message was a copy of one already folded.
HARMLESS: Final = frozenset({"Replay"})
CATCH_UP_LIMIT: Final = 1000


def run_of(subject: str) -> str | None:
    """The run address of a segment subject (``<fleet>.seg.<host>.<token>``)."""
    parsed = parse_segment_subject(subject)
    return None if parsed is None else parsed[1]


def stop_reason(doc: dict[str, Any]) -> str:
    """The stop's reason, from a refusal as the ledger publishes it."""
    return (f"{doc.get('rule')} at segment {doc.get('index')} (stream sequence "
            f"{doc.get('stream_seq')}): {doc.get('detail', '')}")


class RefusalWatcher:
    """Subscribes to the host's refusals and stops the runs they make hopeless."""

    def __init__(self, nc: Any, host: str, outbox: Outbox,
                 subject: str | None = None, names: FleetNames = DEFAULT_FLEET) -> None:
        self.names = names
        self.subject = subject or names.rejection_subject(host)  # another fleet's: its own
        self.nc = nc
        self.host = host
        self.outbox = outbox
        self.stopped: dict[str, str] = {}
        self._sub: Any = None

    async def start(self) -> RefusalWatcher:
        self._sub = await self.nc.subscribe(self.subject, cb=self._on)
        return self

    async def stop(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()
            self._sub = None

    async def catch_up(self, timeout: float = 2.0) -> int:
        """Apply the refusals the ledger holds for this host (those published while it was
        away); how many runs that stopped. No ledger answering is no news (0)."""
        before = len(self.stopped)
        try:
            reply = await self.nc.request(
                self.names.api_subject("rejections"),
                json.dumps({"host": self.host, "limit": CATCH_UP_LIMIT}).encode(),
                timeout=timeout)
            docs = json.loads(reply.data)["rejections"]
        except Exception as exc:  # no responders, a timeout, an error reply: nothing learnt
            log.info("no refusals fetched for %s: %r", self.host, exc)
            return 0
        for doc in reversed(docs):  # oldest first: the first refusal of a run is its reason
            if isinstance(doc, dict):
                self.apply(doc)
        return len(self.stopped) - before

    def apply(self, doc: dict[str, Any]) -> str | None:
        """Stop the run a refusal names, if it is one of this host's and not already
        stopped; the run stopped, or None."""
        rule, subject = doc.get("rule"), doc.get("subject")
        run = run_of(subject) if isinstance(subject, str) else None
        if rule in HARMLESS or run is None or run in self.stopped:
            return None
        if not self.outbox.holds_run(run):
            return None
        seq = doc.get("stream_seq")
        reason = stop_reason(doc)
        if not self.outbox.stop_run(run, reason, seq if isinstance(seq, int) else None):
            return None  # acted on before (the run may have come back since)
        self.stopped[run] = self.outbox.stopped_runs().get(run, reason)
        log.warning("run %s stopped on this host: %s", run, reason)
        return run

    async def _on(self, msg: Any) -> None:
        try:
            doc = json.loads(msg.data)
            if not isinstance(doc, dict) or "rule" not in doc or "subject" not in doc:
                raise ValueError("not a refusal")
        except ValueError:
            log.warning("an unreadable refusal on %s", msg.subject)
            return
        self.apply(doc)


__all__ = ["HARMLESS", "RefusalWatcher", "run_of", "stop_reason"]
