"""Regenerate docs/spec/vectors/exec_policy.json: ``python tests/gen_vectors_exec.py``.

Tests read the checked-in file; they also check this script would write the same bytes.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from fleet_ledger.fleet.address import digest, format_address
from fleet_ledger.fleet.env.exec_journal import JournalEntry, entry_bytes, fold_roots, journal_root
from fleet_ledger.fleet.env.exec_policy import (
    POLICY_DOMAIN,
    build_policy,
    decode_policy,
    policy_from_json,
    policy_to_json,
)
from fleet_ledger.fleet.errors import FleetError

PATH = Path(__file__).parent.parent / "docs" / "spec" / "vectors" / "exec_policy.json"


def content(name: str) -> bytes:
    """The stand-in BLAKE3 of a program's bytes: BLAKE3 of its name."""
    return digest(name.encode())


PROGRAMS = ["nc", "sh", "python3", "evil.py", "busybox", "make", "cc"]
POLICIES: list[tuple[str, str, list[tuple[str, str, str]]]] = [
    ("empty denylist", "allow", []),
    ("empty allowlist", "deny", []),
    ("denylist, rules given out of order", "allow",
     [("nc", "deny", "netcat"), ("evil.py", "deny", "evil script"), ("busybox", "deny", "bb")]),
    ("deny beats allow, the smallest label of the winner is kept", "allow",
     [("sh", "allow", "zeta"), ("sh", "deny", "beta"), ("sh", "deny", "alpha"),
      ("sh", "allow", "aaa")]),
    ("allowlist with a deny among allows, non-ASCII label", "deny",
     [("make", "allow", "make"), ("cc", "allow", "コンパイラ"), ("python3", "allow", "py"),
      ("python3", "deny", "no python"), ("make", "allow", "gmake")]),
]


def _refused(fn: Any, *args: Any) -> str | None:
    try:
        fn(*args)
    except FleetError as exc:
        return exc.rule
    return None


def _hand_built() -> dict[str, bytes]:
    """Canonical bytes of some policies written out from the spec's layout with the
    hand-builders below, not by ``build_policy``: the positive cases are pinned to them."""
    deny = sorted([("nc", b"netcat"), ("evil.py", b"evil script"), ("busybox", b"bb")],
                  key=lambda r: content(r[0]))
    return {
        "empty denylist": _head(1, 0),
        "empty allowlist": _head(2, 0),
        "denylist, rules given out of order": _head(1, 3) + b"".join(
            _rule(name, 2, label) for name, label in deny),
        # one rule per bytes: deny wins, with the smallest deny label
        "deny beats allow, the smallest label of the winner is kept": (
            _head(1, 1) + _rule("sh", 2, b"alpha")),
    }


def policy_case(name: str, default: str, rules: list[tuple[str, str, str]]) -> dict[str, Any]:
    policy = build_policy(default, [(content(p), v, label) for p, v, label in rules])
    pinned = _hand_built().get(name)
    assert pinned is None or policy.canonical == pinned, name
    return {
        "name": name,
        "input": {"default": default,
                  "rules": [[format_address(content(p)), v, label] for p, v, label in rules]},
        "expect": {
            "canonical": policy.canonical.hex(),
            "address": format_address(policy.address),
            "mode": policy.mode,
            "file": policy_to_json(policy),
            "decisions": [
                {"program": p, "bytes": format_address(content(p)),
                 "verdict": (d := policy.decide(content(p))).verdict, "label": d.label}
                for p in PROGRAMS],
        },
    }


def _rule(name: str, verdict: int, label: bytes) -> bytes:
    return content(name) + bytes((verdict,)) + struct.pack(">H", len(label)) + label


def _head(default: int, count: int) -> bytes:
    return POLICY_DOMAIN + struct.pack(">BI", default, count)


def byte_refusals() -> list[dict[str, Any]]:
    first = min(("nc", "sh"), key=content)
    second = "sh" if first == "nc" else "nc"
    good = [_rule(first, 2, b"x"), _rule(second, 2, b"y")]
    cases = [
        ("another domain", b"fleet.execpolicy/2" + _head(1, 0)[len(POLICY_DOMAIN):]),
        ("cut inside the rule count", _head(1, 0)[:-1]),
        ("unknown default byte", _head(3, 0)),
        ("rules out of order", _head(1, 2) + good[1] + good[0]),
        ("the same bytes twice", _head(1, 2) + good[0] + good[0]),
        ("unknown verdict byte", _head(1, 1) + _rule(first, 3, b"x")),
        ("empty label", _head(1, 1) + _rule(first, 2, b"")),
        ("label of 129 bytes", _head(1, 1) + _rule(first, 2, b"l" * 129)),
        ("label not UTF-8", _head(1, 1) + _rule(first, 2, b"\xff")),
        ("label with a control character", _head(1, 1) + _rule(first, 2, b"a\nb")),
        ("a byte after the last rule", _head(1, 1) + good[0] + b"\x00"),
        ("fewer rules than counted", _head(1, 2) + good[0]),
    ]
    out = []
    for name, raw in cases:
        rule = _refused(decode_policy, raw)
        assert rule is not None, name
        out.append({"name": name, "canonical": raw.hex(), "refused": rule})
    valid = _head(1, 2) + good[0] + good[1]
    assert decode_policy(valid).canonical == valid
    out.append({"name": "control: the same rules in order", "canonical": valid.hex(),
                "address": format_address(digest(valid))})
    return out


def file_refusals() -> list[dict[str, Any]]:
    policy = build_policy("allow", [(content("nc"), "deny", "netcat"),
                                    (content("sh"), "deny", "shell")])
    good = policy_to_json(policy)
    other = format_address(digest(b"another policy"))
    cases = [
        ("stated address is not the rules' hash", {**good, "address": other}),
        ("stated mode disagrees with the default", {**good, "mode": "allowlist"}),
        ("rules out of order", {**good, "rules": good["rules"][::-1]}),
        ("an unknown key", {**good, "comment": "x"}),
        ("a rule with an unknown key", {**good, "rules": [
            {**good["rules"][0], "why": "x"}, good["rules"][1]]}),
        ("a rule's bytes not an address", {**good, "rules": [
            {**good["rules"][0], "bytes": good["rules"][0]["bytes"] + "="},
            good["rules"][1]]}),
        ("another format", {**good, "format": "fleet.execpolicy/0"}),
        ("unknown verdict", {**good, "rules": [
            {**good["rules"][0], "verdict": "maybe"}, good["rules"][1]]}),
    ]
    out = []
    for name, doc in cases:
        rule = _refused(policy_from_json, doc)
        assert rule is not None, name
        out.append({"name": name, "file": doc, "refused": rule})
    return out


def journal_case() -> dict[str, Any]:
    policy = digest(b"a policy")
    entries = [
        JournalEntry(1, 1_700_000_000_000_000_000, "exec", "deny", "policy", content("nc"),
                     policy, "netcat", "/srv/unit/bin/nc"),
        JournalEntry(2, 1_700_000_000_000_500_000, "open", "deny", "policy", content("evil.py"),
                     policy, "evil script", "/srv/unit/é/evil.py"),
        JournalEntry(3, 1_700_000_000_001_000_000, "exec", "allow", "policy", content("make"),
                     policy, "default", ""),
        JournalEntry(4, 1_700_000_000_002_000_000, "exec", "deny", "unpinned", content("cc"),
                     policy, "default", "/srv/unit/cc"),
    ]
    roots = [format_address(journal_root(entries[:i])) for i in range(len(entries) + 1)]
    replay = digest(b"a runtime's replay journal root")
    return {
        "entries": [{**e.to_json(), "canonical": entry_bytes(e).hex()} for e in entries],
        "roots": roots,
        "fold": {"replay_root": format_address(replay), "exec_root": roots[-1],
                 "journal_root": format_address(fold_roots(replay, journal_root(entries)))},
    }


def render() -> str:
    assert set(_hand_built()) <= {name for name, _d, _r in POLICIES}  # no pin left unchecked
    doc = {
        "format": "fleet.execpolicy/1 vectors",
        "note": "program bytes are stood in for by BLAKE3(program name); see "
                "docs/spec/exec-policy.md",
        "policies": [policy_case(*p) for p in POLICIES],
        "byte_refusals": byte_refusals(),
        "file_refusals": file_refusals(),
        "journal": journal_case(),
    }
    return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    PATH.write_text(render())
    print(f"wrote {PATH}")
