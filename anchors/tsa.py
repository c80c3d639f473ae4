"""RFC 3161 timestamp authority anchor: the checkpoint's digest, time-stamped.

What leaves: a ``TimeStampReq`` whose message imprint is SHA-256 of the checkpoint body
(origin, size and root lines - the exact text the ledger signed), with a random nonce and
``certReq`` set. Nothing else. The receipt is the TSA's DER ``TimeStampResp``, kept
base64. It proves that the checkpoint existed at the token's ``genTime``: a ledger that
later rewrote history cannot produce an earlier-dated token for the new root.

Verifying a receipt (:func:`verify_receipt`, no I/O): status granted, the token's CMS
signature, the signer certificate's critical ``id-kp-timeStamping`` EKU and its chain to
the trust anchor(s) given, and the message imprint equal to SHA-256(checkpoint body).

Library: ``rfc3161-client`` (Trail of Bits, used by sigstore-python): a maintained Rust
(``rust-openssl``/``cryptography``) parser and verifier of TimeStampResp including the
certificate chain, ESSCertID and EKU checks, with typed ``VerificationError`` - rather than
asn1crypto + hand-written CMS checks, or the unmaintained pyasn1-based ``rfc3161ng``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from rfc3161_client import (
    HashAlgorithm,
    TimestampRequestBuilder,
    VerificationError,
    VerifierBuilder,
    decode_timestamp_response,
)

from fleet_ledger.anchors.base import Anchor, AnchorError, ProofSource, Receipt
from fleet_ledger.fleet.log.log_errors import BadTimestamp
from fleet_ledger.fleet.log.note import parse_note

QUERY_TYPE = "application/timestamp-query"
REPLY_TYPE = "application/timestamp-reply"


def load_trust_anchors(paths: Sequence[str | Path]) -> list[x509.Certificate]:
    """Every PEM certificate in the files given (``ValueError`` if a file holds none)."""
    certs: list[x509.Certificate] = []
    for path in paths:
        found = x509.load_pem_x509_certificates(Path(path).read_bytes())
        if not found:
            raise ValueError(f"{path} holds no PEM certificate")
        certs.extend(found)
    return certs


def timestamp_request(body: str) -> tuple[bytes, int | None]:
    """DER TimeStampReq for SHA-256(``body``) with a nonce; returns (bytes, nonce)."""
    request = (TimestampRequestBuilder().data(body.encode()).hash_algorithm(HashAlgorithm.SHA256)
               .nonce(nonce=True).cert_request(cert_request=True).build())
    return request.as_bytes(), request.nonce


def verify_receipt(receipt: str, body: str, roots: Sequence[x509.Certificate],
                   nonce: int | None = None) -> str:
    """Check a base64 TimeStampResp against checkpoint ``body``; returns its genTime (ISO).

    Raises :class:`~fleet.log.log_errors.BadTimestamp` naming what failed.
    """
    try:
        response = decode_timestamp_response(base64.b64decode(receipt, validate=True))
    except (ValueError, binascii.Error) as exc:
        raise BadTimestamp(f"receipt is not a DER TimeStampResp: {exc}") from exc
    builder = VerifierBuilder(nonce=nonce)
    for root in roots:
        builder = builder.add_root_certificate(root)
    try:
        builder.build().verify_message(response, body.encode())
    except (VerificationError, ValueError) as exc:
        raise BadTimestamp(f"RFC 3161 receipt does not verify: {exc}") from exc
    return response.tst_info.gen_time.isoformat()


def post_query(url: str, query: bytes, timeout: float = 10.0) -> bytes:
    """POST a TimeStampReq; the raw TimeStampResp bytes."""
    request = urllib.request.Request(url, data=query, method="POST",
                                     headers={"Content-Type": QUERY_TYPE, "Accept": REPLY_TYPE})
    with urllib.request.urlopen(request, timeout=timeout) as resp:
        return resp.read()


class TsaAnchor(Anchor):
    """Time-stamps each checkpoint's body digest at an RFC 3161 TSA over HTTP."""

    kind = "tsa"

    def __init__(self, name: str, url: str, ca: str | Sequence[str] | None = None,
                 timeout: float = 10.0) -> None:
        super().__init__(name)
        self.url = url
        paths = [] if ca is None else [ca] if isinstance(ca, str) else list(ca)
        self.roots = load_trust_anchors(paths)
        self.timeout = timeout

    async def anchor(self, note: str, size: int, proofs: ProofSource) -> Receipt:
        body = parse_note(note)[0]
        query, nonce = timestamp_request(body)
        try:
            der = await asyncio.to_thread(post_query, self.url, query, self.timeout)
        except (OSError, urllib.error.URLError) as exc:
            raise AnchorError(f"TSA {self.url} unreachable: {exc}") from exc
        receipt = base64.b64encode(der).decode()
        try:
            if self.roots:
                verify_receipt(receipt, body, self.roots, nonce)
            else:
                response = decode_timestamp_response(der)
                imprint = response.tst_info.message_imprint.message
                if response.status != 0 or response.tst_info.nonce != nonce \
                        or imprint != hashlib.sha256(body.encode()).digest():
                    raise BadTimestamp("TSA refused, or answered another nonce or imprint")
        except (BadTimestamp, ValueError) as exc:
            raise AnchorError(f"TSA {self.url} sent a bad receipt: {exc}") from exc
        return Receipt(self.name, self.kind, size, receipt)
