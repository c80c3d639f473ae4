"""The fleet log as c2sp.org/tlog-tiles resources, read from a read-only store connection.

Everything here answers "up to the latest signed size": a tile or entry bundle is there
when the newest signed checkpoint's tree holds it, and a *partial* one only when some
signed checkpoint had exactly that partial tile (:func:`fleet.log.tiles.partial_sizes`), as the
spec asks. A tile's hashes are one row of the tree store's nodes at level ``8 * L``
(:meth:`ledger.tree_store.TreeStore.node_row`); an entry bundle's entries are the fleet
leaves, rebuilt from the segments table (whose rowid is the leaf index + 1).

The checkpoint is served with the witness cosignatures the anchors gathered for exactly
its size (a :class:`plumbing.anchoring.ReceiptStore`, itself on a connection of its own).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from fleet_ledger.fleet.address import parse_address
from fleet_ledger.fleet.log.cosignature import cosigned_note
from fleet_ledger.fleet.log.leaf import encode_leaf
from fleet_ledger.fleet.log.log_errors import MissingNode
from fleet_ledger.fleet.log.tiles import Tile, encode_entry_bundle, partial_sizes
from fleet_ledger.fleet.log.tlog_proof import format_tlog_proof
from fleet_ledger.ledger.store import ReadOnlyStore
from fleet_ledger.plumbing.anchoring import ReceiptStore

_CACHED_TILES = 2048  # ~16 MiB of full tiles: the hot right edge and followers' catch-up


@dataclass(frozen=True)
class Inclusion:
    """A segment's leaf and its inclusion proof in the (cosigned) checkpoint ``note``."""

    index: int
    leaf_index: int
    leaf: bytes
    size: int
    note: str
    proof: list[bytes]


class LogReader:
    """Tiles, entry bundles, checkpoints and tlog proofs of the ledger in ``data_dir``."""

    def __init__(self, data_dir: Path | str, receipts: ReceiptStore | None = None) -> None:
        self.store = ReadOnlyStore(data_dir)
        self.receipts = receipts
        self._signed = 0
        self._tiles: OrderedDict[Tile, bytes] = OrderedDict()

    def close(self) -> None:
        self.store.close()
        if self.receipts is not None:
            self.receipts.close()

    # -- checkpoints ----------------------------------------------------------------------

    def latest(self) -> tuple[int, str] | None:
        """(size, signed note) of the newest checkpoint, with the cosignatures gathered for
        that size; None before the first."""
        last = self.store.last_checkpoint()
        if last is None:
            return None
        size, _root, note = last
        self._signed = max(self._signed, size)
        return size, self._cosigned(size, note)

    def _cosigned(self, size: int, note: str) -> str:
        if self.receipts is None:
            return note
        return cosigned_note(note, self.receipts.witness_signatures(size))

    def signed_size(self, at_least: int = 0) -> int:
        """The latest signed size: the one last seen unless ``at_least`` is beyond it (then
        read again: sizes only grow, so a tile within the last one seen is always there)."""
        if at_least > self._signed:
            return self.refresh_signed()
        return self._signed

    def refresh_signed(self) -> int:
        """The latest signed size, read afresh from the store."""
        last = self.store.last_checkpoint()
        self._signed = max(self._signed, 0 if last is None else last[0])
        return self._signed

    # -- tiles ----------------------------------------------------------------------------

    def tile(self, tile: Tile) -> bytes | None:
        """A hash tile's bytes, or an entry bundle's; None when it is not there."""
        held = self._tiles.get(tile)
        if held is not None:
            self._tiles.move_to_end(tile)
            return held
        if not self._exists(tile):
            return None
        try:
            data = self._entries(tile) if tile.entries else self.store.tree.node_row(
                tile.tree_level, tile.first, tile.width, self._signed)
        except MissingNode:
            return None
        self._tiles[tile] = data
        if len(self._tiles) > _CACHED_TILES:
            self._tiles.popitem(last=False)
        return data

    def _exists(self, tile: Tile) -> bool:
        end = (tile.first + tile.width) << tile.tree_level  # leaves the tile spans
        if end > self.signed_size(end):
            return False
        if not tile.partial:
            return True
        sizes = partial_sizes(tile)
        return self.store.signed_size_between(sizes.start, sizes.stop, self._signed)

    def _entries(self, tile: Tile) -> bytes:
        first = tile.first
        rows = self.store.leaves(first, tile.width)
        if [r.leaf_index for r in rows] != list(range(first, first + tile.width)):
            raise MissingNode(f"the store lacks leaves {first}..{first + tile.width - 1}")
        return encode_entry_bundle(r.raw if r.raw is not None else encode_leaf(
            parse_address(r.run), r.idx, parse_address(r.head)) for r in rows)

    # -- proofs ---------------------------------------------------------------------------

    def inclusion(self, run: str, index: int | None) -> Inclusion | None:
        """Segment ``index`` (default: the latest one in the newest checkpoint) of ``run``
        with its inclusion proof in the newest checkpoint; None when it is not in it."""
        latest = self.latest()
        if latest is None:
            return None
        size, note = latest
        if index is None:
            index = self.store.latest_index_below(run, size)
            if index is None:
                return None
        found = self.store.segment(run, index)
        if found is None or found[1] >= size:
            return None
        head, leaf_index = found
        leaf = encode_leaf(parse_address(run), index, parse_address(head))
        return Inclusion(index, leaf_index, leaf, size, note,
                         self.store.tree.inclusion_proof(leaf_index, size))

    def tlog_proof(self, run: str, index: int | None) -> str | None:
        """The c2sp.org/tlog-proof of segment ``index`` (default: the latest one in the
        newest checkpoint) of ``run``; None when the run or segment is not in it."""
        found = self.inclusion(run, index)
        if found is None:
            return None
        return format_tlog_proof(found.leaf_index, found.proof, found.note, extra=found.leaf)


def decimal(text: str) -> bool:
    """Whether ``text`` is ASCII digits (``str.isdigit`` also takes "²", which ``int``
    refuses): what the HTTP paths and query values that hold numbers must be."""
    return text.isascii() and text.isdigit()
