"""The pure core of jobs (fleet/jobs/): terms and ids, item units, the Merkle-sum tree, the
receipt and its log leaf, item proofs, and the forgeries each check exists to refuse."""

from __future__ import annotations

import dataclasses
import json
import struct
from pathlib import Path

import pytest
from blake3 import blake3
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet_ledger.fleet.jobs.item_proof import (
    ItemProof,
    check_against_record,
    decode_item_proof,
    encode_item_proof,
    item_proof,
    tree_item_proof,
    verify_item_proof,
)
from fleet_ledger.fleet.jobs.job_errors import (
    ItemCountMismatch,
    ItemIndexMismatch,
    ItemMismatch,
    ItemRunMismatch,
    JobError,
    JobIdMismatch,
    JobRootMismatch,
    JobTotalsMismatch,
    MalformedItemProof,
    MalformedJobTerms,
    MalformedReceipt,
    MissingItemsMismatch,
    SumOverflow,
    VerdictCountsMismatch,
)
from fleet_ledger.fleet.jobs.job_id import (
    ITEM_MARK,
    JobTerms,
    decode_terms,
    encode_terms,
    item_run,
    item_unit,
    job_id,
    job_tag,
    parse_item_unit,
)
from fleet_ledger.fleet.jobs.receipt import (
    Receipt,
    decode_receipt,
    encode_receipt,
    item_leaves,
    receipt_json,
    receipt_leaf,
    seal,
    seal_leaves,
    verify_receipt,
)
from fleet_ledger.fleet.jobs.sum_tree import (
    Item,
    SumTree,
    add_sums,
    decode_item_leaf,
    encode_item_leaf,
    encode_sums,
    energy_of,
    fold_path,
    inclusion_path,
    item_of,
    leaf_node,
    node_hash,
    state_leaf,
    subtree_root,
    verdict_code,
    verdict_of,
)
from fleet_ledger.fleet.log.leaf import (
    decode_job_leaf,
    decode_leaf,
    encode_job_leaf,
    encode_leaf,
    leaf_kind,
)
from fleet_ledger.fleet.log.log_errors import MalformedLeaf
from fleet_ledger.fleet.record.kernel import Energy, RunState, genesis
from fleet_ledger.fleet.record.wait_proof import (
    Blocked,
    Malformed,
    NonBlocking,
    Unproved,
    WaitTracker,
)

from job_helpers import item, items, seed, terms

# -- terms, ids, units --------------------------------------------------------------------


def test_terms_round_trip_and_every_field_changes_the_job_id():
    """Terms decode to themselves, and changing any one field gives another job id."""
    base = terms(10, grant=seed("g"))
    assert decode_terms(encode_terms(base)) == base
    assert decode_terms(encode_terms(terms(3))) == terms(3)
    variants = [dataclasses.replace(base, name="other"), dataclasses.replace(base, items=11),
                dataclasses.replace(base, issuer=seed("x")),
                dataclasses.replace(base, nonce=bytes(16)),
                dataclasses.replace(base, grant=None), dataclasses.replace(base, grant=seed("h"))]
    ids = {job_id(v) for v in variants} | {job_id(base)}
    assert len(ids) == len(variants) + 1


@pytest.mark.parametrize("change", [
    {"name": ""}, {"name": "a\nb"}, {"name": "x" * 129}, {"items": 0}, {"items": 2**32},
    {"issuer": bytes(31)}, {"nonce": bytes(17)}, {"grant": bytes(5)},
])
def test_bad_terms_are_refused_by_name(change):
    """An empty or unprintable or long name, 0 or 2**32 items, short keys: MalformedJobTerms."""
    with pytest.raises(MalformedJobTerms):
        encode_terms(dataclasses.replace(terms(4), **change))


def test_non_canonical_terms_bytes_are_refused():
    """Trailing bytes, a grant flag of 2, a cut name: MalformedJobTerms."""
    good = encode_terms(terms(4))
    for bad in (good + b"\x00", good[:52] + b"\x02" + good[53:], good[:-1], good[:40]):
        with pytest.raises(MalformedJobTerms):
            decode_terms(bad)


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=32, max_size=32), st.integers(0, 2**32 - 2))
def test_an_item_unit_names_its_job_tag_and_index(job, index):
    """parse_item_unit(item_unit(job, i)) is (job[:20], i), and the unit is 32 bytes."""
    unit = item_unit(job, index)
    assert len(unit) == 32 and unit.startswith(ITEM_MARK)
    assert parse_item_unit(unit) == (job_tag(job), index)


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=32, max_size=32).filter(lambda b: not b.startswith(ITEM_MARK)))
def test_an_ordinary_unit_is_not_an_item(unit):
    """A unit without the 8-byte item mark parses to None (an ordinary run)."""
    assert parse_item_unit(unit) is None


def test_an_item_run_is_bound_to_its_job_and_index():
    """The run id is genesis(item unit, grants): another job, index or grants changes it."""
    a, b, g = job_id(terms(5)), job_id(terms(5, name="b")), seed("grants")
    assert item_run(a, 2, g) == genesis(item_unit(a, 2), g)
    assert len({item_run(a, 2, g), item_run(b, 2, g), item_run(a, 3, g),
                item_run(a, 2, seed("x"))}) == 4


# -- the tree -----------------------------------------------------------------------------


def _reference_root(nodes):
    """RFC 9162 MTH by its recursive definition (split at the largest power of two < n)."""
    n = len(nodes)
    if n == 1:
        return nodes[0]
    k = 1 << ((n - 1).bit_length() - 1)
    left, right = _reference_root(nodes[:k]), _reference_root(nodes[k:])
    total = struct.pack(">8Q5I", *(x + y for x, y in zip(struct.unpack(">8Q5I", left[1]),
                                                          struct.unpack(">8Q5I", right[1]),
                                                          strict=True)))
    return (blake3(b"fleet.jobnode/1" + left[0] + left[1] + right[0] + right[1]).digest(),
            total)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17, 33])
def test_the_tree_is_rfc9162_shaped(n):
    """The bottom-up root equals the RFC's recursive split, for sizes around powers of two."""
    t = terms(n)
    nodes = [leaf_node(leaf) for leaf in item_leaves(t, items(t, missing=(n // 2,)))]
    assert subtree_root(nodes) == _reference_root(nodes)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 11])
def test_every_item_of_a_job_proves_against_its_receipt(n):
    """Each item's proof, through its bytes, verifies and returns what its leaf states."""
    t = terms(n)
    its = items(t, missing=(1,) if n > 1 else ())
    r = seal(t, its, log_size=9)
    leaves = item_leaves(t, its)
    for i in range(n):
        proof = decode_item_proof(encode_item_proof(item_proof(job_id(t), leaves, i)))
        got = verify_item_proof(proof, r)
        assert got == (i if its[i] is None else its[i])


def test_the_receipt_sums_every_item():
    """Root sums are the items' energy by source and provenance and their verdict counts."""
    t = terms(6)
    its = items(t, missing=(4,))
    r = seal(t, its, 3)
    present = [x for x in its if x is not None]
    assert r.sums[:8] == tuple(sum(x.energy[k] for x in present) for k in range(8))
    assert r.sums[8:] == (1, 2, 1, 1, 1) and r.missing == (4,)
    j = receipt_json(r)
    assert j["energy"]["total_uj"] == sum(r.sums[:8])
    assert j["verdicts"] == {"NonBlocking": 1, "Blocked": 2, "Malformed": 1, "Unproved": 1}


def test_an_item_is_made_from_a_run_state():
    """item_of reads the run id, grants, head, energy and verdict of a run's state."""
    t = terms(2)
    g = seed("grants")
    st_ = RunState(item_unit(job_id(t), 1), g, item_run(job_id(t), 1, g), seed("head"), 3,
                   energy=Energy({"measured": 5, "estimated": 1}, {"measured": 2,
                                 "estimated": 0}), wait=WaitTracker(accounted=1, first_blocked=2))
    it = item_of(1, st_)
    assert it.energy == (5, 1, 2, 0, 0, 0, 0, 0) and (it.verdict, it.segment) == (2, 2)
    assert seal(t, [None, it], 0).sums[9] == 1


@settings(max_examples=200, deadline=None)
@given(energy=st.lists(st.integers(0, 2**64 - 1), min_size=8, max_size=8),
       wait=st.sampled_from([WaitTracker(accounted=1), WaitTracker(accounted=2, first_blocked=2),
                             WaitTracker(accounted=1, first_malformed=4),
                             WaitTracker(unaccounted=1), WaitTracker()]),
       index=st.integers(0, 2**32 - 2))
def test_the_folds_leaf_from_a_state_is_the_checked_leaf(energy, wait, index):
    """The fold packs a closing item's leaf straight from the run's state (state_leaf);
    it is byte for byte the leaf of the checked path (item_of, then encode_item_leaf), for
    every verdict and any energy a leaf holds."""
    t = terms(2)
    g = seed("grants")
    e = Energy(*({"measured": energy[k], "estimated": energy[k + 1]} for k in (0, 2, 4, 6)))
    st_ = RunState(item_unit(job_id(t), 1), g, item_run(job_id(t), 1, g), seed("head"), 3,
                   energy=e, wait=wait)
    made = energy_of(e)
    assert made == tuple(energy)
    assert state_leaf(index, st_, made) == encode_item_leaf(item_of(index, st_))


def test_a_leaf_from_a_state_past_the_width_is_refused_by_both_paths():
    """An energy account past 2**64 - 1 makes no leaf: SumOverflow from the fold's path,
    MalformedItemProof from the checked one; neither wraps."""
    t = terms(2)
    g = seed("grants")
    e = Energy({"measured": 2**64, "estimated": 0})
    st_ = RunState(item_unit(job_id(t), 1), g, item_run(job_id(t), 1, g), seed("head"), 3,
                   energy=e, wait=WaitTracker(accounted=1))
    with pytest.raises(SumOverflow):
        state_leaf(1, st_, energy_of(e))
    with pytest.raises(MalformedItemProof):
        encode_item_leaf(item_of(1, st_))


@pytest.mark.parametrize("verdict", [NonBlocking(), Blocked(3), Malformed(1), Unproved()])
def test_each_verdict_has_its_code_and_comes_back(verdict):
    """A verdict's leaf code and segment name it again (verdict_of inverts verdict_code)."""
    assert verdict_of(*verdict_code(verdict)) == verdict


# -- the receipt and its leaf -------------------------------------------------------------


def test_receipt_bytes_round_trip_and_its_leaf_is_a_job_leaf():
    """A receipt decodes to itself; its log leaf is the job kind, never a run leaf."""
    t = terms(5, grant=seed("grants"))
    r = seal(t, items(t, missing=(0, 3)), 77)
    data = encode_receipt(r)
    assert decode_receipt(data) == r
    leaf = receipt_leaf(data)
    assert leaf_kind(leaf) == "job" and decode_job_leaf(leaf).job == job_id(t)
    with pytest.raises(MalformedLeaf):
        decode_leaf(leaf)
    run_leaf = encode_leaf(seed("run"), 1, seed("head"))
    assert leaf_kind(run_leaf) == "run"
    with pytest.raises(MalformedLeaf):
        decode_job_leaf(run_leaf)
    with pytest.raises(MalformedLeaf):
        leaf_kind(encode_job_leaf(seed("j"), seed("r"))[:-1])


def test_a_receipt_that_contradicts_itself_does_not_decode():
    """Counts not adding up to the item count, a missing list out of order or of the wrong
    length, trailing bytes: MalformedReceipt."""
    t = terms(5)
    r = seal(t, items(t, missing=(1, 3)), 1)
    data = encode_receipt(r)
    for bad in (data + b"\x00", data[:-4], data[:-8] + data[-4:] + data[-8:-4]):
        with pytest.raises(MalformedReceipt):
            decode_receipt(bad)
    with pytest.raises(MalformedReceipt):
        encode_receipt(dataclasses.replace(r, sums=(*r.sums[:8], 9, 0, 0, 0, 2)))


# -- forgeries ----------------------------------------------------------------------------


def _forge(t: JobTerms, leaves: list[bytes], log_size: int = 1) -> Receipt:
    """A sealer's receipt over leaves of its choosing (consistent with itself)."""
    return seal_leaves(t, leaves, log_size)


def test_a_receipt_under_reporting_one_item_fails():
    """Lowering item 2's energy in its leaf gives a self-consistent receipt: the items'
    records refuse it (JobTotalsMismatch) and so does item 2's honest proof (JobRootMismatch)."""
    t = terms(6)
    its = items(t)
    leaves = item_leaves(t, its)
    low = its[2]._replace(energy=(0, *its[2].energy[1:]))
    forged_leaves = [*leaves[:2], encode_item_leaf(low), *leaves[3:]]
    forged = _forge(t, forged_leaves)
    with pytest.raises(JobTotalsMismatch) as e:
        verify_receipt(forged, its)
    assert e.value.expected + its[2].energy[0] == e.value.calculated
    with pytest.raises(JobRootMismatch):
        verify_item_proof(item_proof(job_id(t), leaves, 2), forged)
    # The forged leaf's own proof verifies (the tree is consistent with itself): only the
    # item's record, compared with the leaf, shows the lie.
    stated = verify_item_proof(item_proof(job_id(t), forged_leaves, 2), forged)
    with pytest.raises(ItemMismatch):
        check_against_record(stated, its[2])
    check_against_record(verify_item_proof(item_proof(job_id(t), leaves, 2),
                                           seal(t, its, 1)), its[2])
    verify_receipt(seal(t, its, 1), its)


def test_a_receipt_dropping_an_item_fails():
    """Listing a present item as missing is MissingItemsMismatch; a tree one leaf short
    cannot even be a receipt of the job (its counts do not add up: MalformedReceipt)."""
    t = terms(6)
    its = items(t)
    leaves = item_leaves(t, its)
    forged = _forge(t, [*leaves[:3], encode_item_leaf(3), *leaves[4:]])
    with pytest.raises(MissingItemsMismatch):
        verify_receipt(forged, its)
    with pytest.raises(MissingItemsMismatch):
        verify_item_proof(item_proof(job_id(t), leaves, 3), forged)
    with pytest.raises(MalformedReceipt):
        _forge(t, leaves[:3] + leaves[4:])


def test_a_receipt_counting_an_item_twice_fails():
    """Item 1's leaf again in item 4's place: the records refuse the receipt, and the proof
    at position 4 is refused (ItemIndexMismatch), or with the index rewritten, its run
    (ItemRunMismatch)."""
    t = terms(6)
    its = items(t)
    leaves = item_leaves(t, its)
    twice = [*leaves[:4], leaves[1], *leaves[5:]]
    forged = _forge(t, twice)
    with pytest.raises(JobTotalsMismatch):
        verify_receipt(forged, its)
    proof = item_proof(job_id(t), twice, 4)
    # Without the index check the attack works: the path from the copy reaches the root.
    assert fold_path(leaf_node(proof.leaf), 4, 6, proof.path)[0] == forged.root
    with pytest.raises(ItemIndexMismatch):
        verify_item_proof(proof, forged)
    moved = its[1]._replace(index=4)
    twice = [*leaves[:4], encode_item_leaf(moved), *leaves[5:]]
    with pytest.raises(ItemRunMismatch):
        verify_item_proof(item_proof(job_id(t), twice, 4), _forge(t, twice))


def test_an_item_of_another_job_cannot_be_counted():
    """A run bound to job A, put into job B's tree at the same index: ItemRunMismatch, in
    the receipt check and in the proof."""
    a, b = terms(3, name="a"), terms(3, name="b")
    stranger = item(a, 1)
    its = items(b)
    its[1] = stranger
    with pytest.raises(ItemRunMismatch):
        seal(b, its, 1)
    leaves = item_leaves(b, items(b))
    leaves[1] = encode_item_leaf(stranger)
    proof, forged = item_proof(job_id(b), leaves, 1), _forge(b, leaves)
    # Without the run check the attack works: the stranger's leaf sits at the right index
    # and its path reaches the forged root.
    assert fold_path(leaf_node(proof.leaf), 1, 3, proof.path)[0] == forged.root
    with pytest.raises(ItemRunMismatch):
        verify_item_proof(proof, forged)


def test_a_job_with_a_grant_takes_only_items_under_it():
    """An item run under other grants than the job's grant: ItemRunMismatch."""
    t = terms(2, grant=seed("g"))
    stray = item(t, 0, grants=seed("other"))
    with pytest.raises(ItemRunMismatch):
        seal(t, [stray, item(t, 1)], 0)


def test_a_proof_against_the_wrong_receipt_is_refused_by_name():
    """Another job's receipt: JobIdMismatch; a cut path: MalformedItemProof; totals edited
    after sealing: JobTotalsMismatch / VerdictCountsMismatch."""
    t, u = terms(4), terms(4, name="u")
    its = items(t)
    leaves = item_leaves(t, its)
    r = seal(t, its, 2)
    proof = item_proof(job_id(t), leaves, 1)
    with pytest.raises(JobIdMismatch):
        verify_item_proof(proof, seal(u, items(u), 2))
    with pytest.raises(ItemCountMismatch):
        verify_item_proof(dataclasses.replace(proof, items=5), r)
    with pytest.raises(MalformedItemProof):
        verify_item_proof(dataclasses.replace(proof, path=proof.path[:-1]), r)
    edited = list(r.sums)
    edited[0] -= 1
    with pytest.raises(JobTotalsMismatch):
        verify_item_proof(proof, dataclasses.replace(r, sums=tuple(edited)))
    counts = (*r.sums[:8], r.sums[8] - 1, r.sums[9] + 1, *r.sums[10:])
    with pytest.raises(VerdictCountsMismatch):
        verify_item_proof(proof, dataclasses.replace(r, sums=counts))


def test_sums_overflow_is_refused_never_wrapped():
    """Two items of 2**64 - 1 uJ each cannot be summed: SumOverflow, no wrapped total."""
    t = terms(2)
    big = [item(t, i)._replace(energy=(2**64 - 1,) + (0,) * 7) for i in range(2)]
    with pytest.raises(SumOverflow):
        seal(t, big, 0)


_FIELD_LIMITS = (2**64 - 1,) * 8 + (2**32 - 1,) * 5


def test_sums_are_added_field_by_field_and_refused_past_each_field():
    """add_sums adds the encoded sums as one integer: each field's sum at its limit is
    taken (however full the others), one past it is SumOverflow in every field, the top
    one included, and never shows up as a carry into the field above."""
    full = list(_FIELD_LIMITS)
    for n, limit in enumerate(_FIELD_LIMITS):
        left = [0] * 13
        left[n] = limit // 2 + 1
        right = list(full)
        right[n] = limit - left[n]
        assert add_sums(encode_sums(left), encode_sums(right)) == encode_sums(
            [a + b for a, b in zip(left, right, strict=True)])
        assert add_sums(encode_sums(left), encode_sums([0] * 13)) == encode_sums(left)
        right[n] += 1
        with pytest.raises(SumOverflow):
            add_sums(encode_sums(left), encode_sums(right))
    with pytest.raises(MalformedItemProof):
        add_sums(encode_sums(full), encode_sums(full)[:-1])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), min_size=13, max_size=13),
       st.lists(st.integers(0, 2**64 - 1), min_size=13, max_size=13))
def test_added_sums_agree_with_the_field_by_field_rule(xs: list[int], ys: list[int]):
    left = [min(x, m) for x, m in zip(xs, _FIELD_LIMITS, strict=True)]
    right = [min(y, m) for y, m in zip(ys, _FIELD_LIMITS, strict=True)]
    summed = [a + b for a, b in zip(left, right, strict=True)]
    if all(v <= m for v, m in zip(summed, _FIELD_LIMITS, strict=True)):
        assert add_sums(encode_sums(left), encode_sums(right)) == encode_sums(summed)
    else:
        with pytest.raises(SumOverflow):
            add_sums(encode_sums(left), encode_sums(right))


def _naive_node(left, right):
    """A node that binds only its children's hashes and its own total (no per-child sums)."""
    total = tuple(x + y for x, y in zip(left[1], right[1], strict=True))
    return blake3(b"naive" + left[0] + right[0] + struct.pack(">2Q", *total)).digest(), total


def test_binding_each_childs_sums_defeats_the_split_sum_forgery():
    """WITHOUT per-child sums, a sealer lowers the total by d and gives each item a proof
    whose sibling sum is lowered by d: both proofs verify. WITH them (our node), the same
    forgery fails for one of the two items whichever root the sealer commits to."""
    a, b, d = (b"A" * 32, (50, 0)), (b"B" * 32, (70, 0)), 30
    forged = _naive_node(a, (b[0], (b[1][0] - d, 0)))
    assert _naive_node(a, (b[0], (b[1][0] - d, 0))) == forged  # a's proof verifies
    assert _naive_node((a[0], (a[1][0] - d, 0)), b) == forged  # and so does b's
    assert forged[1][0] == 50 + 70 - d  # under a total that hides d

    t = terms(2)
    leaves = item_leaves(t, items(t))
    na, nb = (leaf_node(x) for x in leaves)
    lower = struct.pack(">8Q5I", *(max(v - d, 0) if k == 0 else v for k, v in
                                   enumerate(struct.unpack(">8Q5I", nb[1]))))
    root, sums = node_hash(na, (nb[0], lower))
    r = Receipt(t, root, struct.unpack(">8Q5I", sums), 0)
    verify_item_proof(ItemProof(job_id(t), 2, 0, leaves[0], ((nb[0], lower),)), r)
    lower_a = struct.pack(">8Q5I", *(max(v - d, 0) if k == 0 else v for k, v in
                                     enumerate(struct.unpack(">8Q5I", na[1]))))
    with pytest.raises(JobRootMismatch):
        verify_item_proof(ItemProof(job_id(t), 2, 1, leaves[1], ((na[0], lower_a),)), r)
    with pytest.raises(JobRootMismatch):
        verify_item_proof(ItemProof(job_id(t), 2, 1, leaves[1], ((na[0], na[1]),)), r)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.data())
def test_any_single_leaf_edit_breaks_its_own_proof(n, data):
    """Flip one byte of any item's leaf in a proof (keeping it decodable): never verifies."""
    t = terms(n)
    its = items(t)
    leaves = item_leaves(t, its)
    r = seal(t, its, 0)
    i = data.draw(st.integers(0, n - 1))
    proof = item_proof(job_id(t), leaves, i)
    pos = data.draw(st.integers(1, len(leaves[i]) - 1))
    bad = bytearray(leaves[i])
    bad[pos] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(JobError):
        verify_item_proof(dataclasses.replace(proof, leaf=bytes(bad)), r)


def test_leaf_bytes_round_trip_and_bad_leaves_are_refused():
    """Present and missing leaves decode to what they state; other forms are refused."""
    t = terms(3)
    it = item(t, 2)
    assert decode_item_leaf(encode_item_leaf(it)) == it
    assert decode_item_leaf(encode_item_leaf(2)) == 2
    for bad in (b"", b"\x02" + bytes(4), encode_item_leaf(it)[:-1], b"\x00\xff\xff\xff\xff"):
        with pytest.raises(MalformedItemProof):
            decode_item_leaf(bad)
    with pytest.raises(MalformedItemProof):
        encode_item_leaf(Item(0, bytes(32), bytes(32), bytes(32), (0,) * 8, 2, 0))
    with pytest.raises(MalformedItemProof):
        inclusion_path([leaf_node(encode_item_leaf(0))], 1)


# -- an item-proof verifier written from docs/spec/jobs.md alone --------------------------
# It imports nothing of the project's: only blake3, struct and the vector file's bytes.


def _spec_receipt(data: bytes) -> dict:
    """Section 7 (and 2): the fields a verifier needs from a receipt's bytes."""
    assert data[:18] == b"fleet.jobreceipt/1"
    at = 18
    items, flag = struct.unpack_from(">IB", data, at + 48)
    at += 53
    grant = None
    if flag == 1:
        grant, at = data[at:at + 32], at + 32
    (name_len,) = struct.unpack_from(">H", data, at)
    at += 2 + name_len
    terms_bytes = data[18:at]
    root, totals = data[at:at + 32], struct.unpack_from(">8Q5I", data, at + 32)
    at += 32 + 84 + 8
    missing = [i for (i,) in struct.iter_unpack(">I", data[at:])]
    assert len(missing) == totals[12]
    return {"job": blake3(b"fleet.job/1" + terms_bytes).digest(), "items": items,
            "grant": grant, "root": root, "totals": totals, "missing": missing}


def _spec_node(left, right):
    """Section 6: a node binds both children's hashes and sums; sums add, never wrap."""
    total = [a + b for a, b in zip(left[1], right[1], strict=True)]
    if any(t >= 2**64 for t in total[:8]) or any(t >= 2**32 for t in total[8:]):
        raise OverflowError("SumOverflow")
    return (blake3(b"fleet.jobnode/1" + left[0] + struct.pack(">8Q5I", *left[1]) + right[0]
                   + struct.pack(">8Q5I", *right[1])).digest(), tuple(total))


def _spec_path_length(index, size):
    length, lo, hi = 0, 0, size
    while hi - lo > 1:
        k = 1 << ((hi - lo - 1).bit_length() - 1)
        lo, hi = (lo, lo + k) if index < lo + k else (lo + k, hi)
        length += 1
    return length


def spec_verify(proof: bytes, receipt: bytes) -> str | None:
    """Section 9: None if the proof verifies against the receipt, else the failing rule."""
    r = _spec_receipt(receipt)
    assert proof[:16] == b"fleet.jobproof/1"
    job, items, index = struct.unpack_from(">32sII", proof, 16)
    at = 16 + 40
    size = 174 if proof[at] == 1 else 5
    leaf, count = proof[at:at + size], proof[at + size]
    body = proof[at + size + 1:]
    assert len(body) == count * 116
    path = [(body[i:i + 32], struct.unpack(">8Q5I", body[i + 32:i + 116]))
            for i in range(0, len(body), 116)]
    if job != r["job"]:
        return "JobIdMismatch"
    if items != r["items"]:
        return "ItemCountMismatch"
    if leaf[0] == 1:
        _, leaf_index, run, grants = struct.unpack_from(">BI32s32s", leaf)
        energy = struct.unpack_from(">8Q", leaf, 101)
        verdict = leaf[165]
        sums = (*energy, *(int(verdict == c) for c in (1, 2, 3, 4)), 0)
    else:
        _, leaf_index = struct.unpack(">BI", leaf)
        sums = (0,) * 12 + (1,)
    if leaf_index != index:
        return "ItemIndexMismatch"
    if leaf[0] == 1:
        unit = b"jobitem1" + job[:20] + struct.pack(">I", index)
        if ((r["grant"] is not None and grants != r["grant"])
                or run != blake3(b"sandbox.runrecord/1" + unit + grants).digest()):
            return "ItemRunMismatch"
    if (leaf[0] == 0) != (index in r["missing"]):
        return "MissingItemsMismatch"
    if count != _spec_path_length(index, items):
        return "MalformedItemProof"
    node = (blake3(b"fleet.jobleaf/1" + leaf).digest(), sums)
    fn, sn = index, items - 1
    for p in path:
        if fn & 1 or fn == sn:
            node = _spec_node(p, node)
            while fn and not fn & 1:
                fn, sn = fn >> 1, sn >> 1
        else:
            node = _spec_node(node, p)
        fn, sn = fn >> 1, sn >> 1
    if node[0] != r["root"]:
        return "JobRootMismatch"
    if node[1][:8] != r["totals"][:8]:
        return "JobTotalsMismatch"
    if node[1][8:] != r["totals"][8:]:
        return "VerdictCountsMismatch"
    return None


def _vectors() -> dict:
    return json.loads((Path(__file__).parent.parent / "docs" / "spec" / "vectors"
                       / "jobs.json").read_text())


def test_a_verifier_written_from_the_spec_alone_accepts_every_honest_proof():
    """The spec-only verifier accepts each of the vector job's item proofs."""
    v = _vectors()
    receipt = bytes.fromhex(v["receipt"]["bytes"])
    assert [spec_verify(bytes.fromhex(p), receipt) for p in v["proofs"]] == [None] * 7


def test_a_verifier_written_from_the_spec_alone_refuses_each_forgery_by_name():
    """The spec-only verifier refuses each forged item proof with the same rule the project's
    verifier names, and accepts an honest proof only against the honest receipt."""
    v = _vectors()
    for f in v["forgeries"]:
        assert spec_verify(bytes.fromhex(f["proof"]), bytes.fromhex(f["receipt"])) == \
            f["from_proof"], f["name"]
    assert spec_verify(bytes.fromhex(v["proofs"][2]),
                       bytes.fromhex(v["forgeries"][0]["receipt"])) == "JobRootMismatch"


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 70), st.data())
def test_the_spec_verifier_and_the_project_agree_on_random_jobs(n, data):
    """For random job sizes, missing sets and indexes, both verifiers accept the honest
    proof, and both refuse it against a receipt whose totals were lowered by one."""
    missing = tuple(sorted(data.draw(st.sets(st.integers(0, n - 1), max_size=n // 3))))
    t = terms(n)
    its = items(t, missing=missing)
    r = seal(t, its, 5)
    i = data.draw(st.integers(0, n - 1))
    proof = item_proof(job_id(t), item_leaves(t, its), i)
    assert spec_verify(encode_item_proof(proof), encode_receipt(r)) is None
    verify_item_proof(proof, r)
    if r.sums[1]:
        low = dataclasses.replace(r, sums=(r.sums[0], r.sums[1] - 1, *r.sums[2:]))
        assert spec_verify(encode_item_proof(proof), encode_receipt(low)) == "JobTotalsMismatch"
        with pytest.raises(JobTotalsMismatch):
            verify_item_proof(proof, low)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 6, 7, 8, 9, 12, 31, 33])
def test_a_kept_tree_gives_the_same_root_and_paths_as_the_leaves(n):
    """SumTree's root and every path equal the streamed root and the RFC's PATH, also after
    a round trip through its level bytes."""
    t = terms(n)
    leaves = item_leaves(t, items(t, missing=(n - 1,)))
    nodes = [leaf_node(leaf) for leaf in leaves]
    tree = SumTree.from_leaves(leaves)
    assert tree.root == subtree_root(nodes) == _reference_root(nodes)
    again = SumTree(list(tree.levels))
    assert [again.path(i) for i in range(n)] == [inclusion_path(nodes, i) for i in range(n)]


def test_a_proof_from_a_kept_tree_is_the_proof_from_the_leaves():
    """tree_item_proof gives the same bytes as item_proof, and refuses another item's leaf."""
    t = terms(11)
    leaves = item_leaves(t, items(t, missing=(4,)))
    tree = SumTree.from_leaves(leaves)
    for i in range(11):
        assert tree_item_proof(job_id(t), tree, i, leaves[i]) == item_proof(job_id(t), leaves, i)
    with pytest.raises(MalformedItemProof):
        tree_item_proof(job_id(t), tree, 2, leaves[3])


_VALID = _vectors()


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["receipt", "proof", "leaf", "terms"]), st.data())
def test_decoders_refuse_mangled_bytes_only_by_name(kind, data):
    """Valid bytes cut, extended or with a byte changed either decode or raise a JobError:
    never another exception."""
    good = {"receipt": _VALID["receipt"]["bytes"], "proof": _VALID["proofs"][1],
            "leaf": _VALID["items"][1]["leaf"], "terms": _VALID["terms"]["bytes"]}[kind]
    raw = bytearray(bytes.fromhex(good))
    how = data.draw(st.sampled_from(["cut", "extend", "flip"]))
    if how == "cut":
        raw = raw[:data.draw(st.integers(0, len(raw) - 1))]
    elif how == "extend":
        raw += data.draw(st.binary(min_size=1, max_size=40))
    else:
        raw[data.draw(st.integers(0, len(raw) - 1))] ^= data.draw(st.integers(1, 255))
    decoder = {"receipt": decode_receipt, "proof": decode_item_proof,
               "leaf": decode_item_leaf, "terms": decode_terms}[kind]
    try:
        decoded = decoder(bytes(raw))
    except JobError:
        return
    if kind == "proof":
        receipt = decode_receipt(bytes.fromhex(_VALID["receipt"]["bytes"]))
        try:
            verify_item_proof(decoded, receipt)
        except JobError:
            return
        assert bytes(raw) == bytes.fromhex(good), "a changed proof verified"


_ITEMS = st.builds(
    lambda index, run, grants, head, energy, verdict, segment: Item(
        index, run, grants, head, tuple(energy), verdict, segment if verdict in (2, 3) else 0),
    st.integers(0, 2**32 - 2), *(st.binary(min_size=32, max_size=32),) * 3,
    st.lists(st.integers(0, 2**64 - 1), min_size=8, max_size=8), st.integers(1, 4),
    st.integers(1, 2**64 - 1))


@settings(max_examples=200, deadline=None)
@given(_ITEMS)
def test_any_item_leaf_round_trips(it):
    """Every well-formed item encodes to 174 bytes that decode to it again."""
    leaf = encode_item_leaf(it)
    assert len(leaf) == 174 and decode_item_leaf(leaf) == it


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 3000), st.data())
def test_any_consistent_receipt_round_trips(n, data):
    """A receipt with any root, log size, sums within width and a missing list that agrees
    with its counts encodes and decodes to itself."""
    missing = tuple(sorted(data.draw(st.sets(st.integers(0, n - 1), max_size=min(n, 50)))))
    rest = n - len(missing)
    a = data.draw(st.integers(0, rest))
    b = data.draw(st.integers(0, rest - a))
    c = data.draw(st.integers(0, rest - a - b))
    sums = (*data.draw(st.lists(st.integers(0, 2**64 - 1), min_size=8, max_size=8)),
            a, b, c, rest - a - b - c, len(missing))
    r = Receipt(terms(n), data.draw(st.binary(min_size=32, max_size=32)), sums,
                data.draw(st.integers(0, 2**64 - 1)), missing)
    assert decode_receipt(encode_receipt(r)) == r
