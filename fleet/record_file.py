"""Who sealed each segment of a run record file, and with which key.

A record sealed by one host names its key once (``host_key``); its segments name no host.
A record sealed by several hosts (a run that moved) lists every host's key (``hosts``:
name -> base64 key) and each segment names the host that sealed it. Anything in between
(a segment naming a host the file does not list, a multi-host file with a ``host_key``,
a host named in a single-host file) is ``MalformedSegment``: every byte of the file is
either hashed, checked by a seal, or compared.

Who may seal which segment is the kernel's rule (:func:`fleet.kernel.check_holder`); this
module only says who did, for both decoders (:mod:`fleet.verify`, :mod:`fleet.verify_fast`).
"""

from __future__ import annotations

from nacl.signing import VerifyKey

from fleet.errors import MalformedSegment, RecordError
from fleet.seal import decode_key
from fleet.subjects import check_host_name
from fleet.wire import RecordWire

__all__ = ["SINGLE", "Sealers", "sealers"]

# The name the one host of a single-host record goes by here.
SINGLE = ""

# (each segment's host, in order; each host's key, None where the file gives none)
Sealers = tuple[list[str], dict[str, VerifyKey | None]]


def _key(text: str) -> VerifyKey:
    try:
        return decode_key(text)
    except ValueError as exc:
        raise MalformedSegment(str(exc)) from None


def sealers(record: RecordWire, pinned: str | None = None) -> Sealers:
    """Each segment's sealing host and each host's key; ``pinned`` (a single-host record
    only) is the key the record must be sealed with."""
    if record.hosts is None:
        for position, wire in enumerate(record.segments, start=1):
            if wire.host is not None:
                raise MalformedSegment("a single-host record names no host per segment",
                                       segment=position)
        if pinned is not None and record.host_key not in (None, pinned):
            raise RecordError("the record is sealed by a different host key than the pinned one")
        text = pinned if pinned is not None else record.host_key
        return [SINGLE] * len(record.segments), {SINGLE: None if text is None else _key(text)}
    if record.host_key is not None:
        raise MalformedSegment("a record sealed by several hosts lists their keys in hosts, "
                               "not in host_key")
    if pinned is not None:
        raise RecordError("a record sealed by several hosts is checked against the keys it "
                          "lists; a single pinned key cannot check it")
    keys: dict[str, VerifyKey | None] = {}
    for name, text in record.hosts.items():
        try:
            check_host_name(name)
        except ValueError as exc:
            raise MalformedSegment(str(exc)) from None
        keys[name] = _key(text)
    names = []
    for position, wire in enumerate(record.segments, start=1):
        if wire.host is None or wire.host not in keys:
            raise MalformedSegment(
                f"segment {position} names host {wire.host!r}, which the record does not list",
                segment=position)
        names.append(wire.host)
    return names, keys
