"""Faults on the host side, with real processes: a host SIGKILLed right before its one
durable step (the outbox put of a segment with its run state), between that put and applying
it in memory (and publishing it), and between the broker's PubAck and recording it; and a
PubAck lost on the way. Nothing may be lost and nothing duplicated, in the stream or in the
ledger's log."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

import nats
import pytest
from nats.js.api import Header

from fleet_ledger.agents.host import Host, load_or_create_key
from fleet_ledger.agents.publisher import Backoff, Publisher
from fleet_ledger.fleet.address import digest
from fleet_ledger.fleet.record.seal import encode_key
from fleet_ledger.ledger.store import LedgerStore
from fleet_ledger.plumbing.natsd import NatsServer

from fault_helpers import LedgerProc, store_summary, stream_messages, wait_until

pytestmark = pytest.mark.timeout(120)

SEGMENTS_PER_RUN = 6
RUNS = 2

# The host program: two runs of six segments (executed, executed, suspended, resumed,
# executed, closed), each segment published as soon as it is written. The kill point is
# patched in: SIGKILL right before the Nth outbox put (the segment prepared, nothing durable),
# right after it commits (before the run applies it and before anything is sent), or right
# before the Nth PubAck is recorded (the broker has stored the segment). Run again without a
# kill point, it picks its runs up and ends them.
HOST_PROGRAM = r'''
import asyncio, os, signal, sys
from pathlib import Path
from fleet_ledger.agents.host import Host
from fleet_ledger.agents.outbox import Outbox
from fleet_ledger.agents.publisher import Backoff, Publisher
from fleet_ledger.fleet.address import digest
from fleet_ledger.fleet.record.segment import CallAccount, make_snapshot
from fleet_ledger.plumbing.nats_connect import connect

host_dir, url, point, nth = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
count = [0]

def kill_on_nth():
    count[0] += 1
    if count[0] == nth:
        os.kill(os.getpid(), signal.SIGKILL)

if point == "before-outbox-put":
    put = Outbox.put
    def patched_put(self, *a, **k):
        kill_on_nth()
        return put(self, *a, **k)
    Outbox.put = patched_put
elif point == "after-outbox-put":
    put = Outbox.put
    def patched_put(self, *a, **k):
        row = put(self, *a, **k)
        kill_on_nth()
        return row
    Outbox.put = patched_put
elif point == "after-puback-before-record":
    mark = Outbox.mark_acked
    def patched_mark(self, *a, **k):
        kill_on_nth()
        return mark(self, *a, **k)
    Outbox.mark_acked = patched_mark

MANIFEST = digest(b"manifest")

def step(run):
    i = run.state.index + 1
    if i in (1, 2, 5):
        run.execute(uj=100 * i, provenance="measured", meter="rapl:package-0",
                    journal_root=digest(run.run.encode() + b"%d" % i),
                    calls=CallAccount((f"c{i}",), ()))
    elif i == 3:
        run.suspend(make_snapshot(transcript=digest(run.run.encode())), MANIFEST)
    elif i == 4:
        run.resume(run.state.parked, MANIFEST, idle_uj=77, provenance="estimated",
                   meter="estimate:storage")
    else:
        run.close()

async def main():
    host = Host("h1", Path(host_dir))
    nc = await connect([url])
    publisher = Publisher(host.outbox, nc.jetstream(timeout=5.0),
                          backoff=Backoff(initial=0.02, maximum=0.2))
    for u in range(2):
        run = host.open_run(digest(b"unit-%d" % u), digest(b"grants"))
        while run.state.index < 6:
            step(run)
            await publisher.drain(timeout=30)
    report = await publisher.drain(timeout=30)
    print("remaining", report.remaining, "duplicates", report.duplicates)
    await nc.drain()
    host.close()

asyncio.run(main())
'''


def _host_program(host_dir: Path, url: str, point: str, nth: int
                  ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", HOST_PROGRAM, str(host_dir), url, point,
                           str(nth)], capture_output=True, text=True, timeout=90,
                          stdin=subprocess.DEVNULL)


def _enrolled_ledger(tmp_path: Path, host_dir: Path) -> Path:
    data = tmp_path / "ledger"
    host_dir.mkdir(parents=True)
    key = load_or_create_key(host_dir)
    store = LedgerStore(data)
    store.enroll("h1", encode_key(bytes(key.verify_key)))
    store.close()
    return data


def _outbox_rows(host_dir: Path) -> list[tuple[str, int, str, str]]:
    from pipeline_helpers import outbox_rows

    return outbox_rows(host_dir)


def _check_states(host_dir: Path, rows: list[tuple[str, int, str, str]]) -> None:
    """Reopened, the host's state of each run ends at its newest outbox row and equals the
    run rebuilt from its sealed segments."""
    host = Host("h1", host_dir)
    try:
        for u in range(RUNS):
            hr = host.open_run(digest(b"unit-%d" % u), digest(b"grants"))
            assert hr.state.index == max((r[1] for r in rows if r[0] == hr.run), default=0)
            host.verified_state(hr)  # raises StateMismatch if the saved state differs
    finally:
        host.close()


@pytest.mark.parametrize(("point", "nth"), [
    ("before-outbox-put", 4), ("before-outbox-put", 9),
    ("after-outbox-put", 4), ("after-outbox-put", 9),
    ("after-puback-before-record", 4), ("after-puback-before-record", 9),
])
def test_host_sigkilled_then_restarted_loses_and_duplicates_nothing(
    nats_server: NatsServer, tmp_path: Path, point: str, nth: int
) -> None:
    """A host SIGKILLed right before its Nth outbox put, right after it (nothing sent, not
    applied in memory) or right before recording its Nth PubAck (the broker has the
    segment): its saved states match its rows, and restarted, it publishes every segment
    exactly once and the ledger folds each as one leaf."""
    host_dir = tmp_path / "h1"
    data = _enrolled_ledger(tmp_path, host_dir)
    total = SEGMENTS_PER_RUN * RUNS
    with LedgerProc(nats_server.url, data) as ledger:
        ledger.start()
        crashed = _host_program(host_dir, nats_server.url, point, nth)
        assert crashed.returncode == -signal.SIGKILL, crashed.stderr
        rows = _outbox_rows(host_dir)
        pending = [r for r in rows if r[3] == "pending"]
        if point == "before-outbox-put":
            assert len(rows) == nth - 1 and pending == []  # the Nth never became durable
        else:
            assert len(rows) == nth  # the Nth segment was written before the kill
            assert len(pending) == 1 and pending[0] == rows[-1]
        _check_states(host_dir, rows)
        before = len(stream_messages(nats_server.url))
        # After the put: not sent yet. Before the ack was recorded: already in the stream.
        assert before == (nth if point == "after-puback-before-record" else nth - 1)
        resumed = _host_program(host_dir, nats_server.url, "none", 0)
        assert resumed.returncode == 0, resumed.stderr
        assert "remaining 0" in resumed.stdout
        wait_until(lambda: store_summary(data).watermark >= total, 30, "the ledger to fold")
        assert ledger.stop() == 0
    rows = _outbox_rows(host_dir)
    assert len(rows) == total and all(r[3] == "acked" for r in rows)
    messages = stream_messages(nats_server.url)
    assert len(messages) == total  # nothing duplicated in the stream
    summary = store_summary(data)
    assert summary.rejections == []
    assert summary.size == total
    assert {(s[0], s[1], s[2]) for s in summary.segments} == {r[:3] for r in rows}
    summary.check_leaves()
    host = Host("h1", host_dir)
    try:
        assert [host.open_run(digest(b"unit-%d" % u), digest(b"grants")).state.index
                for u in range(RUNS)] == [SEGMENTS_PER_RUN] * RUNS
    finally:
        host.close()


class DroppingAcks:
    """A JetStream context whose PubAck for chosen segments is lost: the message goes to the
    server (which stores it and answers to an inbox nobody reads) and the publish times
    out, exactly as when the ack is dropped on the way back."""

    def __init__(self, nc: nats.aio.client.Client, js: object, drop: set[str]) -> None:
        self.nc, self.js, self.drop = nc, js, set(drop)
        self.dropped: list[str] = []

    async def publish(self, subject: str, payload: bytes, *, headers: dict, **kw: object
                      ) -> object:
        msg_id = headers[Header.MSG_ID]
        if msg_id in self.drop:
            self.drop.discard(msg_id)
            self.dropped.append(msg_id)
            await self.nc.publish(subject, payload, reply=f"_INBOX.dropped.{msg_id[3:12]}",
                                  headers=headers)
            await self.nc.flush()
            raise nats.errors.TimeoutError
        return await self.js.publish(subject, payload, headers=headers, **kw)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self.js, name)


def test_lost_puback_is_a_broker_duplicate_not_a_second_leaf(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """Segments that reached the stream but whose PubAck was lost: the publisher's retry is
    recognised as the same segment (and a resend within the window is the broker's
    duplicate of the first copy), the stream holds each once and the ledger folds each as
    one leaf."""
    host_dir = tmp_path / "h1"
    data = _enrolled_ledger(tmp_path, host_dir)
    host = Host("h1", host_dir)
    run = host.open_run(digest(b"unit-lost-ack"), digest(b"grants"))
    for i in range(5):
        run.execute(uj=10 + i, provenance="measured", meter="rapl:package-0",
                    journal_root=digest(b"j%d" % i))
    run.close()
    entries = host.outbox.pending()
    drop = {e.msg_id for e in entries[::2]}  # segments 1, 3 and 5

    async def body() -> tuple[object, list[str], object]:
        nc = await nats.connect(nats_server.url)
        try:
            js = DroppingAcks(nc, nc.jetstream(timeout=5.0), drop)
            report = await Publisher(host.outbox, js, ack_timeout=1.0,  # type: ignore[arg-type]
                                     backoff=Backoff(0.02, 0.2)).drain(30)
            again = await nc.jetstream().publish(entries[0].subject, entries[0].payload,
                                                 headers={Header.MSG_ID: entries[0].msg_id})
            return report, js.dropped, again
        finally:
            await nc.close()

    with LedgerProc(nats_server.url, data) as ledger:
        ledger.start()
        report, dropped, again = asyncio.run(body())
        wait_until(lambda: store_summary(data).watermark >= len(entries), 30, "the fold")
        assert ledger.stop() == 0
    host.close()
    assert sorted(dropped) == sorted(drop)
    assert (report.acked, report.duplicates, report.stopped) == (6, 3, [])  # type: ignore[attr-defined]
    assert (again.duplicate, again.seq) == (True, 1)  # type: ignore[attr-defined]
    assert len(stream_messages(nats_server.url)) == len(entries) == 6
    summary = store_summary(data)
    assert summary.size == 6 and summary.rejections == []
    summary.check_leaves()
