"""A grant: what a run may do, signed by its issuer, addressed by its bytes; and the one
partial order ("only tighten") that minting and amending both use.

A grant's canonical bytes (``docs/spec/grants.md`` is the normative text)::

    grant  = "fleet.grant/1" || issuer[32] || subject[32] || parent || terms || signature[64]
    parent = 0x00 | 0x01 || parent_address[32]
    terms  = budget_uj:u64 || not_before_ms:u64 || expires_ms:u64
             || count:u16 || text(scope)*             strictly ascending
             || set(hosts, text)                        strictly ascending, or any
             || set(manifests, [32])                    strictly ascending, or any
             || 0x00 | 0x01 || max_children:u32 || max_per_window:u32 || window_ms:u64
                            || trigger_key[32]          the mint policy
    set    = 0x00 (any) | 0x01 || count:u16 || item*
    text   = len:u16 || utf8

The signature is Ed25519 by ``issuer`` over everything before it; the grant's address
(a run's ``grants_id``) is BLAKE3 of all of it, signature included. A decoder refuses bytes
that are not canonical (``NonCanonicalGrant``) before anything else looks at them.

:func:`check_narrows` is the order: ``child <= parent`` when every scope of the child is
under one of the parent's at a ``/`` boundary, its budget is no larger, its window lies
inside the parent's, its hosts and manifests are subsets (``any`` covers every set), and
its mint policy is no looser. :func:`meet` is the intersection the ledger holds a run to
(along the grant's chain and every amendment).
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

from fleet_ledger.fleet.address import digest, format_address, parse_address
from fleet_ledger.fleet.errors import FleetError
from fleet_ledger.fleet.grants.grant_errors import (
    BadGrantSignature,
    GrantWidens,
    MalformedGrant,
    MissingExpiry,
    NonCanonicalGrant,
)
from fleet_ledger.fleet.subjects import HOST_NAME
from fleet_ledger.fleet.text import encode_text

__all__ = [
    "GRANT_DOMAIN",
    "MAX_ITEMS",
    "Grant",
    "MintPolicy",
    "Reader",
    "Terms",
    "check_expiry",
    "check_narrows",
    "covers",
    "decode_grant",
    "decode_terms",
    "encode_grant",
    "grant_address",
    "grant_json",
    "is_void",
    "make_terms",
    "meet",
    "nothing",
    "sign_grant",
    "signed_grant_bytes",
    "terms_bytes",
    "terms_from_json",
    "terms_json",
    "verify_grant",
]

GRANT_DOMAIN: Final = b"fleet.grant/1"
MAX_ITEMS: Final = 256
MAX_SCOPE: Final = 128
_SIGNATURE: Final = 64
_U16 = struct.Struct(">H")
_TIMES = struct.Struct(">QQQ")
_POLICY = struct.Struct(">IIQ32s")
_MAX_U64 = 2**64 - 1
_MAX_U32 = 2**32 - 1


@dataclass(frozen=True, slots=True)
class MintPolicy:
    """A standing grant's mint policy: at most ``max_children`` children ever, at most
    ``max_per_window`` in any ``window_ms`` of ledger time, each on a trigger raised under
    ``trigger_key``."""

    max_children: int
    max_per_window: int
    window_ms: int
    trigger_key: bytes


@dataclass(frozen=True, slots=True)
class Terms:
    """What a grant allows. ``hosts``/``manifests``: ``None`` is any; a tuple (sorted,
    unique) the ones allowed. The validity window is ``[not_before_ms, expires_ms)``."""

    scopes: tuple[str, ...]
    budget_uj: int
    not_before_ms: int
    expires_ms: int
    hosts: tuple[str, ...] | None = None
    manifests: tuple[bytes, ...] | None = None
    mint: MintPolicy | None = None


@dataclass(frozen=True, slots=True)
class Grant:
    issuer: bytes
    subject: bytes
    parent: bytes | None
    terms: Terms
    signature: bytes = b""


# -- checks -----------------------------------------------------------------------------------


def _check_scope(scope: object) -> str:
    if not isinstance(scope, str) or not scope.startswith("/") or not scope.isprintable():
        raise MalformedGrant(f"a scope is an absolute path, got {scope!r}")
    if len(scope.encode()) > MAX_SCOPE:
        raise MalformedGrant(f"a scope is at most {MAX_SCOPE} bytes")
    if scope != "/" and any(part in ("", ".", "..") for part in scope[1:].split("/")):
        raise NonCanonicalGrant(f"scope {scope!r} is not in normal form ('/', or '/a/b' "
                                "with no empty, '.' or '..' part and no trailing '/')")
    return scope


def _check_host(host: object) -> str:
    if not isinstance(host, str) or not HOST_NAME.match(host):
        raise MalformedGrant(f"not a host name: {host!r}")
    return host


def _check_u(value: object, top: int, what: str) -> int:
    if type(value) is not int or not 0 <= value <= top:
        raise MalformedGrant(f"{what} must be an integer in 0..{top}, got {value!r}")
    return value


def _check_key(value: object, what: str) -> bytes:
    if type(value) is not bytes or len(value) != 32:
        raise MalformedGrant(f"{what} must be 32 bytes")
    return value


def _sorted_unique(items: tuple[Any, ...], what: str) -> None:
    if len(items) > MAX_ITEMS:
        raise MalformedGrant(f"at most {MAX_ITEMS} {what}")
    keys = [i.encode() if isinstance(i, str) else i for i in items]
    if any(a >= b for a, b in itertools.pairwise(keys)):
        raise NonCanonicalGrant(f"{what} must be strictly ascending (sorted, no repeats)")


def _check_terms(t: Terms) -> None:
    for scope in t.scopes:
        _check_scope(scope)
    _sorted_unique(t.scopes, "scopes")
    _check_u(t.budget_uj, _MAX_U64, "budget_uj")
    _check_u(t.not_before_ms, _MAX_U64, "not_before_ms")
    _check_u(t.expires_ms, _MAX_U64, "expires_ms")
    if t.hosts is not None:
        for host in t.hosts:
            _check_host(host)
        _sorted_unique(t.hosts, "hosts")
    if t.manifests is not None:
        for manifest in t.manifests:
            _check_key(manifest, "a manifest")
        _sorted_unique(t.manifests, "manifests")
    if t.mint is not None:
        m = t.mint
        _check_u(m.max_children, _MAX_U32, "max_children")
        _check_u(m.max_per_window, _MAX_U32, "max_per_window")
        _check_u(m.window_ms, _MAX_U64, "window_ms")
        if m.window_ms == 0:
            raise MalformedGrant("a mint policy's window is at least 1 ms")
        _check_key(m.trigger_key, "trigger_key")


# -- canonical bytes ------------------------------------------------------------------------


def _text(value: str, what: str) -> bytes:
    # Checked twice (here and by _check_terms, which names the scope's or host's own rule):
    # the one text codec never writes a text its decoders would refuse.
    return encode_text(value, what, MalformedGrant, MAX_SCOPE)


def terms_bytes(t: Terms) -> bytes:
    """The canonical bytes of ``t`` (checked first: ``MalformedGrant``/``NonCanonicalGrant``)."""
    _check_terms(t)
    out = [_TIMES.pack(t.budget_uj, t.not_before_ms, t.expires_ms), _U16.pack(len(t.scopes))]
    out += [_text(s, "a scope") for s in t.scopes]
    for items in (t.hosts, t.manifests):
        if items is None:
            out.append(b"\x00")
            continue
        out.append(b"\x01" + _U16.pack(len(items)))
        out += [_text(i, "a host") if isinstance(i, str) else i for i in items]
    if t.mint is None:
        out.append(b"\x00")
    else:
        m = t.mint
        out.append(b"\x01" + _POLICY.pack(m.max_children, m.max_per_window, m.window_ms,
                                          m.trigger_key))
    return b"".join(out)


def signed_grant_bytes(g: Grant) -> bytes:
    """Everything of a grant but its signature (what the issuer signs)."""
    parent = b"\x00" if g.parent is None else b"\x01" + _check_key(g.parent, "parent")
    return (GRANT_DOMAIN + _check_key(g.issuer, "issuer") + _check_key(g.subject, "subject")
            + parent + terms_bytes(g.terms))


def encode_grant(g: Grant) -> bytes:
    if len(g.signature) != _SIGNATURE:
        raise MalformedGrant("a grant's signature is 64 bytes")
    return signed_grant_bytes(g) + g.signature


def grant_address(data: bytes) -> bytes:
    """The grant's address (a run's ``grants_id``): BLAKE3 of its bytes, signature included."""
    return digest(data)


def check_expiry(terms: Terms) -> None:
    """``MissingExpiry`` unless the terms end after they begin (every grant ends)."""
    if terms.expires_ms <= terms.not_before_ms:
        raise MissingExpiry("a grant needs an expiry after its not-before")


def sign_grant(issuer: SigningKey, subject: bytes, terms: Terms, parent: bytes | None = None
               ) -> bytes:
    """A grant's bytes, signed by ``issuer``; every check of :func:`decode_grant` (and a
    required expiry) is made first."""
    check_expiry(terms)
    g = Grant(bytes(issuer.verify_key), subject, parent, terms)
    signed = signed_grant_bytes(g)
    return signed + issuer.sign(signed).signature


class Reader:
    """A cursor over canonical bytes; running out is ``MalformedGrant``."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data = data
        self.pos = pos

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.data):
            raise MalformedGrant("the bytes end inside a field")
        out = self.data[self.pos:end]
        self.pos = end
        return out

    def u8(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        return int(_U16.unpack(self.take(2))[0])

    def u64(self) -> int:
        return int.from_bytes(self.take(8), "big")

    def text(self, what: str) -> str:
        raw = self.take(self.u16())
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedGrant(f"{what} is not UTF-8") from None

    def flag(self, what: str) -> bool:
        tag = self.u8()
        if tag > 1:
            raise MalformedGrant(f"{what} is tagged {tag}, not 0 or 1")
        return tag == 1

    def end(self) -> None:
        if self.pos != len(self.data):
            raise MalformedGrant("bytes follow the end of the value")


def decode_terms(r: Reader) -> Terms:
    budget, not_before, expires = _TIMES.unpack(r.take(_TIMES.size))
    scopes = tuple(r.text("a scope") for _ in range(r.u16()))
    hosts = tuple(r.text("a host") for _ in range(r.u16())) if r.flag("hosts") else None
    manifests = tuple(r.take(32) for _ in range(r.u16())) if r.flag("manifests") else None
    mint = MintPolicy(*_POLICY.unpack(r.take(_POLICY.size))) if r.flag("mint") else None
    t = Terms(scopes, budget, not_before, expires, hosts, manifests, mint)
    _check_terms(t)
    return t


def decode_grant(data: bytes) -> Grant:
    """The grant in ``data`` (canonical bytes only; the signature is not checked here:
    :func:`verify_grant`)."""
    if type(data) is not bytes:
        raise MalformedGrant("a grant is bytes")
    r = Reader(data)
    if r.take(len(GRANT_DOMAIN)) != GRANT_DOMAIN:
        raise MalformedGrant("not a fleet.grant/1 grant")
    issuer, subject = r.take(32), r.take(32)
    parent = r.take(32) if r.flag("parent") else None
    terms = decode_terms(r)
    signature = r.take(_SIGNATURE)
    r.end()
    return Grant(issuer, subject, parent, terms, signature)


def verify_grant(g: Grant) -> None:
    """``BadGrantSignature`` unless the issuer signed the grant."""
    try:
        VerifyKey(g.issuer).verify(signed_grant_bytes(g), g.signature)
    except (BadSignatureError, ValueError, TypeError):
        raise BadGrantSignature("the grant's signature does not verify under its issuer"
                                ) from None


# -- the order --------------------------------------------------------------------------------


def covers(parent: str, child: str) -> bool:
    """Whether scope ``child`` is ``parent`` or under it at a ``/`` boundary (``/fs``
    covers ``/fs/a`` but not ``/fsx``)."""
    return parent == "/" or child == parent or child.startswith(parent + "/")


def _widens(what: str, detail: str) -> GrantWidens:
    return GrantWidens(f"{what}: {detail}")


def check_narrows(child: Terms, parent: Terms) -> None:
    """``GrantWidens`` (naming the first field) unless ``child <= parent``."""
    for scope in child.scopes:
        if not any(covers(p, scope) for p in parent.scopes):
            raise _widens("scopes", f"{scope!r} is under none of {list(parent.scopes)}")
    if child.budget_uj > parent.budget_uj:
        raise _widens("budget_uj", f"{child.budget_uj} > {parent.budget_uj}")
    if child.not_before_ms < parent.not_before_ms:
        raise _widens("not_before_ms", f"{child.not_before_ms} < {parent.not_before_ms}")
    if child.expires_ms > parent.expires_ms:
        raise _widens("expires_ms", f"{child.expires_ms} > {parent.expires_ms}")
    for what in ("hosts", "manifests"):
        mine, theirs = getattr(child, what), getattr(parent, what)
        if theirs is None:
            continue
        if mine is None:
            raise _widens(what, "any, where the parent lists some")
        extra = set(mine) - set(theirs)
        if extra:
            shown = sorted(x if isinstance(x, str) else format_address(x) for x in extra)
            raise _widens(what, f"{shown} not allowed by the parent")
    m, p = child.mint, parent.mint
    if m is None:
        return
    if p is None:
        raise _widens("mint", "a mint policy where the parent has none")
    if m.trigger_key != p.trigger_key:
        raise _widens("mint.trigger_key", "another trigger key")
    if m.max_children > p.max_children:
        raise _widens("mint.max_children", f"{m.max_children} > {p.max_children}")
    if m.max_per_window > p.max_per_window:
        raise _widens("mint.max_per_window", f"{m.max_per_window} > {p.max_per_window}")
    if m.window_ms < p.window_ms:
        raise _widens("mint.window_ms", f"{m.window_ms} < {p.window_ms}")


def _minimal(scopes: Iterable[str]) -> tuple[str, ...]:
    held = sorted(set(scopes), key=str.encode)
    return tuple(s for s in held if not any(o != s and covers(o, s) for o in held))


def _both(a: tuple[Any, ...] | None, b: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
    if a is None:
        return b
    if b is None:
        return a
    keep = set(b)
    return tuple(x for x in a if x in keep)


def meet(a: Terms, b: Terms) -> Terms:
    """What both ``a`` and ``b`` allow (a child's terms under its parent's, a grant's under
    its amendments): the greatest terms below both in :func:`check_narrows`'s order."""
    scopes = _minimal([x for x in a.scopes if any(covers(y, x) for y in b.scopes)]
                      + [y for y in b.scopes if any(covers(x, y) for x in a.scopes)])
    mint = None
    if a.mint is not None and b.mint is not None and a.mint.trigger_key == b.mint.trigger_key:
        mint = MintPolicy(min(a.mint.max_children, b.mint.max_children),
                          min(a.mint.max_per_window, b.mint.max_per_window),
                          max(a.mint.window_ms, b.mint.window_ms), a.mint.trigger_key)
    return Terms(scopes, min(a.budget_uj, b.budget_uj),
                 max(a.not_before_ms, b.not_before_ms), min(a.expires_ms, b.expires_ms),
                 _both(a.hosts, b.hosts), _both(a.manifests, b.manifests), mint)


def nothing(current: Terms) -> Terms:
    """The terms a revoke amends ``current`` to: no scope, no budget, an empty window, no
    host, no manifest, no mint policy; below ``current`` in :func:`check_narrows`'s order
    even when an amendment already emptied its window (expiry before not-before)."""
    return Terms((), 0, current.not_before_ms,
                 min(current.not_before_ms, current.expires_ms), (), (), None)


def is_void(t: Terms) -> bool:
    """Whether ``t`` allows nothing at any time (a revoked grant's terms)."""
    return t.expires_ms <= t.not_before_ms


# -- making terms and showing them ------------------------------------------------------------


def make_terms(scopes: Iterable[str], budget_uj: int, not_before_ms: int, expires_ms: int,
               hosts: Iterable[str] | None = None, manifests: Iterable[bytes] | None = None,
               mint: MintPolicy | None = None) -> Terms:
    """Terms in canonical order (sets sorted and deduplicated), checked."""
    t = Terms(tuple(sorted(set(scopes), key=str.encode)), budget_uj, not_before_ms,
              expires_ms, None if hosts is None else tuple(sorted(set(hosts))),
              None if manifests is None else tuple(sorted(set(manifests))), mint)
    _check_terms(t)
    return t


_TERM_KEYS = {"scopes", "budget_uj", "not_before_ms", "expires_ms", "hosts", "manifests",
              "mint"}
_MINT_KEYS = {"max_children", "max_per_window", "window_ms", "trigger_key"}


def terms_json(t: Terms) -> dict[str, Any]:
    mint = None if t.mint is None else {
        "max_children": t.mint.max_children, "max_per_window": t.mint.max_per_window,
        "window_ms": t.mint.window_ms, "trigger_key": t.mint.trigger_key.hex()}
    return {
        "scopes": list(t.scopes),
        "budget_uj": t.budget_uj,
        "not_before_ms": t.not_before_ms,
        "expires_ms": t.expires_ms,
        "hosts": None if t.hosts is None else list(t.hosts),
        "manifests": None if t.manifests is None else [format_address(m) for m in t.manifests],
        "mint": mint,
    }


def terms_from_json(obj: Mapping[str, Any], base: Terms | None = None) -> Terms:
    """Terms from their JSON form (:func:`terms_json`'s keys; unknown keys are
    ``MalformedGrant``). With ``base``, keys left out keep ``base``'s value."""
    if not isinstance(obj, Mapping):
        raise MalformedGrant("terms are a JSON object")
    unknown = set(obj) - _TERM_KEYS
    if unknown:
        raise MalformedGrant(f"unknown terms keys: {sorted(unknown)}")
    if base is None:
        missing = {"scopes", "budget_uj", "expires_ms"} - set(obj)
        if missing:
            raise MalformedGrant(f"terms need {sorted(missing)}")
        base = Terms((), 0, 0, 0)
    try:
        manifests = obj.get("manifests", base.manifests)
        if manifests is not None and obj.get("manifests") is not None:
            manifests = [parse_address(m) for m in manifests]
        mint = base.mint
        if "mint" in obj:
            mint = None if obj["mint"] is None else _mint_from_json(obj["mint"])
        scopes = obj.get("scopes", base.scopes)
        hosts = obj.get("hosts", base.hosts)
        if isinstance(scopes, str) or isinstance(hosts, str):
            raise MalformedGrant("scopes and hosts are lists")
        return make_terms(scopes, obj.get("budget_uj", base.budget_uj),
                          obj.get("not_before_ms", base.not_before_ms),
                          obj.get("expires_ms", base.expires_ms), hosts, manifests, mint)
    except FleetError:
        raise
    except (TypeError, ValueError, AttributeError) as exc:
        raise MalformedGrant(f"terms do not read: {exc}") from None


def _mint_from_json(obj: Any) -> MintPolicy:
    if not isinstance(obj, Mapping) or set(obj) != _MINT_KEYS:
        raise MalformedGrant(f"a mint policy has exactly the keys {sorted(_MINT_KEYS)}")
    key = bytes.fromhex(obj["trigger_key"]) if isinstance(obj["trigger_key"], str) else None
    return MintPolicy(obj["max_children"], obj["max_per_window"], obj["window_ms"],
                      _check_key(key, "trigger_key"))


def grant_json(data: bytes) -> dict[str, Any]:
    """A grant's bytes as JSON (decoded, not verified)."""
    g = decode_grant(data)
    return {
        "address": format_address(grant_address(data)),
        "issuer": g.issuer.hex(),
        "subject": g.subject.hex(),
        "parent": None if g.parent is None else format_address(g.parent),
        **terms_json(g.terms),
        # With it the JSON form alone rebuilds the signed bytes (docs/spec/grants.md §2.5).
        "signature_hex": g.signature.hex(),
    }
