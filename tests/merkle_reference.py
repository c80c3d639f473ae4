"""RFC 9162 §2.1 written straight from the text (recursive MTH, PATH, PROOF), for tests only.

Deliberately slow and literal: the fast planner in fleet.log.merkle is checked against it.
"""

from __future__ import annotations

from hashlib import sha256


def _k(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def mth(d: list[bytes]) -> bytes:
    if not d:
        return sha256(b"").digest()
    if len(d) == 1:
        return sha256(b"\x00" + d[0]).digest()
    k = _k(len(d))
    return sha256(b"\x01" + mth(d[:k]) + mth(d[k:])).digest()


def path(m: int, d: list[bytes]) -> list[bytes]:
    if len(d) == 1:
        return []
    k = _k(len(d))
    if m < k:
        return [*path(m, d[:k]), mth(d[k:])]
    return [*path(m - k, d[k:]), mth(d[:k])]


def proof(m: int, d: list[bytes]) -> list[bytes]:
    return _subproof(m, d, True)


def _subproof(m: int, d: list[bytes], b: bool) -> list[bytes]:
    n = len(d)
    if m == n:
        return [] if b else [mth(d)]
    k = _k(n)
    if m <= k:
        return [*_subproof(m, d[:k], b), mth(d[k:])]
    return [*_subproof(m - k, d[k:], False), mth(d[:k])]
