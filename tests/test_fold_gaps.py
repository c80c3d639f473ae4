"""A running ledger never folds past a hole in what its consumer delivers: messages delivered
where the fold never saw them (here a second reader of the ledger's consumer takes them, as
a pull whose reply is lost while a cluster node dies would) are folded, not skipped and
acked unread by the ack of a later one."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from fleet_ledger.fleet.record.seal import encode_key
from fleet_ledger.ledger.stream import consumer_name
from fleet_ledger.plumbing.natsd import NatsServer

from fault_helpers import host_key, running_ledger, sealed_run, store_summary


@pytest.mark.parametrize("puller", ["fetch", "auto"])
def test_messages_taken_from_the_consumer_are_folded_not_skipped(nats_server: NatsServer,
                                                                 tmp_path: Path,
                                                                 puller: str) -> None:
    """A thief fetches (and never acks) messages from the ledger's own durable consumer
    while the ledger runs; the ledger then gets later ones: it sees the hole, folds again
    from its watermark, and ends with every message of the stream as a leaf."""
    hosts = [("h1", encode_key(bytes(host_key("h1").verify_key)), 0, None)]
    runs = [sealed_run("h1", f"gap-{i}", "eee") for i in range(6)]
    messages = [m for r in runs for m in r.messages]

    async def scenario() -> tuple[int, int]:
        async with running_ledger(nats_server.url, tmp_path / "ledger", hosts,
                                  name="gaps", puller=puller) as (ledger, js):
            deadline = asyncio.get_running_loop().time() + 20
            while ledger.nc is None or not ledger.healthy:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)  # its consumer made and pulling
            # The thief's pull request is a plain one (as the client library sends it),
            # answered into an inbox nobody folds from: a pull whose reply is lost.
            nc = ledger.nc
            inbox = nc.new_inbox()
            taken: list[int] = []

            async def keep(msg: object) -> None:
                if getattr(msg, "data", b""):
                    taken.append(1)

            await nc.subscribe(inbox, cb=keep)
            await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.FLEET.{consumer_name('gaps')}",
                             b'{"batch": 2, "expires": 10000000000}', reply=inbox)
            await nc.flush()
            sent = 0
            for subject, data in messages:
                await js.publish(subject, data)
                sent += 1
                await asyncio.sleep(0.05)
                if len(taken) >= 2 and sent >= 6:
                    break
            stolen = len(taken)
            for subject, data in messages[sent:]:
                await js.publish(subject, data)
            while ledger.store.watermark() < len(messages):
                assert asyncio.get_running_loop().time() < deadline, (
                    "the ledger did not fold the stream", ledger.store.watermark())
                await asyncio.sleep(0.05)
            return stolen, ledger.store.tree.size()

    stolen, size = asyncio.run(scenario())
    assert stolen > 0, "the thief took nothing: nothing was tested"
    held = store_summary(tmp_path / "ledger")
    assert held.rejections == []
    assert size == held.size == len(messages), (stolen, size, held.size)
    held.check_leaves()
