"""The ledger's two seal verifiers give libsodium's verdicts on every kind of edge case.

ed25519-dalek (through solders, the ``fast`` extra the test install carries) must accept and
refuse exactly what PyNaCl does, or a ledger and ``fleet verify`` could disagree about a
seal. The cases are built here from scalars and points with libsodium's own primitives.
"""

from __future__ import annotations

import hashlib
import random

import pytest
from nacl import bindings as sodium
from nacl.signing import SigningKey

from fleet_ledger.ledger import seal_verifiers
from fleet_ledger.ledger.seal_verifiers import Item, canonical_point, verify_many_libsodium

L = 2**252 + 27742317777372353535851937790883648493
P = 2**255 - 19
# A point of order 8 (its multiples are the whole torsion subgroup).
TORSION = bytes.fromhex("c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a")
IDENTITY = (1).to_bytes(32, "little")


def _dalek():  # type: ignore[no-untyped-def]
    found = seal_verifiers._dalek()
    assert found is not None, "solders (the 'fast' extra) is part of the test install"
    return found


def _scalar(rng: random.Random) -> bytes:
    return sodium.crypto_core_ed25519_scalar_reduce(rng.randbytes(64))


def _k(r_enc: bytes, a_enc: bytes, message: bytes) -> bytes:
    return sodium.crypto_core_ed25519_scalar_reduce(
        hashlib.sha512(r_enc + a_enc + message).digest())


def _sign_raw(a: bytes, a_enc: bytes, r: bytes, r_enc: bytes, message: bytes) -> bytes:
    """S = r + k*a for given R and A encodings (the signer may choose any)."""
    s = sodium.crypto_core_ed25519_scalar_add(
        r, sodium.crypto_core_ed25519_scalar_mul(_k(r_enc, a_enc, message), a))
    return r_enc + s


def _torsion(n: int) -> bytes:
    point = IDENTITY
    for _ in range(n):
        point = sodium.crypto_core_ed25519_add(point, TORSION) if point != IDENTITY else TORSION
    return point


def _cases() -> list[tuple[str, Item]]:
    rng = random.Random(20261129)
    out: list[tuple[str, Item]] = []
    for _ in range(40):
        key = SigningKey(rng.randbytes(32))
        public = bytes(key.verify_key)
        message = b"fleet.seal/1" + rng.randbytes(72)
        sig = key.sign(message).signature
        out.append(("valid", (public, message, sig)))
        for _ in range(4):  # one flipped bit anywhere
            which, bit = rng.randrange(3), rng.randrange(8)
            item = [public, message, sig]
            pos = rng.randrange(len(item[which]))
            item[which] = (item[which][:pos] + bytes([item[which][pos] ^ (1 << bit)])
                           + item[which][pos + 1:])
            out.append(("bit flip", (item[0], item[1], item[2])))
        s_plus_l = (int.from_bytes(sig[32:], "little") + L).to_bytes(32, "little")
        out.append(("S + L", (public, message, sig[:32] + s_plus_l)))
    zero = (0).to_bytes(32, "little")
    for n in range(24):
        a, r = _scalar(rng), _scalar(rng)
        a_enc = sodium.crypto_scalarmult_ed25519_base_noclamp(a)
        r_enc = sodium.crypto_scalarmult_ed25519_base_noclamp(r)
        message = b"m%d" % n
        t = _torsion(n % 8 or 1)
        # Mixed-order R: valid under a cofactored check only.
        mixed_r = sodium.crypto_core_ed25519_add(r_enc, t)
        out.append(("mixed-order R", (a_enc, message, _sign_raw(a, a_enc, r, mixed_r, message))))
        # Mixed-order A: accepted by both exactly when k*T vanishes.
        mixed_a = sodium.crypto_core_ed25519_add(a_enc, t)
        out.append(("mixed-order A", (mixed_a, message, _sign_raw(a, mixed_a, r, r_enc, message))))
        # Small-order R and A.
        out.append(("small-order R", (a_enc, message, _sign_raw(a, a_enc, zero, t, message))))
        out.append(("small-order A", (t, message, t + zero)))
        out.append(("identity R and A", (IDENTITY, message, IDENTITY + zero)))
        valid = _sign_raw(a, a_enc, r, r_enc, message)
        # Non-canonical R: only the points with y < 19 have a second encoding (y + p), so a
        # signer can only use one whose log it knows as r, here the identity and y = 0.
        for y in (0, 1, n % 19):
            alt_r = ((y + P) | ((n & 1) << 255)).to_bytes(32, "little")
            out.append(("non-canonical R", (a_enc, message, _sign_raw(a, a_enc, zero, alt_r,
                                                                      message))))
        out.append(("valid raw", (a_enc, message, valid)))
    # Non-canonical A: y in 0..18 re-encoded as y + p (the only such encodings there are),
    # with both sign bits; a signature over the non-canonical bytes by the small-order or
    # unknown-log point they name.
    for y in range(19):
        for sign in (0, 1):
            enc = ((y + P) | (sign << 255)).to_bytes(32, "little")
            out.append(("non-canonical A", (enc, b"x", IDENTITY + bytes(32))))
    return out


CASES = _cases()


def test_the_cases_cover_accepts_and_refusals():
    verdicts = verify_many_libsodium([item for _, item in CASES])
    kinds_accepted = {kind for (kind, _), ok in zip(CASES, verdicts, strict=True) if ok}
    kinds_refused = {kind for (kind, _), ok in zip(CASES, verdicts, strict=True) if not ok}
    assert {"valid", "valid raw", "mixed-order A"} <= kinds_accepted
    assert {"bit flip", "S + L", "mixed-order R", "small-order R", "small-order A",
            "non-canonical R", "non-canonical A", "mixed-order A"} <= kinds_refused


@pytest.mark.parametrize("kind", sorted({kind for kind, _ in CASES}))
def test_dalek_gives_libsodiums_verdict(kind: str):
    items = [item for k, item in CASES if k == kind]
    assert _dalek()(items) == verify_many_libsodium(items)


def test_canonical_point():
    assert canonical_point(bytes(32)) and canonical_point(TORSION)
    assert canonical_point((P - 1).to_bytes(32, "little"))
    assert not canonical_point(P.to_bytes(32, "little"))
    assert not canonical_point((P | 1 << 255).to_bytes(32, "little"))
    assert canonical_point((1 << 255).to_bytes(32, "little"))  # y = 0, sign bit set


def test_the_environment_can_force_libsodium(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(seal_verifiers.VERIFIER_ENV, "libsodium")
    assert seal_verifiers.choose()[0] == "libsodium"
    monkeypatch.delenv(seal_verifiers.VERIFIER_ENV)
    assert seal_verifiers.choose()[0] == "ed25519-dalek"
