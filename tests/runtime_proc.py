"""A runtime process for the runtime tests: ``python tests/runtime_proc.py DIR NAME INPUT``.

Starts (or picks up) run NAME of ``runtime_flows.chain`` in host folder DIR and advances it
until it ends or waits, printing the outcome as one JSON line. ``--kill before|after|queued N``
SIGKILLs this process itself just before its N-th journal append, just after it is
committed, or (``queued``) just after a deferred append returned, before its commit: the
real signal at an exact journal position. ``--host NAME`` records the intervals as that
host's run record (outbox only).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import runtime_flows

from fleet_ledger.agents.host import Host
from fleet_ledger.agents.runtime import Runtime
from fleet_ledger.agents.runtime.journal import Journal


def kill_at(when: str, n: int) -> None:
    """SIGKILL just before the N-th append, just after it is durable (committed: a deferred
    entry rides a later commit), or just after it was queued (``queued``: a deferred
    entry is not written yet)."""
    original, flush = Journal.append, Journal.flush
    count = [0]
    armed = [False]

    def append(self: Journal, *args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        if count[0] == n and when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        if count[0] == n and when == "after":
            armed[0] = True
        out = original(self, *args, **kwargs)
        if count[0] == n and when == "queued":
            os.kill(os.getpid(), signal.SIGKILL)
        return out

    def flushed(self: Journal, *args: Any, **kwargs: Any) -> Any:
        out = flush(self, *args, **kwargs)
        if armed[0] and not any(self._pending.values()):
            os.kill(os.getpid(), signal.SIGKILL)
        return out

    Journal.append = append  # type: ignore[method-assign]
    Journal.flush = flushed  # type: ignore[method-assign]


async def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("name")
    p.add_argument("input")
    p.add_argument("--kill", nargs=2)
    p.add_argument("--host")
    p.add_argument("--workflow", default="chain")
    p.add_argument("--module", default="runtime_flows", help="the workflows' module")
    a = p.parse_args()
    if a.kill:
        kill_at(a.kill[0], int(a.kill[1]))
    host = Host(a.host, Path(a.dir)) if a.host else None
    rt = Runtime(Path(a.dir), host=host)
    flows = runtime_flows if a.module == "runtime_flows" else importlib.import_module(a.module)
    run = rt.start(getattr(flows, a.workflow), a.name, json.loads(a.input))
    out = await rt.advance(run)
    print(json.dumps(out.json()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
