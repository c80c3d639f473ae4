"""The strict JSONC reader: what it accepts, each refusal by name, agreement with an
independent parser (json5) on generated and edited documents, and plain JSON reading back as
the value json.dumps wrote (the reader wraps the standard library's parser, so json.loads is
no independent check: that test shows the blanking and hooks leave plain JSON alone)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet_ledger.fleet.env.jsonc import MAX_BYTES, MAX_DEPTH, MAX_SAFE_INTEGER, blank, loads
from fleet_ledger.fleet.env.manifest_errors import (
    ByteOrderMark,
    DuplicateKey,
    IntegerOutOfRange,
    JsoncError,
    JsoncSyntax,
    LoneSurrogate,
    NonFiniteNumber,
    NonIntegerNumber,
)

from jsonc_helpers import GAPS, read5, render, same, values

REFUSED = [
    ("bom-utf8", b"\xef\xbb\xbf{}", ByteOrderMark),
    ("bom-utf16", b"\xff\xfe{\x00}\x00", ByteOrderMark),
    ("bom-text", "\ufeff{}", ByteOrderMark),
    ("duplicate-top", '{"a": 1, "a": 1}', DuplicateKey),
    ("duplicate-deep", '{"x": [{"y": {"a": 1, "b": 2, "a": 3}}]}', DuplicateKey),
    ("duplicate-by-escape", '{"a": 1, "\\u0061": 2}', DuplicateKey),
    ("nan", '{"a": NaN}', NonFiniteNumber),
    ("infinity", "[Infinity]", NonFiniteNumber),
    ("minus-infinity", "[-Infinity]", NonFiniteNumber),
    ("fraction", "[1.5]", NonIntegerNumber),
    ("whole-fraction", "[1.0]", NonIntegerNumber),
    ("exponent", "[1e3]", NonIntegerNumber),
    ("beyond-2^53", f"[{MAX_SAFE_INTEGER + 1}]", IntegerOutOfRange),
    ("below-minus-2^53", f"[-{MAX_SAFE_INTEGER + 1}]", IntegerOutOfRange),
    ("thousand-digits", "[" + "9" * 1000 + "]", IntegerOutOfRange),
    ("lone-high-surrogate", '["\\ud800"]', LoneSurrogate),
    ("lone-low-surrogate", '{"\\udc00": 1}', LoneSurrogate),
    ("reversed-pair", '["\\udc00\\ud800"]', LoneSurrogate),
    ("raw-surrogate-text", '["\ud800"]', LoneSurrogate),
    ("encoded-surrogate-bytes", b'["\xed\xa0\x80"]', JsoncSyntax),
    ("not-utf8", b'["\xff"]', JsoncSyntax),
    ("lone-comma", "[,]", JsoncSyntax),
    ("double-comma", "[1,,]", JsoncSyntax),
    ("comma-after-colon", '{"a":,}', JsoncSyntax),
    ("comma-in-empty-object", "{,}", JsoncSyntax),
    ("two-trailing-commas-in-object", '{"a":1,,}', JsoncSyntax),
    ("single-quotes", "['a']", JsoncSyntax),
    ("unquoted-key", "{a: 1}", JsoncSyntax),
    ("hex", "[0x10]", JsoncSyntax),
    ("plus-sign", "[+1]", JsoncSyntax),
    ("leading-zero", "[01]", JsoncSyntax),
    ("unterminated-comment", "[1] /* no end", JsoncSyntax),
    ("slash", "[1/2]", JsoncSyntax),
    ("hash-comment", "# not a comment\n{}", JsoncSyntax),
    ("raw-tab-in-string", '["a\tb"]', JsoncSyntax),
    ("empty", "", JsoncSyntax),
    ("only-a-comment", "// nothing\n", JsoncSyntax),
    ("two-values", "{} {}", JsoncSyntax),
    ("too-deep", "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), JsoncSyntax),
    ("vertical-tab-space", "[1,\v2]", JsoncSyntax),
    ("nbsp-space", "[1,\u00a02]", JsoncSyntax),
]


@pytest.mark.parametrize(("text", "error"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_each_refusal_is_named(text: str | bytes, error: type[JsoncError]) -> None:
    """Each input is refused with exactly its named error (and never accepted)."""
    with pytest.raises(JsoncError) as caught:
        loads(text)
    assert type(caught.value) is error, caught.value


ACCEPTED = [
    ('{"a": [1, 2,], // two\n}', {"a": [1, 2]}),
    ("/* lead */ [ /* in */ 1 /* out */ ] // tail", [1]),
    ('{"a": 1,}', {"a": 1}),
    ("[[],]", [[]]),
    ('{"u": "\\ud83d\\ude00", "e": "\\u00e9", "s": "/*not*/ //not"}',
     {"u": "\U0001f600", "e": "\u00e9", "s": "/*not*/ //not"}),
    (f"[{MAX_SAFE_INTEGER}, -{MAX_SAFE_INTEGER}, -0]", [MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER, 0]),
    ("[true,false,null]\r\n// crlf\r\n", [True, False, None]),
    ("[" * MAX_DEPTH + "]" * MAX_DEPTH, json.loads("[" * MAX_DEPTH + "]" * MAX_DEPTH)),
]


@pytest.mark.parametrize(("text", "value"), ACCEPTED, ids=range(len(ACCEPTED)))
def test_jsonc_inputs_read_as_their_value(text: str, value: Any) -> None:
    """Comments and single trailing commas are read past; strings keep what looks like one."""
    assert same(loads(text), value)
    assert same(loads(text.encode()), value)


def test_the_size_limit_counts_bytes_for_text_as_for_bytes() -> None:
    """A str is held to MAX_BYTES in UTF-8 bytes, not characters: a document of fewer than
    MAX_BYTES characters but more than MAX_BYTES bytes is refused either way it is given."""
    text = '["' + "\u00e9" * (MAX_BYTES // 2) + '"]'
    assert len(text) < MAX_BYTES < len(text.encode("utf-8"))
    for form in (text, text.encode("utf-8")):
        with pytest.raises(JsoncSyntax, match="larger than"):
            loads(form)
    fits = '["' + "\u00e9" * (MAX_BYTES // 2 - 2) + '"]'
    assert loads(fits) == loads(fits.encode("utf-8")) == ["\u00e9" * (MAX_BYTES // 2 - 2)]


def test_plain_json_mode_refuses_comments_and_trailing_commas() -> None:
    """With comments=False, a comment or a trailing comma is JsoncSyntax; plain JSON reads."""
    for text in ("[1] // c", "/* c */ [1]", "[1,]", '{"a": 1,}'):
        with pytest.raises(JsoncSyntax):
            loads(text, comments=False)
    assert loads('{"a": [1]}', comments=False) == {"a": [1]}


def test_blanking_keeps_every_position() -> None:
    """The blanked text has the same length and newlines, so errors point into the source."""
    text = '{\n  "a": 1, /* x\n y */ "b": [2,], // z\n}'
    out = blank(text)
    assert len(out) == len(text)
    assert [i for i, c in enumerate(out) if c == "\n"] == [i for i, c in enumerate(text)
                                                          if c == "\n"]
    with pytest.raises(JsoncSyntax, match="line 3 column 7"):
        loads('{\n  "a": 1, // fine\n  "b" 2\n}')


# -- against independent parsers ------------------------------------------------------------


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values, st.data())
def test_generated_jsonc_reads_alike_in_both_parsers(value: Any, data: st.DataObject) -> None:
    """A generated JSONC document reads as the value it was made from, here and in json5."""
    text = data.draw(st.sampled_from(GAPS)) + render(value, data.draw) + data.draw(
        st.sampled_from(GAPS))
    assert same(loads(text), value)
    assert same(loads(text.encode("utf-8")), value)
    assert same(read5(text), value)


MUTATIONS = [",", "/", "*", '"', "\\", "]", "}", "[", "{", ":", "NaN", "1.5", "1e2",
             str(MAX_SAFE_INTEGER + 1), "'", "\\ud800", "0x1", "+", "\t", "\x00", "a", " "]


def _outcome(parse: Any, text: str, errors: Any) -> tuple[str, Any]:
    try:
        return "ok", parse(text)
    except errors as exc:
        return type(exc).__name__, exc


def _holds(value: Any, pred: Any) -> bool:
    stack = [value]
    while stack:
        v = stack.pop()
        if pred(v):
            return True
        if isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
    return False


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values, st.data())
def test_mutated_documents_agree_with_json5_where_both_accept(value: Any,
                                                             data: st.DataObject) -> None:
    """Edited documents: whatever this reader accepts, json5 accepts with the same value;
    a number or string refusal json5 lets through is a float, big integer or half a pair."""
    text = render(value, data.draw)
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(text)))
        if data.draw(st.booleans()) and at < len(text):
            text = text[:at] + text[at + 1:]
        else:
            text = text[:at] + data.draw(st.sampled_from(MUTATIONS)) + text[at:]
    ours = _outcome(loads, text, JsoncError)  # anything else escapes and fails the test
    theirs = _outcome(read5, text, (ValueError, RecursionError))  # json5's refusals
    if ours[0] == "ok":
        assert theirs[0] == "ok", f"json5 refused what we accepted: {text!r}: {theirs[1]}"
        assert same(ours[1], theirs[1]), text
        return
    error = ours[1]
    if theirs[0] != "ok":
        return
    found = theirs[1]
    if isinstance(error, NonIntegerNumber):
        assert _holds(found, lambda v: type(v) is float)
    elif isinstance(error, NonFiniteNumber):
        assert _holds(found, lambda v: (type(v) is float and v != v) or v in (float("inf"),
                                                                            float("-inf")))
    elif isinstance(error, IntegerOutOfRange):
        assert _holds(found, lambda v: type(v) is int and abs(v) > MAX_SAFE_INTEGER)
    elif isinstance(error, LoneSurrogate):
        assert _holds(found, lambda v: isinstance(v, str) and any(
            0xD800 <= ord(c) <= 0xDFFF for c in v))
    else:
        # JSON5's extras (quotes, hex, '+', raw control characters ...) are not JSONC.
        assert isinstance(error, JsoncSyntax), f"{text!r}: {error!r} but json5 read {found!r}"


@settings(max_examples=200, deadline=None)
@given(values, st.booleans())
def test_plain_json_reads_back_as_the_value_dumped_in_both_modes(value: Any,
                                                                 ascii_only: bool) -> None:
    """A comment-free document from json.dumps reads back as the value it was made from,
    with comments allowed or not: the blanking and the hooks change nothing in plain JSON
    (json.loads, which this reader calls, reads it the same)."""
    text = json.dumps(value, ensure_ascii=ascii_only, indent=None if ascii_only else 1)
    assert same(loads(text, comments=False), value)
    assert same(loads(text, comments=False), json.loads(text))
    assert same(loads(text), json.loads(text))
