"""A world for grant tests: an issuer, an agent, a trigger key, two enrolled hosts, and a
real ledger (its SQLite store, its own batch fold) fed messages at chosen ledger times."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nacl.signing import SigningKey

from fleet_ledger.fleet.address import digest
from fleet_ledger.fleet.fold.grant_events import (
    NO_AMENDMENT,
    amend_event,
    checkpoint_event,
    issue_event,
    mint_event,
    trigger_event,
)
from fleet_ledger.fleet.grants.grant import MintPolicy, Terms, grant_address, make_terms, sign_grant
from fleet_ledger.fleet.record.builder import RecordBuilder
from fleet_ledger.fleet.record.seal import encode_key
from fleet_ledger.fleet.subjects import DEFAULT_FLEET
from fleet_ledger.ledger.service import Ledger, LedgerConfig

from fault_helpers import MANIFEST, SealedRun, host_key, seed_hosts, store_summary

GRANT_SUBJECT = DEFAULT_FLEET.grant_subject
T0 = 1_800_000_000_000  # ledger time (ms) the tests start at


def key(name: str) -> SigningKey:
    return SigningKey(digest(b"grant-test/" + name.encode()))


ISSUER, AGENT, TRIGGERS, CHILD_AGENT = key("issuer"), key("agent"), key("triggers"), key("sub")


def terms(**kw: Any) -> Terms:
    args: dict[str, Any] = dict(scopes=["/fs/work"], budget_uj=10_000, not_before_ms=T0,
                                expires_ms=T0 + 3_600_000, hosts=["h1", "h2"],
                                manifests=[MANIFEST], mint=None)
    args.update(kw)
    return make_terms(**args)


def policy(max_children: int = 3, max_per_window: int = 2, window_ms: int = 60_000
           ) -> MintPolicy:
    return MintPolicy(max_children, max_per_window, window_ms, bytes(TRIGGERS.verify_key))


@dataclass
class World:
    data: Path
    grants: str = "enforce"
    fast_path: bool = True
    seq: int = 0
    ledger: Ledger = field(init=False)

    def __post_init__(self) -> None:
        if not (self.data / "ledger.db").exists():
            seed_hosts(self.data, [(n, encode_key(bytes(host_key(n).verify_key)), 0, None)
                                   for n in ("h1", "h2", "h3")])
        self.open()

    def open(self) -> None:
        self.ledger = Ledger(LedgerConfig(data_dir=self.data, servers=[], grants=self.grants,
                                          fast_path=self.fast_path))
        self.seq = self.ledger.store.watermark()

    def close(self) -> None:
        self.ledger.store.close()

    def feed(self, subject: str, data: bytes, at_ms: int = T0 + 1000) -> Any:
        """Fold one message at ledger time ``at_ms``; its decision."""
        self.seq += 1
        batch, _ = self.ledger.fold_messages([(self.seq, subject, data)], [at_ms])
        assert len(batch) == 1
        return batch[0].decision

    def rule(self, subject: str, data: bytes, at_ms: int = T0 + 1000) -> str:
        d = self.feed(subject, data, at_ms)
        return getattr(d, "rule", "accepted")

    def event(self, data: bytes, at_ms: int = T0 + 1000) -> str:
        return self.rule(GRANT_SUBJECT, data, at_ms)

    def issue(self, t: Terms | None = None, issuer: SigningKey = ISSUER,
              subject: SigningKey = AGENT, at_ms: int = T0 + 1000) -> bytes:
        """Issue a grant (accepted) and return its address."""
        g = sign_grant(issuer, bytes(subject.verify_key), t or terms())
        assert self.event(issue_event(issuer, g), at_ms) == "accepted"
        return grant_address(g)

    def state(self) -> Any:
        """Everything the ledger decided so far, comparable: its store and its grant book."""
        book = self.ledger.grants
        return (store_summary(self.data),
                sorted((a, e.terms, e.amended, e.last, tuple(e.minted))
                       for a, e in book.entries.items()),
                sorted(book.triggers.items()))


def run_under(grants_id: bytes, host: str = "h1", unit: str = "u") -> SealedRun:
    return SealedRun(host, RecordBuilder(host_key(host), digest(unit.encode()), grants_id))


def child_grant(standing: bytes, t: Terms, holder: SigningKey = AGENT,
                subject: SigningKey = CHILD_AGENT) -> bytes:
    return sign_grant(holder, bytes(subject.verify_key), t, parent=standing)


__all__ = ["AGENT", "CHILD_AGENT", "GRANT_SUBJECT", "ISSUER", "NO_AMENDMENT", "T0", "TRIGGERS",
           "World", "amend_event", "checkpoint_event", "child_grant", "issue_event", "key",
           "mint_event", "policy", "run_under", "terms", "trigger_event"]
