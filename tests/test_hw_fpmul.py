# amaranth: UnusedElaboratable=no
"""FloatMultiplier: bit-exact IEEE 754 products against numpy / ml_dtypes, pipeline semantics.

Operand pairs are built to hit the cases where multipliers go wrong: every pair of special and
extreme values, exact ties (and their neighbours) in the normal range, in the subnormal range
and across the subnormal/normal boundary, products near overflow and deep underflow,
subnormal times large normal operands, and random bit patterns.
"""

import random
import re

import ml_dtypes
import numpy as np
import pytest
from amaranth.hdl import Cat, ClockSignal, Const, Elaboratable, Module, Signal, Value

from nicoll.hw.alu import limbs as limbs_mod
from nicoll.hw.alu.fpformat import BF16, FP16, FP32, FP64, FloatFormat
from nicoll.hw.alu.fpmul import FloatMultiplier
from nicoll.sim.testbench import run_testbenches


FORMATS = [FP16, BF16, FP32, FP64]
#: A format numpy does not have among the four, to exercise the parametrization: the 8-bit
#: float with IEEE 754 special values (ml_dtypes' float8_e5m2).
E5M2 = FloatFormat(5, 2)


def test_limb_product_widths_checked():
    with pytest.raises(ValueError, match=r"operand widths must be integers from 1 to 18, not 19"):
        limbs_mod.LimbProduct(16, 19)
    with pytest.raises(ValueError, match=r"operand widths must be integers from 1 to 18, not 0"):
        limbs_mod.LimbProduct(0, 16)


def test_format_type_checked():
    with pytest.raises(TypeError, match=re.escape("Format must be a FloatFormat, not 'fp32'")):
        FloatMultiplier("fp32")
    with pytest.raises(TypeError, match=re.escape("Format must be a FloatFormat, not 32")):
        FloatMultiplier(32)


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda fmt: fmt.name)
def test_ports(fmt):
    dut = FloatMultiplier(fmt)
    assert dut.fmt is fmt
    assert len(dut.a) == len(dut.b) == len(dut.result) == fmt.width
    assert len(dut.en) == 1
    assert isinstance(dut.latency, int) and dut.latency > 0


# Reference --------------------------------------------------------------------------------

def _numpy_types(fmt):
    if fmt == E5M2:
        return ml_dtypes.float8_e5m2, np.uint8
    return fmt.numpy_dtype(), {16: np.uint16, 32: np.uint32, 64: np.uint64}[fmt.width]


def _reference(fmt, pairs):
    """numpy's (ml_dtypes') product bits of every pair of operand bit patterns."""
    dtype, utype = _numpy_types(fmt)
    a = np.array([a for a, _ in pairs], dtype=utype).view(dtype)
    b = np.array([b for _, b in pairs], dtype=utype).view(dtype)
    with np.errstate(all="ignore"):
        product = a * b
    return [int(bits) for bits in product.astype(dtype).view(utype)]


def _check(fmt, pairs, results):
    assert len(results) == len(pairs)
    failures = []
    for (a, b), expected, got in zip(pairs, _reference(fmt, pairs), results):
        if fmt.is_nan(expected):
            # Any quiet NaN (§6.2.1: the first trailing significand bit set).
            ok = fmt.is_nan(got) and (got >> (fmt.man_bits - 1)) & 1
        else:
            ok = got == expected
        if not ok:
            failures.append(f"{a:#x} * {b:#x}: expected {expected:#x}, got {got:#x}")
    assert not failures, f"{len(failures)} of {len(pairs)} wrong:\n" + "\n".join(failures[:20])


# Operands ---------------------------------------------------------------------------------

def _encode(fmt, sign, significand, exponent):
    """Bits of ``(-1)**sign * significand * 2**exponent``, which must be representable."""
    if significand == 0:
        return sign << (fmt.width - 1)
    top = exponent + significand.bit_length() - 1
    if top >= fmt.emin:
        shift = fmt.man_bits - (significand.bit_length() - 1)
        biased = top + fmt.bias
        assert biased < fmt.exp_max
        fraction = significand << shift if shift >= 0 else significand >> -shift
        assert shift >= 0 or significand & ((1 << -shift) - 1) == 0
        return (sign << (fmt.width - 1)) | (biased << fmt.man_bits) | (fraction & fmt.man_mask)
    shift = exponent - (fmt.emin - fmt.man_bits)
    assert shift >= 0
    return (sign << (fmt.width - 1)) | (significand << shift)


def _odd(rng, bits):
    """A random odd number of exactly ``bits`` bits."""
    if bits == 1:
        return 1
    return (1 << (bits - 1)) | rng.getrandbits(bits - 1) | 1


def _split(fmt, rng, u, v, exponent_sum):
    """Operands ``±u * 2**ea`` and ``±v * 2**eb`` with ``ea + eb == exponent_sum``, both
    representable, or None."""
    lsb = fmt.emin - fmt.man_bits               # weight of the smallest subnormal
    low = max(lsb, exponent_sum - (fmt.emax - v.bit_length() + 1))
    high = min(fmt.emax - u.bit_length() + 1, exponent_sum - lsb)
    if low > high:
        return None
    ea = rng.randint(low, high)
    return (_encode(fmt, rng.getrandbits(1), u, ea),
            _encode(fmt, rng.getrandbits(1), v, exponent_sum - ea))


def _edges(fmt):
    half = 1 << (fmt.man_bits - 1)          # first trailing significand bit
    values = [
        0, fmt.one(), fmt.one() + 1, fmt.one() - 1, fmt.one() + (1 << fmt.man_bits),
        fmt.one() - (1 << fmt.man_bits), fmt.one() | half,
        fmt.min_normal(), fmt.min_normal() + 1, fmt.max_normal(), fmt.max_normal() - 1,
        fmt.min_subnormal(), fmt.min_subnormal() + 1, fmt.max_subnormal(), half,
        # about the square roots of the largest and smallest numbers
        ((fmt.bias + fmt.emax // 2) << fmt.man_bits) | fmt.man_mask,
        (fmt.bias - fmt.bias // 2) << fmt.man_bits,
        fmt.inf(),
    ]
    signed = values + [value | fmt.sign_mask for value in values]
    return signed + [fmt.qnan(), fmt.qnan(1), fmt.inf() | 1, fmt.inf() | fmt.man_mask]


def _ties(fmt, rng):
    """Exact ties in the normal range (guard bit set, nothing below it), and the products
    just above and just below them."""
    p = fmt.precision
    pairs = []
    while len(pairs) < 240:
        top = rng.getrandbits(1)
        bits_u = rng.randint(1, p)
        bits_v = p + 2 - top - bits_u
        if not 1 <= bits_v <= p:
            continue
        u, v = _odd(rng, bits_u), _odd(rng, bits_v)
        if (u * v).bit_length() != bits_u + bits_v - 1 + top:
            continue
        exponent = rng.randint(-(fmt.emax // 2), fmt.emax // 2) - (bits_u + bits_v - 2)
        candidates = [(u, exponent)]
        if bits_u < p:
            # (u 2^k ± 1) 2^-k: the same tie, plus or minus a little.
            k = rng.randint(1, p - bits_u)
            candidates += [((u << k) + 1, exponent - k), ((u << k) - 1, exponent - k)]
        for w, exponent_sum in candidates:
            pair = _split(fmt, rng, w, v, exponent_sum)
            if pair is not None:
                pairs.append(pair)
    return pairs


def _subnormal_ties(fmt, rng):
    """Products that are exact ties between neighbouring subnormals, or between the largest
    subnormal and the smallest normal, or in the lowest normal binade, and their
    neighbours: odd multiples of half the smallest subnormal."""
    p = fmt.precision
    half_min = fmt.emin - fmt.man_bits - 1
    quotients = [1, 3, 5, (1 << p) - 1, (1 << p) - 3, (1 << p) + 1]
    products = [(q, 1) for q in quotients if q.bit_length() <= p]
    while len(products) < 80:
        bits_u = rng.randint(1, p)
        bits_v = rng.randint(1, p + 1 - bits_u)
        products.append((_odd(rng, bits_u), _odd(rng, bits_v)))
    pairs = []
    for u, v in products:
        for pair in (_split(fmt, rng, u, v, half_min), _split(fmt, rng, v, u, half_min)):
            if pair is not None:
                pairs.append(pair)
        # Just above and just below the tie.
        spare = p - u.bit_length()
        if spare >= 1:
            k = rng.randint(1, spare)
            for w in ((u << k) + 1, (u << k) - 1):
                pair = _split(fmt, rng, w, v, half_min - k)
                if pair is not None:
                    pairs.append(pair)
    return pairs


def _random_field(fmt, rng):
    if rng.random() < 0.25:
        return rng.choice([0, 1, fmt.man_mask, 1 << (fmt.man_bits - 1)])
    return rng.getrandbits(fmt.man_bits)


def _with_exponent_sum(fmt, rng, target):
    """Random operands whose biased exponent fields sum to ``target + bias`` (clamped), so
    the exact product's exponent is about ``target`` (biased)."""
    ea = rng.randint(1, fmt.exp_max - 1)
    eb = min(max(target + fmt.bias - ea, 0), fmt.exp_max - 1)
    a = (rng.getrandbits(1) << (fmt.width - 1)) | (ea << fmt.man_bits) | _random_field(fmt, rng)
    b = (rng.getrandbits(1) << (fmt.width - 1)) | (eb << fmt.man_bits) | _random_field(fmt, rng)
    return (a, b) if rng.getrandbits(1) else (b, a)


def _vectors(fmt, seed=0):
    rng = random.Random(f"{fmt.name}-{seed}")
    p = fmt.precision
    edges = _edges(fmt)
    pairs = [(a, b) for a in edges for b in edges]
    pairs += _ties(fmt, rng)
    pairs += _subnormal_ties(fmt, rng)
    # Around the subnormal/normal boundary, deep underflow, and overflow.
    pairs += [_with_exponent_sum(fmt, rng, rng.randint(-2, 2)) for _ in range(200)]
    pairs += [_with_exponent_sum(fmt, rng, rng.randint(-p - 4, -p + 2)) for _ in range(100)]
    pairs += [_with_exponent_sum(fmt, rng, rng.randint(fmt.exp_max - 3, fmt.exp_max + 1))
              for _ in range(200)]
    # Subnormal times a normal large enough for a normal product.
    for _ in range(150):
        fraction = max(1, rng.getrandbits(fmt.man_bits) >> rng.randint(0, fmt.man_bits))
        a = (rng.getrandbits(1) << (fmt.width - 1)) | fraction
        eb = rng.randint(min(fmt.bias + p, fmt.exp_max - 1), fmt.exp_max - 1)
        b = ((rng.getrandbits(1) << (fmt.width - 1)) | (eb << fmt.man_bits)
             | _random_field(fmt, rng))
        pairs.append((a, b) if rng.getrandbits(1) else (b, a))
    pairs += [(rng.getrandbits(fmt.width), rng.getrandbits(fmt.width)) for _ in range(400)]
    return pairs


# Simulation -------------------------------------------------------------------------------

def _run_back_to_back(fmt, pairs):
    """Results of ``pairs`` presented one per cycle with ``en`` held high, checking that each
    appears exactly ``latency`` cycles after its operands."""
    dut = FloatMultiplier(fmt)
    results = []

    async def testbench(ctx):
        ctx.set(dut.en, 1)
        for cycle in range(len(pairs) + dut.latency - 1):
            if cycle < len(pairs):
                ctx.set(dut.a, pairs[cycle][0])
                ctx.set(dut.b, pairs[cycle][1])
            await ctx.tick()
            if cycle + 1 >= dut.latency:
                results.append(ctx.get(dut.result))

    run_testbenches(dut, testbench, watchdog_cycles=len(pairs) + 1000)
    return results


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda fmt: fmt.name)
def test_products_back_to_back(fmt):
    pairs = _vectors(fmt)
    _check(fmt, pairs, _run_back_to_back(fmt, pairs))


def test_generic_format():
    """A format outside the four (8 bits, IEEE 754 specials, ml_dtypes.float8_e5m2): every
    operand pair."""
    pairs = [(a, b) for a in range(256) for b in range(0, 256, 3)]
    _check(E5M2, pairs, _run_back_to_back(E5M2, pairs))


def _run_toggling(fmt, pairs, rng):
    """Results of ``pairs`` presented with ``en`` toggling at random, checking that each
    comes out after exactly ``latency`` en-high cycles and that ``result`` holds while ``en``
    is low."""
    dut = FloatMultiplier(fmt)
    results = []

    async def testbench(ctx):
        taken = 0
        previous = 0
        while len(results) < len(pairs):
            enable = rng.random() < 0.5
            index = min(taken, len(pairs) - 1)
            ctx.set(dut.en, enable)
            # Operands change every cycle, also while en is low: only en-high cycles take them.
            ctx.set(dut.a, pairs[index][0] if enable else rng.getrandbits(fmt.width))
            ctx.set(dut.b, pairs[index][1] if enable else rng.getrandbits(fmt.width))
            await ctx.tick()
            result = ctx.get(dut.result)
            if enable:
                taken += 1
                if taken >= dut.latency:
                    results.append(result)
            else:
                assert result == previous
            previous = result

    run_testbenches(dut, testbench, watchdog_cycles=4 * len(pairs) + 4000)
    return results


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda fmt: fmt.name)
def test_enable_toggling(fmt):
    """With ``en`` toggling at random, nothing is lost, repeated or reordered."""
    rng = random.Random(f"toggle-{fmt.name}")
    pairs = rng.sample(_vectors(fmt, seed=1), 500)
    _check(fmt, pairs, _run_toggling(fmt, pairs, rng))


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda fmt: fmt.name)
def test_latency_exact(fmt):
    """Operands present on a cycle with ``en`` high reach ``result`` at the ``latency``-th
    en-high clock edge, counting the edge that takes them, never before, however many en-low
    cycles intervene; ``result`` then holds while ``en`` is low."""
    dut = FloatMultiplier(fmt)
    three = _encode(fmt, 0, 3, 0)
    five = _encode(fmt, 0, 5, 0)
    fifteen = _encode(fmt, 0, 15, 0)

    async def testbench(ctx):
        ctx.set(dut.en, 1)
        ctx.set(dut.a, three)
        ctx.set(dut.b, five)
        await ctx.tick()
        ctx.set(dut.a, 0)
        ctx.set(dut.b, 0)
        edges = 1
        while edges < dut.latency:
            ctx.set(dut.en, 0)
            for _ in range(edges % 3):
                await ctx.tick()
                assert ctx.get(dut.result) == 0
            ctx.set(dut.en, 1)
            await ctx.tick()
            edges += 1
            expected = fifteen if edges == dut.latency else 0
            assert ctx.get(dut.result) == expected, f"result after {edges} en-high edges"
        ctx.set(dut.en, 0)
        for _ in range(3):
            await ctx.tick()
            assert ctx.get(dut.result) == fifteen
        ctx.set(dut.en, 1)
        await ctx.tick()
        assert ctx.get(dut.result) == 0

    run_testbenches(dut, testbench, watchdog_cycles=1000)


def test_bfloat16_binary32_subnormal_products():
    """bfloat16 products below binary32's normal range, where ml_dtypes rounds twice (to
    binary32, then to bfloat16): the tie at half the smallest bfloat16 subnormal, just above
    and below it, products that binary32 itself must round (below 2^-149), and ties between
    bfloat16 subnormals.  A single correctly rounded product agrees with ml_dtypes on all."""
    fmt = BF16
    pairs = []
    for u, v, exponent in [
        (1, 1, -134),       # 2^-134, half the smallest subnormal: a tie, to even (+-0)
        (0x81, 1, -141),    # (1 + 2^-7) 2^-134: just above the tie, the smallest subnormal
        (0xff, 1, -142),    # (1 - 2^-8) 2^-134: just below, 0
        (0x81, 0x81, -148),  # 16641 2^-148, just above the tie, exact in binary32
        (0xff, 0xff, -150),  # 65025 2^-150: binary32 rounds it (a tie there) first; 0
        (0xfd, 0xfb, -151),  # 63503 2^-151: binary32 rounds it first; 0
        (0xff, 0xff, -166),  # below 2^-149 altogether: binary32 gives 0
        (3, 1, -134),       # 1.5 smallest subnormals: a tie, to even (2)
        (5, 1, -134),       # 2.5: a tie, to even (2)
        (0xff, 1, -134),    # 127.5: the largest subnormal/smallest normal tie, to even
        (0xfd, 1, -134),    # 126.5: a tie between subnormals, to even (126)
        (0xab, 0x33, -138),  # 8721 2^-138, inexact: 545.06 subnormal ulps
        (0xab, 0x35, -139),  # 9063 2^-139, inexact, in the lowest normal binade
    ]:
        rng = random.Random(u * v + exponent)
        for _ in range(8):
            pair = _split(fmt, rng, u, v, exponent)
            assert pair is not None
            pairs.append(pair)
    _check(fmt, pairs, _run_back_to_back(fmt, pairs))


# ECP5 multiplier blocks -------------------------------------------------------------------

class _Mult18x18dModel(Elaboratable):
    """What an ECP5 MULT18X18D instance does, read from its parameters and connections as
    the sysDSP documentation describes them: each of the A, B and output registers is either
    bypassed (``REG_*_CLK = "NONE"``) or clocked by the named CLKn port and enabled by the
    named CEn port.  Only the unsigned, uncascaded use is modelled; anything else fails."""

    def __init__(self, kind, **arguments):
        assert kind == "MULT18X18D"
        self.parameters = {name[2:]: value for name, value in arguments.items()
                           if name.startswith("p_")}
        self.ports = {name[2:]: value for name, value in arguments.items()
                      if not name.startswith("p_")}
        assert self.parameters["REG_INPUTC_CLK"] == self.parameters["REG_PIPELINE_CLK"] == "NONE"
        assert self.parameters["MULT_BYPASS"] == "DISABLED"
        for port in ("SIGNEDA", "SIGNEDB", "SOURCEA", "SOURCEB", *(f"C{k}" for k in range(18))):
            value = self.ports[port]
            assert isinstance(value, Const) and value.value == 0, port

    def _register(self, m, name, value):
        clock = self.parameters[f"REG_{name}_CLK"]
        if clock == "NONE":
            return value
        clock_port = self.ports[clock]
        assert isinstance(clock_port, ClockSignal) and clock_port.domain == "sync"
        reset = self.ports[self.parameters[f"REG_{name}_RST"]]
        assert isinstance(reset, Const) and reset.value == 0
        register = Signal.like(value, name=f"reg_{name.lower()}")
        with m.If(self.ports[self.parameters[f"REG_{name}_CE"]]):
            m.d.sync += register.eq(value)
        return register

    def elaborate(self, platform):
        m = Module()
        a = self._register(m, "INPUTA", Cat(self.ports[f"A{k}"] for k in range(18)))
        b = self._register(m, "INPUTB", Cat(self.ports[f"B{k}"] for k in range(18)))
        p = self._register(m, "OUTPUT", a * b)
        for k in range(36):
            m.d.comb += Value.cast(self.ports[f"P{k}"]).eq(p[k])
        return m


@pytest.fixture
def ecp5_blocks(monkeypatch):
    """Elaborate as for an ECP5 device, with each MULT18X18D instance simulated by
    :class:`_Mult18x18dModel`; yields the list of models made."""
    made = []

    def instance(kind, **arguments):
        model = _Mult18x18dModel(kind, **arguments)
        made.append(model)
        return model

    monkeypatch.setattr(limbs_mod, "_is_ecp5", lambda platform: True)
    monkeypatch.setattr(limbs_mod, "Instance", instance)
    yield made


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda fmt: fmt.name)
def test_ecp5_multiplier_blocks(fmt, ecp5_blocks):
    """On ECP5 the partial products come from MULT18X18D blocks with their own input and
    output registers: same results, same latency, same behaviour under en."""
    rng = random.Random(f"ecp5-{fmt.name}")
    pairs = rng.sample(_vectors(fmt, seed=2), 600)
    _check(fmt, pairs[:400], _run_back_to_back(fmt, pairs[:400]))
    _check(fmt, pairs[400:], _run_toggling(fmt, pairs[400:], rng))
    limbs = -(-fmt.precision // 18)
    assert len(ecp5_blocks) == 2 * limbs ** 2       # one block per limb pair, two designs
    for model in ecp5_blocks:
        for register in ("INPUTA", "INPUTB", "OUTPUT"):
            assert model.parameters[f"REG_{register}_CLK"] != "NONE"


def test_ecp5_detection():
    from amaranth_boards.versa_ecp5 import VersaECP5Platform
    assert limbs_mod._is_ecp5(VersaECP5Platform())
    assert not limbs_mod._is_ecp5(None)
