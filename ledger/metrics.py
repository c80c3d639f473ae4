"""The ledger's Prometheus metrics (``GET /metrics`` on the operations port).

Two sources, one registry per ledger (never prometheus_client's global one, so two ledgers
in one process, as in the tests, do not mix):

- :class:`FoldMetrics`, observed by the fold as it commits: batch durations, the
  publish-to-commit latency of each batch's oldest message (its JetStream timestamp, from
  the ack subject, to the commit: a batch's worst case, one observation per batch so the
  fold pays nothing per message), and when the oldest leaf not yet in a signed checkpoint
  was committed. HTTP requests by kind and status code are counted here too.
- :class:`StoreCollector`, read at scrape time from a read-only store connection: tree,
  signed and witnessed sizes, the checkpoint's time, refusals by rule, runs, anchors.

What NATS already exports is not repeated: consumer pending and redeliveries come from
nats-server's monitoring port (``/jsz?consumers=true``), and request counts and latencies
of the request/reply API from the micro service's ``$SRV.STATS`` (``docs/operations.md``).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from fleet_ledger.ledger.pull import BadDelivery, ack_fields
from fleet_ledger.ledger.store import LedgerStore
from fleet_ledger.plumbing.anchoring import AnchorState, ReceiptStore

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_BATCH_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def publish_time_ns(reply: str) -> int | None:
    """The stream timestamp (ns since the epoch) in a JetStream ack subject
    (:func:`ledger.pull.ack_fields`); None if it has none."""
    try:
        return ack_fields(reply.encode())[1]
    except BadDelivery:
        return None


class FoldMetrics:
    """What the fold and the HTTP servers observe, on ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.batch_seconds = Histogram(
            "fleet_fold_batch_seconds", "Deciding, writing and committing one fold batch.",
            buckets=_BATCH_BUCKETS, registry=registry)
        self.publish_to_commit = Histogram(
            "fleet_publish_to_commit_seconds",
            "From a batch's oldest message reaching the stream to the batch's commit.",
            buckets=_LATENCY_BUCKETS, registry=registry)
        self.http_requests = Counter(
            "fleet_http_requests", "HTTP requests served, by kind and status code.",
            ["kind", "code"], registry=registry)
        self._unsigned: deque[tuple[int, float]] = deque()  # (tree size after, commit time)

    def batch_committed(self, started: float, tree_size: int, oldest_reply: str | None,
                        now: float | None = None, signing: bool = True) -> None:
        """A batch that began deciding at ``started`` (``time.monotonic``) is committed;
        the tree now has ``tree_size`` leaves. ``signing``: whether this ledger signs
        checkpoints now; a standby never does, so its leaves are not waiting on it and
        nothing is kept for them."""
        self.batch_seconds.observe(max(0.0, time.monotonic() - started))
        wall = time.time() if now is None else now
        published = None if oldest_reply is None else publish_time_ns(oldest_reply)
        if published is not None:
            self.publish_to_commit.observe(max(0.0, wall - published / 1e9))
        if not signing:
            self._unsigned.clear()
        elif not self._unsigned or self._unsigned[-1][0] < tree_size:
            self._unsigned.append((tree_size, wall))

    def signed(self, size: int) -> None:
        """A checkpoint of ``size`` is signed: leaves up to it are no longer waiting."""
        while self._unsigned and self._unsigned[0][0] <= size:
            self._unsigned.popleft()

    def unsigned_age(self, signed_size: int, now: float | None = None) -> float:
        """Seconds since the oldest leaf not in a signed checkpoint was committed (0: none)."""
        self.signed(signed_size)
        if not self._unsigned:
            return 0.0
        return max(0.0, (time.time() if now is None else now) - self._unsigned[0][1])


class StoreCollector(Collector):
    """Gauges read from the store at scrape time."""

    def __init__(self, store: LedgerStore, receipts: ReceiptStore | None,
                 fold: FoldMetrics | None,
                 lag: Callable[[], int | None] = lambda: None) -> None:
        self.store = store
        self.receipts = receipts
        self.fold = fold
        self.lag = lag

    def collect(self) -> Iterator[Metric]:
        store = self.store
        size = store.tree.size()
        states = [] if self.receipts is None else self.receipts.anchor_states()
        last = store.newest_checkpoint()
        signed, at = (0, None) if last is None else (last.size, last.at)
        yield _gauge("fleet_tree_size", "Leaves in the fleet log (committed).", size)
        yield _gauge("fleet_signed_size", "Tree size of the newest signed checkpoint.", signed)
        yield _gauge("fleet_checkpoint_timestamp_seconds",
                     "When the newest checkpoint was signed (Unix time).", at or 0)
        yield _gauge("fleet_witnessed_size",
                     "Largest checkpoint size cosigned by a witness (0: none).",
                     max((s.anchored_size or 0 for s in states if s.kind == "witness"),
                         default=0))
        if self.fold is not None:
            yield _gauge("fleet_unsigned_leaf_age_seconds",
                         "Age of the oldest committed leaf not in a signed checkpoint.",
                         self.fold.unsigned_age(signed))
        yield _gauge("fleet_runs", "Runs the ledger holds.", store.run_count())
        lag = self.lag()
        if lag is not None:
            yield _gauge("fleet_stream_lag", "Stream messages not yet decided.", lag)
        refused = CounterMetricFamily("fleet_refusals", "Segments refused, by rule.",
                                      labels=["rule"])
        for rule, count in store.refusal_counts().items():
            refused.add_metric([rule], count)
        yield refused
        yield from self._anchors(states)

    def _anchors(self, states: list[AnchorState]) -> Iterator[Metric]:
        done = CounterMetricFamily(
            "fleet_anchor_requests", "Anchor requests by result (ok: receipts stored; error:"
            " failures since the anchor's last success).", labels=["anchor", "kind", "result"])
        size = GaugeMetricFamily("fleet_anchored_size", "Largest checkpoint size anchored.",
                                 labels=["anchor", "kind"])
        for s in states:
            done.add_metric([s.name, s.kind, "ok"], s.receipts)
            done.add_metric([s.name, s.kind, "error"], s.failures)
            size.add_metric([s.name, s.kind], s.anchored_size or 0)
        yield done
        yield size


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def new_registry() -> CollectorRegistry:
    return CollectorRegistry(auto_describe=False)


def render(registry: CollectorRegistry) -> bytes:
    """The registry in Prometheus text format 0.0.4."""
    return generate_latest(registry)
