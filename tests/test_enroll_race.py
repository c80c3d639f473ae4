"""An enrollment that commits while a batch is being decided changes nothing a rebuild would
decide differently: the batch is refused at its write and decided again."""

from __future__ import annotations

from pathlib import Path

from fleet_ledger.fleet.record.seal import encode_key
from fleet_ledger.ledger.service import Ledger, LedgerConfig
from fleet_ledger.ledger.store import HostsChanged, LedgerStore

from fault_helpers import host_key, reference_fold, sealed_run, store_summary


def _stream() -> list[tuple[int, str, bytes]]:
    run = sealed_run("late", "enroll-race", "eprec")
    return [(i, s, d) for i, (s, d) in enumerate(run.messages, start=1)]


def test_a_batch_decided_before_an_enrollment_is_decided_again(tmp_path: Path) -> None:
    stream = _stream()
    data = tmp_path / "live"
    ledger = Ledger(LedgerConfig(data_dir=data, servers=[], seal_workers=0))
    try:
        prepared = ledger.prepare(stream)  # decided with no host enrolled
        # The operator's `fleet host enroll`, from another connection, meanwhile.
        operator = LedgerStore(data)
        operator.enroll("late", encode_key(bytes(host_key("late").verify_key)))
        operator.close()
        batch, top = ledger.finish(prepared)
    finally:
        ledger.store.close()
    assert top == len(stream)
    assert all(type(item.decision).__name__ == "Accepted" for item in batch)
    live = store_summary(data)
    # A ledger rebuilt from the same stream with the same enrollment agrees.
    rebuilt = reference_fold(stream, [("late", encode_key(bytes(host_key("late").verify_key)),
                                       0, None)], tmp_path / "rebuilt")
    assert (live.size, live.root, live.rejections) == (rebuilt.size, rebuilt.root,
                                                       rebuilt.rejections)
    assert live.size == len(stream)


def test_write_batch_refuses_a_stale_host_table(tmp_path: Path) -> None:
    store = LedgerStore(tmp_path)
    version = store.hosts_version()
    store.enroll("h", encode_key(bytes(host_key("h").verify_key)))
    assert store.hosts_version() == version + 1
    try:
        store.write_batch([], 5, hosts_version=version)
    except HostsChanged:
        pass
    else:
        raise AssertionError("a batch decided with an older host table was written")
    assert not store.conn.in_transaction
    assert store.watermark() == 0
    store.revoke("h")
    assert store.hosts_version() == version + 2
    store.close()
