"""``fleet bench records``: record verification throughput against bare Ed25519 in one run."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable

import click
from nacl.signing import SigningKey

from fleet_ledger.cli._app import bench
from fleet_ledger.fleet.address import digest
from fleet_ledger.fleet.record.builder import RecordBuilder
from fleet_ledger.fleet.record.seal import seal_message
from fleet_ledger.fleet.record.segment import CallAccount, make_snapshot
from fleet_ledger.fleet.record.verify import verify_record
from fleet_ledger.fleet.record.wire import decode_record, encode_record


def sample_record(segments: int) -> RecordBuilder:
    """A record cycling execute (accounted) / suspend / resume, both park forms."""
    b = RecordBuilder(SigningKey(bytes([3]) * 32), digest(b"bench-unit"), digest(b"grants"))
    manifest = digest(b"manifest")
    park = None
    i = 0
    while b.state.index < segments:
        phase = b.state.phase
        if phase == "parked":
            assert park is not None
            b.resume(park, manifest, 1000 + i, "estimated", "estimate:storage@1.2W/TB")
        elif phase == "ran" and i % 4 == 3:
            park = (make_snapshot(transcript=digest(b"t%d" % i)) if i % 8 == 3 else
                    make_snapshot(fs_root=digest(b"f%d" % i), mem_image=digest(b"m%d" % i)))
            b.suspend(park, manifest)
        else:
            calls = CallAccount((f"call-{i}",), (f"call-{i - 4}",) if i >= 4 else ())
            b.execute(uj=10_000 + i, provenance="measured", meter="rapl:package-0",
                      journal_root=digest(b"j%d" % i), calls=calls)
        i += 1
    return b


def _cpu(fn: Callable[[], object]) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def measure(segments: int, repeats: int) -> dict[str, object]:
    """Rates from interleaved rounds: each round times every variant once, so drift on a
    shared machine hits all of them alike; the ratio is the median of per-round ratios."""
    b = sample_record(segments)
    data = encode_record(b.to_record())
    sealed_rec = decode_record(data)
    chain_rec = decode_record(data)
    chain_rec.host_key = None
    key = b._key.verify_key  # the host key itself, as a verifier would hold it
    messages = [(seal_message(b.run, s.index, s.head), s.seal) for s in b.sealed]

    def bare() -> None:
        verify = key.verify
        for msg, sig in messages:
            verify(msg, sig)

    from fleet_ledger.ledger import seal_verifiers

    public = bytes(key)
    items = [(public, msg, sig) for msg, sig in messages]
    dalek = seal_verifiers._dalek()
    variants: dict[str, Callable[[], object]] = {
        "chain": lambda: verify_record(chain_rec),
        "sealed": lambda: verify_record(sealed_rec),
        "file": lambda: verify_record(decode_record(data)),
        "bare": bare,
        "ledger_libsodium": lambda: seal_verifiers.verify_many_libsodium(items),
    }
    if dalek is not None:
        variants["ledger_dalek"] = lambda: dalek(items)
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(repeats):
        for name, fn in variants.items():
            times[name].append(_cpu(fn))
    med = {k: statistics.median(v) for k, v in times.items()}
    ratios = [s / b_ for s, b_ in zip(times["sealed"], times["bare"], strict=True)]
    return {
        "segments": segments,
        "repeats": repeats,
        "record_bytes": len(data),
        "chain_segments_per_s": round(segments / med["chain"]),
        "sealed_segments_per_s": round(segments / med["sealed"]),
        "bare_ed25519_verifies_per_s": round(segments / med["bare"]),
        "sealed_over_bare_time_ratio": round(statistics.median(ratios), 3),
        "file_sealed_segments_per_s": round(segments / med["file"]),
        # The ledger's batch seal check (ledger/seal_verifiers.py) on the same seals.
        "ledger_seal_check_us_libsodium": round(med["ledger_libsodium"] / segments * 1e6, 1),
        **({} if dalek is None else {
            "ledger_seal_check_us_dalek": round(med["ledger_dalek"] / segments * 1e6, 1),
            "dalek_over_libsodium_time_ratio": round(statistics.median(
                d / n for d, n in zip(times["ledger_dalek"], times["ledger_libsodium"],
                                      strict=True)), 3)}),
        "statistic": "CPU time of this process (one core), median of interleaved rounds; "
                     "chain and sealed verify a decoded record (every head, rule and address "
                     "recomputed), file_sealed adds the JSON decode of the record file",
    }


@bench.command("records")
@click.option("--segments", default=20_000, show_default=True, type=click.IntRange(1))
@click.option("--repeats", default=5, show_default=True, type=click.IntRange(1))
@click.option("--json", "as_json", is_flag=True, help="Print JSON only.")
def bench_records(segments: int, repeats: int, as_json: bool) -> None:
    """Record verification: chain only, with seals, and bare Ed25519 on the same seals."""
    result = measure(segments, repeats)
    if as_json:
        click.echo(json.dumps(result))
        return
    for k, v in result.items():
        click.echo(f"{k}: {v}")
