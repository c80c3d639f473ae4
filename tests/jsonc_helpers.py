"""Generating JSONC documents for the tests: values, random comments, whitespace, escapes
and trailing commas, and reading them with an independent parser (json5)."""

from __future__ import annotations

import json
from typing import Any

import json5
from hypothesis import strategies as st

from fleet_ledger.fleet.env.jsonc import MAX_SAFE_INTEGER


def same(a: Any, b: Any) -> bool:
    """Equal values of equal types all the way down (True is not 1 here)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


def joined(value: Any) -> Any:
    """json5's value with escaped surrogate pairs joined into one character each, as JSON
    readers do (json5 keeps the two halves)."""
    if isinstance(value, str):
        return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    if isinstance(value, list):
        return [joined(v) for v in value]
    if isinstance(value, dict):
        return {joined(k): joined(v) for k, v in value.items()}
    return value


def read5(text: str) -> Any:
    """The independent reading: json5, duplicates refused, pairs joined."""
    return joined(json5.loads(text, allow_duplicate_keys=False))


values = st.recursive(
    st.none() | st.booleans() | st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
GAPS = ["", " ", "\n", "\t", "\r\n", "// line\n", "/* block */", "/*\n * many\n */",
        "//\r", "/**/", "/* // */", "// /* \n"]
SHORT = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r", "\b": "\\b",
         "\f": "\\f", "/": "\\/"}


def render_string(s: str, draw: Any) -> str:
    """A JSON string for ``s`` with escapes of every kind chosen at random."""
    out = []
    for ch in s:
        style = draw(st.integers(0, 3))
        code = ord(ch)
        if ch in SHORT and (style < 2 or ch in '"\\' or code < 0x20):
            out.append(SHORT[ch] if ch != "/" or style == 0 else "/")
        elif code < 0x20 or style == 3:
            if code > 0xFFFF:
                hi, lo = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
                out.append(f"\\u{hi:04x}\\u{lo:04X}")
            else:
                out.append(f"\\u{code:04x}" if style == 3 else f"\\u{code:04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def render(value: Any, draw: Any, shuffle: bool = False) -> str:
    """``value`` as JSONC with random comments, whitespace and trailing commas (and with
    ``shuffle``, its objects' members in a random order)."""
    def gap() -> str:
        return draw(st.sampled_from(GAPS))

    if isinstance(value, list | dict):
        if isinstance(value, dict):
            pairs = list(value.items())
            if shuffle:
                pairs = draw(st.permutations(pairs))
            items = [render_string(k, draw) + gap() + ":" + gap() + render(v, draw, shuffle)
                     for k, v in pairs]
        else:
            items = [render(v, draw, shuffle) for v in value]
        body = ",".join(gap() + item + gap() for item in items)
        if items and draw(st.booleans()):
            body += "," + gap()
        return ("{" if isinstance(value, dict) else "[") + body + gap() + (
            "}" if isinstance(value, dict) else "]")
    if isinstance(value, str):
        return render_string(value, draw)
    return json.dumps(value)
