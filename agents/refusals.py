"""The ledger's refusals of this host's segments, acted on: a run another host now holds is
stopped in the outbox.

The ledger publishes every refusal on ``fleet.rej.<host>`` (:func:`fleet.subjects.
rejection_subject`). When it refuses a segment as ``ForeignRun``, the run has moved on
(another host adopted it at its park): nothing this host seals for it can ever be folded,
so the run is stopped (:meth:`agents.outbox.Outbox.stop_run`): its pending rows are kept,
marked ``stopped``, never sent again, and the program's next segment for it raises
:class:`agents.outbox.RunStopped` instead of queueing more.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from agents.outbox import Outbox
from fleet.subjects import parse_segment_subject, rejection_subject

log = logging.getLogger(__name__)

# Refusals after which nothing more of the run from this host can be folded.
STOPPING = frozenset({"ForeignRun"})


def run_of(subject: str) -> str | None:
    """The run address of a segment subject (``<fleet>.seg.<host>.<token>``)."""
    parsed = parse_segment_subject(subject)
    return None if parsed is None else parsed[1]


class RefusalWatcher:
    """Subscribes to the host's refusals and stops the runs they make hopeless."""

    def __init__(self, nc: Any, host: str, outbox: Outbox,
                 subject: str | None = None) -> None:
        self.subject = subject or rejection_subject(host)  # another fleet's: its own
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

    async def _on(self, msg: Any) -> None:
        try:
            doc = json.loads(msg.data)
            rule, subject = doc["rule"], doc["subject"]
        except (ValueError, KeyError, TypeError):
            log.warning("an unreadable refusal on %s", msg.subject)
            return
        run = run_of(subject) if isinstance(subject, str) else None
        if rule not in STOPPING or run is None or run in self.stopped:
            return
        reason = f"{rule} at segment {doc.get('index')}: {doc.get('detail', '')}"
        self.outbox.stop_run(run, reason)
        self.stopped[run] = reason
        log.warning("run %s stopped on this host: %s", run, reason)


__all__ = ["STOPPING", "RefusalWatcher", "run_of"]
