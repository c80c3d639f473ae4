"""Exec policies: which file bytes a unit may execute or open, by their BLAKE3 address.

A policy maps the BLAKE3 address of a file's *bytes* (never its name or path) to a verdict,
``allow`` or ``deny``, with a label, and has a default for bytes it does not list:

* **deny-listed mode** (``default = allow``): listed ``deny`` bytes are refused, the rest
  run;
* **allow-listed mode** (``default = deny``): only listed ``allow`` bytes run.

Deny beats allow: building a policy from rules that name the same bytes twice keeps
``deny`` if any rule denies them. The policy is content-addressed: its canonical bytes are::

    policy = "fleet.execpolicy/1" || default:u8 || count:u32 || rule*
    rule   = bytes[32] || verdict:u8 || text(label)      rules in ascending order of bytes
    verdict, default: 0x01 allow, 0x02 deny;  text(t) = len:u16 || utf8(t)

and its address is ``BLAKE3(policy)``, the value a grant or a record names. Every byte
string has one reading: rules are strictly ascending (no duplicates), labels are 1..128
bytes of printable UTF-8, nothing follows the last rule. The JSON file form
(:func:`policy_to_json`) lists the same rules in the same order beside the address, and
:func:`policy_from_json` refuses a file whose address or order disagrees.

``docs/spec/exec-policy.md`` is the normative text; ``docs/spec/vectors/exec_policy.json``
holds vectors.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from fleet_ledger.fleet.address import digest, format_address, parse_address
from fleet_ledger.fleet.env.exec_errors import MalformedPolicy, PolicyMismatch
from fleet_ledger.fleet.errors import FleetError, MalformedAddress, ValueOutOfRange
from fleet_ledger.fleet.record.kernel import MAX_TEXT
from fleet_ledger.fleet.text import encode_text

__all__ = [
    "ALLOW",
    "DENY",
    "FILE_FORMAT",
    "MAX_RULES",
    "POLICY_DOMAIN",
    "VERDICTS",
    "Decision",
    "ExecPolicy",
    "Rule",
    "build_policy",
    "code_of",
    "decode_policy",
    "policy_from_json",
    "policy_to_json",
]

ALLOW: Final = "allow"
DENY: Final = "deny"
VERDICTS: Final = {ALLOW: 0x01, DENY: 0x02}
_BY_CODE: Final = {code: name for name, code in VERDICTS.items()}
POLICY_DOMAIN: Final = b"fleet.execpolicy/1"
FILE_FORMAT: Final = "fleet.execpolicy/1"
MAX_RULES: Final = 1 << 20
_HEAD = struct.Struct(">BI")
_U16 = struct.Struct(">H")


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule: the 32-byte BLAKE3 of some file bytes, its verdict and a label."""

    bytes: bytes
    verdict: str
    label: str


@dataclass(frozen=True, slots=True)
class Decision:
    """What a policy says about some bytes: the verdict, the label of the rule that
    decided (``None``: the default decided) and the policy's address."""

    verdict: str
    label: str | None
    policy: bytes

    @property
    def allowed(self) -> bool:
        return self.verdict == ALLOW


@dataclass(frozen=True)
class ExecPolicy:
    """A canonical policy (build it with :func:`build_policy` or decode it)."""

    default: str
    rules: tuple[Rule, ...]
    canonical: bytes = field(repr=False)
    address: bytes
    _index: Mapping[bytes, Rule] = field(repr=False, compare=False)

    @property
    def mode(self) -> str:
        """``allowlist`` when unlisted bytes are refused, else ``denylist``."""
        return "allowlist" if self.default == DENY else "denylist"

    def decide(self, content: bytes) -> Decision:
        """The verdict for bytes whose BLAKE3 is ``content``."""
        rule = self._index.get(content)
        if rule is None:
            return Decision(self.default, None, self.address)
        return Decision(rule.verdict, rule.label, self.address)

    def counts(self) -> dict[str, int]:
        """How many rules allow and how many deny."""
        denied = sum(1 for r in self.rules if r.verdict == DENY)
        return {ALLOW: len(self.rules) - denied, DENY: denied}


def code_of(table: Mapping[str, int], value: object, what: str,
            error: type[FleetError] = ValueOutOfRange) -> int:
    """The byte code of ``value`` (a name in ``table``), or ``error`` naming the choices."""
    code = table.get(value) if type(value) is str else None
    if code is None:
        raise error(f"{what} must be one of {', '.join(map(repr, table))}, got {value!r}")
    return code


def _verdict_code(value: object, what: str) -> int:
    return code_of(VERDICTS, value, what, MalformedPolicy)


def _label(value: object) -> bytes:
    return encode_text(value, "a rule's label", MalformedPolicy, MAX_TEXT)


def _make(default: str, rules: tuple[Rule, ...]) -> ExecPolicy:
    if len(rules) > MAX_RULES:
        raise MalformedPolicy(f"a policy holds at most {MAX_RULES} rules, got {len(rules)}")
    parts = [POLICY_DOMAIN, _HEAD.pack(_verdict_code(default, "the default"), len(rules))]
    for r in rules:
        parts += (r.bytes, bytes((VERDICTS[r.verdict],)), _label(r.label))
    canonical = b"".join(parts)
    return ExecPolicy(default, rules, canonical, digest(canonical), {r.bytes: r for r in rules})


def build_policy(default: str, rules: Iterable[tuple[bytes, str, str]]) -> ExecPolicy:
    """The canonical policy of ``(bytes, verdict, label)`` rules in any order.

    Rules naming the same bytes merge: ``deny`` beats ``allow``, and among the winning
    verdict's labels the smallest (by UTF-8 bytes) is kept, so the result does not depend
    on the order the rules were given in.
    """
    _verdict_code(default, "the default")
    best: dict[bytes, tuple[int, bytes, str]] = {}
    for content, verdict, label in rules:
        if type(content) is not bytes or len(content) != 32:
            raise MalformedPolicy("a rule names 32 bytes of BLAKE3")
        code = _verdict_code(verdict, "a rule's verdict")
        _label(label)
        raw = label.encode()
        held = best.get(content)
        # Deny (0x02) beats allow (0x01); within one verdict the smallest label wins.
        if held is None or code > held[0] or (code == held[0] and raw < held[1]):
            best[content] = (code, raw, label)
    ordered = tuple(Rule(b, _BY_CODE[best[b][0]], best[b][2]) for b in sorted(best))
    return _make(default, ordered)


def decode_policy(canonical: bytes) -> ExecPolicy:
    """The policy whose canonical bytes are ``canonical``, or :class:`MalformedPolicy`."""
    view = memoryview(canonical)
    if bytes(view[:len(POLICY_DOMAIN)]) != POLICY_DOMAIN:
        raise MalformedPolicy("policy bytes must start with 'fleet.execpolicy/1'")
    pos = len(POLICY_DOMAIN)
    if len(view) < pos + _HEAD.size:
        raise MalformedPolicy("policy bytes end before the rule count")
    default_code, count = _HEAD.unpack_from(view, pos)
    pos += _HEAD.size
    if default_code not in _BY_CODE:
        raise MalformedPolicy(f"unknown default byte 0x{default_code:02x}")
    rules: list[Rule] = []
    previous = b""
    for _ in range(count):
        if len(view) < pos + 35:
            raise MalformedPolicy("policy bytes end inside a rule")
        content, code = bytes(view[pos:pos + 32]), view[pos + 32]
        (size,) = _U16.unpack_from(view, pos + 33)
        pos += 35
        if code not in _BY_CODE:
            raise MalformedPolicy(f"unknown verdict byte 0x{code:02x}")
        if not 0 < size <= MAX_TEXT or len(view) < pos + size:
            raise MalformedPolicy("a rule's label is empty, too long or cut short")
        try:
            label = bytes(view[pos:pos + size]).decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedPolicy("a rule's label is not UTF-8") from None
        pos += size
        if content <= previous:
            raise MalformedPolicy("rules must be in strictly ascending order of their bytes")
        previous = content
        rules.append(Rule(content, _BY_CODE[code], label))
    if pos != len(view):
        raise MalformedPolicy(f"{len(view) - pos} bytes follow the last rule")
    policy = _make(_BY_CODE[default_code], tuple(rules))
    if policy.canonical != canonical:  # e.g. a label that is not printable
        raise MalformedPolicy("policy bytes are not canonical")
    return policy


def policy_to_json(policy: ExecPolicy) -> dict[str, Any]:
    """The file form: format, address, mode, default and the rules in canonical order."""
    return {
        "format": FILE_FORMAT,
        "address": format_address(policy.address),
        "mode": policy.mode,
        "default": policy.default,
        "rules": [{"bytes": format_address(r.bytes), "verdict": r.verdict, "label": r.label}
                  for r in policy.rules],
    }


_FILE_KEYS = frozenset({"format", "address", "mode", "default", "rules"})
_RULE_KEYS = frozenset({"bytes", "verdict", "label"})


def policy_from_json(doc: object) -> ExecPolicy:
    """The policy a file form states, checked: :class:`MalformedPolicy` for a malformed or
    non-canonical file, :class:`PolicyMismatch` when its address or mode is not the one
    its rules hash to."""
    if not isinstance(doc, dict) or doc.get("format") != FILE_FORMAT:
        raise MalformedPolicy(f"not a policy file: 'format' must be {FILE_FORMAT!r}")
    if set(doc) - _FILE_KEYS or not {"address", "default", "rules"} <= set(doc):
        raise MalformedPolicy("a policy file holds format, address, default, rules (and mode)")
    if not isinstance(doc["rules"], list):
        raise MalformedPolicy("'rules' must be a list")
    rules = []
    for item in doc["rules"]:
        if not isinstance(item, dict) or set(item) != _RULE_KEYS:
            raise MalformedPolicy("each rule holds exactly bytes, verdict and label")
        try:
            content = parse_address(item["bytes"])
        except MalformedAddress as exc:
            raise MalformedPolicy(f"a rule's bytes: {exc}") from None
        _verdict_code(item["verdict"], "a rule's verdict")
        rules.append(Rule(content, item["verdict"], item["label"]))
    _verdict_code(doc["default"], "the default")
    for a, b in itertools.pairwise(rules):
        if a.bytes >= b.bytes:
            raise MalformedPolicy("rules must be in strictly ascending order of their bytes")
    policy = _make(doc["default"], tuple(rules))
    try:
        stated = parse_address(doc["address"])
    except MalformedAddress as exc:
        raise MalformedPolicy(f"the policy address: {exc}") from None
    if stated != policy.address:
        raise PolicyMismatch(f"the file states address {doc['address']}, its rules hash to "
                             f"{format_address(policy.address)}")
    if "mode" in doc and doc["mode"] != policy.mode:
        raise PolicyMismatch(f"the file states mode {doc['mode']!r}, its default makes it "
                             f"{policy.mode!r}")
    return policy
