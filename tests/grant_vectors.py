"""Builds ``docs/spec/vectors/standing.json``: grants (terms and keys to bytes and address),
byte strings a decoder refuses and by which rule, the order and meet, every grant event's
bytes, and scripted streams of events and segments with the decision of each.

Run ``python tests/grant_vectors.py`` to rewrite the file; tests/test_grant_vectors.py
checks that the checked-in file equals what this builds and that each input behaves as
stated (decoded, ordered and decided by the code, and the streams also folded by a real
ledger). Keys come from fixed seeds; Ed25519 signatures are deterministic, so every byte is.
"""

from __future__ import annotations

import json
import struct
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nacl.signing import SigningKey

from fleet_ledger.fleet.address import digest, format_address, parse_address
from fleet_ledger.fleet.errors import FleetError
from fleet_ledger.fleet.fold.grant_events import (
    EVENT_DOMAIN,
    NO_AMENDMENT,
    GrantBook,
    amend_event,
    apply,
    check_event,
    check_segment,
    checkpoint_event,
    decode_event,
    event_id,
    event_json,
    issue_event,
    mint_event,
    trigger_event,
)
from fleet_ledger.fleet.grants.grant import (
    GRANT_DOMAIN,
    MintPolicy,
    Terms,
    check_narrows,
    decode_grant,
    grant_address,
    is_void,
    make_terms,
    meet,
    nothing,
    sign_grant,
    terms_bytes,
    terms_from_json,
    terms_json,
    verify_grant,
)

PATH = Path(__file__).resolve().parent.parent / "docs" / "spec" / "vectors" / "standing.json"
T0 = 1_800_000_000_000
HOUR = 3_600_000
HOSTS = ("h1", "h2", "h3")


def _seed(label: str) -> bytes:
    return digest(b"fleet grant vector/" + label.encode())


# Host keys are derived as tests/fault_helpers.py derives them, so a real ledger seeded with
# those hosts folds the streams below.
SEEDS: dict[str, bytes] = {
    **{name: _seed(name) for name in ("issuer", "agent", "child", "triggers", "stranger")},
    **{h: digest(b"fleet-test/host-key/" + h.encode()) for h in HOSTS},
}
KEYS = {name: SigningKey(seed) for name, seed in SEEDS.items()}


def pub(name: str) -> bytes:
    return bytes(KEYS[name].verify_key)


def label(text: str) -> bytes:
    """32 bytes standing for something the vectors only name (a manifest, a run, a head)."""
    return digest(b"fleet grant vector label/" + text.encode())


MA, MB = label("manifest a"), label("manifest b")


def addr(raw: bytes) -> str:
    return format_address(raw)


# -- raw encodings (no checks: to build what a decoder must refuse) ----------------------------


def _text(raw: bytes) -> bytes:
    return struct.pack(">H", len(raw)) + raw


def raw_terms(scopes: Iterable[bytes], budget: int = 1000, not_before: int = T0,
              expires: int = T0 + HOUR, hosts: Iterable[bytes] | None = None,
              manifests: Iterable[bytes] | None = None, mint: bytes | None = None,
              tags: tuple[int, int, int] = (1, 1, 1)) -> bytes:
    """Terms bytes as the layout reads, in the order given (``tags``: the flag bytes used
    for a present hosts set, manifests set and mint policy)."""
    scopes = list(scopes)
    out = struct.pack(">QQQH", budget, not_before, expires, len(scopes))
    out += b"".join(_text(s) for s in scopes)
    for tag, items, enc in ((tags[0], hosts, _text), (tags[1], manifests, bytes)):
        if items is None:
            out += b"\x00"
        else:
            listed = list(items)
            out += bytes((tag,)) + struct.pack(">H", len(listed))
            out += b"".join(enc(i) for i in listed)
    out += b"\x00" if mint is None else bytes((tags[2],)) + mint
    return out


def raw_policy(max_children: int, max_per_window: int, window_ms: int, key: bytes) -> bytes:
    return struct.pack(">IIQ", max_children, max_per_window, window_ms) + key


def raw_grant(terms: bytes, issuer: str = "issuer", subject: str = "agent",
              parent: bytes | None = None, sign: bool = True) -> bytes:
    """A grant around ``terms``, signed by ``issuer`` (valid signature, whatever the terms)."""
    signed = (GRANT_DOMAIN + pub(issuer) + pub(subject)
              + (b"\x00" if parent is None else b"\x01" + parent) + terms)
    return signed + (KEYS[issuer].sign(signed).signature if sign else bytes(64))


def raw_event(signer: str, kind: int, body: bytes) -> bytes:
    signed = EVENT_DOMAIN + bytes((kind,)) + pub(signer) + body
    return signed + KEYS[signer].sign(signed).signature


# -- (a) grants --------------------------------------------------------------------------------


def policy(max_children: int = 3, max_per_window: int = 2, window_ms: int = 60_000
           ) -> MintPolicy:
    return MintPolicy(max_children, max_per_window, window_ms, pub("triggers"))


def terms(**kw: Any) -> Terms:
    args: dict[str, Any] = dict(scopes=["/fs/work"], budget_uj=10_000, not_before_ms=T0,
                                expires_ms=T0 + HOUR, hosts=["h1", "h2"], manifests=[MA])
    args.update(kw)
    return make_terms(**args)


# Sorted as UTF-16 code units would sort them; canonical order is UTF-8 bytes (code points).
UTF16_ORDER = ["/\u00e9", "/\U0001f600", "/\uff41"]
STANDING = terms(scopes=["/fs/work", "/net/api"], budget_uj=50_000, mint=policy())

GRANTS: list[tuple[str, str, str, Terms, str | None]] = [
    # (name, issuer, subject, terms, parent grant's name)
    ("minimal-any-host-any-manifest", "issuer", "agent",
     make_terms(["/"], 1, T0, T0 + 1), None),
    ("no-scope", "issuer", "agent", make_terms([], 0, 0, 1, [], []), None),
    ("typical", "issuer", "agent", terms(), None),
    ("several-scopes-hosts-manifests", "issuer", "agent",
     terms(scopes=["/net/api", "/fs/work", "/fs/cache/pip", "/caf\u00e9"],
           hosts=["h2", "h1", "h3"], manifests=[MB, MA]), None),
    ("scopes-in-utf8-byte-order", "issuer", "agent", terms(scopes=UTF16_ORDER), None),
    ("standing", "issuer", "agent", STANDING, None),
    ("child-of-standing", "agent", "child",
     terms(scopes=["/fs/work/tmp"], budget_uj=5_000, not_before_ms=T0 + 1,
           expires_ms=T0 + HOUR - 1, hosts=["h1"]), "standing"),
    ("largest-integers", "issuer", "agent",
     make_terms(["/x"], 2**64 - 1, 2**64 - 2, 2**64 - 1,
                mint=MintPolicy(2**32 - 1, 2**32 - 1, 2**64 - 1, pub("triggers"))), None),
]


def built_grants() -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for name, issuer, subject, t, parent in GRANTS:
        out[name] = sign_grant(KEYS[issuer], pub(subject), t,
                               None if parent is None else grant_address(out[parent]))
    return out


# -- (b) bytes a decoder refuses ----------------------------------------------------------------


def _flip(data: bytes, at: int) -> bytes:
    out = bytearray(data)
    out[at] ^= 1
    return bytes(out)


def refused_grants() -> list[tuple[str, bytes]]:
    """(name, bytes): each refused by decoding and verifying (the rule is computed, and the
    test checks the file against the code)."""
    ok = raw_terms([b"/fs"], hosts=[b"h1"], manifests=[MA])
    good = raw_grant(ok)
    pol = raw_policy(1, 1, 1, pub("triggers"))
    return [
        # Canonical in every field but one, and validly signed by the issuer:
        ("hosts-out-of-order", raw_grant(raw_terms([b"/fs"], hosts=[b"h2", b"h1"]))),
        ("host-repeated", raw_grant(raw_terms([b"/fs"], hosts=[b"h1", b"h1"]))),
        ("scopes-out-of-order", raw_grant(raw_terms([b"/net", b"/fs"]))),
        ("scopes-in-utf16-order",
         raw_grant(raw_terms(s.encode() for s in UTF16_ORDER))),
        ("scope-repeated", raw_grant(raw_terms([b"/fs", b"/fs"]))),
        ("manifests-out-of-order",
         raw_grant(raw_terms([b"/fs"], manifests=sorted([MA, MB], reverse=True)))),
        ("scope-trailing-slash", raw_grant(raw_terms([b"/fs/"]))),
        ("scope-empty-part", raw_grant(raw_terms([b"/fs//work"]))),
        ("scope-dot", raw_grant(raw_terms([b"/fs/./work"]))),
        ("scope-dotdot", raw_grant(raw_terms([b"/fs/../etc"]))),
        ("scope-double-slash-root", raw_grant(raw_terms([b"//"]))),
        # Not a grant at all:
        ("empty", b""),
        ("other-domain", b"fleet.grant/2" + good[len(GRANT_DOMAIN):]),
        ("truncated-signature", good[:-1]),
        ("byte-after-signature", good + b"\x00"),
        ("parent-tag-2",
         good[:len(GRANT_DOMAIN) + 64] + b"\x02" + good[len(GRANT_DOMAIN) + 65:]),
        ("hosts-tag-2", raw_grant(raw_terms([b"/fs"], hosts=[b"h1"], tags=(2, 1, 1)))),
        ("mint-tag-2", raw_grant(raw_terms([b"/fs"], mint=pol, tags=(1, 1, 2)))),
        ("scope-relative", raw_grant(raw_terms([b"fs"]))),
        ("scope-not-utf8", raw_grant(raw_terms([b"/fs\xff"]))),
        ("scope-control-character", raw_grant(raw_terms([b"/fs\nwork"]))),
        ("scope-129-bytes", raw_grant(raw_terms([b"/" + b"a" * 128]))),
        ("host-name-with-dot", raw_grant(raw_terms([b"/fs"], hosts=[b"h1.example"]))),
        ("host-name-empty", raw_grant(raw_terms([b"/fs"], hosts=[b""]))),
        ("257-scopes", raw_grant(raw_terms(b"/s%03d" % i for i in range(257)))),
        ("mint-window-0",
         raw_grant(raw_terms([b"/fs"], mint=raw_policy(1, 1, 0, pub("triggers"))))),
        ("scope-count-past-the-end", good[:len(GRANT_DOMAIN) + 89] + b"\xff\xff"
         + good[len(GRANT_DOMAIN) + 91:]),
        # Well formed, but not signed by its issuer:
        ("signature-bit-flipped", _flip(good, len(good) - 1)),
        ("terms-edited-after-signing", _flip(good, len(GRANT_DOMAIN) + 65 + 7)),
        ("zero-signature", raw_grant(ok, sign=False)),
    ]


def grant_outcome(data: bytes) -> str:
    """``valid`` or the rule decoding and verifying ``data`` refuses it by."""
    try:
        verify_grant(decode_grant(data))
    except FleetError as exc:
        return exc.rule
    return "valid"


# -- (c) the order and meet --------------------------------------------------------------------

BASE = terms(scopes=["/fs", "/net/api"], budget_uj=1000, not_before_ms=T0,
             expires_ms=T0 + HOUR, hosts=["h1", "h2"], manifests=[MA, MB],
             mint=policy(3, 2, 60_000))


def _with(base: Terms, **kw: Any) -> Terms:
    obj = terms_json(base)
    obj.update(kw)
    return terms_from_json(obj)


ORDER: list[tuple[str, Terms, Terms]] = [
    # (name, child, parent)
    ("equal", BASE, BASE),
    ("scope-under-at-slash", _with(BASE, scopes=["/fs/x", "/net/api/v1"]), BASE),
    ("scope-sibling-prefix-fsx", _with(BASE, scopes=["/fsx"]), BASE),
    ("scope-parent-of-parent", _with(BASE, scopes=["/net"]), BASE),
    ("scope-root-covers-all", _with(BASE, scopes=["/anything/at/all"]), _with(BASE, scopes=["/"])),
    ("scope-root-under-root", _with(BASE, scopes=["/"]), _with(BASE, scopes=["/"])),
    ("scopes-none", _with(BASE, scopes=[]), BASE),
    ("budget-equal", _with(BASE, budget_uj=1000), BASE),
    ("budget-larger-by-1", _with(BASE, budget_uj=1001), BASE),
    ("not-before-later", _with(BASE, not_before_ms=T0 + 1), BASE),
    ("not-before-earlier", _with(BASE, not_before_ms=T0 - 1), BASE),
    ("expiry-earlier", _with(BASE, expires_ms=T0 + 1), BASE),
    ("expiry-later", _with(BASE, expires_ms=T0 + HOUR + 1), BASE),
    ("hosts-subset", _with(BASE, hosts=["h2"]), BASE),
    ("hosts-empty", _with(BASE, hosts=[]), BASE),
    ("hosts-other", _with(BASE, hosts=["h1", "h3"]), BASE),
    ("hosts-any-under-some", _with(BASE, hosts=None), BASE),
    ("hosts-some-under-any", BASE, _with(BASE, hosts=None)),
    ("manifests-subset", _with(BASE, manifests=[addr(MB)]), BASE),
    ("manifests-any-under-some", _with(BASE, manifests=None), BASE),
    ("manifests-other", _with(BASE, manifests=[addr(label("manifest c"))]), BASE),
    ("mint-none-under-some", _with(BASE, mint=None), BASE),
    ("mint-some-under-none", BASE, _with(BASE, mint=None)),
    ("mint-tighter", _with(BASE, mint=terms_json(terms(mint=policy(1, 1, 120_000)))["mint"]),
     BASE),
    ("mint-other-trigger-key",
     _with(BASE, mint={**terms_json(BASE)["mint"], "trigger_key": pub("stranger").hex()}), BASE),
    ("mint-more-children", _with(BASE, mint=terms_json(terms(mint=policy(4, 2, 60_000)))["mint"]),
     BASE),
    ("mint-more-per-window",
     _with(BASE, mint=terms_json(terms(mint=policy(3, 3, 60_000)))["mint"]), BASE),
    ("mint-shorter-window",
     _with(BASE, mint=terms_json(terms(mint=policy(3, 2, 59_999)))["mint"]), BASE),
    ("first-field-named", _with(BASE, scopes=["/etc"], budget_uj=5000, hosts=None), BASE),
    ("nothing-under-base", nothing(BASE), BASE),
]

MEET: list[tuple[str, Terms, Terms]] = [
    ("with-itself", BASE, BASE),
    ("scopes-keep-the-narrower", _with(BASE, scopes=["/fs/a", "/net"]),
     _with(BASE, scopes=["/fs", "/net/api/v2", "/tmp"])),
    ("disjoint-scopes", _with(BASE, scopes=["/fsx"]), _with(BASE, scopes=["/fs"])),
    ("numbers-and-window", _with(BASE, budget_uj=10, not_before_ms=T0 + 5),
     _with(BASE, expires_ms=T0 + 7)),
    ("disjoint-windows-are-void", _with(BASE, expires_ms=T0 + 10),
     _with(BASE, not_before_ms=T0 + 10)),
    ("any-meets-some", _with(BASE, hosts=None, manifests=None),
     _with(BASE, hosts=["h3"], manifests=[addr(MB)])),
    ("sets-intersect", _with(BASE, hosts=["h1", "h3"]), _with(BASE, hosts=["h2", "h3"])),
    ("mint-componentwise", _with(BASE, mint=terms_json(terms(mint=policy(5, 1, 1000)))["mint"]),
     _with(BASE, mint=terms_json(terms(mint=policy(2, 4, 9000)))["mint"])),
    ("mint-other-keys-none", BASE,
     _with(BASE, mint={**terms_json(BASE)["mint"], "trigger_key": pub("stranger").hex()})),
    ("mint-with-none", BASE, _with(BASE, mint=None)),
    ("with-nothing", BASE, nothing(BASE)),
]


def order_outcome(child: Terms, parent: Terms) -> dict[str, Any]:
    try:
        check_narrows(child, parent)
    except FleetError as exc:
        return {"rule": exc.rule, "field": str(exc).split(":", 1)[0]}
    return {"rule": None, "field": None}


# -- (d) events ----------------------------------------------------------------------------------


def events(grants: dict[str, bytes]) -> list[tuple[str, dict[str, Any], bytes]]:
    """(name, inputs as JSON, bytes) of one event of each kind (and more)."""
    standing, child = grants["standing"], grants["child-of-standing"]
    amended = terms(budget_uj=6_000)
    first = amend_event(KEYS["issuer"], grant_address(grants["typical"]), 1, NO_AMENDMENT,
                        amended)
    run, head, state = label("run"), label("head 2"), label("state")
    return [
        ("issue", {"signer": "issuer", "grant": "typical"},
         issue_event(KEYS["issuer"], grants["typical"])),
        ("trigger", {"signer": "triggers", "name": "build-finished/42"},
         trigger_event(KEYS["triggers"], "build-finished/42")),
        ("mint", {"signer": "agent", "standing": addr(grant_address(standing)),
                  "trigger": "build-finished/42", "child": "child-of-standing"},
         mint_event(KEYS["agent"], grant_address(standing), "build-finished/42", child)),
        ("amend-first", {"signer": "issuer", "grant": addr(grant_address(grants["typical"])),
                         "seq": 1, "previous": addr(NO_AMENDMENT), "terms": terms_json(amended)},
         first),
        ("amend-second-revokes", {"signer": "issuer",
                                  "grant": addr(grant_address(grants["typical"])), "seq": 2,
                                  "previous": addr(digest(first)),
                                  "terms": terms_json(nothing(amended))},
         amend_event(KEYS["issuer"], grant_address(grants["typical"]), 2, digest(first),
                     nothing(amended))),
        ("checkpoint", {"signer": "agent", "run": addr(run), "index": 2, "head": addr(head),
                        "state": addr(state), "note": "step 2 of 5: tests green"},
         checkpoint_event(KEYS["agent"], run, 2, head, state, "step 2 of 5: tests green")),
    ]


def refused_events(grants: dict[str, bytes]) -> list[tuple[str, bytes]]:
    trig = trigger_event(KEYS["triggers"], "t")
    return [
        ("empty", b""),
        ("other-domain", b"fleet.gev/2" + trig[len(EVENT_DOMAIN):]),
        ("too-short", EVENT_DOMAIN + b"\x02" + pub("triggers") + bytes(63)),
        ("unknown-kind-6", raw_event("triggers", 6, _text(b"t"))),
        ("kind-0", raw_event("triggers", 0, _text(b"t"))),
        ("trigger-name-empty", raw_event("triggers", 2, _text(b""))),
        ("trigger-name-129-bytes", raw_event("triggers", 2, _text(b"n" * 129))),
        ("trigger-name-control", raw_event("triggers", 2, _text(b"a\tb"))),
        ("byte-after-body", raw_event("triggers", 2, _text(b"t") + b"\x00")),
        ("issue-length-past-the-end", raw_event("issuer", 1, struct.pack(">I", 10**6)
                                                + grants["typical"])),
        ("amend-non-canonical-terms", raw_event(
            "issuer", 4, grant_address(grants["typical"]) + struct.pack(">Q", 1) + NO_AMENDMENT
            + raw_terms([b"/fs"], hosts=[b"h2", b"h1"]))),
        ("signature-bit-flipped", _flip(trig, len(trig) - 1)),
        ("signed-by-another-key", trig[:len(EVENT_DOMAIN) + 1] + pub("stranger")
         + trig[len(EVENT_DOMAIN) + 33:]),
    ]


def event_outcome(data: bytes) -> str:
    try:
        decode_event(data)
    except FleetError as exc:
        return exc.rule
    return "valid"


# -- (e) streams -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Seg:
    """A segment of a run under ``grant``: sealed by ``host``, parking under ``manifest``
    (``None``: a segment that names none), the run's energy after it."""

    grant: bytes
    energy_after_uj: int
    host: str = "h1"
    manifest: bytes | None = None


@dataclass
class Stream:
    """Steps at ledger times that never go back (as a stream's timestamps); a step without a
    time is at the time of the step before it."""

    name: str
    about: str
    steps: list[tuple[int, bytes | Seg, str]] = field(default_factory=list)
    runs: dict[bytes, tuple[bytes, list[bytes]]] = field(default_factory=dict)

    def _at(self, at: int | None) -> int:
        last = self.steps[-1][0] if self.steps else T0
        assert at is None or at >= last, "ledger time goes forward"
        return last if at is None else at

    def ev(self, data: bytes, at: int | None = None, what: str = "") -> bytes:
        self.steps.append((self._at(at), data, what))
        return data

    def seg(self, grant: bytes, energy: int, at: int | None = None, what: str = "",
            **kw: Any) -> None:
        self.steps.append((self._at(at), Seg(grant, energy, **kw), what))


def host_keys() -> list[bytes]:
    return [pub(h) for h in HOSTS]


def run_at_of(runs: dict[bytes, tuple[bytes, list[bytes]]]
              ) -> Callable[[bytes, int], tuple[bytes, int, bytes | None] | None]:
    def run_at(run: bytes, index: int) -> tuple[bytes, int, bytes | None] | None:
        held = runs.get(run)
        if held is None:
            return None
        grant, heads = held
        return grant, len(heads), heads[index - 1] if 1 <= index <= len(heads) else None
    return run_at


def decide_stream(steps: list[tuple[int, bytes | Seg]],
                  runs: dict[bytes, tuple[bytes, list[bytes]]]) -> list[str]:
    """The decision of each step: events by ``check_event`` (then ``apply``), segments by
    ``check_segment`` under the book's effective terms at that point (a grant the book does
    not hold: ``UnknownGrant``, as a ledger that requires grants decides)."""
    book, keys, run_at = GrantBook(), host_keys(), run_at_of(runs)
    out = []
    for seq, (at, step) in enumerate(steps, 1):
        try:
            if isinstance(step, Seg):
                held = book.effective(step.grant)
                if held is None:
                    out.append("UnknownGrant")
                    continue
                check_segment(held, step.host, step.manifest, step.energy_after_uj, at, 1)
            else:
                apply(book, check_event(book, step, seq, at, keys, run_at))
        except FleetError as exc:
            out.append(exc.rule)
            continue
        out.append("accepted")
    return out


def _issue(s: Stream, t: Terms, at: int | None = None, what: str = "issue", issuer: str = "issuer",
           subject: str = "agent") -> bytes:
    g = sign_grant(KEYS[issuer], pub(subject), t)
    s.ev(issue_event(KEYS[issuer], g), at, what)
    return grant_address(g)


def stream_segments() -> Stream:
    s = Stream("segments", "a run's segments held to its grant: window, hosts, manifests, "
                           "budget, in that order")
    g = _issue(s, terms(budget_uj=10_000, not_before_ms=T0 + 500, hosts=["h1", "h2"],
                        manifests=[MA]))
    s.seg(g, 1, T0 + 499, "one ms before the not-before")
    s.seg(g, 1, T0 + 500, "at the not-before")
    s.seg(g, 10_000, T0 + 1000, what="lands exactly on the budget")
    s.seg(g, 10_001, what="one microjoule over the budget")
    s.seg(g, 1, host="h2", what="a listed host")
    s.seg(g, 1, host="h3", what="a host the grant does not list")
    s.seg(g, 2, manifest=MA, what="runs under an allowed manifest")
    s.seg(g, 2, manifest=MB, what="runs under another manifest")
    s.seg(g, 10_001, host="h3", manifest=MB, what="host before manifest and budget")
    s.seg(g, 10_001, manifest=MB, what="manifest before budget")
    s.seg(label("no such grant"), 1, what="a grant never presented")
    s.seg(g, 1, T0 + HOUR - 1, "the last ms before expiry")
    s.seg(g, 1, T0 + HOUR, "at the expiry")
    s.seg(g, 10_001, host="h3", manifest=MB, what="all wrong: the window first")
    return s


def stream_issue() -> Stream:
    s = Stream("issue", "who may present which grant")
    t = terms()
    s.ev(issue_event(KEYS["agent"], sign_grant(KEYS["agent"], pub("agent"), t)),
         what="issuer is the subject")
    s.ev(issue_event(KEYS["h1"], sign_grant(KEYS["h1"], pub("agent"), t)),
         what="issuer is an enrolled host's key")
    no_expiry = raw_grant(raw_terms([b"/fs"], not_before=T0, expires=T0))
    s.ev(issue_event(KEYS["issuer"], no_expiry), what="expiry equal to the not-before")
    g = sign_grant(KEYS["issuer"], pub("agent"), t)
    s.ev(issue_event(KEYS["agent"], g), what="presented by someone other than its issuer")
    s.ev(issue_event(KEYS["agent"], sign_grant(KEYS["agent"], pub("child"), t,
                                               grant_address(g))),
         what="a grant with a parent, outside a mint")
    s.ev(issue_event(KEYS["issuer"], g[:-64] + bytes(64)), what="unsigned grant")
    s.ev(issue_event(KEYS["issuer"], raw_grant(raw_terms([b"/fs"], hosts=[b"h2", b"h1"]))),
         what="hosts out of order, validly signed")
    s.ev(issue_event(KEYS["issuer"], g), what="the grant")
    s.ev(issue_event(KEYS["issuer"], g), what="the same grant again")
    s.ev(raw_event("issuer", 7, b""), what="unknown event kind")
    return s


def _mint(s: Stream, standing: bytes, trigger: str, t: Terms, at: int | None, what: str,
          holder: str = "agent", subject: str = "child", parent: bytes | None = None) -> bytes:
    child = sign_grant(KEYS[holder], pub(subject), t, standing if parent is None else parent)
    s.ev(mint_event(KEYS[holder], standing, trigger, child), at, what)
    return child


def stream_standing() -> Stream:
    s = Stream("standing", "a standing grant mints bounded, rate-limited, triggered children")
    sg = _issue(s, STANDING)
    plain = _issue(s, terms(), what="issue a grant with no mint policy")
    late = _issue(s, terms(expires_ms=T0 + 5000, mint=policy()), what="a short standing grant")
    for name in ("t1", "t2", "t3", "t4", "t5"):
        s.ev(trigger_event(KEYS["triggers"], name), T0 + 500, f"raise trigger {name}")
    s.ev(trigger_event(KEYS["triggers"], "t1"), what="raise t1 again")
    s.ev(trigger_event(KEYS["stranger"], "s1"), what="a stranger raises s1")
    c = terms(budget_uj=5_000)
    _mint(s, sg, "t1", c, T0 + 1000, "minted by the issuer, not the holder", holder="issuer")
    _mint(s, label("no such grant"), "t1", c, None, "from a grant never folded")
    _mint(s, plain, "t1", c, None, "from a grant with no mint policy", parent=plain)
    _mint(s, sg, "nope", c, None, "on a trigger never raised")
    _mint(s, sg, "s1", c, None, "on a trigger raised under another key")
    _mint(s, sg, "t1", terms(budget_uj=50_001), None, "a child with a larger budget")
    _mint(s, sg, "t1", terms(scopes=["/fs/workx"]), None, "a child scope /fs/workx")
    _mint(s, sg, "t1", c, None, "a child naming another parent", parent=plain)
    _mint(s, sg, "t1", c, None, "a child the holder grants itself", subject="agent")
    c1 = _mint(s, sg, "t1", c, None, "child 1 on t1")
    s.seg(grant_address(c1), 5_000, what="a run under child 1, at its budget")
    s.seg(grant_address(c1), 1, host="h3", what="child 1 allows only its own hosts")
    s.ev(mint_event(KEYS["agent"], sg, "t2", c1), T0 + 1500, "child 1 again, on t2")
    _mint(s, sg, "t1", terms(budget_uj=4_000), None, "another child on t1 (used)")
    _mint(s, sg, "t2", terms(budget_uj=4_000), T0 + 2000, "child 2 on t2")
    _mint(s, late, "t5", terms(expires_ms=T0 + 5000, budget_uj=1), T0 + 5000,
          "a mint at the short standing grant's expiry")
    _mint(s, sg, "t3", terms(budget_uj=3_000), T0 + 60_999,
          "child 3, 1 ms before child 1 leaves the window")
    _mint(s, sg, "t3", terms(budget_uj=3_001), T0 + 61_000,
          "child 3 once child 1 left the window")
    _mint(s, sg, "t4", terms(budget_uj=2_000), T0 + HOUR - 1,
          "a fourth child, windows later (max_children 3)")
    return s


def stream_amend() -> Stream:
    s = Stream("amend", "only the issuer amends, only to tighten, in order; revoke is "
                        "amending to nothing")
    g = _issue(s, terms(budget_uj=10_000))
    s.runs[label("run 1")] = (g, [label("run 1 head 1"), label("run 1 head 2")])
    s.seg(g, 5_000, T0 + 1000, "a segment under the grant as issued")
    tighter = terms(budget_uj=6_000)
    for who in ("agent", "h1", "stranger"):
        s.ev(amend_event(KEYS[who], g, 1, NO_AMENDMENT, tighter), what=f"amended by {who}")
    s.ev(amend_event(KEYS["issuer"], g, 1, NO_AMENDMENT, terms(budget_uj=10_001)),
         what="an amendment that raises the budget")
    s.ev(amend_event(KEYS["issuer"], g, 1, NO_AMENDMENT, terms(budget_uj=6_000,
                                                                hosts=["h1", "h2", "h3"])),
         what="tighter budget but one more host: refused whole")
    s.ev(amend_event(KEYS["issuer"], g, 2, NO_AMENDMENT, tighter), what="sequence 2 first")
    s.ev(amend_event(KEYS["issuer"], g, 1, label("not an amendment"), tighter),
         what="sequence 1 naming a previous amendment")
    s.ev(amend_event(KEYS["issuer"], label("no such grant"), 1, NO_AMENDMENT, tighter),
         what="amending a grant never folded")
    a1 = s.ev(amend_event(KEYS["issuer"], g, 1, NO_AMENDMENT, tighter), T0 + 2000,
              "amendment 1: budget 6000")
    s.seg(g, 6_001, what="past the amended budget")
    s.seg(g, 6_000, what="on the amended budget")
    s.ev(amend_event(KEYS["issuer"], g, 1, NO_AMENDMENT, terms(budget_uj=5_000)),
         what="sequence 1 again")
    s.ev(amend_event(KEYS["issuer"], g, 0, NO_AMENDMENT, terms(budget_uj=5_000)),
         what="sequence 0")
    s.ev(amend_event(KEYS["issuer"], g, 2, NO_AMENDMENT, terms(budget_uj=5_000)),
         what="sequence 2 naming no previous")
    shorter = terms(budget_uj=6_000, expires_ms=T0 + 2400)
    a2 = s.ev(amend_event(KEYS["issuer"], g, 2, digest(a1), shorter),
              what="amendment 2: expires at +2400 ms")
    s.ev(amend_event(KEYS["issuer"], g, 3, digest(a2), terms(budget_uj=6_000)),
         what="amendment 3 restoring the expiry")
    for signer, run, index, head, what in (
            ("agent", "run 1", 2, "run 1 head 2", "the agent checkpoints run 1 at its head"),
            ("agent", "run 1", 1, "run 1 head 1", "a checkpoint at an earlier head"),
            ("issuer", "run 1", 2, "run 1 head 2", "a checkpoint by the issuer"),
            ("agent", "run 1", 2, "run 1 head 1", "a checkpoint naming another head"),
            ("agent", "run 1", 3, "run 1 head 2", "a checkpoint past the run's last index"),
            ("agent", "run 2", 1, "run 1 head 1", "a checkpoint of a run the ledger does "
                                                  "not hold")):
        s.ev(checkpoint_event(KEYS[signer], label(run), index, label(head), label("state"),
                              what), what=what)
    s.seg(g, 1, T0 + 2399, "the last ms before the amended expiry")
    s.seg(g, 1, T0 + 2400, "at the amended expiry")
    s.ev(amend_event(KEYS["issuer"], g, 3, digest(a2), nothing(shorter)), T0 + 2500,
         "amendment 3: revoke")
    s.seg(g, 1, what="a segment after the revoke")
    s.ev(amend_event(KEYS["issuer"], g, 3, digest(a2), nothing(shorter)),
         what="the revoke again")
    return s


def stream_chain() -> Stream:
    s = Stream("chain", "a child is held to its parent's effective terms, amendments "
                        "included, and dies with it")
    sg = _issue(s, STANDING)
    s.ev(trigger_event(KEYS["triggers"], "go"), T0 + 1000, "raise trigger go")
    child = sign_grant(KEYS["agent"], pub("child"), terms(budget_uj=20_000), sg)
    c = grant_address(child)
    s.seg(c, 1, what="a run under the child before its mint")
    s.ev(mint_event(KEYS["agent"], sg, "go", child), what="mint the child")
    s.seg(c, 20_000, what="at the child's budget")
    lowered = _with(STANDING, budget_uj=15_000)
    a1 = s.ev(amend_event(KEYS["issuer"], sg, 1, NO_AMENDMENT, lowered),
              what="the issuer lowers the standing grant's budget below the child's")
    s.seg(c, 15_001, what="past the parent's amended budget")
    s.seg(c, 15_000, what="at the parent's amended budget")
    s.ev(amend_event(KEYS["issuer"], c, 1, NO_AMENDMENT, terms(budget_uj=100)),
         what="the root issuer amends the child (its issuer is the holder)")
    ca = s.ev(amend_event(KEYS["agent"], c, 1, NO_AMENDMENT, terms(budget_uj=100)),
              what="the holder, the child's issuer, amends it")
    s.seg(c, 101, what="past the child's own amended budget")
    s.ev(amend_event(KEYS["issuer"], sg, 2, digest(a1), nothing(lowered)), T0 + 3000,
         "revoke the standing grant")
    s.seg(c, 1, what="the child after its parent was revoked")
    s.ev(trigger_event(KEYS["triggers"], "again"), what="raise trigger again")
    _mint(s, sg, "again", terms(budget_uj=1), None, "a mint from the revoked grant")
    s.ev(amend_event(KEYS["agent"], c, 2, digest(ca), terms(budget_uj=50)),
         what="the child can still be amended (and stays void)")
    s.seg(c, 1, what="the child after its own amendment")
    return s


def stream_emptied() -> Stream:
    s = Stream("emptied-window", "an amendment may empty a window by hand (not-before after "
                                 "expiry); revoking it still works")
    t = terms()
    g = _issue(s, t)
    inverted = _with(t, not_before_ms=T0 + 2000, expires_ms=T0 + 1500)
    a1 = s.ev(amend_event(KEYS["issuer"], g, 1, NO_AMENDMENT, inverted), T0 + 1000,
              "amendment 1: not-before after expiry")
    s.seg(g, 1, what="a segment under the emptied window")
    s.ev(amend_event(KEYS["issuer"], g, 2, digest(a1), nothing(inverted)),
         what="amendment 2: revoke (expiry stays at the earlier of the two)")
    return s


def streams() -> list[Stream]:
    return [stream_segments(), stream_issue(), stream_standing(), stream_amend(),
            stream_chain(), stream_emptied()]


def step_json(at: int, step: bytes | Seg, what: str, expect: str) -> dict[str, Any]:
    out: dict[str, Any] = {"at_ms": at, "what": what}
    if isinstance(step, Seg):
        out["segment"] = {"grant": addr(step.grant), "host": step.host,
                          "manifest": None if step.manifest is None else addr(step.manifest),
                          "energy_after_uj": step.energy_after_uj}
    else:
        out["event"] = step.hex()
    out["expect"] = expect
    return out


def stream_json(s: Stream) -> dict[str, Any]:
    decided = decide_stream([(at, step) for at, step, _ in s.steps], s.runs)
    return {
        "name": s.name, "about": s.about,
        "runs": [{"run": addr(run), "grant": addr(g), "heads": [addr(h) for h in heads]}
                 for run, (g, heads) in s.runs.items()],
        "steps": [step_json(at, step, what, expect)
                  for (at, step, what), expect in zip(s.steps, decided, strict=True)],
    }


# -- the file ------------------------------------------------------------------------------------


def build() -> dict[str, Any]:
    grants = built_grants()
    return {
        "keys": {name: {"seed_hex": seed.hex(), "public_hex": pub(name).hex()}
                 for name, seed in SEEDS.items()},
        "labels": {"manifest a": addr(MA), "manifest b": addr(MB)},
        "host_keys": [pub(h).hex() for h in HOSTS],
        "grants": [{"name": name, "issuer": issuer, "subject": subject,
                    "parent": None if parent is None else parent, "terms": terms_json(t),
                    "terms_hex": terms_bytes(t).hex(), "hex": grants[name].hex(),
                    "address": addr(grant_address(grants[name]))}
                   for name, issuer, subject, t, parent in GRANTS],
        "refused_grants": [{"name": name, "hex": data.hex(), "rule": grant_outcome(data)}
                           for name, data in refused_grants()],
        "order": [{"name": name, "child": terms_json(c), "parent": terms_json(p),
                   **order_outcome(c, p)} for name, c, p in ORDER],
        "meet": [{"name": name, "a": terms_json(a), "b": terms_json(b),
                  "meet": terms_json(meet(a, b)), "void": is_void(meet(a, b))}
                 for name, a, b in MEET],
        "events": [{"name": name, "inputs": inputs, "hex": data.hex(), "id": event_id(data),
                    "address": addr(digest(data)), "json": event_json(data)}
                   for name, inputs, data in events(grants)],
        "refused_events": [{"name": name, "hex": data.hex(), "rule": event_outcome(data)}
                           for name, data in refused_events(grants)],
        "streams": [stream_json(s) for s in streams()],
    }


def parse_seg(obj: dict[str, Any]) -> Seg:
    m = obj["manifest"]
    return Seg(parse_address(obj["grant"]), obj["energy_after_uj"], obj["host"],
               None if m is None else parse_address(m))


def render() -> str:
    return json.dumps(build(), indent=1, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    PATH.write_text(render(), encoding="utf-8")
    sys.stdout.write(f"wrote {PATH}\n")
