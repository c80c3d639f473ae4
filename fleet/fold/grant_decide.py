"""The decisions on grant events: :func:`check_event` accepts one event against a
:class:`~fleet.grants.grant_book.GrantView` or raises the first rule it breaks;
:func:`decide_event` returns that refusal as a value (:class:`fleet.fold.Refused`), the
style of every decision of the fold (:mod:`fleet.fold.event_overlay`); :func:`apply` makes an
accepted event's change.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Protocol

from fleet_ledger.fleet.address import digest, format_address
from fleet_ledger.fleet.errors import FleetError
from fleet_ledger.fleet.fold import Refused
from fleet_ledger.fleet.grants.grant import (
    Grant,
    check_expiry,
    check_narrows,
    decode_grant,
    grant_address,
    verify_grant,
)
from fleet_ledger.fleet.grants.grant_book import GrantEntry, GrantView
from fleet_ledger.fleet.grants.grant_codec import (
    NO_AMENDMENT,
    Amend,
    Checkpoint,
    GrantEvent,
    Issue,
    Mint,
    Trigger,
    decode_event,
)
from fleet_ledger.fleet.grants.grant_errors import (
    AmendmentOutOfOrder,
    CheckpointMismatch,
    ChildMismatch,
    ChildNotMinted,
    DuplicateGrant,
    DuplicateTrigger,
    IssuerIsHost,
    IssuerIsSubject,
    MintLimitReached,
    MintRateExceeded,
    NotGrantSubject,
    NotHolder,
    NotIssuer,
    NotStanding,
    ReplayedAmendment,
    ReplayedChild,
    ReplayedTrigger,
    UnknownGrant,
    UnknownTrigger,
)
from fleet_ledger.fleet.grants.grant_gate import check_window

__all__ = ["GrantAccepted", "RunAt", "apply", "check_child_of", "check_event",
           "check_issuable", "decide_event", "event_ref"]


class RunAt(Protocol):
    """What a checkpoint is decided against: a run's grant, last index and the head at an
    index (``None``: no such run or index)."""

    def __call__(self, run: bytes, index: int) -> tuple[bytes, int, bytes | None] | None: ...


@dataclass(frozen=True, slots=True)
class GrantAccepted:
    """An accepted event at ``stream_seq`` (ledger time ``at_ms``): ``ref`` is the grant it
    concerns (the run, for a checkpoint); ``address`` the event's address."""

    event: GrantEvent
    data: bytes
    stream_seq: int
    at_ms: int
    ref: bytes
    grant: Grant | None = None  # the issued or minted grant, decoded once by the decision

    @property
    def address(self) -> bytes:
        return digest(self.data)


def event_ref(ev: GrantEvent) -> bytes:
    """What an event concerns: the grant it issues, mints (the child) or amends, the run a
    checkpoint is bound to, the key a trigger is raised under."""
    f = ev.fields
    if isinstance(f, Issue):
        return grant_address(f.grant)
    if isinstance(f, Mint):
        return grant_address(f.child)
    if isinstance(f, Amend):
        return f.grant
    if isinstance(f, Checkpoint):
        return f.run
    return ev.signer


def decide_event(view: GrantView, data: bytes, stream_seq: int, at_ms: int,
                 host_keys: Collection[bytes], run_at: RunAt,
                 signatures_ok: bool | None = None) -> GrantAccepted | Refused:
    """Decide one grant event (changes nothing): :func:`check_event`'s acceptance, or its
    first refusal as a value."""
    try:
        return check_event(view, data, stream_seq, at_ms, host_keys, run_at, signatures_ok)
    except FleetError as exc:
        return Refused(exc.rule, str(exc), None, None, None)


def check_event(view: GrantView, data: bytes, stream_seq: int, at_ms: int,
                host_keys: Collection[bytes], run_at: RunAt,
                signatures_ok: bool | None = None) -> GrantAccepted:
    """Accept one grant event or raise the first rule it breaks; nothing is changed.
    ``signatures_ok``: every triple of :func:`signature_items` already found valid (True;
    the signatures are not checked again), else they are checked here."""
    check = signatures_ok is not True
    ev = decode_event(data, check)
    f = ev.fields
    if isinstance(f, Issue):
        g = _grant(f.grant, check)
        if g.parent is not None:
            raise ChildNotMinted("a grant with a parent enters the book only by its mint")
        if ev.signer != g.issuer:
            raise NotIssuer("a grant is presented by its issuer")
        check_issuable(g, host_keys)
        address = grant_address(f.grant)
        if view.entry(address) is not None:
            raise DuplicateGrant(f"grant {format_address(address)} is already folded")
        return GrantAccepted(ev, data, stream_seq, at_ms, address, g)
    if isinstance(f, Trigger):
        if view.trigger(ev.signer, f.name) is not None:
            raise DuplicateTrigger(f"trigger {f.name!r} was already raised by this key")
        return GrantAccepted(ev, data, stream_seq, at_ms, ev.signer)
    if isinstance(f, Mint):
        return _decide_mint(view, ev, f, data, stream_seq, at_ms, host_keys, check)
    if isinstance(f, Amend):
        return _decide_amend(view, ev, f, data, stream_seq, at_ms, host_keys)
    return _decide_checkpoint(view, ev, f, data, stream_seq, at_ms, run_at)


def _grant(data: bytes, check: bool) -> Grant:
    g = decode_grant(data)
    if check:
        verify_grant(g)
    return g


def check_issuable(g: Grant, host_keys: Collection[bytes]) -> None:
    """What any grant must be to enter the book, beside its signature: issued by a key
    other than its subject's (``IssuerIsSubject``) and than any enrolled host's
    (``host_keys``: ``IssuerIsHost``), with an expiry after its not-before
    (``MissingExpiry``)."""
    if g.issuer == g.subject:
        raise IssuerIsSubject("the grant's issuer is its subject: an agent cannot grant itself")
    if g.issuer in host_keys:
        raise IssuerIsHost("the grant's issuer is an enrolled host's key")
    check_expiry(g.terms)


def check_child_of(child: Grant, standing: bytes, holder: bytes) -> None:
    """``ChildMismatch`` unless ``child`` names the grant at ``standing`` as its parent and
    is issued by ``holder``, that grant's subject, who mints it."""
    if child.parent != standing or child.issuer != holder:
        raise ChildMismatch("the child's parent must be the standing grant and its issuer "
                            "the holder who mints it")


def _known(view: GrantView, address: bytes) -> GrantEntry:
    entry = view.entry(address)
    if entry is None:
        raise UnknownGrant(f"no grant {format_address(address)} is folded")
    return entry


def _decide_mint(view: GrantView, ev: GrantEvent, f: Mint, data: bytes, stream_seq: int,
                 at_ms: int, host_keys: Collection[bytes], check: bool) -> GrantAccepted:
    standing = _known(view, f.standing)
    if ev.signer != standing.grant.subject:
        raise NotHolder("a mint is signed by the standing grant's holder (its subject)")
    terms = view.effective(standing.address)
    assert terms is not None
    policy = terms.mint
    if policy is None:
        raise NotStanding("the grant has no mint policy (or was amended to none)")
    check_window(terms, at_ms, None)
    child = _grant(f.child, check)
    check_child_of(child, standing.address, ev.signer)
    check_issuable(child, host_keys)
    address = grant_address(f.child)
    if view.entry(address) is not None:
        raise ReplayedChild(f"child {format_address(address)} is already minted")
    used = view.trigger(policy.trigger_key, f.trigger)
    if used is None:
        raise UnknownTrigger(f"no trigger {f.trigger!r} was raised under the policy's key")
    if used != NO_AMENDMENT:
        raise ReplayedTrigger(f"trigger {f.trigger!r} already minted "
                              f"{format_address(used)}")
    check_narrows(child.terms, terms)
    if len(standing.minted) >= policy.max_children:
        raise MintLimitReached(f"the grant has minted {len(standing.minted)} of "
                               f"{policy.max_children} children")
    recent = sum(1 for t in standing.minted if t > at_ms - policy.window_ms)
    if recent >= policy.max_per_window:
        raise MintRateExceeded(f"{recent} mints in the last {policy.window_ms} ms; "
                               f"the policy allows {policy.max_per_window}")
    return GrantAccepted(ev, data, stream_seq, at_ms, address, child)


def _decide_amend(view: GrantView, ev: GrantEvent, f: Amend, data: bytes, stream_seq: int,
                  at_ms: int, host_keys: Collection[bytes]) -> GrantAccepted:
    entry = _known(view, f.grant)
    if ev.signer != entry.grant.issuer:
        who = ("the grant's subject" if ev.signer == entry.grant.subject
               else "a host" if ev.signer in host_keys else "another key")
        raise NotIssuer(f"only the grant's issuer may amend it; signed by {who}")
    if ev.signer in host_keys:
        raise IssuerIsHost("the issuer's key has since been enrolled for a host")
    if f.seq <= entry.amended:
        raise ReplayedAmendment(f"amendment {f.seq} is not above the last, {entry.amended}")
    if f.seq != entry.amended + 1 or f.previous != entry.last:
        raise AmendmentOutOfOrder(f"amendment {f.seq} must follow amendment "
                                  f"{entry.amended} and name it as previous")
    check_narrows(f.terms, entry.terms)
    return GrantAccepted(ev, data, stream_seq, at_ms, entry.address)


def _decide_checkpoint(view: GrantView, ev: GrantEvent, f: Checkpoint, data: bytes,
                       stream_seq: int, at_ms: int, run_at: RunAt) -> GrantAccepted:
    held = run_at(f.run, f.index)
    if held is None:
        raise CheckpointMismatch("the checkpoint names a run the ledger does not hold")
    grants_id, last, head = held
    entry = _known(view, grants_id)
    if ev.signer != entry.grant.subject:
        raise NotGrantSubject("a checkpoint is signed by the subject of the run's grant")
    if not 1 <= f.index <= last or head != f.head:
        raise CheckpointMismatch(f"the checkpoint's head is not the run's head at index "
                                 f"{f.index}")
    return GrantAccepted(ev, data, stream_seq, at_ms, f.run)


def apply(book: Any, d: GrantAccepted) -> None:
    """Make an accepted event's change to ``book`` (a :class:`GrantBook` or a batch's copy:
    anything with ``entry``, ``put`` and ``put_trigger``); a checkpoint changes nothing."""
    ev = d.event
    f = ev.fields
    if isinstance(f, Issue):
        g = d.grant if d.grant is not None else decode_grant(f.grant)
        book.put(GrantEntry(g, d.ref, f.grant, g.terms, d.stream_seq))
    elif isinstance(f, Trigger):
        book.put_trigger(ev.signer, f.name, NO_AMENDMENT)
    elif isinstance(f, Mint):
        g = d.grant if d.grant is not None else decode_grant(f.child)
        standing = book.entry(f.standing).copy()
        standing.minted.append(d.at_ms)
        book.put(standing)
        book.put(GrantEntry(g, d.ref, f.child, g.terms, d.stream_seq))
        # The effective policy keeps the grant's own trigger key (fleet.grants.grant.meet).
        book.put_trigger(book.effective(f.standing).mint.trigger_key, f.trigger, d.ref)
    elif isinstance(f, Amend):
        entry = book.entry(f.grant).copy()
        entry.terms = f.terms
        entry.amended = f.seq
        entry.last = d.address
        book.put(entry)


