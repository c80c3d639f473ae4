"""The ledger's batch seal check: libsodium (PyNaCl), or ed25519-dalek where installed.

Both give the verdicts of the pure core's :func:`fleet.record.seal.check_seal` (libsodium's
``crypto_sign_verify_detached``); ``fleet verify`` keeps to PyNaCl. ed25519-dalek's
``verify_strict`` checks a seal in about three quarters of libsodium's time on the
benchmark machine (``fleet bench records``: 70 us against 90-96 us), and seals are most of
the fold's CPU. It is reached through the
``solders`` wheel (``pip install 'fleet-ledger[fast]'``), the one maintained PyPI wheel that
exposes it.

Why the verdicts agree. libsodium refuses a signature whose S is not below the group order,
whose R or public key A is of small order, whose A is not a canonical encoding (y < p) or
not on the curve, and otherwise accepts exactly when the encoding of [S]B - [k]A equals R's
32 bytes (cofactorless). ``verify_strict`` refuses a non-canonical S, small-order R and A,
and points off the curve, and compares the recomputed R with the signature's R bytes, also
cofactorless. The one difference is that dalek reads a non-canonical A (y >= p) as the
point y - p; this module refuses those keys before calling it, and refuses a non-canonical
R as well (libsodium can never match one, whose bytes no computed point encodes to).
``tests/test_seal_verifiers.py`` holds the two to the same verdicts on valid seals,
single-bit corruptions, non-canonical S, R and A, small-order and mixed-order R and A.

``FLEET_SEAL_VERIFIER=libsodium`` selects PyNaCl even where solders is installed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Literal

from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

# (public key, sealed message, signature)
Item = tuple[bytes, bytes, bytes]

VERIFIER_ENV = "FLEET_SEAL_VERIFIER"
_P = 2**255 - 19
_Y_MASK = (1 << 255) - 1

_SODIUM_KEYS: dict[bytes, VerifyKey] = {}


def canonical_point(encoding: bytes) -> bool:
    """Whether a 32-byte point encoding's y (its low 255 bits) is below p."""
    return (int.from_bytes(encoding, "little") & _Y_MASK) < _P


def verify_many_libsodium(items: list[Item]) -> list[bool]:
    """Each seal's verdict, in order, by libsodium."""
    out = []
    for public, message, signature in items:
        key = _SODIUM_KEYS.get(public)
        if key is None:
            try:
                key = _SODIUM_KEYS[public] = VerifyKey(public)
            except (ValueError, TypeError):
                out.append(False)
                continue
        try:
            key.verify(message, signature)
        except (BadSignatureError, ValueError, TypeError):
            out.append(False)
        else:
            out.append(True)
    return out


def _dalek() -> Callable[[list[Item]], list[bool]] | None:
    try:
        from solders.pubkey import Pubkey
        from solders.signature import Signature
    except ImportError:
        return None
    keys: dict[bytes, Pubkey | None] = {}

    def verify_many_dalek(items: list[Item]) -> list[bool]:
        """Each seal's verdict, in order, by ed25519-dalek's ``verify_strict``."""
        out = []
        for public, message, signature in items:
            key: Pubkey | Literal[False] | None = keys.get(public, False)  # False: not seen
            if key is False:
                ok = len(public) == 32 and canonical_point(public)
                key = keys[public] = Pubkey.from_bytes(public) if ok else None
            if (key is None or len(signature) != 64
                    or (signature[31] & 0x7F == 0x7F and not canonical_point(signature[:32]))):
                out.append(False)
                continue
            out.append(Signature.from_bytes(signature).verify(key, message))
        return out

    return verify_many_dalek


def choose() -> tuple[str, Callable[[list[Item]], list[bool]]]:
    """The verifier this process uses: (name, function)."""
    if os.environ.get(VERIFIER_ENV, "").lower() != "libsodium":
        dalek = _dalek()
        if dalek is not None:
            return "ed25519-dalek", dalek
    return "libsodium", verify_many_libsodium


VERIFIER, verify_many = choose()
