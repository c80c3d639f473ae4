"""The book of grants the grant events build: each grant's entry (its terms after its
amendments, the children minted from it), the triggers raised, and a run's effective terms
up its chain. A batch's overlay on the committed book is a :class:`GrantBook` with a base.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from fleet_ledger.fleet.grants.grant import Grant, Terms, meet
from fleet_ledger.fleet.grants.grant_codec import NO_AMENDMENT

__all__ = ["GrantBook", "GrantEntry", "GrantView", "chain_of", "effective_terms"]


@dataclass(slots=True)
class GrantEntry:
    """A folded grant: its bytes, its own terms after its amendments (``amended``: the last
    amendment's sequence number, ``last``: its address) and the ledger times of the
    children minted from it."""

    grant: Grant
    address: bytes
    data: bytes
    terms: Terms
    stream_seq: int
    amended: int = 0
    last: bytes = NO_AMENDMENT
    minted: list[int] = field(default_factory=list)

    def copy(self) -> GrantEntry:
        return GrantEntry(self.grant, self.address, self.data, self.terms, self.stream_seq,
                          self.amended, self.last, list(self.minted))


class GrantView(Protocol):
    """What events and segments are decided against."""

    def entry(self, address: bytes) -> GrantEntry | None: ...

    def trigger(self, key: bytes, name: str) -> bytes | None:
        """``None``: never raised; ``NO_AMENDMENT`` (zeros): raised, unused; else the
        child minted on it."""
        ...

    def effective(self, address: bytes) -> Terms | None: ...


class GrantBook:
    """The grants, triggers and mints folded so far: a ledger's committed book, or
    (``base``) a batch's overlay on it, holding copies of the entries the batch changed
    until :meth:`install` makes them the base's once the batch is durable."""

    __slots__ = ("_effective", "base", "entries", "triggers")

    def __init__(self, base: GrantBook | None = None) -> None:
        self.base = base
        self.entries: dict[bytes, GrantEntry] = {}
        self.triggers: dict[tuple[bytes, str], bytes] = {}
        self._effective: dict[bytes, Terms] = {}

    def entry(self, address: bytes) -> GrantEntry | None:
        held = self.entries.get(address)
        return held if held is not None or self.base is None else self.base.entry(address)

    def trigger(self, key: bytes, name: str) -> bytes | None:
        held = self.triggers.get((key, name))
        return (held if held is not None or self.base is None
                else self.base.trigger(key, name))

    def effective(self, address: bytes) -> Terms | None:
        """The terms a run under ``address`` is held to: its own (amended) terms met with
        its parent's effective terms, up the chain (cached until the book changes; an
        overlay that changed nothing asks its base, whose cache outlives the batch)."""
        if self.base is not None and not self.entries:
            return self.base.effective(address)
        held = self._effective.get(address)
        if held is None:
            held = effective_terms(self, address)
            if held is not None:
                self._effective[address] = held
        return held

    def put(self, entry: GrantEntry) -> None:
        self.entries[entry.address] = entry
        self._effective.clear()

    def put_trigger(self, key: bytes, name: str, child: bytes) -> None:
        self.triggers[(key, name)] = child

    def install(self) -> None:
        """Make an overlay's changes its base's."""
        assert self.base is not None
        for entry in self.entries.values():
            self.base.put(entry)
        self.base.triggers.update(self.triggers)


def chain_of(view: GrantView, address: bytes) -> list[bytes]:
    """``address`` and each parent above it, as far as the book holds them."""
    out: list[bytes] = []
    entry = view.entry(address)
    while entry is not None:
        out.append(entry.address)
        parent = entry.grant.parent
        entry = None if parent is None else view.entry(parent)
    return out


def effective_terms(view: GrantView, address: bytes) -> Terms | None:
    entry = view.entry(address)
    if entry is None:
        return None
    terms = entry.terms
    parent = entry.grant.parent
    if parent is not None:
        above = view.effective(parent)
        terms = meet(terms, above) if above is not None else terms
    return terms


