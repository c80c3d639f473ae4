"""C2SP tlog-tiles (``c2sp.org/tlog-tiles``): tile paths, which tiles a tree size has, and
entry bundles - the static layout the ledger serves its log in over HTTP.

Tiles
    A tile is 256 consecutive Merkle tree hashes at tree level ``8 * L`` (a "level-L
    tile"): tile ``N`` at level ``L`` holds the hashes of the complete subtrees
    ``(8L, N*256 + i)`` for ``i`` in ``0 .. W-1`` (:mod:`fleet.log.merkle` names nodes by
    level and index), each the root of 256**L leaves. A full tile has ``W = 256`` (8,192
    bytes); a *partial* tile ``W`` in 1 .. 255. At tree size ``s`` the full tiles of level
    ``L`` are those with ``(N + 1) * 256**(L+1) <= s``, and the one partial tile is
    ``N = s // 256**(L+1)`` with ``W = (s // 256**L) % 256`` (none when that is 0).

Paths (relative to the log's prefix)::

    tile/<L>/<N>[.p/<W>]          L: decimal, 0 .. 63, no leading zero
    tile/entries/<N>[.p/<W>]      W: decimal, 1 .. 255, no leading zero

    <N>: decimal in 3-digit groups, zero-padded, every group but the last prefixed "x":
         0 -> "000", 67 -> "067", 1234067 -> "x001/x234/067"

Parsing is strict: any other spelling (``0067``, ``x067``, ``.p/0``, ``.p/256``, a leading
zero in ``L``) is :class:`~fleet.log.log_errors.MalformedTilePath`, so one tile has one path.

Entry bundles
    The entries of level-0 tile ``N`` (leaves ``N*256 .. N*256 + W - 1``), each as a
    big-endian uint16 length then the entry's bytes. Our entries are the 84-byte fleet
    leaves (:mod:`fleet.log.leaf`); an entry hashes (RFC 9162 leaf hash) to the hash at the same
    position of the level-0 tile.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from fleet_ledger.fleet.log.log_errors import MalformedTilePath

__all__ = [
    "MAX_LEVEL",
    "TILE_HEIGHT",
    "TILE_WIDTH",
    "Tile",
    "decode_entry_bundle",
    "encode_entry_bundle",
    "format_index",
    "parse_tile_path",
    "partial_sizes",
    "tiles_at_size",
]

TILE_HEIGHT = 8
TILE_WIDTH = 1 << TILE_HEIGHT
MAX_LEVEL = 63
_ENTRIES = "entries"
_GROUP = re.compile(r"x[0-9]{3}\Z")
_LAST = re.compile(r"[0-9]{3}\Z")
_DECIMAL = re.compile(r"(0|[1-9][0-9]*)\Z")
_U16 = struct.Struct(">H")


@dataclass(frozen=True, order=True)
class Tile:
    """One tile: ``level`` (the tile level L; None for an entry bundle), ``index`` (N) and
    ``width`` (W, 256 for a full tile)."""

    level: int | None
    index: int
    width: int = TILE_WIDTH

    @property
    def entries(self) -> bool:
        return self.level is None

    @property
    def partial(self) -> bool:
        return self.width < TILE_WIDTH

    @property
    def tree_level(self) -> int:
        """The Merkle tree level of the tile's hashes (0 for an entry bundle's leaves)."""
        return TILE_HEIGHT * (self.level or 0)

    @property
    def first(self) -> int:
        """Index, at :attr:`tree_level`, of the tile's first hash (or entry)."""
        return self.index * TILE_WIDTH

    def path(self) -> str:
        """The tile's path below the log's prefix, e.g. ``tile/1/x001/067.p/12``."""
        level = _ENTRIES if self.level is None else str(self.level)
        suffix = f".p/{self.width}" if self.partial else ""
        return f"tile/{level}/{format_index(self.index)}{suffix}"

def format_index(index: int) -> str:
    """``N`` in the 3-digit, ``x``-prefixed path form (``1234067`` -> ``x001/x234/067``)."""
    if index < 0:
        raise ValueError(f"tile index {index} is negative")
    groups = [f"{index % 1000:03d}"]
    index //= 1000
    while index:
        groups.append(f"x{index % 1000:03d}")
        index //= 1000
    return "/".join(reversed(groups))


def parse_tile_path(path: str) -> Tile:
    """The tile a path names (``tile/...``, without the log's prefix), or
    :class:`MalformedTilePath`."""
    parts = path.split("/")
    if len(parts) < 3 or parts[0] != "tile":
        raise MalformedTilePath(f"{path!r} is not tile/<L>/<N>[.p/<W>]")
    level_text, rest = parts[1], parts[2:]
    level: int | None
    if level_text == _ENTRIES:
        level = None
    elif _DECIMAL.match(level_text) and int(level_text) <= MAX_LEVEL:
        level = int(level_text)
    else:
        raise MalformedTilePath(f"tile level {level_text!r} is not a decimal 0..{MAX_LEVEL}")
    width = TILE_WIDTH
    if len(rest) >= 2 and rest[-2].endswith(".p"):
        width_text = rest[-1]
        rest = [*rest[:-2], rest[-2][:-2]]
        if not _DECIMAL.match(width_text) or not 1 <= int(width_text) < TILE_WIDTH:
            raise MalformedTilePath(f"partial width {width_text!r} is not a decimal 1..255")
        width = int(width_text)
    if not _LAST.match(rest[-1]) or not all(_GROUP.match(g) for g in rest[:-1]):
        raise MalformedTilePath(f"tile index {'/'.join(rest)!r} is not in the x001/x234/067"
                                " form")
    digits = "".join(g.lstrip("x") for g in rest)
    if len(rest) > 1 and rest[0] == "x000":
        raise MalformedTilePath(f"tile index {'/'.join(rest)!r} has a leading zero group")
    return Tile(level, int(digits), width)


def tiles_at_size(size: int) -> list[Tile]:
    """Every hash tile a tree of ``size`` leaves has (full and partial), level by level;
    entry bundles are the level-0 tiles' :attr:`Tile.entries` twins."""
    out: list[Tile] = []
    for level in range(MAX_LEVEL + 1):
        hashes = size >> (TILE_HEIGHT * level)
        if hashes == 0:
            break
        out.extend(Tile(level, n) for n in range(hashes // TILE_WIDTH))
        if hashes % TILE_WIDTH:
            out.append(Tile(level, hashes // TILE_WIDTH, hashes % TILE_WIDTH))
    return out


def partial_sizes(tile: Tile) -> range:
    """The tree sizes whose partial tile (at the tile's level) is ``tile``: a log serves
    a partial tile when it signed a checkpoint of one of these sizes."""
    if not tile.partial:
        raise ValueError(f"{tile.path()} is a full tile")
    shift = tile.tree_level
    hashes = tile.index * TILE_WIDTH + tile.width
    return range(hashes << shift, (hashes + 1) << shift)


def encode_entry_bundle(entries: Iterable[bytes]) -> bytes:
    """Entries, each prefixed by its big-endian uint16 length."""
    out = bytearray()
    for entry in entries:
        if len(entry) > 0xFFFF:
            raise ValueError(f"an entry of {len(entry)} bytes does not fit a uint16 length")
        out += _U16.pack(len(entry))
        out += entry
    return bytes(out)


def decode_entry_bundle(data: bytes | bytearray | memoryview) -> list[bytes]:
    """The entries of a bundle, or :class:`MalformedTilePath` if it is cut short."""
    view = memoryview(data)
    out: list[bytes] = []
    pos = 0
    while pos < len(view):
        if pos + 2 > len(view):
            raise MalformedTilePath("an entry bundle ends inside a length prefix")
        (length,) = _U16.unpack_from(view, pos)
        end = pos + 2 + length
        if end > len(view):
            raise MalformedTilePath("an entry bundle ends inside an entry")
        out.append(bytes(view[pos + 2:end]))
        pos = end
    return out
