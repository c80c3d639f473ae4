"""Provisioning the FLEET stream and a ledger's durable pull consumer, idempotently."""

from __future__ import annotations

import logging

from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import NotFoundError

from fleet_ledger.fleet.record.wire import MAX_MESSAGE
from fleet_ledger.fleet.subjects import DEFAULT_FLEET, FleetNames

log = logging.getLogger(__name__)


def stream_config(replicas: int = 1, dedup_window_s: float = 120.0,
                  names: FleetNames = DEFAULT_FLEET) -> StreamConfig:
    return StreamConfig(
        name=names.stream,
        subjects=[f"{names.segments}.>", f"{names.control}.>"],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        num_replicas=replicas,
        duplicate_window=dedup_window_s,
        max_msg_size=MAX_MESSAGE,
        discard=DiscardPolicy.OLD,
        deny_delete=True,
        deny_purge=True,
        allow_rollup_hdrs=False,
    )


async def ensure_stream(
    js: JetStreamContext, replicas: int = 1, dedup_window_s: float = 120.0,
    names: FleetNames = DEFAULT_FLEET,
) -> None:
    """Create the stream, or update it to this configuration (replicas, window, limits)."""
    config = stream_config(replicas, dedup_window_s, names)
    try:
        await js.stream_info(names.stream)
    except NotFoundError:
        await js.add_stream(config)
        return
    await js.update_stream(config)


def consumer_name(ledger: str) -> str:
    return f"ledger-{ledger}"


async def ensure_consumer(js: JetStreamContext, ledger: str, watermark: int,
                          names: FleetNames = DEFAULT_FLEET) -> str:
    """The ledger's own durable pull consumer, positioned just after ``watermark``.

    A consumer that is ahead of the store (the store was deleted or restored from an old
    backup) is recreated at ``watermark + 1``, so the ledger replays what its store lacks
    instead of trusting the consumer's position. So is one that has *delivered* past the
    watermark (a ledger killed mid-batch, or a batch it could not commit and nak'd): its
    unacked messages would come back only after the ack wait, behind newer ones, and be
    skipped as below the watermark once those were folded, i.e. lost.
    """
    durable = consumer_name(ledger)
    try:
        info = await js.consumer_info(names.stream, durable)
    except NotFoundError:
        info = None
    if info is not None:
        floor = info.ack_floor.stream_seq if info.ack_floor else 0
        delivered = info.delivered.stream_seq if info.delivered else 0
        # A consumer from before control events filtered on segments only: it would miss
        # them, so it is recreated (unfiltered: the stream holds segments and control).
        filtered = info.config.filter_subject is not None
        if floor <= watermark and delivered <= watermark and not filtered:
            return durable
        log.warning("consumer %s is at %d (delivered %d), store at %d: replaying from the"
                    " store's position", durable, floor, delivered, watermark)
        await js.delete_consumer(names.stream, durable)
    await js.add_consumer(names.stream, ConsumerConfig(
        durable_name=durable,
        deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
        opt_start_seq=watermark + 1,
        ack_policy=AckPolicy.ALL,
        ack_wait=30.0,
        max_ack_pending=20_000,
    ))
    return durable
