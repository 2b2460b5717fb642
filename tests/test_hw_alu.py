# amaranth: UnusedElaboratable=no
"""ReductionALU in the Amaranth simulator: lanes, edge values, error flag, backpressure, latency.

The long random runs (≥ 100 000 vectors per op and type) are the Verilator bench's
(tests/test_alu_cocotb.py); here each case is a few beats, checked against nicoll.ops.combine.
"""

import random

import numpy as np
import pytest

from nicoll.hw.alu import ReductionALU, all_capabilities
from nicoll.hw.ops import DType, FLOAT_TYPES, INTEGER_TYPES, ReduceOp
from nicoll.ops import combine, numpy_dtype
from nicoll.sim.testbench import run_testbenches
from nicoll.sim.vectors import operand_pairs, results_match

INT_ONLY = frozenset(p for p in all_capabilities() if not p[1].is_float)


def run_alu(alu, beats, *, stall_a=0.0, stall_b=0.0, stall_out=0.0, seed=0):
    """Send (op, dtype, a_bytes, b_bytes, last) beats; return [(data_bytes, last, error)]."""
    rng = random.Random(seed)
    width = alu.data_width
    results = []

    def source(port, index, stall):
        async def run(ctx):
            await drive(ctx, port, index, stall)
        return run

    async def drive(ctx, port, index, stall):
        for beat in beats:
            while rng.random() < stall:
                await ctx.tick()
            op, dtype, a, b, last = beat
            ctx.set(port.payload.data, int.from_bytes((a, b)[index], "little"))
            ctx.set(port.payload.op, op)
            ctx.set(port.payload.dtype, dtype)
            ctx.set(port.payload.last, last)
            ctx.set(port.valid, 1)
            await ctx.tick().until(port.ready)
            ctx.set(port.valid, 0)

    async def sink(ctx):
        while len(results) < len(beats):
            ctx.set(alu.result.ready, rng.random() >= stall_out)
            _, _, valid, ready, data, last, error = await ctx.tick().sample(
                alu.result.valid, alu.result.ready, alu.result.payload.data,
                alu.result.payload.last, alu.result.payload.error)
            if valid and ready:
                results.append((int(data).to_bytes(width // 8, "little"), int(last), int(error)))

    run_testbenches(alu, source(alu.a, 0, stall_a), source(alu.b, 1, stall_b), sink)
    return results


def make_beats(pairs, width, rng, per_pair=2):
    beats, expected = [], []
    for op, dtype in pairs:
        n = width // dtype.bits
        for k in range(per_pair):
            a, b = operand_pairs(op, dtype, n, rng)
            beats.append((op, dtype, a.tobytes(), b.tobytes(), k == per_pair - 1))
            expected.append((op, dtype, a, b))
    return beats, expected


def check(results, beats, expected, capabilities):
    assert len(results) == len(beats)
    for (data, last, error), beat, (op, dtype, a, b) in zip(results, beats, expected):
        assert last == beat[4]
        if (op, dtype) not in capabilities:
            assert error == 1 and data == bytes(len(data)), (op, dtype)
            continue
        assert error == 0, (op, dtype)
        got = np.frombuffer(data, dtype=numpy_dtype(dtype))
        want = combine(op, a, b)
        bad = results_match(got, want)
        assert not len(bad), (op, dtype, a[bad], b[bad], got[bad], want[bad])


@pytest.mark.parametrize("width,output_fifo", [(64, True), (256, True), (64, False)])
def test_integer_ops_every_type(width, output_fifo):
    rng = random.Random(width)
    alu = ReductionALU(width, capabilities=INT_ONLY, output_fifo=output_fifo)
    pairs = sorted(INT_ONLY, key=lambda p: (p[1].value, p[0].value))
    beats, expected = make_beats(pairs, width, rng)
    check(run_alu(alu, beats), beats, expected, INT_ONLY)


def test_float_min_max_and_rejected_pairs():
    rng = random.Random(5)
    caps = INT_ONLY | {(op, d) for d in FLOAT_TYPES for op in (ReduceOp.MIN, ReduceOp.MAX)}
    pairs = [(op, d) for d in FLOAT_TYPES for op in (ReduceOp.MIN, ReduceOp.MAX)]
    pairs += [(ReduceOp.BAND, DType.FLOAT32), (ReduceOp.LXOR, DType.FLOAT64),
              (ReduceOp.SUM, DType.FLOAT16), (ReduceOp.PROD, DType.INT8)]
    beats, expected = make_beats(pairs, 128, rng, per_pair=3)
    caps_left_out = caps - {(ReduceOp.PROD, DType.INT8)}
    alu = ReductionALU(128, capabilities=caps_left_out)
    check(run_alu(alu, beats), beats, expected, caps_left_out)


def test_backpressure_loses_nothing():
    rng = random.Random(9)
    alu = ReductionALU(64, capabilities=INT_ONLY)
    pairs = [rng.choice(sorted(INT_ONLY, key=str)) for _ in range(40)]
    beats, expected = make_beats(pairs, 64, rng, per_pair=1)
    results = run_alu(alu, beats, stall_a=0.3, stall_b=0.5, stall_out=0.5, seed=3)
    check(results, beats, expected, INT_ONLY)


@pytest.mark.parametrize("output_fifo", [True, False])
def test_one_beat_per_clock_and_fixed_latency(output_fifo):
    alu = ReductionALU(64, capabilities=INT_ONLY, output_fifo=output_fifo)
    count = 32
    seen = []

    async def source(ctx):
        for k in range(count):
            for port in (alu.a, alu.b):
                ctx.set(port.payload.data, k)
                ctx.set(port.payload.op, ReduceOp.SUM)
                ctx.set(port.payload.dtype, DType.UINT64)
                ctx.set(port.valid, 1)
            await ctx.tick()
            assert ctx.get(alu.a.ready) or k == 0
        ctx.set(alu.a.valid, 0)
        ctx.set(alu.b.valid, 0)

    async def sink(ctx):
        ctx.set(alu.result.ready, 1)
        cycle = 0
        while len(seen) < count:
            _, _, valid, data = await ctx.tick().sample(alu.result.valid, alu.result.payload.data)
            cycle += 1
            if valid:
                seen.append((cycle, int(data)))

    run_testbenches(alu, source, sink)
    assert [d for _, d in seen] == [2 * k for k in range(count)]
    cycles = [c for c, _ in seen]
    assert cycles == list(range(cycles[0], cycles[0] + count)), "a bubble in the output"
    # The first input beat is taken at edge 1; its result is taken `latency` edges later.
    assert cycles[0] == 1 + alu.latency, (cycles[0], alu.latency)
    # The FIFO costs two edges (write, read register); without it the result register is
    # the output.
    assert alu.latency == ReductionALU(64, capabilities=INT_ONLY).latency - 2 * (not output_fifo)


def test_capability_masks():
    alu = ReductionALU(64, capabilities=INT_ONLY - {(ReduceOp.PROD, DType.INT64)})
    assert alu.op_mask(DType.INT32) == (1 << 10) - 1
    assert alu.op_mask(DType.INT64) == ((1 << 10) - 1) & ~(1 << ReduceOp.PROD.value)
    assert alu.op_mask(DType.FLOAT32) == 0
    assert len(all_capabilities()) == 10 * len(INTEGER_TYPES) + 4 * len(FLOAT_TYPES)


def test_constructor_errors():
    with pytest.raises(ValueError, match=r"data_width must be one of 64, 128, 256, 512, not 96"):
        ReductionALU(96)
    with pytest.raises(ValueError, match=r"capability .*BAND.*FLOAT32.* is undefined in MPI"):
        ReductionALU(64, capabilities={(ReduceOp.BAND, DType.FLOAT32)})
    with pytest.raises(TypeError, match=r"capabilities must hold \(ReduceOp, DType\) pairs, not 'sum'"):
        ReductionALU(64, capabilities={"sum"})
    with pytest.raises(TypeError, match="output_fifo must be a bool, not 1"):
        ReductionALU(64, output_fifo=1)


def test_float_sums_every_type():
    rng = random.Random(11)
    caps = INT_ONLY | {(ReduceOp.SUM, d) for d in FLOAT_TYPES}
    alu = ReductionALU(64, capabilities=caps)
    pairs = [(ReduceOp.SUM, d) for d in FLOAT_TYPES]
    beats, expected = make_beats(pairs, 64, rng, per_pair=24)
    check(run_alu(alu, beats, stall_out=0.3, seed=2), beats, expected, caps)


def test_float_products_every_type():
    rng = random.Random(12)
    caps = all_capabilities()
    alu = ReductionALU(64, capabilities=caps)
    pairs = [(ReduceOp.PROD, d) for d in FLOAT_TYPES] + [(ReduceOp.SUM, DType.FLOAT64)]
    beats, expected = make_beats(pairs, 64, rng, per_pair=24)
    check(run_alu(alu, beats, stall_a=0.2, stall_out=0.3, seed=4), beats, expected, caps)


def test_float_sum_only_build_has_no_integer_unit():
    """The demo's ALU (sum:float32 alone) leaves the shared integer / compare unit out, still
    sums exactly and refuses every other pair with error = 1 and data 0."""
    rng = random.Random(13)
    caps = frozenset({(ReduceOp.SUM, DType.FLOAT32)})
    alu = ReductionALU(64, capabilities=caps)
    assert "simple" not in alu._sources
    assert "simple" in ReductionALU(64, capabilities=caps | {(ReduceOp.MAX, DType.FLOAT32)})._sources
    pairs = [(ReduceOp.SUM, DType.FLOAT32), (ReduceOp.MAX, DType.FLOAT32),
             (ReduceOp.SUM, DType.INT32), (ReduceOp.SUM, DType.FLOAT32)]
    beats, expected = make_beats(pairs, 64, rng, per_pair=4)
    check(run_alu(alu, beats, stall_out=0.3, seed=5), beats, expected, caps)


def test_every_op_is_commutative_bit_for_bit():
    """op(a, b) and op(b, a) are the same bits for every pair the ALU has, NaNs with payloads
    and zeros of both signs among the operands (a NaN result is the canonical one; min/max
    order −0 below +0).  The engine relies on it: it gives the ALU the local row as ``a``
    whichever operand order the step's action names, so no multiplexer sits between the
    block RAM's read and the ALU's operand registers (docs/algorithms.md, "Operand order")."""
    rng = random.Random(14)
    caps = all_capabilities()
    pairs = sorted(caps, key=lambda p: (p[1].value, p[0].value))
    beats, _ = make_beats(pairs, 64, rng, per_pair=4)
    swapped = [(op, dtype, b, a, last) for op, dtype, a, b, last in beats]
    alu = ReductionALU(64, capabilities=caps)
    forward, backward = run_alu(alu, beats), run_alu(alu, swapped)
    assert len(forward) == len(backward) == len(beats)
    for (op, dtype, a, b, _), one, other in zip(beats, forward, backward):
        assert one[2] == other[2] == 0, (op, dtype)
        assert one[0] == other[0], (op, dtype, a.hex(), b.hex(), one[0].hex(), other[0].hex())
