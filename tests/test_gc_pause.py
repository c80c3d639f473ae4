"""The ledger's batch fold holds the cyclic collector off (plumbing.gc_pause): a batch is a
bounded burst of short-lived objects, and collections during it found almost nothing while
costing 12-17% of the fold's CPU (docs/benchmarks.md)."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nacl.signing import SigningKey

from fleet_ledger.cli._bench_jobs_fold import _stream
from fleet_ledger.fleet.address import digest
from fleet_ledger.fleet.record.seal import encode_key
from fleet_ledger.ledger import service
from fleet_ledger.ledger.service import Ledger, LedgerConfig
from fleet_ledger.plumbing.gc_pause import gc_paused


@pytest.fixture
def collector_on() -> Iterator[None]:
    was, thresholds = gc.isenabled(), gc.get_threshold()
    gc.enable()
    gc.set_threshold(700, 10, 10)  # CPython's defaults, whatever ran before
    yield
    gc.set_threshold(*thresholds)
    if not was:
        gc.disable()


def test_the_collector_is_off_inside_and_back_after(collector_on: None) -> None:
    """Off inside, on after; on after an error too; a nested pause leaves the outer one's
    state; a pause inside code that had it off already leaves it off."""
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), gc_paused():
        raise ValueError("boom")
    assert gc.isenabled()
    gc.disable()
    with gc_paused():
        pass
    assert not gc.isenabled()
    gc.enable()


def _collections_while_deciding(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """Collections that ran while a fresh ledger decided and wrote one batch of 1,200
    segments (counted inside the decision and the writing; the batch decoded before)."""
    keys = {f"h{i}": SigningKey(digest(b"gc-pause/host%d" % i)) for i in range(4)}
    stream = _stream(400, 3, None, keys)
    ledger = Ledger(LedgerConfig(data_dir=tmp, servers=[], seal_workers=0))
    seen = [0]

    def count(phase: str, _info: dict[str, int]) -> None:
        seen[0] += phase == "start"

    real = service.decide_written

    def counted(*args: Any) -> Any:
        gc.callbacks.append(count)
        try:
            return real(*args)
        finally:
            gc.callbacks.remove(count)

    monkeypatch.setattr(service, "decide_written", counted)
    try:
        for host, key in keys.items():
            ledger.store.enroll(host, encode_key(bytes(key.verify_key)))
        prepared = ledger.prepare([(n + 1, s, d) for n, (s, d) in enumerate(stream)])
        batch, _top, _changed = ledger.decide_and_write(prepared)
        ledger.store.commit()
        assert sum(1 for item in batch if getattr(item.decision, "rule", None) is None) \
            == len(stream)
    finally:
        ledger.store.close()
    return seen[0]


def test_no_collection_runs_while_a_batch_is_decided(tmp_path: Path, collector_on: None,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the pause the collector runs while one batch is decided and written (some
    ten times here); with it, not once (the batch is the same and every segment is accepted)."""
    with monkeypatch.context() as patched:
        patched.setattr(service, "gc_paused", contextlib.nullcontext)
        assert _collections_while_deciding(tmp_path / "without", patched) > 0
    assert _collections_while_deciding(tmp_path / "with", monkeypatch) == 0
