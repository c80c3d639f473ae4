"""Who sealed each segment of a run record file, and with which key.

A record sealed by one host names its key once (``host_key``); its segments name no host.
A record sealed by several hosts (a run that moved) lists every host's key (``hosts``:
name -> base64 key) and each segment names the host that sealed it. Anything in between
(a segment naming a host the file does not list, a multi-host file with a ``host_key``,
a host named in a single-host file) is ``MalformedSegment``: every byte of the file is
either hashed, checked by a seal, or compared.

Who may seal which segment is the kernel's rule (:func:`fleet.record.kernel.check_holder`); this
module only says who did, for both decoders (:mod:`fleet.record.verify`,
:mod:`fleet.record.verify_fast`).
"""

from __future__ import annotations

from nacl.signing import VerifyKey

from fleet_ledger.fleet.errors import MalformedSegment, RecordError
from fleet_ledger.fleet.record.seal import decode_key
from fleet_ledger.fleet.record.wire import RecordWire, SegmentWire
from fleet_ledger.fleet.subjects import check_host_name

__all__ = ["SINGLE", "Sealers", "join_pages", "sealers"]

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


def join_pages(pages: list[RecordWire]) -> RecordWire:
    """One record file from pages of it (each naming every segment's host, as the ledger's
    paged export gives them): in the single-host form when one host sealed every segment,
    else in the multi-host form. Pages must be of one run, in order, without gaps."""
    if not pages:
        raise MalformedSegment("no pages to join")
    first = pages[0]
    segments: list[SegmentWire] = []
    keys: dict[str, str] = {}
    for page in pages:
        if (page.unit_id, page.grants_id, page.run) != (first.unit_id, first.grants_id,
                                                         first.run):
            raise MalformedSegment("pages of different runs")
        for name, key in (page.hosts or {}).items():
            if keys.setdefault(name, key) != key:
                raise MalformedSegment(f"pages give host {name!r} two keys")
        segments.extend(page.segments)
    if [w.index for w in segments] != list(range(1, len(segments) + 1)):
        raise MalformedSegment("the pages do not hold segments 1..n in order")
    names = {w.host for w in segments}
    sole = next(iter(names)) if len(names) == 1 else None
    if sole is not None:
        for w in segments:
            w.host = None
        return RecordWire(unit_id=first.unit_id, grants_id=first.grants_id, run=first.run,
                          host_key=keys.get(sole), segments=segments)
    return RecordWire(unit_id=first.unit_id, grants_id=first.grants_id, run=first.run,
                      hosts={n: keys[n] for n in sorted(keys) if n in names},
                      segments=segments)
