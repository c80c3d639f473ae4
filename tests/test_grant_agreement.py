"""Two ledgers folding one real stream of grant events and segments decide alike: the same
log, the same refusals by the same rules, the same grant events kept, even where a decision
depends on ledger time (the stream's timestamps, not either ledger's clock)."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fleet_ledger.fleet.address import digest, format_address
from fleet_ledger.fleet.fold.grant_events import event_id
from fleet_ledger.fleet.grants.grant import grant_address, nothing, sign_grant
from fleet_ledger.fleet.record.seal import encode_key
from fleet_ledger.plumbing.natsd import NatsServer

import grant_helpers as gh
from fault_helpers import host_key, seed_hosts, store_summary

HOUR = 3_600_000
HOSTS = [(n, encode_key(bytes(host_key(n).verify_key)), 0, None) for n in ("h1", "h2")]


@asynccontextmanager
async def _ledger(url: str, data: Path, **config: Any) -> AsyncIterator[Any]:
    """A ledger requiring grants, folding in a task of this loop; stopped on exit."""
    from fleet_ledger.ledger.service import Ledger, LedgerConfig

    seed_hosts(data, HOSTS)
    ledger = Ledger(LedgerConfig(data_dir=data, servers=[url], name=data.name,
                                 grants="require", **config))
    stop = asyncio.Event()
    task = asyncio.create_task(ledger.run(stop))
    try:
        yield ledger
    finally:
        stop.set()
        await task
        await ledger.close()


def _grant_rows(data: Path) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(f"file:{data / 'ledger.db'}?mode=ro", uri=True)
    try:
        return [tuple(r) for r in db.execute("SELECT * FROM grant_events ORDER BY stream_seq")]
    finally:
        db.close()


async def _scenario(url: str, base: Path) -> tuple[int, dict[str, int]]:
    """Publish the stream (ledger ``a`` folding as it arrives, ``b`` only once it is all
    there) and wait for both; the stream's length and the segments each run should keep."""
    from fleet_ledger.ledger.stream import ensure_stream
    from fleet_ledger.plumbing.nats_connect import connect

    nc = await connect([url], name="grant-agreement")
    js = nc.jetstream(timeout=10.0)
    await ensure_stream(js)
    last = 0

    async def send(subject: str, data: bytes) -> None:
        nonlocal last
        headers = {"Nats-Msg-Id": event_id(data)} if subject == gh.GRANT_SUBJECT else None
        last = (await js.publish(subject, data, headers=headers)).seq

    async def grant(t: Any) -> bytes:
        g = sign_grant(gh.ISSUER, bytes(gh.AGENT.verify_key), t)
        await send(gh.GRANT_SUBJECT, gh.issue_event(gh.ISSUER, g))
        return grant_address(g)

    try:
        async with _ledger(url, base / "a", batch=4) as a:
            now = int(time.time() * 1000)
            win = {"not_before_ms": now - HOUR, "expires_ms": now + HOUR}
            main = await grant(gh.terms(budget_uj=10_000, **win))
            later = await grant(gh.terms(budget_uj=10_002, not_before_ms=now + HOUR,
                                      expires_ms=now + 2 * HOUR))
            h1_only = await grant(gh.terms(budget_uj=10_003, hosts=["h1"],
                                        manifests=[digest(b"elsewhere")], **win))
            standing_terms = gh.terms(budget_uj=50_000, mint=gh.policy(), **win)
            standing = await grant(standing_terms)
            child = gh.child_grant(standing, gh.terms(budget_uj=1_000, hosts=["h1"], **win))
            await send(gh.GRANT_SUBJECT, gh.trigger_event(gh.TRIGGERS, "t1"))
            await send(gh.GRANT_SUBJECT, gh.mint_event(gh.AGENT, standing, "t1", child))
            await send(gh.GRANT_SUBJECT, gh.mint_event(gh.AGENT, standing, "t1", gh.child_grant(
                standing, gh.terms(budget_uj=999, **win))))  # ReplayedTrigger

            # A grant expiring between two segments of its run: the first now, the second
            # once the expiry has passed.
            soon = int(time.time() * 1000) + 2_000
            brief = await grant(gh.terms(budget_uj=10_001, not_before_ms=now - HOUR,
                                      expires_ms=soon))
            r_brief = gh.run_under(brief, unit="brief")
            await send(r_brief.subject, r_brief.execute(0))

            r_main = gh.run_under(main, unit="main")  # 3,000 + 3,000, then over the amendment
            for n in range(2):
                await send(r_main.subject, r_main.execute(n, uj=3_000))
                if n == 0:
                    head1 = r_main.builder.state.head
            await send(gh.GRANT_SUBJECT, gh.amend_event(gh.AGENT, main, 1, gh.NO_AMENDMENT,
                                                  gh.terms(budget_uj=7_000, **win)))  # NotIssuer
            await send(gh.GRANT_SUBJECT, gh.amend_event(gh.ISSUER, main, 1, gh.NO_AMENDMENT,
                                                  gh.terms(budget_uj=7_000, **win)))
            await send(r_main.subject, r_main.execute(2, uj=3_000))  # OverBudget
            r_park = gh.run_under(main, host="h2", unit="parks")  # parks under an allowed manifest
            for data in (r_park.execute(0), r_park.park(0), r_park.resume(), r_park.close()):
                await send(r_park.subject, data)
            r_later = gh.run_under(later, unit="later")
            await send(r_later.subject, r_later.execute(0))  # GrantNotYetValid
            r_host = gh.run_under(h1_only, host="h2", unit="host")
            await send(r_host.subject, r_host.execute(0))  # HostNotGranted
            r_manifest = gh.run_under(h1_only, unit="manifest")
            await send(r_manifest.subject, r_manifest.execute(0))
            await send(r_manifest.subject, r_manifest.park(0))  # ManifestNotGranted
            r_unknown = gh.run_under(digest(b"never issued"), unit="unknown")
            await send(r_unknown.subject, r_unknown.execute(0))  # UnknownGrant
            r_child = gh.run_under(grant_address(child), unit="child")
            await send(r_child.subject, r_child.execute(0, uj=10))
            await send(gh.GRANT_SUBJECT, gh.amend_event(gh.ISSUER, standing, 1, gh.NO_AMENDMENT,
                                                  nothing(standing_terms)))
            await send(r_child.subject, r_child.execute(1, uj=10))  # GrantRevoked (parent)

            wait_s = max(0.0, (soon + 50 - time.time() * 1000) / 1000)
            await asyncio.sleep(wait_s)
            await send(r_brief.subject, r_brief.execute(1))  # GrantExpired
            await send(gh.GRANT_SUBJECT, gh.checkpoint_event(gh.AGENT, r_main.run, 1, head1,
                                                       digest(b"state"), "halfway"))
            await send(gh.GRANT_SUBJECT, gh.checkpoint_event(gh.ISSUER, r_main.run, 1, head1,
                                                       digest(b"state"), "not mine"))
            async with _ledger(url, base / "b") as b:
                deadline = time.monotonic() + 20
                while min(a.store.watermark(), b.store.watermark()) < last:
                    assert time.monotonic() < deadline, "the ledgers did not fold the stream"
                    await asyncio.sleep(0.05)
    finally:
        await nc.drain()
    kept = [(r_brief, 1), (r_main, 2), (r_park, 4), (r_manifest, 1), (r_child, 1)]
    return last, {format_address(r.run): n for r, n in kept}


def test_two_ledgers_agree_on_every_grant_decision(nats_server: NatsServer,
                                                   tmp_path: Path) -> None:
    """Ledger a folding the stream as it is published in small batches, ledger b folding it
    whole afterwards: the same log root, the same refusals (stream position and rule, every
    segment rule of a grant among them, one only because ledger time passed the expiry),
    and the same grant events kept."""
    last, kept = asyncio.run(asyncio.wait_for(_scenario(nats_server.url, tmp_path), 60))
    a, b = store_summary(tmp_path / "a"), store_summary(tmp_path / "b")
    assert a.watermark == b.watermark == last
    assert (a.size, a.root, a.segments) == (b.size, b.root, b.segments)
    assert a.rejections == b.rejections
    rules = [rule for _, rule in a.rejections]
    assert sorted(rules) == sorted([
        "ReplayedTrigger", "NotIssuer", "OverBudget", "GrantNotYetValid", "HostNotGranted",
        "ManifestNotGranted", "UnknownGrant", "GrantRevoked", "GrantExpired",
        "NotGrantSubject"])
    events = _grant_rows(tmp_path / "a")
    assert events == _grant_rows(tmp_path / "b")
    assert [row[1] for row in events] == ["issue"] * 4 + ["trigger", "mint", "issue", "amend",
                                                           "amend", "checkpoint"]
    # What each refused run had folded before its refusal stands (the expiring grant's first
    # segment, the two segments before the amendment, ...), and nothing after it.
    held: dict[str, int] = {}
    for run, idx, *_ in a.segments:
        held[run] = max(held.get(run, 0), idx)
    assert held == kept
