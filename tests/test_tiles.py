"""c2sp.org/tlog-tiles paths, tile sets, entry bundles and tlog-proof texts
(fleet.log.tiles, fleet.log.tlog_proof) against docs/spec/vectors/tiles.json, both ways."""

from __future__ import annotations

import json
from pathlib import Path

import gen_vectors_tiles
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleet_ledger.fleet.log.log_errors import MalformedProof, MalformedTilePath
from fleet_ledger.fleet.log.tiles import (
    Tile,
    decode_entry_bundle,
    encode_entry_bundle,
    format_index,
    parse_tile_path,
    partial_sizes,
    tiles_at_size,
)
from fleet_ledger.fleet.log.tlog_proof import format_tlog_proof, parse_tlog_proof

VECTORS = json.loads((Path(__file__).parent.parent / "docs" / "spec" / "vectors"
                      / "tiles.json").read_text())


def test_generator_writes_the_checked_in_file():
    """The code reproduces docs/spec/vectors/tiles.json byte for byte."""
    assert gen_vectors_tiles.render() == gen_vectors_tiles.OUT.read_text()


@pytest.mark.parametrize("case", VECTORS["paths"], ids=lambda c: c["path"])
def test_vector_paths_parse_to_their_tiles(case):
    """Each vector path parses to its level, index and width, and formats back."""
    tile = parse_tile_path(case["path"])
    assert (tile.level, tile.index, tile.width) == (case["level"], case["index"], case["width"])
    assert tile.path() == case["path"]


@pytest.mark.parametrize("case", VECTORS["bad_paths"], ids=lambda c: c["why"])
def test_vector_bad_paths_are_refused_by_name(case):
    """Each malformed vector path is a MalformedTilePath."""
    with pytest.raises(MalformedTilePath):
        parse_tile_path(case["path"])


@pytest.mark.parametrize("case", VECTORS["sizes"], ids=lambda c: str(c["size"]))
def test_vector_sizes_list_their_tiles(case):
    """A tree size has the full tiles per level and the partial tiles the vectors list, and
    each partial tile's size range holds that size."""
    tiles = tiles_at_size(case["size"])
    partial = [t for t in tiles if t.partial]
    assert [t.path() for t in partial] == case["partial"]
    for level, count in enumerate(case["full_per_level"]):
        assert sum(1 for t in tiles if t.level == level and not t.partial) == count
    assert all(case["size"] in partial_sizes(t) for t in partial)


def test_vector_entry_bundle_both_ways():
    """The vector entries encode to the vector bundle and the bundle decodes to them; a
    bundle cut short is refused."""
    entries = [bytes.fromhex(e) for e in VECTORS["entry_bundle"]["entries"]]
    bundle = bytes.fromhex(VECTORS["entry_bundle"]["bundle"])
    assert encode_entry_bundle(entries) == bundle
    assert decode_entry_bundle(bundle) == entries
    for cut in (1, 2, 50):
        with pytest.raises(MalformedTilePath):
            decode_entry_bundle(bundle[:-cut] if cut != 50 else bundle[:1])


def test_vector_tlog_proof_both_ways():
    """The vector proof text formats from its parts and parses back to them; a text
    without its header, index or with a short hash is refused."""
    v = VECTORS["tlog_proof"]
    proof = [bytes.fromhex(h) for h in v["proof"]]
    extra = bytes.fromhex(v["extra"])
    assert format_tlog_proof(v["index"], proof, v["checkpoint"], extra=extra) == v["text"]
    parsed = parse_tlog_proof(v["text"])
    assert (parsed.index, list(parsed.proof), parsed.checkpoint, parsed.extra) == (
        v["index"], proof, v["checkpoint"], extra)
    for bad in (v["text"].replace("c2sp.org/tlog-proof@v1", "tlog-proof"),
                v["text"].replace("index 4", "index 04"),
                v["text"].replace("index 4\n", ""),
                v["text"].replace(v["text"].split("\n")[3], "AAAA")):
        with pytest.raises(MalformedProof):
            parse_tlog_proof(bad)


@given(st.integers(0, 10**15), st.one_of(st.none(), st.integers(0, 63)), st.integers(1, 256))
def test_every_tile_has_one_path(index, level, width):
    """Formatting then parsing any tile gives it back (one tile, one path)."""
    tile = Tile(level, index, width)
    assert parse_tile_path(tile.path()) == tile
    assert format_index(index).replace("x", "").replace("/", "").lstrip("0") == (
        str(index) if index else "")


@given(st.integers(1, 1 << 21))
def test_the_tiles_of_a_size_cover_its_leaves_once(size):
    """Per level, a size's tiles hold exactly size // 256**L hashes, the partial one last."""
    tiles = tiles_at_size(size)
    for level in {t.level for t in tiles}:
        row = [t for t in tiles if t.level == level]
        assert sum(t.width for t in row) == size >> (8 * level)
        assert all(not t.partial for t in row[:-1])
        assert [t.index for t in row] == list(range(len(row)))
