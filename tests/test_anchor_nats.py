"""Publishing checkpoints to another NATS system: the auditors' stream holds every anchored
checkpoint; while their server is down the ledger keeps folding and the anchor retries."""

from __future__ import annotations

import asyncio
import json

import nats
from anchor_helpers import anchored, publish_run, running_ledger, wait_for

from fleet_ledger.anchors.base import AnchorConfig
from fleet_ledger.fleet.log.checkpoint import open_checkpoint
from fleet_ledger.ledger import views
from fleet_ledger.plumbing.testing import running_server

SUBJECT = "audit.fleet.checkpoint"


async def _audit_stream(url: str) -> list[bytes]:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        sub = await js.subscribe(SUBJECT, stream="AUDIT", ordered_consumer=True)
        out = []
        while True:
            try:
                msg = await sub.next_msg(timeout=0.5)
            except nats.errors.TimeoutError:
                return out
            out.append(msg.data)
    finally:
        await nc.close()


async def _make_stream(url: str) -> None:
    nc = await nats.connect(url)
    try:
        await nc.jetstream().add_stream(name="AUDIT", subjects=[SUBJECT])
    finally:
        await nc.close()


def test_checkpoints_reach_the_auditors_stream_and_survive_their_outage(nats_server, tmp_path):
    """Each anchored checkpoint lands verbatim in the auditors' JetStream stream (receipt: its
    sequence); with their server stopped the fold goes on, the anchor records failures, and it
    catches up once the server is back."""
    with running_server(tmp_path / "auditors") as auditors:
        asyncio.run(_make_stream(auditors.url))
        configs = [AnchorConfig("nats", "auditors", {"url": auditors.url, "subject": SUBJECT,
                                                     "stream": "AUDIT"})]

        async def scenario():
            async with running_ledger(nats_server.url, tmp_path / "ledger", configs) as ledger:
                await publish_run(nats_server.url, "unit-1")
                await wait_for(lambda: anchored(ledger, {"auditors"}), 20, "first anchor")
                first_size = ledger.store.tree.size()
                await asyncio.to_thread(auditors.stop)
                await publish_run(nats_server.url, "unit-2")
                await wait_for(lambda: ledger.store.tree.size() > first_size, 20,
                               "folding while the auditors are down")
                down = await wait_for(
                    lambda: [a for a in views.anchor_status(ledger.store, ledger.receipts)
                             if a["failures"] >= 1], 30, "a recorded anchor failure")
                await asyncio.to_thread(auditors.start)
                await wait_for(lambda: anchored(ledger, {"auditors"}), 60, "catching up")
                receipts = ledger.receipts.receipts_covering(1)
                notes = [n for (n,) in ledger.store.conn.execute(
                    "SELECT note FROM checkpoints ORDER BY size")]
                return ledger.signer.verifier(), down, receipts, notes, first_size

        verifier, down, receipts, notes, first_size = asyncio.run(scenario())
        stored = asyncio.run(_audit_stream(auditors.url))
    assert down[0]["lag"] > 0 and down[0]["anchored_size"] == first_size
    assert stored and all(m.decode() in notes for m in stored)
    sizes = [open_checkpoint(m.decode(), [verifier]).size for m in stored]
    assert sizes == sorted(sizes) and sizes[-1] == open_checkpoint(notes[-1], [verifier]).size
    receipt = json.loads(receipts[0].data)
    assert receipt["stream"] == "AUDIT" and receipt["seq"] >= 1
