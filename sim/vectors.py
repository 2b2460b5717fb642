"""Operand vectors for the reduction ALU benches, drawn to hit the edges, and the comparison.

Used by the Amaranth-simulator unit tests (tests/test_hw_alu.py) and the Verilator bench
(sim/benches/alu/bench.py) alike.  About half of the elements are plain random bit patterns; the
rest are edge values of the type (0, −0, ±1, integer min/max, largest and smallest normal,
subnormals, ±inf, NaN) and operand pairs built for the op: exact and near cancellation and
exponent carries for sums, overflow to inf and underflow to subnormal or zero for products.
"""

import numpy as np

from nicoll.hw.ops import DType, ReduceOp
from nicoll.ops import numpy_dtype

__all__ = ["operand_pairs", "results_match", "UINT_OF_WIDTH"]

UINT_OF_WIDTH = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}

_FORMATS = {DType.FLOAT16: (5, 10), DType.BFLOAT16: (8, 7),
            DType.FLOAT32: (8, 23), DType.FLOAT64: (11, 52)}


def _float_edges(dtype):
    exp_bits, man_bits = _FORMATS[dtype]
    sign = 1 << (exp_bits + man_bits)
    exp_max = (1 << exp_bits) - 1
    one = ((1 << (exp_bits - 1)) - 1) << man_bits
    edges = [
        0, one, (exp_max - 1) << man_bits | ((1 << man_bits) - 1),      # 0, 1, largest normal
        1 << man_bits, 1, (1 << man_bits) - 1, 1 << (man_bits - 1),   # smallest normal, subnormals
        exp_max << man_bits,                                           # inf
        exp_max << man_bits | 1 << (man_bits - 1),                    # quiet NaN
        exp_max << man_bits | 1,                                       # signalling NaN
        one | 1, (one + (1 << man_bits)) - 1,                         # 1 + ulp, just below 2
    ]
    return edges + [e | sign for e in edges]


def _edge_raw(dtype, rng, count):
    bits = dtype.bits
    if dtype.is_float:
        edges = _float_edges(dtype)
    else:
        edges = [0, 1, (1 << bits) - 1, 1 << (bits - 1), (1 << (bits - 1)) - 1, 2,
                 (1 << bits) - 2, (1 << (bits - 1)) + 1]
    return [rng.choice(edges) for _ in range(count)]


def operand_pairs(op, dtype, count, rng):
    """``count`` operand pairs for ``op`` on ``dtype`` as two numpy arrays (random.Random rng)."""
    bits = dtype.bits
    raw_type = UINT_OF_WIDTH[bits]
    a = [rng.getrandbits(bits) for _ in range(count)]
    b = [rng.getrandbits(bits) for _ in range(count)]
    edge_a, edge_b = _edge_raw(dtype, rng, count), _edge_raw(dtype, rng, count)
    for k in range(count):
        roll = rng.random()
        if roll < 0.25:
            a[k] = edge_a[k]
        elif roll < 0.5:
            b[k] = edge_b[k]
        elif roll < 0.6:
            a[k], b[k] = edge_a[k], edge_b[k]
    a = np.array(a, dtype=raw_type)
    b = np.array(b, dtype=raw_type)
    if dtype.is_float:
        exp_bits, man_bits = _FORMATS[dtype]
        sign = raw_type(1 << (exp_bits + man_bits))
        idx = np.array([rng.random() < 0.2 for _ in range(count)])
        if op is ReduceOp.SUM and idx.any():
            # Cancellation and carries: b = −a, b = −a ± a few ulps, b = a (exponent carry).
            kind = np.array([rng.randrange(3) for _ in range(count)])
            ulps = np.array([rng.randrange(-3, 4) for _ in range(count)]).astype(np.int64)
            neg = a ^ sign
            near = (neg.astype(np.int64) + ulps).astype(raw_type)
            b = np.where(idx & (kind == 0), neg, b)
            b = np.where(idx & (kind == 1), near, b)
            b = np.where(idx & (kind == 2), a, b)
        if op is ReduceOp.PROD and idx.any():
            # Exponents chosen so the product lands near overflow or deep in the subnormals.
            bias = (1 << (exp_bits - 1)) - 1
            exp_mask = raw_type(((1 << exp_bits) - 1) << man_bits)
            for k in np.nonzero(idx)[0]:
                target = rng.choice([2 * bias + 1, 2 * bias - 1, 1 - bias - man_bits,
                                     1 - bias - man_bits // 2, 1 - bias, -bias - man_bits - 2])
                ea = rng.randrange(1, (1 << exp_bits) - 1)
                eb = min(max(target + 2 * bias - ea, 1), (1 << exp_bits) - 2)
                a[k] = (a[k] & ~exp_mask) | raw_type(ea << man_bits)
                b[k] = (b[k] & ~exp_mask) | raw_type(eb << man_bits)
    np_dtype = numpy_dtype(dtype)
    return a.view(np_dtype), b.view(np_dtype)


def results_match(got, want):
    """Bit-exact equality, with any NaN matching any NaN; returns the mismatching indices."""
    if got.dtype.kind in "iu":
        return np.nonzero(got != want)[0]
    with np.errstate(invalid="ignore"):       # casting a signalling NaN
        g_nan = np.isnan(got.astype(np.float64))
        w_nan = np.isnan(want.astype(np.float64))
    raw = UINT_OF_WIDTH[got.dtype.itemsize * 8]
    differ = got.view(raw) != want.view(raw)
    return np.nonzero((g_nan != w_nan) | (~w_nan & differ))[0]
