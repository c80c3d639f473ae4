"""Grant events in the stream (issue, trigger, mint, amend, checkpoint), the book of grants
they build, and the rule a run's segments meet under its grant.

Every event has one envelope (``docs/spec/grants.md``)::

    event = "fleet.gev/1" || kind:u8 || signer[32] || body || signature[64]

    ISSUE      0x01  body = len:u32 || grant                      signer: the issuer
    TRIGGER    0x02  body = text(name)                            signer: the trigger key
    MINT       0x03  body = standing[32] || text(trigger) || len:u32 || child grant
                                                                   signer: the holder
    AMEND      0x04  body = grant[32] || seq:u64 || previous[32] || terms
                                                                   signer: the issuer
    CHECKPOINT 0x05  body = run[32] || index:u64 || head[32] || state[32] || text(note)
                                                                   signer: the grant's subject

signed by ``signer`` (Ed25519) over everything before the signature. An amendment's
address (``previous`` of the next) is BLAKE3 of its event bytes.

:func:`decide_event` decides one event against a :class:`GrantView` at a stream position
and ledger time (the stream's timestamp) and returns a :class:`GrantAccepted` or raises
the named refusal, changing nothing; :func:`apply` makes an accepted event's change. The
book is thus a pure function of the stream, and replicas folding it agree.
:func:`check_segment` is the rule every segment of a run under a grant meets.
"""

from __future__ import annotations

import struct
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

from fleet import kernel
from fleet.address import digest, format_address, message_id
from fleet.grant import (
    GRANT_DOMAIN,
    Grant,
    Reader,
    Terms,
    check_expiry,
    check_narrows,
    decode_grant,
    decode_terms,
    grant_address,
    is_void,
    meet,
    terms_bytes,
    terms_json,
    verify_grant,
)
from fleet.grant_errors import (
    AmendmentOutOfOrder,
    BadGrantSignature,
    CheckpointMismatch,
    ChildMismatch,
    ChildNotMinted,
    DuplicateGrant,
    DuplicateTrigger,
    GrantExpired,
    GrantNotYetValid,
    GrantRevoked,
    HostNotGranted,
    IssuerIsHost,
    IssuerIsSubject,
    MalformedGrant,
    ManifestNotGranted,
    MintLimitReached,
    MintRateExceeded,
    NotGrantSubject,
    NotHolder,
    NotIssuer,
    NotStanding,
    OverBudget,
    ReplayedAmendment,
    ReplayedChild,
    ReplayedTrigger,
    UnknownGrant,
    UnknownTrigger,
)

__all__ = [
    "AMEND",
    "CHECKPOINT",
    "EVENT_DOMAIN",
    "ISSUE",
    "KINDS",
    "MINT",
    "NO_AMENDMENT",
    "TRIGGER",
    "GrantAccepted",
    "GrantBook",
    "GrantEntry",
    "GrantEvent",
    "GrantView",
    "RunAt",
    "amend_event",
    "apply",
    "chain_of",
    "check_child_of",
    "check_issuable",
    "check_segment",
    "check_step",
    "check_window",
    "checkpoint_event",
    "decide_event",
    "decode_event",
    "effective_terms",
    "event_id",
    "event_json",
    "event_ref",
    "issue_event",
    "mint_event",
    "signature_items",
    "trigger_event",
]

EVENT_DOMAIN: Final = b"fleet.gev/1"
ISSUE, TRIGGER, MINT, AMEND, CHECKPOINT = 1, 2, 3, 4, 5
KINDS: Final = {ISSUE: "issue", TRIGGER: "trigger", MINT: "mint", AMEND: "amend",
                CHECKPOINT: "checkpoint"}
NO_AMENDMENT: Final = bytes(32)
MAX_NAME: Final = 128
_SIGNATURE = 64
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")


@dataclass(frozen=True, slots=True)
class GrantEvent:
    """A decoded event: ``fields`` holds the body's values by name (see the module text)."""

    kind: int
    signer: bytes
    fields: dict[str, Any]
    signed: bytes
    signature: bytes

    @property
    def kind_name(self) -> str:
        return KINDS[self.kind]


# -- encoding -----------------------------------------------------------------------------------


def _text(value: str, what: str) -> bytes:
    if not isinstance(value, str) or not value or not value.isprintable():
        raise MalformedGrant(f"{what} must be non-empty printable text")
    raw = value.encode()
    if len(raw) > MAX_NAME:
        raise MalformedGrant(f"{what} is at most {MAX_NAME} bytes")
    return _U16.pack(len(raw)) + raw


def _sign(key: SigningKey, kind: int, body: bytes) -> bytes:
    signed = EVENT_DOMAIN + bytes((kind,)) + bytes(key.verify_key) + body
    return signed + key.sign(signed).signature


def issue_event(issuer: SigningKey, grant: bytes) -> bytes:
    return _sign(issuer, ISSUE, _U32.pack(len(grant)) + grant)


def trigger_event(key: SigningKey, name: str) -> bytes:
    return _sign(key, TRIGGER, _text(name, "a trigger name"))


def mint_event(holder: SigningKey, standing: bytes, trigger: str, child: bytes) -> bytes:
    return _sign(holder, MINT, standing + _text(trigger, "a trigger name")
                 + _U32.pack(len(child)) + child)


def amend_event(issuer: SigningKey, grant: bytes, seq: int, previous: bytes, terms: Terms
                ) -> bytes:
    return _sign(issuer, AMEND, grant + _U64.pack(seq) + previous + terms_bytes(terms))


def checkpoint_event(subject: SigningKey, run: bytes, index: int, head: bytes, state: bytes,
                     note: str) -> bytes:
    return _sign(subject, CHECKPOINT, run + _U64.pack(index) + head + state
                 + _text(note, "a checkpoint note"))


def event_id(data: bytes) -> str:
    """The event's ``Nats-Msg-Id``: ``gev-`` and hex of 16 bytes of BLAKE3 of it."""
    return message_id("gev", data)


def decode_event(data: bytes, verify: bool = True) -> GrantEvent:
    """The event in ``data`` with its signature checked (``verify=False``: by the caller,
    :func:`signature_items`), or the named refusal."""
    if type(data) is not bytes or not data.startswith(EVENT_DOMAIN):
        raise MalformedGrant("not a fleet.gev/1 grant event")
    if len(data) < len(EVENT_DOMAIN) + 33 + _SIGNATURE:
        raise MalformedGrant("a grant event is too short")
    signed, signature = data[:-_SIGNATURE], data[-_SIGNATURE:]
    r = Reader(signed, len(EVENT_DOMAIN))
    kind = r.u8()
    signer = r.take(32)
    if kind not in KINDS:
        raise MalformedGrant(f"unknown grant event kind {kind}")
    fields: dict[str, Any]
    if kind == ISSUE:
        fields = {"grant": r.take(int(_U32.unpack(r.take(4))[0]))}
    elif kind == TRIGGER:
        fields = {"name": _name(r, "a trigger name")}
    elif kind == MINT:
        fields = {"standing": r.take(32), "trigger": _name(r, "a trigger name")}
        fields["child"] = r.take(int(_U32.unpack(r.take(4))[0]))
    elif kind == AMEND:
        fields = {"grant": r.take(32), "seq": r.u64(), "previous": r.take(32),
                  "terms": decode_terms(r)}
    else:
        fields = {"run": r.take(32), "index": r.u64(), "head": r.take(32),
                  "state": r.take(32), "note": _name(r, "a checkpoint note")}
    r.end()
    if verify:
        try:
            VerifyKey(signer).verify(signed, signature)
        except (BadSignatureError, ValueError, TypeError):
            raise BadGrantSignature("the event's signature does not verify under its signer"
                                    ) from None
    return GrantEvent(kind, signer, fields, signed, signature)


def signature_items(data: bytes) -> list[tuple[bytes, bytes, bytes]] | None:
    """The (public key, signed bytes, signature) triples :func:`decide_event` checks for
    ``data``: the event's, and an issued or minted grant's. A ledger may check them beside
    the fold (as it checks seals) and pass the verdict as ``signatures_ok``.

    Read at the layout's fixed offsets without decoding the rest (the decision decodes it
    all, and where it decodes, these are exactly the triples it would verify); ``None``:
    the bytes are too short for the layout, and the decision names why."""
    head = len(EVENT_DOMAIN)
    if len(data) < head + 33 + _SIGNATURE or not data.startswith(EVENT_DOMAIN):
        return None
    items = [(data[head + 1:head + 33], data[:-_SIGNATURE], data[-_SIGNATURE:])]
    kind = data[head]
    if kind not in (ISSUE, MINT):
        return items
    at = head + 33
    if kind == MINT:
        at += 32
        if len(data) < at + 2:
            return None
        at += 2 + int(_U16.unpack_from(data, at)[0])
    if len(data) < at + 4:
        return None
    size = int(_U32.unpack_from(data, at)[0])
    grant = data[at + 4:at + 4 + size]
    start = len(GRANT_DOMAIN)
    if len(grant) != size or size < start + 32 + _SIGNATURE:
        return None
    items.append((grant[start:start + 32], grant[:-_SIGNATURE], grant[-_SIGNATURE:]))
    return items


def _name(r: Reader, what: str) -> str:
    value = r.text(what)
    _text(value, what)
    return value


# -- the book -----------------------------------------------------------------------------------


@dataclass(slots=True)
class GrantEntry:
    """A folded grant: its bytes, its own terms after its amendments (``amended``: the last
    amendment's sequence number, ``last``: its address) and the ledger times of the
    children minted from it."""

    grant: Grant
    address: bytes
    data: bytes
    terms: Terms
    stream_seq: int
    amended: int = 0
    last: bytes = NO_AMENDMENT
    minted: list[int] = field(default_factory=list)

    def copy(self) -> GrantEntry:
        return GrantEntry(self.grant, self.address, self.data, self.terms, self.stream_seq,
                          self.amended, self.last, list(self.minted))


class GrantView(Protocol):
    """What events and segments are decided against."""

    def entry(self, address: bytes) -> GrantEntry | None: ...

    def trigger(self, key: bytes, name: str) -> bytes | None:
        """``None``: never raised; ``NO_AMENDMENT`` (zeros): raised, unused; else the
        child minted on it."""
        ...

    def effective(self, address: bytes) -> Terms | None: ...


class GrantBook:
    """The grants, triggers and mints folded so far: a ledger's committed book, or
    (``base``) a batch's overlay on it, holding copies of the entries the batch changed
    until :meth:`install` makes them the base's once the batch is durable."""

    __slots__ = ("_effective", "base", "entries", "triggers")

    def __init__(self, base: GrantBook | None = None) -> None:
        self.base = base
        self.entries: dict[bytes, GrantEntry] = {}
        self.triggers: dict[tuple[bytes, str], bytes] = {}
        self._effective: dict[bytes, Terms] = {}

    def entry(self, address: bytes) -> GrantEntry | None:
        held = self.entries.get(address)
        return held if held is not None or self.base is None else self.base.entry(address)

    def trigger(self, key: bytes, name: str) -> bytes | None:
        held = self.triggers.get((key, name))
        return (held if held is not None or self.base is None
                else self.base.trigger(key, name))

    def effective(self, address: bytes) -> Terms | None:
        """The terms a run under ``address`` is held to: its own (amended) terms met with
        its parent's effective terms, up the chain (cached until the book changes; an
        overlay that changed nothing asks its base, whose cache outlives the batch)."""
        if self.base is not None and not self.entries:
            return self.base.effective(address)
        held = self._effective.get(address)
        if held is None:
            held = effective_terms(self, address)
            if held is not None:
                self._effective[address] = held
        return held

    def put(self, entry: GrantEntry) -> None:
        self.entries[entry.address] = entry
        self._effective.clear()

    def put_trigger(self, key: bytes, name: str, child: bytes) -> None:
        self.triggers[(key, name)] = child

    def install(self) -> None:
        """Make an overlay's changes its base's."""
        assert self.base is not None
        for entry in self.entries.values():
            self.base.put(entry)
        self.base.triggers.update(self.triggers)


def chain_of(view: GrantView, address: bytes) -> list[bytes]:
    """``address`` and each parent above it, as far as the book holds them."""
    out: list[bytes] = []
    entry = view.entry(address)
    while entry is not None:
        out.append(entry.address)
        parent = entry.grant.parent
        entry = None if parent is None else view.entry(parent)
    return out


def effective_terms(view: GrantView, address: bytes) -> Terms | None:
    entry = view.entry(address)
    if entry is None:
        return None
    terms = entry.terms
    parent = entry.grant.parent
    if parent is not None:
        above = view.effective(parent)
        terms = meet(terms, above) if above is not None else terms
    return terms


# -- decisions ------------------------------------------------------------------------------


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
    if ev.kind in (ISSUE, MINT):
        return grant_address(f["grant" if ev.kind == ISSUE else "child"])
    if ev.kind == AMEND:
        return f["grant"]  # type: ignore[no-any-return]
    if ev.kind == CHECKPOINT:
        return f["run"]  # type: ignore[no-any-return]
    return ev.signer


def decide_event(view: GrantView, data: bytes, stream_seq: int, at_ms: int,
                 host_keys: Collection[bytes], run_at: RunAt,
                 signatures_ok: bool | None = None) -> GrantAccepted:
    """Decide one grant event; the first rule it breaks is raised, nothing is changed.
    ``signatures_ok``: every triple of :func:`signature_items` already found valid (True;
    the signatures are not checked again), else they are checked here."""
    check = signatures_ok is not True
    ev = decode_event(data, check)
    f = ev.fields
    if ev.kind == ISSUE:
        g = _grant(f["grant"], check)
        if g.parent is not None:
            raise ChildNotMinted("a grant with a parent enters the book only by its mint")
        if ev.signer != g.issuer:
            raise NotIssuer("a grant is presented by its issuer")
        check_issuable(g, host_keys)
        address = grant_address(f["grant"])
        if view.entry(address) is not None:
            raise DuplicateGrant(f"grant {format_address(address)} is already folded")
        return GrantAccepted(ev, data, stream_seq, at_ms, address, g)
    if ev.kind == TRIGGER:
        if view.trigger(ev.signer, f["name"]) is not None:
            raise DuplicateTrigger(f"trigger {f['name']!r} was already raised by this key")
        return GrantAccepted(ev, data, stream_seq, at_ms, ev.signer)
    if ev.kind == MINT:
        return _decide_mint(view, ev, data, stream_seq, at_ms, host_keys, check)
    if ev.kind == AMEND:
        return _decide_amend(view, ev, data, stream_seq, at_ms, host_keys)
    return _decide_checkpoint(view, ev, data, stream_seq, at_ms, run_at)


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


def _decide_mint(view: GrantView, ev: GrantEvent, data: bytes, stream_seq: int, at_ms: int,
                 host_keys: Collection[bytes], check: bool) -> GrantAccepted:
    f = ev.fields
    standing = _known(view, f["standing"])
    if ev.signer != standing.grant.subject:
        raise NotHolder("a mint is signed by the standing grant's holder (its subject)")
    terms = view.effective(standing.address)
    assert terms is not None
    policy = terms.mint
    if policy is None:
        raise NotStanding("the grant has no mint policy (or was amended to none)")
    check_window(terms, at_ms, None)
    child = _grant(f["child"], check)
    check_child_of(child, standing.address, ev.signer)
    check_issuable(child, host_keys)
    address = grant_address(f["child"])
    if view.entry(address) is not None:
        raise ReplayedChild(f"child {format_address(address)} is already minted")
    used = view.trigger(policy.trigger_key, f["trigger"])
    if used is None:
        raise UnknownTrigger(f"no trigger {f['trigger']!r} was raised under the policy's key")
    if used != NO_AMENDMENT:
        raise ReplayedTrigger(f"trigger {f['trigger']!r} already minted "
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


def _decide_amend(view: GrantView, ev: GrantEvent, data: bytes, stream_seq: int, at_ms: int,
                  host_keys: Collection[bytes]) -> GrantAccepted:
    f = ev.fields
    entry = _known(view, f["grant"])
    if ev.signer != entry.grant.issuer:
        who = ("the grant's subject" if ev.signer == entry.grant.subject
               else "a host" if ev.signer in host_keys else "another key")
        raise NotIssuer(f"only the grant's issuer may amend it; signed by {who}")
    if ev.signer in host_keys:
        raise IssuerIsHost("the issuer's key has since been enrolled for a host")
    if f["seq"] <= entry.amended:
        raise ReplayedAmendment(f"amendment {f['seq']} is not above the last, {entry.amended}")
    if f["seq"] != entry.amended + 1 or f["previous"] != entry.last:
        raise AmendmentOutOfOrder(f"amendment {f['seq']} must follow amendment "
                                  f"{entry.amended} and name it as previous")
    check_narrows(f["terms"], entry.terms)
    return GrantAccepted(ev, data, stream_seq, at_ms, entry.address)


def _decide_checkpoint(view: GrantView, ev: GrantEvent, data: bytes, stream_seq: int,
                       at_ms: int, run_at: RunAt) -> GrantAccepted:
    f = ev.fields
    held = run_at(f["run"], f["index"])
    if held is None:
        raise CheckpointMismatch("the checkpoint names a run the ledger does not hold")
    grants_id, last, head = held
    entry = _known(view, grants_id)
    if ev.signer != entry.grant.subject:
        raise NotGrantSubject("a checkpoint is signed by the subject of the run's grant")
    if not 1 <= f["index"] <= last or head != f["head"]:
        raise CheckpointMismatch(f"the checkpoint's head is not the run's head at index "
                                 f"{f['index']}")
    return GrantAccepted(ev, data, stream_seq, at_ms, f["run"])


def apply(book: Any, d: GrantAccepted) -> None:
    """Make an accepted event's change to ``book`` (a :class:`GrantBook` or a batch's copy:
    anything with ``entry``, ``put`` and ``put_trigger``); a checkpoint changes nothing."""
    ev = d.event
    f = ev.fields
    if ev.kind == ISSUE:
        g = d.grant if d.grant is not None else decode_grant(f["grant"])
        book.put(GrantEntry(g, d.ref, f["grant"], g.terms, d.stream_seq))
    elif ev.kind == TRIGGER:
        book.put_trigger(ev.signer, f["name"], NO_AMENDMENT)
    elif ev.kind == MINT:
        g = d.grant if d.grant is not None else decode_grant(f["child"])
        standing = book.entry(f["standing"]).copy()
        standing.minted.append(d.at_ms)
        book.put(standing)
        book.put(GrantEntry(g, d.ref, f["child"], g.terms, d.stream_seq))
        # The effective policy keeps the grant's own trigger key (fleet.grant.meet).
        book.put_trigger(book.effective(f["standing"]).mint.trigger_key, f["trigger"], d.ref)
    elif ev.kind == AMEND:
        entry = book.entry(f["grant"]).copy()
        entry.terms = f["terms"]
        entry.amended = f["seq"]
        entry.last = d.address
        book.put(entry)


# -- segments -----------------------------------------------------------------------------------


def check_window(terms: Terms, at_ms: int, index: int | None) -> None:
    if is_void(terms):
        raise GrantRevoked("the run's grant (or one above it) was revoked", segment=index)
    if at_ms < terms.not_before_ms:
        raise GrantNotYetValid(f"ledger time {at_ms} is before the grant's not-before "
                               f"{terms.not_before_ms}", segment=index)
    if at_ms >= terms.expires_ms:
        raise GrantExpired(f"ledger time {at_ms} is at or after the grant's expiry "
                           f"{terms.expires_ms}", segment=index)


def check_segment(terms: Terms, host: str, manifest: bytes | None, energy_after: int,
                  at_ms: int, index: int) -> None:
    """The rule a segment of a run meets under the run's effective grant ``terms``, in this
    order: not revoked, inside the window at ledger time ``at_ms``, sealed by a host the
    grant allows, under a manifest it allows (``manifest``: the one the segment parks,
    resumes or claims under), and the run's energy after it within the budget."""
    check_window(terms, at_ms, index)
    if terms.hosts is not None and host not in terms.hosts:
        raise HostNotGranted(f"host {host!r} may not hold a run under this grant",
                             segment=index)
    if manifest is not None and terms.manifests is not None and manifest not in terms.manifests:
        raise ManifestNotGranted(f"manifest {format_address(manifest)} is not allowed by "
                                 "the grant", segment=index)
    if energy_after > terms.budget_uj:
        raise OverBudget(f"the run would reach {energy_after} µJ; the grant allows "
                         f"{terms.budget_uj}", segment=index)


def check_step(view: GrantView, grants_id: bytes, host: str, held_park: bytes | None,
               kind: str, step: kernel.Step, energy_before: int, at_ms: int, index: int,
               require: bool) -> None:
    """The grant rule for one kernel ``step`` of a run under ``grants_id`` (``held_park``:
    the run's park before it; ``energy_before``: its energy so far): a run under no grant
    (:data:`fleet.kernel.NO_GRANTS`, a pool's own run) and a close pass (a close spends
    nothing and runs nothing, and ending a run is what revoking its grant asks for); a
    grant not in the book is ``UnknownGrant`` where grants are required (``require``) and
    passes otherwise; else :func:`check_segment` under its effective terms."""
    if kind == kernel.CLOSED or grants_id == kernel.NO_GRANTS:
        return
    terms = view.effective(grants_id)
    if terms is None:
        if require:
            raise UnknownGrant("the run's grant was not presented before its segments",
                               segment=index)
        return
    check_segment(terms, host, kernel.step_manifest(held_park, kind, step),
                  energy_before + kernel.step_uj(step), at_ms, index)


# -- showing ------------------------------------------------------------------------------------


def event_json(data: bytes) -> dict[str, Any]:
    """An event as JSON (decoded and its signature checked)."""
    ev = decode_event(data)
    out: dict[str, Any] = {"kind": ev.kind_name, "signer": ev.signer.hex(),
                           "address": format_address(digest(data))}
    for name, value in ev.fields.items():
        if isinstance(value, Terms):
            out[name] = terms_json(value)
        elif name in ("grant", "child") and len(value) != 32:
            out[name] = format_address(grant_address(value))
        elif isinstance(value, bytes):
            out[name] = format_address(value)
        else:
            out[name] = value
    return out
