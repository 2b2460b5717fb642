"""The repack planner (nicoll.plan.repack): subgroups, cost model, message bytes, references."""

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nicoll import NicollError
from nicoll.hw.repack import (HEADER_LAYOUT, MAX_BLOCK_BYTES, OrderList, buffer_bytes_needed,
                              length_table_layout)
from nicoll.plan.repack import (DEFAULT_ALPHA, Message, beats_to_message, cost_direct,
                                cost_repack, direct_threshold, message_beats, pack_message,
                                plan_subgroups, reference_alltoallv, submatrix_tag,
                                unpack_message)

WIDTHS = st.sampled_from([64, 128, 256, 512])


# ---- Messages -----------------------------------------------------------------------------

def test_message_layout_bytes():
    """Header and table are the gateware layouts, little-endian, each in a whole beat."""
    msg = pack_message(0x0102, 0x0304, [b"abc", b"", b"0123456789"], 64)
    head = HEADER_LAYOUT.const({"rank": 0x0102, "tag": 0x0304, "count": 3})
    assert msg[:8] == head.as_value().value.to_bytes(8, "little")
    assert msg[:8] == bytes([0x02, 0x01, 0x04, 0x03, 3, 0, 0, 0])
    assert msg[8:16] == bytes([3, 0, 0, 0, 10, 0, 0, 0])
    assert msg[8:16] == length_table_layout(64).const([3, 0, 10, 0]).as_value().value \
        .to_bytes(8, "little")
    assert msg[16:] == b"abc0123456789"
    # Five blocks at 64 bits: two table beats.
    assert len(pack_message(1, 2, [b"x"] * 5, 64)) == 8 * 3 + 5


@settings(max_examples=200, deadline=None)
@given(width=WIDTHS, rank=st.integers(0, 0xffff), tag=st.integers(0, 0xffff),
       blocks=st.lists(st.binary(max_size=70), min_size=1, max_size=40))
def test_pack_unpack_round_trip(width, rank, tag, blocks):
    msg = pack_message(rank, tag, blocks, width)
    beat = width // 8
    assert len(msg) == beat * (1 + math.ceil(len(blocks) / (width // 16))) + sum(map(len, blocks))
    assert unpack_message(msg, width) == Message(rank, tag, tuple(blocks))
    beats = message_beats(msg, width)
    assert [b["last"] for b in beats] == [0] * (len(beats) - 1) + [1]
    assert all(b["keep"] == (1 << beat) - 1 for b in beats[:-1])
    assert all(b["rank"] == rank for b in beats)
    assert beats_to_message(beats, width) == msg


def test_pack_accepts_numpy():
    a = np.arange(5, dtype=np.int32)
    msg = pack_message(1, 2, [a, np.zeros(0, np.float64)], 128)
    assert unpack_message(msg, 128).blocks == (a.tobytes(), b"")


@pytest.mark.parametrize("args,message", [
    ((70000, 0, [b""], 64), r"^rank must be an integer between 0 and 65535, not 70000$"),
    ((1, -1, [b""], 64), r"^tag must be an integer between 0 and 65535, not -1$"),
    ((1, 1, [], 64), r"^a message holds 1 to 65535 blocks, not 0$"),
    ((1, 1, [b"\0" * 65536], 64), r"^block 0 holds 65536 bytes, more than the 65535 a "
                                  r"length-table entry can say$"),
    ((1, 1, ["abc"], 64), r"^a block must be bytes or a 1-D numpy array, not str$"),
    ((1, 1, [np.zeros((2, 2))], 64), r"^a block must be a 1-D array, not one of shape "
                                     r"\(2, 2\)$"),
    ((1, 1, [b""], 32), r"^data_width must be one of 64, 128, 256, 512, not 32$"),
])
def test_pack_errors(args, message):
    with pytest.raises(NicollError, match=message):
        pack_message(*args)


def test_unpack_errors():
    good = pack_message(3, 4, [b"abcdefghij", b"xy"], 64)
    cases = [
        (good[:5], r"^a repack message starts with a 8-byte header beat; got 5 bytes$"),
        (good[:7] + b"\1" + good[8:], r"^the header beat has non-zero bytes past the header$"),
        (pack_message(3, 4, [b""], 64)[:4] + b"\0\0\0\0", r"^the header says the message "
                                                          r"holds no blocks$"),
        (good[:12], r"^the message ends inside its length table \(2 blocks need 1 table "
                    r"beats\)$"),
        (good[:12] + b"\1" + good[13:], r"^the length table has non-zero entries past its 2 "
                                        r"blocks$"),
        (good[:-1], r"^the length table says 12 data bytes, the message holds 11$"),
        (good + b"z", r"^the length table says 12 data bytes, the message holds 13$"),
    ]
    for raw, message in cases:
        with pytest.raises(NicollError, match=message):
            unpack_message(raw, 64)
    with pytest.raises(NicollError, match=r"^keep 0x5 is not a run of low bytes$"):
        beats_to_message([{"data": 0, "keep": 5, "last": 1}], 64)


# ---- Reference ----------------------------------------------------------------------------

def test_reference_transposes():
    rng = np.random.default_rng(1)
    n = 5
    blocks = [[rng.integers(0, 100, rng.integers(0, 6)).astype(np.int16) for _ in range(n)]
              for _ in range(n)]
    out = reference_alltoallv(blocks)
    for i in range(n):
        for j in range(n):
            assert out[j][i] is blocks[i][j] or np.array_equal(out[j][i], blocks[i][j])
    with pytest.raises(NicollError, match=r"^the block matrix must be N×N: row 1 has 1 "
                                          r"blocks, N = 2$"):
        reference_alltoallv([[b"", b""], [b""]])
    with pytest.raises(NicollError, match=r"^the block matrix is empty$"):
        reference_alltoallv([])


# ---- Planning -----------------------------------------------------------------------------

def test_plan_edges_n11():
    """N = 11 with dh = dv = 3: three full subgroups and a partial one (seed 003)."""
    plan = plan_subgroups(11, 8, 3)
    assert (plan.dh, plan.dv) == (3, 3)
    assert plan.src_groups == ((0, 1, 2), (3, 4, 5), (6, 7, 8), (9, 10))
    assert plan.dst_groups == plan.src_groups
    assert plan.sends_per_rank == plan.receives_per_rank == 4
    assert len(plan.submatrices()) == 16
    assert plan.submatrices()[-1] == (3, 3, (9, 10), (9, 10), submatrix_tag(3, 3))
    assert submatrix_tag(3, 2) == 0x0302


def test_plan_arbitrary_groups():
    """Subgroups {1,2}, {0,3}, {4,5} as in seed 003, fig. 8, and uneven destination groups."""
    plan = plan_subgroups(6, 8, src_groups=[[1, 2], [0, 3], [4, 5]],
                          dst_groups=[[5], [0, 3, 1], [4, 2]])
    assert (plan.dh, plan.dv) == (2, 3)
    assert plan.src_order == [1, 2, 0, 3, 4, 5]
    assert plan.dst_group_of(3) == 1 and plan.src_group_of(3) == 1
    writes = plan.order_writes()
    assert writes[:3] == [
        {"list": OrderList.SRC, "index": 0, "rank": 1, "end": 0},
        {"list": OrderList.SRC, "index": 1, "rank": 2, "end": 1},
        {"list": OrderList.SRC, "index": 2, "rank": 0, "end": 0},
    ]
    assert [(w["rank"], w["end"]) for w in writes if w["list"] == OrderList.DST] == [
        (5, 1), (0, 0), (3, 0), (1, 1), (4, 0), (2, 1)]


def test_plan_defaults():
    """Defaults from the cost model: N = 16, 8-byte blocks, 4 units: 8×8 sub-matrices,
    repacking (2 messages each way instead of 15)."""
    plan = plan_subgroups(16, 8, units=4)
    assert (plan.dh, plan.dv, plan.method) == (8, 8, "repack")
    assert plan.sends_per_rank == 2
    assert plan.cost_repack < plan.cost_direct
    # Large blocks: direct exchange.
    assert plan_subgroups(16, 4096, units=4).method == "direct"
    # One or two ranks: nothing to aggregate.
    assert plan_subgroups(1, 8).method == plan_subgroups(2, 8).method == "direct"


def test_plan_capacity():
    """Defaults keep each sub-matrix within the unit buffer; fixed sizes that do not fit are
    refused, naming the need."""
    plan = plan_subgroups(16, 64, capacity_bytes=1024, units=4)
    lengths = [[64] * 16 for _ in range(16)]
    assert plan.buffer_bytes(lengths) <= 1024
    # d = 1..3 fit (3·3·64 + 3·7 = 597 bytes), d = 4 does not (1052): the cheapest that fits.
    costs = {d: cost_repack(16, 64, d, d, 64, 4) for d in (1, 2, 3)}
    assert plan.dh == plan.dv == min(costs, key=costs.get)
    assert plan.budget(lengths) == plan.dh * plan.dv * 64
    with pytest.raises(NicollError, match=r"^a sub-matrix of this plan needs 1052 bytes of "
                                          r"unit buffer, more than capacity_bytes = 1024; "
                                          r"choose smaller dh / dv$"):
        plan_subgroups(16, 64, 4, capacity_bytes=1024)
    with pytest.raises(NicollError, match=r"^no subgroup size fits a unit buffer of 64 bytes "
                                          r"even at dh = dv = 1; use direct exchange$"):
        plan_subgroups(4, 100, capacity_bytes=64)


def test_plan_alltoallv_lengths():
    rng = random.Random(3)
    n = 7
    lengths = [[rng.randrange(65) for _ in range(n)] for _ in range(n)]
    lengths[2] = [0] * n
    plan = plan_subgroups(n, lengths, 3, 2)
    want = max(sum(lengths[i][j] for i in s for j in d) for _, _, s, d, _ in plan.submatrices())
    assert plan.budget(lengths) == want
    assert plan.buffer_bytes(lengths) == buffer_bytes_needed(want, 3, 64)
    blocks = [[rng.randbytes(v) for v in row] for row in lengths]
    assert plan.budget(blocks) == want
    assert plan.block_bytes == sum(map(sum, lengths)) / n ** 2


@pytest.mark.parametrize("kwargs,message", [
    ({"n": 0, "block_bytes": 8}, r"^n must be an integer between 1 and 256, not 0$"),
    ({"n": 4.0, "block_bytes": 8}, r"^n must be an integer between 1 and 256, not 4.0$"),
    ({"n": 4, "block_bytes": -1}, r"^block_bytes must be between 0 and 65535, not -1$"),
    ({"n": 4, "block_bytes": "8"}, r"^block_bytes must be a byte count or an N×N matrix of "
                                   r"lengths, not '8'$"),
    ({"n": 3, "block_bytes": [[1, 2], [3, 4]]}, r"^the block-length matrix is 2×2, N = 3$"),
    ({"n": 2, "block_bytes": [[1, -2], [3, 4]]}, r"^block lengths must be between 0 and 65535, "
                                                 r"not -2$"),
    ({"n": 4, "block_bytes": 8, "dh": 5}, r"^dh must be an integer between 1 and 4 \(N = 4, "
                                          r"max_group = 8\), not 5$"),
    ({"n": 20, "block_bytes": 8, "dv": 9}, r"^dv must be an integer between 1 and 8 \(N = 20, "
                                           r"max_group = 8\), not 9$"),
    ({"n": 4, "block_bytes": 8, "dh": 0}, r"^dh must be an integer between 1 and 4"),
    ({"n": 4, "block_bytes": 8, "src_groups": [[0, 1], [1, 2]]},
     r"^src_groups must hold every rank 0..3 once: repeated \[1\], missing \[3\]$"),
    ({"n": 4, "block_bytes": 8, "dst_groups": [[0, 1], [2, 7]]},
     r"^dst_groups names rank 7, outside 0..3$"),
    ({"n": 4, "block_bytes": 8, "dst_groups": [[0, 1], []]},
     r"^dst_groups must hold non-empty rank lists, not \[\]$"),
    ({"n": 4, "block_bytes": 8, "src_groups": [[0, 1, 2, 3]], "max_group": 2},
     r"^src_groups has a subgroup of 4 ranks, more than max_group = 2$"),
    ({"n": 4, "block_bytes": 8, "dh": 3, "src_groups": [[0, 1], [2, 3]]},
     r"^dh = 3 disagrees with src_groups, whose largest subgroup has 2 ranks$"),
    ({"n": 4, "block_bytes": 8, "data_width": 100}, r"^data_width must be one of 64, 128, "
                                                    r"256, 512, not 100$"),
    ({"n": 4, "block_bytes": 8, "units": 0}, r"^units must be a positive integer, not 0$"),
    ({"n": 4, "block_bytes": 8, "alpha": -1}, r"^alpha must be a non-negative number of "
                                              r"cycles, not -1$"),
    ({"n": 4, "block_bytes": 8, "capacity_bytes": 0}, r"^capacity_bytes must be a positive "
                                                      r"integer, not 0$"),
    ({"n": 4, "block_bytes": 8, "max_group": 0}, r"^max_group must be an integer between 1 "
                                                 r"and 256, not 0$"),
])
def test_plan_errors(kwargs, message):
    with pytest.raises(NicollError, match=message):
        plan_subgroups(**kwargs)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_plan_covers_the_matrix(data):
    """Every block (i, j) lies in exactly one sub-matrix; subgroups are consecutive ranks,
    only the last partial; each rank sends one message per destination subgroup."""
    n = data.draw(st.integers(1, 40))
    dh = data.draw(st.integers(1, min(n, 8)))
    dv = data.draw(st.integers(1, min(n, 8)))
    plan = plan_subgroups(n, data.draw(st.integers(0, 64)), dh, dv)
    for groups, d in ((plan.src_groups, dh), (plan.dst_groups, dv)):
        assert [r for g in groups for r in g] == list(range(n))
        assert all(len(g) == d for g in groups[:-1]) and 1 <= len(groups[-1]) <= d
    seen = {}
    for a, b, s, d, tag in plan.submatrices():
        assert tag == (a << 8) | b
        for i in s:
            for j in d:
                assert (i, j) not in seen
                seen[(i, j)] = tag
    assert len(seen) == n * n
    assert plan.sends_per_rank == math.ceil(n / dv)
    assert plan.receives_per_rank == math.ceil(n / dh)


def unit_model(plan, source_messages):
    """What a repack unit does, in Python: per sub-matrix, regroup the blocks by
    destination (the gateware's behaviour, written independently of the planner)."""
    width = plan.data_width
    out = {}
    for a, b, s, d, tag in plan.submatrices():
        got = {i: unpack_message(source_messages[(i, b)], width) for i in s}
        for i in s:
            assert got[i].tag == tag and got[i].rank == i and len(got[i].blocks) == len(d)
        for k, j in enumerate(d):
            out[(j, a)] = pack_message(j, tag, [got[i].blocks[k] for i in s], width)
    return out


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_messages_reproduce_the_transpose(data):
    """Source messages → unit model → destination messages → gather_results equals the
    numpy reference, for any subgroups and lengths 0..64 (empty rows and columns too)."""
    n = data.draw(st.integers(1, 9))
    width = data.draw(WIDTHS)
    seed = data.draw(st.integers(0, 2 ** 32 - 1))
    rng = random.Random(seed)
    blocks = [[np.frombuffer(rng.randbytes(rng.randrange(65)), np.uint8) for _ in range(n)]
              for _ in range(n)]
    if rng.random() < 0.5:
        blocks[rng.randrange(n)] = [np.zeros(0, np.uint8)] * n
    perm = rng.sample(range(n), n)
    dh = rng.randint(1, n)
    src_groups = [perm[k:k + dh] for k in range(0, n, dh)]
    plan = plan_subgroups(n, blocks, src_groups=src_groups, dv=rng.randint(1, n),
                          data_width=width, max_group=n)
    produced = unit_model(plan, plan.source_messages(blocks))
    assert produced == plan.destination_messages(blocks)
    received = [[] for _ in range(n)]
    for (j, a), msg in produced.items():
        received[j].append(msg)
    for msgs in received:
        rng.shuffle(msgs)
    got = plan.gather_results(received)
    ref = reference_alltoallv(blocks)
    for j in range(n):
        for i in range(n):
            assert np.array_equal(got[j][i], ref[j][i])


def test_gather_results_errors():
    plan = plan_subgroups(4, 8, 2, 2)
    blocks = [[bytes([i, j]) for j in range(4)] for i in range(4)]
    msgs = plan.destination_messages(blocks)
    good = [[msgs[(j, a)] for a in range(2)] for j in range(4)]
    got = plan.gather_results(good, dtype=np.uint8)
    assert bytes(got[3][1]) == bytes([1, 3])
    cases = [
        ([good[1]] + good[1:], r"^rank 0 received a message for rank 1$"),
        ([[good[0][0], good[0][0]]] + good[1:], r"^rank 0 received sub-matrix \(0, 0\) twice$"),
        ([good[0][:1]] + good[1:], r"^rank 0 is missing the messages of source subgroups "
                                   r"\[1\]$"),
        ([[pack_message(0, submatrix_tag(0, 1), [b"", b""], 64)]] + good[1:],
         r"^rank 0 received tag 0x0001, which names no sub-matrix of its destination "
         r"subgroup 0$"),
        ([[pack_message(0, submatrix_tag(0, 0), [b""], 64)]] + good[1:],
         r"^rank 0 received 1 blocks from source subgroup 0, which has 2 ranks$"),
        (good[:3], r"^expected the messages of 4 ranks, got 3$"),
    ]
    for received, message in cases:
        with pytest.raises(NicollError, match=message):
            plan.gather_results(received)


# ---- Cost model ---------------------------------------------------------------------------

def test_cost_formulas():
    # Direct: 15 messages of one 8-byte beat each at α = 100.
    assert cost_direct(16, 8, 64, 100) == 15 * 100 + 15 * 1
    assert cost_direct(16, 0, 64, 100) == 15 * 101              # a message is at least a beat
    # Repack 4×4 at 64 bits: M = 4 messages each way of 1 header + 1 table beat; 16 blocks of
    # 8 bytes cross twice.  A unit start costs 3 + 4 + 4 cycles; one unit then does 16
    # sub-matrices of 8 messages and 2·16 block beats.  The control tree: 16 starts plus 4 + 4
    # notices each, 16 DONE notices.  Setup: 4·16 + 16.
    rank_side = 4 * 100 + 2 * (4 * 2 + 16)
    unit_side = 1 * 11 + 16 * (8 * 2 + 2 * 16 * 1)
    control = 16 * (11 + 8) + 16
    assert cost_repack(16, 8, 4, 4, 64, 1, 100) == 80 + max(rank_side, unit_side, control) \
        == 80 + 779
    assert cost_repack(16, 8, 4, 4, 64, 4, 100) == 80 + max(rank_side, 4 * 11 + 4 * 48,
                                                            control) == 80 + 448
    assert cost_repack(16, 8, 4, 4, 64, 4, 0) == 80 + control == 400
    assert DEFAULT_ALPHA == 100


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 64), d=st.integers(1, 8), units=st.integers(1, 8),
       alpha=st.integers(0, 2000), width=WIDTHS)
def test_threshold_is_the_first_crossing(n, d, units, alpha, width):
    d = min(d, n)
    t = direct_threshold(n, d, d, width, units, alpha)
    assert -1 <= t <= MAX_BLOCK_BYTES
    for a in range(0, t + 1, max(1, t // 50)):
        assert cost_repack(n, a, d, d, width, units, alpha) < cost_direct(n, a, width, alpha)
    if t < MAX_BLOCK_BYTES:
        assert not (cost_repack(n, t + 1, d, d, width, units, alpha)
                    < cost_direct(n, t + 1, width, alpha))


def test_method_follows_threshold():
    t = direct_threshold(16, 4, 4, 64, 4)
    assert t > 0
    assert plan_subgroups(16, t, 4, units=4).method == "repack"
    assert plan_subgroups(16, t + 1, 4, units=4).method == "direct"
    # A bigger per-message cost raises the threshold.
    assert direct_threshold(16, 4, 4, 64, 4, alpha=1000) > t
