# amaranth: UnusedElaboratable=no
"""FloatAdder: bit-exact against numpy / ml_dtypes on edge and random operands in all four
formats, under a free-running and a randomly stalled pipeline; latency; constructor checks.
Also the format helpers of ``fpformat`` and the two reference models the checks rest on."""

import random

import ml_dtypes
import numpy as np
import pytest
from amaranth.sim import Simulator

from nicoll.hw.alu.fpadd import FloatAdder
from nicoll.hw.alu.fpformat import BF16, FP16, FP32, FP64, FloatFormat
from nicoll.sim.testbench import PERIOD

FORMATS = [FP16, BF16, FP32, FP64]
IDS = [fmt.name for fmt in FORMATS]


# Reference models -------------------------------------------------------------------------

def numpy_add(fmt, a, b):
    """Bit patterns of ``a + b`` as numpy (ml_dtypes for bfloat16) computes it; ``a`` and
    ``b`` are sequences of bit patterns."""
    uint = {16: np.uint16, 32: np.uint32, 64: np.uint64}[fmt.width]
    x = fmt.from_bits(np.asarray(a, dtype=uint))
    y = fmt.from_bits(np.asarray(b, dtype=uint))
    # Overflow and inf - inf are expected results here, not errors.
    with np.errstate(all="ignore"):
        return [int(bits) for bits in np.atleast_1d(fmt.to_bits(x + y))]


def _decode(fmt, bits):
    """(sign, integer significand, effective biased exponent) of a finite encoding."""
    sign, exp, man = fmt.fields(bits)
    if exp:
        man |= 1 << fmt.man_bits
    return sign, man, max(exp, 1)


def _round_exact(fmt, negative, mag, scale):
    """Encoding of ``(-1)**negative * mag * 2**scale`` units of the smallest subnormal,
    rounded once, to nearest with ties to even (IEEE 754-2019 §4.3.1).  ``mag > 0``."""
    p = fmt.precision
    value_bits = mag.bit_length() + scale
    shift = max(value_bits - p, 0)
    right = shift - scale
    if right <= 0:
        q = mag << -right
    else:
        q, rest = mag >> right, mag & ((1 << right) - 1)
        half = 1 << (right - 1)
        if rest > half or (rest == half and q & 1):
            q += 1
    if q == 1 << p:
        q >>= 1
        shift += 1
    exp = shift + 1 if q >> (p - 1) else 0
    if exp >= fmt.exp_max:
        return fmt.inf(negative)
    return (negative << (fmt.width - 1)) | (exp << fmt.man_bits) | (q & fmt.man_mask)


def exact_add(fmt, a, b):
    """Correctly rounded ``a + b`` from exact integer arithmetic: an independent model (no
    alignment, no sticky bit), with Python's unbounded integers.  NaN results are the
    canonical quiet NaN."""
    a_sign, a_exp, a_man = fmt.fields(a)
    b_sign, b_exp, b_man = fmt.fields(b)
    if fmt.is_nan(a) or fmt.is_nan(b):
        return fmt.qnan()
    if a_exp == fmt.exp_max or b_exp == fmt.exp_max:
        if a_exp == b_exp == fmt.exp_max and a_sign != b_sign:
            return fmt.qnan()
        return fmt.inf(a_sign if a_exp == fmt.exp_max else b_sign)
    a_sign, a_sig, a_exp = _decode(fmt, a)
    b_sign, b_sig, b_exp = _decode(fmt, b)
    # Both as integers in units of the smallest subnormal, 2**(emin - man_bits).
    total = (-1) ** a_sign * (a_sig << (a_exp - 1)) + (-1) ** b_sign * (b_sig << (b_exp - 1))
    if total == 0:
        # §6.3: +0 for an exact zero sum in roundTiesToEven, unless both operands are -0.
        return (a_sign & b_sign) << (fmt.width - 1)
    return _round_exact(fmt, int(total < 0), abs(total), 0)


def exact_add_near(fmt, a, b):
    """:func:`exact_add` vectorized over numpy integer arrays, for finite operands whose
    effective exponents differ by at most ``53 - 1 - precision`` (the exact sum then fits in
    53 bits, which float64's ``frexp`` measures without rounding).  Returns the encodings and
    the mask of pairs it covers."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    p, mb, top = fmt.precision, fmt.man_bits, fmt.width - 1

    def decode(x):
        sign = (x >> top) & 1
        exp = (x >> mb) & fmt.exp_max
        sig = (x & fmt.man_mask) | ((exp != 0).astype(np.int64) << mb)
        return sign, sig, np.maximum(exp, 1), exp

    a_sign, a_sig, a_exp, a_raw = decode(a)
    b_sign, b_sig, b_exp, b_raw = decode(b)
    covered = ((a_raw != fmt.exp_max) & (b_raw != fmt.exp_max)
               & (np.abs(a_exp - b_exp) <= 52 - p))
    base = np.minimum(a_exp, b_exp)
    a_val = np.where(a_sign == 1, -1, 1) * (a_sig << np.where(covered, a_exp - base, 0))
    b_val = np.where(b_sign == 1, -1, 1) * (b_sig << np.where(covered, b_exp - base, 0))
    total = a_val + b_val
    scale = base - 1
    negative = (total < 0).astype(np.int64)
    mag = np.abs(total)
    length = np.frexp(mag.astype(np.float64))[1].astype(np.int64)
    shift = np.maximum(length + scale - p, 0)
    right = shift - scale
    left = np.maximum(-right, 0)
    rshift = np.maximum(right, 0)
    q = np.where(right <= 0, mag << left, mag >> rshift)
    rest = mag & ((np.int64(1) << rshift) - 1)
    half = np.where(rshift > 0, np.int64(1) << np.maximum(rshift - 1, 0), 0)
    up = (right > 0) & ((rest > half) | ((rest == half) & ((q & 1) == 1)))
    q = q + up
    carry = q == (1 << p)
    q = np.where(carry, q >> 1, q)
    shift = shift + carry
    exp = np.where((q >> (p - 1)) != 0, shift + 1, 0)
    overflow = exp >= fmt.exp_max
    bits = (negative << top) | (np.minimum(exp, fmt.exp_max) << mb) | (q & fmt.man_mask)
    bits = np.where(overflow, (negative << top) | fmt.exp_mask, bits)
    bits = np.where(total == 0, (a_sign & b_sign) << top, bits)
    return bits, covered


def same_result(fmt, got, expected):
    """Bit-exact, except that any quiet NaN stands for an expected NaN (§6.2.3 leaves the
    payload to the implementation, and §6.2.1 makes the first trailing significand bit the
    quiet flag)."""
    if fmt.is_nan(expected):
        return fmt.is_nan(got) and bool(got >> (fmt.man_bits - 1) & 1)
    return got == expected


# Operand streams ---------------------------------------------------------------------------

def _bits(fmt, sign, exp, man):
    return (sign << (fmt.width - 1)) | (exp << fmt.man_bits) | man


def edge_values(fmt):
    one_ulp = 1
    values = []
    for sign in (0, 1):
        values += [
            sign << (fmt.width - 1),                     # ±0
            fmt.one(sign), fmt.one(sign) + one_ulp,       # ±1, next above
            fmt.one(sign) - one_ulp,                      # largest below 1
            _bits(fmt, sign, fmt.bias + 1, 0),            # ±2
            _bits(fmt, sign, fmt.bias, 1 << (fmt.man_bits - 1)),  # ±1.5
            fmt.min_normal(sign), fmt.min_normal(sign) + one_ulp,
            fmt.max_normal(sign), fmt.max_normal(sign) - one_ulp,
            fmt.min_subnormal(sign), fmt.max_subnormal(sign),
            fmt.min_subnormal(sign) + one_ulp,
            fmt.inf(sign),
        ]
    # A quiet NaN of each sign and a signalling one (quiet flag clear, payload 1).
    values += [fmt.qnan(0), fmt.qnan(1), _bits(fmt, 0, fmt.exp_max, 1)]
    return values


def operand_pairs(fmt, count, seed):
    """All pairs of edge values, then ``count`` pairs drawn from the cases adders get wrong,
    then uniformly random bit patterns."""
    rng = random.Random(f"{fmt.name}-{seed}")
    p, mb, top = fmt.precision, fmt.man_bits, fmt.width - 1
    edges = edge_values(fmt)
    pairs = [(a, b) for a in edges for b in edges]

    def finite(low=0, high=None):
        exp = rng.randint(low, fmt.exp_max - 1 if high is None else high)
        return _bits(fmt, rng.getrandbits(1), exp, rng.getrandbits(mb))

    def normal(low=1, high=None):
        return _bits(fmt, rng.getrandbits(1), rng.randint(low, high or fmt.exp_max - 1),
                     rng.getrandbits(mb))

    def flip(x):
        return x ^ (1 << top)

    def half_ulp_of(x, sign):
        # The power of two half an ulp of x (§2.1.57): exponent lower by p; zero if that
        # falls below the subnormal range, a subnormal power of two if it lands in it.
        exp = (x >> mb) & fmt.exp_max
        shift = exp - p
        if shift >= 1:
            return _bits(fmt, sign, shift, 0)
        position = mb - 1 + shift            # subnormal: value man * 2**(emin - mb)
        return _bits(fmt, sign, 0, 1 << position) if position >= 0 else 0

    makers = [
        # Exact cancellation (x + -x = +0) and near cancellation (one or a few ulps apart,
        # long normalizing shifts, results down into the subnormals).
        lambda: (lambda x: (x, flip(x)))(finite()),
        lambda: (lambda x: (x, flip(x) ^ rng.getrandbits(rng.randint(1, mb))))(finite()),
        lambda: (lambda x: (x, flip(x) + rng.choice((-1, 1))))(normal(2)),
        # Exponent carries: an all-ones significand plus something, x + x.
        lambda: (_bits(fmt, 0, rng.randint(1, fmt.exp_max - 2), fmt.man_mask),
                 _bits(fmt, 0, rng.randint(1, fmt.exp_max - 2), rng.getrandbits(mb))),
        lambda: (lambda x: (x, x))(finite()),
        # Ties (exactly half an ulp) in both directions, and a hair above or below half.
        lambda: (lambda x: (x, half_ulp_of(x, rng.getrandbits(1))))(normal(p + 1)),
        lambda: (lambda x: (x, half_ulp_of(x, rng.getrandbits(1)) + rng.choice((-1, 1))))(
            normal(p + 2)),
        # Overflow: the largest finite plus a tie, or plus large values.
        lambda: (fmt.max_normal(s := rng.getrandbits(1)),
                 half_ulp_of(fmt.max_normal(), s) + rng.choice((-1, 0, 1))),
        lambda: (normal(fmt.exp_max - 2), normal(fmt.exp_max - 2)),
        # Subnormals: sums that stay subnormal or become normal; subnormal plus small normal.
        lambda: (finite(0, 0), finite(0, 0)),
        lambda: (finite(0, 0), finite(1, 2)),
        # Nearby exponents (every alignment shift the adder keeps bits for, and a few past).
        lambda: (lambda x: (x, _bits(fmt, rng.getrandbits(1),
                                     min(max(((x >> mb) & fmt.exp_max)
                                             + rng.randint(-p - 4, p + 4), 0),
                                         fmt.exp_max - 1),
                                     rng.getrandbits(mb))))(finite()),
    ]
    for _ in range(count):
        a, b = rng.choice(makers)()
        pairs.append((a, b) if rng.getrandbits(1) else (b, a))
    for _ in range(count // 4):
        pairs.append((rng.getrandbits(fmt.width), rng.getrandbits(fmt.width)))
    return pairs


# Simulation --------------------------------------------------------------------------------

def run_stream(fmt, pairs, *, stall=0.0, seed=0):
    """Results of ``pairs`` presented one per cycle with ``en`` high, and ``en`` low on a
    random ``stall`` fraction of the cycles (with garbage operands, which must be ignored).
    Checks that ``result`` holds while ``en`` is low."""
    dut = FloatAdder(fmt)
    rng = random.Random(seed)
    results = []

    async def testbench(ctx):
        stream = list(pairs) + [(0, 0)] * (dut.latency - 1)
        advanced = 0
        index = 0
        held = ctx.get(dut.result)
        while index < len(stream):
            en = rng.random() >= stall
            if en:
                a, b = stream[index]
                index += 1
            else:
                a, b = rng.getrandbits(fmt.width), rng.getrandbits(fmt.width)
            ctx.set(dut.a, a)
            ctx.set(dut.b, b)
            ctx.set(dut.en, en)
            await ctx.tick()
            result = ctx.get(dut.result)
            if en:
                advanced += 1
                if advanced >= dut.latency:
                    results.append(result)
            else:
                assert result == held, "result changed while en was low"
            held = result

    sim = Simulator(dut)
    sim.add_clock(PERIOD)
    sim.add_testbench(testbench)
    sim.run()
    assert len(results) == len(pairs)
    return results


def check_results(fmt, pairs, results):
    expected = numpy_add(fmt, [a for a, _ in pairs], [b for _, b in pairs])
    wrong = [(a, b, got, exp) for (a, b), got, exp in zip(pairs, results, expected)
             if not same_result(fmt, got, exp)]
    assert not wrong, "\n".join(
        f"{fmt.name}: {a:#x} + {b:#x} = {got:#x}, expected {exp:#x} "
        f"({fmt.from_bits(a)!r} + {fmt.from_bits(b)!r} = {fmt.from_bits(exp)!r})"
        for a, b, got, exp in wrong[:10])


# Per-format vector counts: the Amaranth simulator runs a few thousand cycles per second,
# slower for the wider formats (the large random runs happen under Verilator).
COUNTS = {FP16.name: 2400, BF16.name: 2400, FP32.name: 2000, FP64.name: 1600}


@pytest.mark.parametrize("fmt", FORMATS, ids=IDS)
def test_stream(fmt):
    pairs = operand_pairs(fmt, COUNTS[fmt.name], seed=1)
    results = run_stream(fmt, pairs)
    check_results(fmt, pairs, results)


@pytest.mark.parametrize("fmt", FORMATS, ids=IDS)
def test_stream_stalled(fmt):
    """The same operands with en toggling at random: identical results, none lost,
    duplicated or reordered."""
    pairs = operand_pairs(fmt, COUNTS[fmt.name] // 4, seed=2)[-1200:]
    free = run_stream(fmt, pairs)
    stalled = run_stream(fmt, pairs, stall=0.4, seed=3)
    assert stalled == free
    check_results(fmt, pairs, stalled)


LATENCY = {FP16.name: 11, BF16.name: 11, FP32.name: 11, FP64.name: 11}


@pytest.mark.parametrize("fmt", FORMATS, ids=IDS)
def test_latency(fmt):
    """One sum in a stream of zeros appears exactly ``latency`` en-high cycles later,
    however many en-low cycles come between."""
    dut = FloatAdder(fmt)
    assert dut.latency == FloatAdder.latency_for(fmt) == LATENCY[fmt.name]
    assert isinstance(dut.latency, int)
    two = _bits(fmt, 0, fmt.bias + 1, 0)
    rng = random.Random(fmt.name)

    async def testbench(ctx):
        advanced = 0
        for cycle in range(4 * dut.latency):
            en = cycle == 0 or rng.random() < 0.6
            first = cycle == 0
            ctx.set(dut.a, fmt.one() if first else (0 if en else rng.getrandbits(fmt.width)))
            ctx.set(dut.b, fmt.one() if first else (0 if en else rng.getrandbits(fmt.width)))
            ctx.set(dut.en, en)
            await ctx.tick()
            advanced += en
            expected = two if advanced == dut.latency else 0
            assert ctx.get(dut.result) == expected, (cycle, advanced)

    sim = Simulator(dut)
    sim.add_clock(PERIOD)
    sim.add_testbench(testbench)
    sim.run()


def test_constructor():
    with pytest.raises(TypeError, match=r"^Format must be a FloatFormat, not 'fp32'$"):
        FloatAdder("fp32")
    with pytest.raises(TypeError, match=r"^Format must be a FloatFormat, not \(8, 23\)$"):
        FloatAdder.latency_for((8, 23))
    dut = FloatAdder(FP32)
    assert dut.fmt is FP32
    members = {name: (member.flow.name, member.shape)
               for name, member in dut.signature.members.items()}
    assert members == {"a": ("In", 32), "b": ("In", 32), "en": ("In", 1),
                       "result": ("Out", 32)}


def test_other_format():
    """A format numpy has no type for still builds and adds (checked against the exact
    model): the adder is parametric, not a table of four."""
    fmt = FloatFormat(4, 3)
    assert fmt.name == "e4m3"
    rng = random.Random(0)
    pairs = [(a, b) for a in edge_values(fmt) for b in edge_values(fmt)]
    pairs += [(rng.getrandbits(8), rng.getrandbits(8)) for _ in range(300)]
    results = run_stream(fmt, pairs)
    for (a, b), got in zip(pairs, results):
        assert same_result(fmt, got, exact_add(fmt, a, b)), (hex(a), hex(b), hex(got))


# The references themselves ------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS, ids=IDS)
def test_numpy_is_correctly_rounded(fmt):
    """numpy agrees with the exact integer model on the test operands, so the stream tests
    check IEEE 754 addition and not some numpy artefact (float16 adds through float32,
    bfloat16 too, see below)."""
    pairs = operand_pairs(fmt, 4000, seed=4)
    expected = numpy_add(fmt, [a for a, _ in pairs], [b for _, b in pairs])
    for (a, b), got in zip(pairs, expected):
        assert same_result(fmt, got, exact_add(fmt, a, b)), (hex(a), hex(b))


def test_exact_models_agree():
    """The vectorized exact model against the scalar one, on bfloat16 and float16."""
    for fmt in (BF16, FP16):
        pairs = operand_pairs(fmt, 3000, seed=5)
        got, covered = exact_add_near(fmt, [a for a, _ in pairs], [b for _, b in pairs])
        assert covered.sum() > len(pairs) // 2
        for (a, b), bits, ok in zip(pairs, got, covered):
            if ok:
                assert int(bits) == exact_add(fmt, a, b), (fmt.name, hex(a), hex(b))


def test_bf16_double_rounding_is_innocuous():
    """ml_dtypes adds bfloat16 values in float32 and rounds the float32 sum to bfloat16:
    two roundings.  For addition that equals one correct rounding when the wider format
    has at least 2p + 2 bits of precision (24 >= 2 * 8 + 2); checked here rather than
    trusted.  Every bfloat16 ``b`` against ``a`` from every significand and sign of a
    mid-range binade (the result depends on exponents only through their difference
    there) and from the binades next to the subnormals and to overflow, with the exact
    model; exponent differences beyond its reach with the scalar model."""
    fmt = BF16
    rng = np.random.default_rng(6)
    b = np.arange(1 << 16, dtype=np.int64)
    mid = [_bits(fmt, s, 127, m) for s in (0, 1) for m in range(1 << fmt.man_bits)]
    ends = [_bits(fmt, int(rng.integers(2)), int(e), int(rng.integers(1 << fmt.man_bits)))
            for e in (0, 1, 2, 253, 254) for _ in range(16)]
    checked = 0
    for a in mid + ends:
        a_vec = np.full_like(b, a)
        expected, covered = exact_add_near(fmt, a_vec, b)
        with np.errstate(all="ignore"):
            got = fmt.to_bits(fmt.from_bits(a_vec.astype(np.uint16))
                              + fmt.from_bits(b.astype(np.uint16))).astype(np.int64)
        mismatch = covered & (got != expected)
        assert not mismatch.any(), [hex(x) for x in b[mismatch][:5]]
        checked += int(covered.sum())
    assert checked > 6_000_000
    # Pairs too far apart for the vectorized model (the smaller operand is then only a
    # sticky bit), and random pairs over the whole range.
    far = []
    pyrng = random.Random(7)
    for _ in range(3000):
        ea = pyrng.randint(50, 254)
        far.append((_bits(fmt, pyrng.getrandbits(1), ea, pyrng.getrandbits(7)),
                    _bits(fmt, pyrng.getrandbits(1), pyrng.randint(0, ea - 45),
                          pyrng.getrandbits(7))))
        far.append((pyrng.getrandbits(16), pyrng.getrandbits(16)))
    got = numpy_add(fmt, [x for x, _ in far], [y for _, y in far])
    for (x, y), bits in zip(far, got):
        assert same_result(fmt, bits, exact_add(fmt, x, y)), (hex(x), hex(y))
    assert ml_dtypes.bfloat16 is fmt.numpy_dtype()


# fpformat ---------------------------------------------------------------------------------

def test_formats():
    assert [(f.exp_bits, f.man_bits, f.width, f.name) for f in FORMATS] == [
        (5, 10, 16, "fp16"), (8, 7, 16, "bf16"), (8, 23, 32, "fp32"), (11, 52, 64, "fp64")]
    assert FP16 == FloatFormat(5, 10) == FloatFormat(5, 10, "half")
    assert hash(FP64) == hash(FloatFormat(11, 52))
    assert FP32.bias == 127 and FP32.emin == -126 and FP32.precision == 24
    for fmt in FORMATS:
        dtype = fmt.numpy_dtype()
        finfo = ml_dtypes.finfo(dtype)
        assert fmt.from_bits(fmt.one()) == dtype(1.0)
        assert fmt.from_bits(fmt.max_normal()) == finfo.max
        assert fmt.from_bits(fmt.min_normal()) == finfo.smallest_normal
        assert fmt.from_bits(fmt.min_subnormal()) == finfo.smallest_subnormal
        assert np.isinf(fmt.from_bits(fmt.inf(1))) and fmt.from_bits(fmt.inf(1)) < 0
        assert np.isnan(fmt.from_bits(fmt.qnan())) and fmt.is_nan(fmt.qnan())
        assert fmt.to_bits(fmt.from_bits(fmt.max_subnormal(1))) == fmt.max_subnormal(1)
        assert list(fmt.to_bits(fmt.from_bits([fmt.one(), 0]))) == [fmt.one(), 0]


def test_format_errors():
    with pytest.raises(TypeError, match=r"^exp_bits must be an integer, not '8'$"):
        FloatFormat("8", 7)
    with pytest.raises(TypeError, match=r"^man_bits must be an integer, not True$"):
        FloatFormat(8, True)
    with pytest.raises(ValueError, match=r"^exp_bits must be at least 2, not 1$"):
        FloatFormat(1, 7)
    with pytest.raises(ValueError, match=r"^man_bits must be at least 1, not 0$"):
        FloatFormat(8, 0)
    with pytest.raises(TypeError, match=r"^name must be a string, not 3$"):
        FloatFormat(8, 7, 3)
    with pytest.raises(ValueError, match=r"^No numpy type for FloatFormat\(exp_bits=4, "
                                         r"man_bits=3, name='e4m3'\)$"):
        FloatFormat(4, 3).numpy_dtype()
