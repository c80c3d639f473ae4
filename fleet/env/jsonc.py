"""Strict JSONC: JSON (RFC 8259) plus comments and trailing commas, and nothing looser.

A devcontainer.json is "JSON with comments". This reader accepts exactly that and refuses
what JSON readers disagree on, each by name (:mod:`fleet.env.manifest_errors`):

* ``//`` line comments and ``/* */`` block comments, anywhere whitespace may stand;
* one trailing comma after the last member of an object or element of an array
  (``[1,]``, ``{"a": 1,}``; not ``[,]``, ``[1,,]`` or ``{"a":,}``);
* refused: a byte order mark (:class:`ByteOrderMark`); a key twice in one object, at any
  depth, also when spelled with escapes (:class:`DuplicateKey`); ``NaN`` and
  ``Infinity`` (:class:`NonFiniteNumber`); a fraction or exponent
  (:class:`NonIntegerNumber`); an integer beyond +-(2^53 - 1) (:class:`IntegerOutOfRange`);
  a ``\\uD800``-``\\uDFFF`` escape that is not half of a pair (:class:`LoneSurrogate`);
  anything else that is not JSON, text that is not UTF-8, more than :data:`MAX_BYTES`
  bytes or nesting deeper than :data:`MAX_DEPTH` (:class:`JsoncSyntax`).

How: a small tokenizer blanks every comment and every allowed trailing comma with spaces
of the same length (newlines kept), so the result is plain JSON with every character where
it was; the standard library's parser then reads it, with hooks that refuse duplicates and
the numbers above. Its error positions are therefore positions in the original text.

    loads('{"a": [1, 2,], // two\\n}')   # -> {'a': [1, 2]}
    loads('{"a": 1, "a": 2}')            # DuplicateKey
    loads('[1] // x', comments=False)    # JsoncSyntax: plain JSON only
"""

from __future__ import annotations

import json
import re
from typing import Any

from fleet_ledger.fleet.env.manifest_errors import (
    ByteOrderMark,
    DuplicateKey,
    IntegerOutOfRange,
    JsoncSyntax,
    LoneSurrogate,
    NonFiniteNumber,
    NonIntegerNumber,
)

__all__ = ["MAX_BYTES", "MAX_DEPTH", "MAX_SAFE_INTEGER", "blank", "loads"]

MAX_BYTES = 1 << 20
MAX_DEPTH = 64
MAX_SAFE_INTEGER = 2**53 - 1
_BOMS = (b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")

_TOKEN = re.compile(r"""
    (?P<string> "(?:[^"\\]|\\.)*" )
  | (?P<line>   //[^\n\r]* )
  | (?P<block>  /\*.*?\*/ )
  | (?P<space>  [ \t\n\r]+ )
  | (?P<punct>  [\[\]{}:,] )
  | (?P<word>   [^ \t\n\r\[\]{}:,"/]+ )
  | (?P<other>  . )
""", re.S | re.X)
_OPEN = frozenset("[{")
_CLOSE = frozenset("]}")
# A comma may be dropped only after a value: not after these.
_NOT_A_VALUE = frozenset("[{,:")
_NOT_NEWLINE = re.compile(r"[^\n\r]")


def blank(text: str, *, comments: bool = True) -> str:
    """``text`` with comments and allowed trailing commas blanked (same length), or the
    refusal; with ``comments=False`` neither is allowed and the text comes back as is."""
    out: list[str] = []
    # (index in out, text) of each significant token, to see around a comma.
    significant: list[tuple[int, str]] = []
    depth = 0
    for m in _TOKEN.finditer(text):
        kind, tok = m.lastgroup, m.group()
        if kind in ("line", "block"):
            if not comments:
                raise JsoncSyntax(f"{_where(text, m.start())}: a comment in plain JSON")
            out.append(_NOT_NEWLINE.sub(" ", tok))
            continue
        if kind == "other" and tok == "/":
            raise JsoncSyntax(f"{_where(text, m.start())}: a '/' that starts no comment, "
                              "or a comment that does not end")
        if kind == "punct":
            if tok in _OPEN:
                depth += 1
                if depth > MAX_DEPTH:
                    raise JsoncSyntax(f"{_where(text, m.start())}: nested deeper than "
                                      f"{MAX_DEPTH}")
            elif tok in _CLOSE:
                depth -= 1
                _drop_trailing_comma(out, significant, comments)
        if kind != "space":
            significant.append((len(out), tok))
        out.append(tok)
    return "".join(out)


def _drop_trailing_comma(out: list[str], significant: list[tuple[int, str]],
                         allowed: bool) -> None:
    # Called at a closing bracket: is the token before it a comma that follows a value?
    if not allowed or len(significant) < 2 or significant[-1][1] != ",":
        return
    if significant[-2][1] in _NOT_A_VALUE:
        return
    at, _comma = significant.pop()
    out[at] = " "


def _where(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    column = pos - text.rfind("\n", 0, pos)
    return f"line {line} column {column}"


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise DuplicateKey(f"the key {key!r} appears twice in one object")
        obj[key] = value
    return obj


def _integer(text: str) -> int:
    # Checked before int(): a long digit string is refused without converting it.
    if len(text.lstrip("-")) > 16 or abs(value := int(text)) > MAX_SAFE_INTEGER:
        raise IntegerOutOfRange(f"the integer {text[:24]} is beyond +-(2^53 - 1)")
    return value


def _fraction(text: str) -> Any:
    raise NonIntegerNumber(f"the number {text[:24]} is not an integer (a declaration holds "
                           "integers only)")


def _constant(text: str) -> Any:
    raise NonFiniteNumber(f"{text} is not a JSON number")


def _check_strings(value: Any) -> None:
    # The standard parser joins escaped surrogate pairs and leaves a lone half as is.
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            _check_text(v)
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, dict):
            for k, item in v.items():
                _check_text(k)
                stack.append(item)


def _check_text(s: str) -> None:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise LoneSurrogate(f"the string {s[:40]!r} holds half a surrogate pair") from None


def loads(data: bytes | str, *, comments: bool = True) -> Any:
    """The value of a strict JSONC (``comments=False``: strict JSON) document, or the
    named refusal; see the module docstring."""
    if isinstance(data, str):  # checked as the bytes it stands for: one limit, in bytes
        try:
            data = data.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise LoneSurrogate(f"the text holds half a surrogate pair (character "
                                f"{exc.start})") from None
    if data.startswith(_BOMS):
        raise ByteOrderMark("the text starts with a byte order mark")
    if len(data) > MAX_BYTES:
        raise JsoncSyntax(f"the text is larger than {MAX_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JsoncSyntax(f"the text is not UTF-8 (byte {exc.start})") from None
    try:
        value = json.loads(blank(text, comments=comments), object_pairs_hook=_pairs,
                           parse_int=_integer, parse_float=_fraction, parse_constant=_constant)
    except json.JSONDecodeError as exc:
        raise JsoncSyntax(f"line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    _check_strings(value)
    return value
