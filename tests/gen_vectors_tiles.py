"""Regenerate docs/spec/vectors/tiles.json: ``python tests/gen_vectors_tiles.py``.

Tests read the checked-in file; they also check this script would write the same bytes.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from fleet_ledger.fleet.log.leaf import encode_leaf
from fleet_ledger.fleet.log.tiles import Tile, encode_entry_bundle, tiles_at_size
from fleet_ledger.fleet.log.tlog_proof import format_tlog_proof

OUT = Path(__file__).parent.parent / "docs" / "spec" / "vectors" / "tiles.json"

PATHS = [Tile(0, 0), Tile(0, 67, 5), Tile(1, 1234067), Tile(3, 1000, 255), Tile(None, 0, 1),
         Tile(None, 1_000_000), Tile(63, 999), Tile(2, 1001)]
BAD_PATHS = {
    "tile/0/0067": "index not in 3-digit groups",
    "tile/0/67": "last group not 3 digits",
    "tile/0/x000/067": "a leading zero group",
    "tile/0/001/067": "a group before the last without its x",
    "tile/0/x1/000": "a group of one digit",
    "tile/00/000": "level with a leading zero",
    "tile/64/000": "level above 63",
    "tile/-1/000": "negative level",
    "tile/0/000.p/0": "width 0",
    "tile/0/000.p/256": "width 256 (a full tile has no .p suffix)",
    "tile/0/000.p/007": "width with a leading zero",
    "tile/entries/abc": "index not decimal",
    "tile/data/000": "unknown level word",
    "tiles/0/000": "not under tile/",
}
SIZES = [1, 255, 256, 257, 65_536, 65_836, 70_000]


def _seed(label: str) -> bytes:
    return hashlib.sha256(label.encode()).digest()


def _size(size: int) -> dict[str, Any]:
    tiles = tiles_at_size(size)
    levels = sorted({t.level or 0 for t in tiles})
    return {"size": size,
            "full_per_level": [sum(1 for t in tiles if t.level == lv and not t.partial)
                               for lv in levels],
            "partial": [t.path() for t in tiles if t.partial]}


def build() -> dict[str, Any]:
    run = _seed("run")
    leaves = [encode_leaf(run, i + 1, _seed(f"head {i + 1}")) for i in range(3)]
    proof = [_seed("sibling"), _seed("uncle")]
    checkpoint = "fleet.example/log\n5\n" + "A" * 43 + "=\n\n\u2014 fleet.example/log AAAA\n"
    return {
        "paths": [{"level": t.level, "index": t.index, "width": t.width, "path": t.path()}
                  for t in PATHS],
        "bad_paths": [{"path": p, "why": why} for p, why in BAD_PATHS.items()],
        "sizes": [_size(s) for s in SIZES],
        "entry_bundle": {"entries": [e.hex() for e in leaves],
                         "bundle": encode_entry_bundle(leaves).hex()},
        "tlog_proof": {"index": 4, "proof": [h.hex() for h in proof], "extra": leaves[0].hex(),
                       "checkpoint": checkpoint,
                       "text": format_tlog_proof(4, proof, checkpoint, extra=leaves[0])},
    }


def render() -> str:
    return json.dumps(build(), indent=1, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    OUT.write_text(render())
