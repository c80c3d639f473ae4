"""A request lost on its way to one replica is answered by another: the client sends it again
after ``HEDGE_S`` without an answer (ledger/client.py says why: a NATS node that dies
without closing its sockets keeps receiving requests until the others' pings time out).

The lost request is made real with a real nats-server: the only member of the API's queue
group at first is a "black hole" that takes the request and never answers (a replica behind
a dead node), then leaves, and a replica that answers joins.
"""

from __future__ import annotations

import asyncio

import nats
import pytest

from fleet_ledger.fleet.subjects import fleet_names
from fleet_ledger.ledger.client import LedgerUnreachable, call
from fleet_ledger.plumbing.natsd import NatsServer

SUBJECT = fleet_names("fleet").api_subject("status")
QUEUE = "hedge-test"


async def _lost_then_answered(url: str, hedge_s: float | None) -> bytes:
    """``call`` while the first request falls into a black hole and a live replica takes
    over the queue group as soon as it has."""
    nc = await nats.connect(url)
    taken = asyncio.Event()
    seen: list[bytes] = []

    async def black_hole(msg: nats.aio.msg.Msg) -> None:
        seen.append(msg.data)
        taken.set()

    async def answer(msg: nats.aio.msg.Msg) -> None:
        await msg.respond(b'{"tree_size": 7}')

    hole = await nc.subscribe(SUBJECT, queue=QUEUE, cb=black_hole)
    await nc.flush()

    async def take_over() -> None:
        await taken.wait()
        await hole.unsubscribe()
        await nc.subscribe(SUBJECT, queue=QUEUE, cb=answer)
        await nc.flush()

    swap = asyncio.create_task(take_over())
    try:
        return await call(url, "status", timeout=6.0, hedge_s=hedge_s)
    finally:
        swap.cancel()
        await nc.close()
        assert seen == [b"{}"]  # the black hole did take the first request


@pytest.mark.timeout(60)
def test_without_hedging_a_lost_request_times_out(nats_server: NatsServer):
    """The attack on availability: one request, lost with the replica it reached, is a
    timeout although a live replica was there all along after it."""
    with pytest.raises(LedgerUnreachable, match="did not answer within 6s"):
        asyncio.run(_lost_then_answered(nats_server.url, None))


@pytest.mark.timeout(60)
def test_a_hedged_request_is_answered_by_the_live_replica(nats_server: NatsServer):
    """With a hedge (1 s here; 3 s by default), the same request sent again reaches the live
    replica and its answer is returned, within the one timeout."""
    assert asyncio.run(_lost_then_answered(nats_server.url, 1.0)) == b'{"tree_size": 7}'
