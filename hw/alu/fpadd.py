# Ref: IEEE Std 754-2019 §5.4.1 (addition), §4.3.1 (roundTiesToEven), §4.3.3 (rounding
#      direction attribute default), §6.1 (infinity arithmetic), §6.2 (NaN operations),
#      §6.3 (the sign bit of an exact zero sum), §7.2 (invalid operation: inf - inf),
#      §7.4 (overflow).
"""Pipelined floating-point adder, parametrized by :class:`~nicoll.hw.alu.fpformat.FloatFormat`.

:class:`FloatAdder` computes ``a + b`` in round-to-nearest-even with subnormal inputs and
outputs (no flush to zero), bit for bit as numpy and ml_dtypes compute it for every result
that is not a NaN.  Any NaN operand, and ``inf + -inf``, give a quiet NaN; which one is not
specified (§6.2.3 leaves the payload to the implementation), the canonical one here.

Pipeline, one step per line, every stage ending in a register (the shifter stage counts
are those of the four standard formats; they follow the shift width):

1. classify: magnitude comparison of the operands, the exponent and fraction tests of
   inf/NaN, exponent differences;
2. swap: the operand of larger magnitude becomes ``big``, its exponent the result's; one
   of the exponent differences becomes the alignment shift; NaN and infinity from the
   tests;
3. align (two stages): the smaller significand is shifted right by the exponent difference,
   shifted-out bits collapse into a sticky bit;
4. add: one carry chain adds or subtracts the aligned significands;
5. leading zeros (two stages): eight-bit group counts, then the first nonzero group;
6. normalize (two stages): left shift by the leading-zero count, limited so that a tiny
   result stays subnormal;
7. round: the round-to-nearest-even increment, the special results;
8. pack: the increment added to exponent and significand together, so a carry out of the
   significand bumps the exponent (and reaches infinity on overflow).

Every stage register loads when ``en`` is high and holds otherwise: the enclosing unit
tracks which stages hold valid operations and stalls the whole pipeline on backpressure.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring

from .fpformat import FloatFormat, binary_unit_signature


__all__ = ["FloatAdder"]


# Right (alignment) and left (normalization) shifters are split into stages of at most this
# many 2:1 multiplexer levels: about one LUT4 each, plus the sticky OR tree beside them.
_SHIFT_LEVELS_PER_STAGE = 3
# Width of a group of the leading-zero counter's first stage: eight bits is a two-LUT4-deep
# priority encoder, and leaves at most eight groups (for binary64) to the second stage.
_LZC_GROUP = 8
# Bits kept below the significand while adding: guard, round and sticky.  With them the sum
# rounds as the exact sum would (the sticky bit is all a far operand contributes; a near
# operand, exponent difference at most 1, loses no bit at all).
_EXTRA_BITS = 3

# Stages other than the two shifters: classify, swap, add, two leading-zero stages, round,
# pack.
_FIXED_STAGES = 7


def _check_format(fmt):
    if not isinstance(fmt, FloatFormat):
        raise TypeError(f"Format must be a FloatFormat, not {fmt!r}")


def _split_levels(levels):
    """Shift amount bit indices, most significant first, grouped into pipeline stages of
    nearly equal size (a four-level shifter becomes 2 + 2, not 3 + 1)."""
    stages = max(1, -(-levels // _SHIFT_LEVELS_PER_STAGE))
    order = list(range(levels - 1, -1, -1))
    groups = []
    for index in range(stages):
        size = len(order) // (stages - index)
        groups.append(order[:size])
        order = order[size:]
    return groups


class _Geometry:
    """Widths derived from the format, shared by the constructor (latency) and
    :meth:`FloatAdder.elaborate`."""

    def __init__(self, fmt):
        # The aligned operand field: significand and the extra bits.  A shift by
        # ``align_max = p + _EXTRA_BITS`` or more leaves only the sticky bit, so the
        # difference saturates at ``2 ** align_bits - 1 >= align_max``.
        self.field = fmt.precision + _EXTRA_BITS
        self.align_max = self.field
        self.align_bits = self.align_max.bit_length()
        # The sum has one more bit, for the carry of an effective addition.
        self.sum_width = self.field + 1
        self.lzc_groups = -(-self.sum_width // _LZC_GROUP)
        self.norm_bits = (self.lzc_groups * _LZC_GROUP - 1).bit_length()
        self.align_stages = _split_levels(self.align_bits)
        self.norm_stages = _split_levels(self.norm_bits)
        self.latency = _FIXED_STAGES + len(self.align_stages) + len(self.norm_stages)


class _StageRegisters:
    """Every stage register of a :class:`FloatAdder`, collected as the stages are written
    and loaded under ``en`` at the end, so the combinational logic between them can be
    written stage by stage."""

    def __init__(self):
        self.loads = []
        self.count = 0

    def stage(self, name, **values):
        self.count += 1
        registered = {}
        for key, value in values.items():
            # No reset: the unit's valid travels beside it in the caller, and a data
            # pipeline this wide would otherwise load the reset (or clear) net.
            reg = Signal(len(value), name=f"s{self.count}_{name}_{key}", reset_less=True)
            self.loads.append(reg.eq(value))
            registered[key] = reg
        return registered


class FloatAdder(wiring.Component):
    """Pipelined IEEE 754 adder for the format ``fmt``.

    Members
    -------
    a, b : ``In(fmt.width)``
        Operands, IEEE 754 interchange encodings (§3.4).
    en : ``In(1)``
        Advance the pipeline by one stage.  With ``en`` low every stage holds.
    result : ``Out(fmt.width)``
        ``a + b`` of the operands presented ``latency`` en-high cycles earlier (the output
        of the last stage register).

    Attributes
    ----------
    fmt : FloatFormat
    latency : int
        Stages from operands to ``result``; see :meth:`latency_for`.
    """

    def __init__(self, fmt):
        _check_format(fmt)
        self._fmt = fmt
        self._geometry = _Geometry(fmt)
        self.latency = self._geometry.latency
        super().__init__(binary_unit_signature(fmt))

    @property
    def fmt(self):
        return self._fmt

    @staticmethod
    def latency_for(fmt):
        """Latency of a :class:`FloatAdder` for ``fmt``, without building one."""
        _check_format(fmt)
        return _Geometry(fmt).latency

    def elaborate(self, platform):
        m = Module()
        stages = _StageRegisters()
        s2 = self._classify_and_swap(stages)
        s4 = self._align_and_add(stages, s2)
        s6 = self._leading_zeros(stages, s4)
        self._normalize_round_pack(m, stages, s6)
        assert stages.count + 1 == self.latency
        with m.If(self.en):
            m.d.sync += stages.loads
        return m

    def _classify_and_swap(self, stages):
        """Stages 1 and 2: the operands classified, then ordered by magnitude."""
        fmt, geo, stage = self._fmt, self._geometry, stages.stage
        width, mb, eb = fmt.width, fmt.man_bits, fmt.exp_bits

        def split(x):
            return x[width - 1], x[mb:width - 1], x[:mb]

        # 1. classify --------------------------------------------------------------------
        _, exp_a, man_a = split(self.a)
        _, exp_b, man_b = split(self.b)
        # Magnitude order of non-NaN encodings is the integer order of their bits without
        # the sign (§3.4: biased exponent above trailing significand), so one comparator
        # decides which operand is larger, subnormals and infinities included.
        a_ge_b = self.a[:width - 1] >= self.b[:width - 1]
        a_top = exp_a == fmt.exp_max
        b_top = exp_b == fmt.exp_max
        a_frac = man_a.any()
        b_frac = man_b.any()
        # The exponent and fraction tests are registered as they are and combined into NaN
        # and infinity in the swap stage: combined here, behind the operand register that
        # the block RAM's output register replaces, they were the 64-bit core's latest pin
        # at seed 2 of 4c92990 (the read -> the fraction OR -> nan, 7 levels, 7.48 ns).
        # Subnormals (biased exponent 0) have the exponent of the smallest normals, 1, and
        # no implicit leading bit (§3.4 c and d).
        a_hidden = exp_a.any()
        b_hidden = exp_b.any()

        # The alignment shift is the difference of effective exponents, big minus small.
        # It is computed here from the raw exponent fields, in parallel with the magnitude
        # comparison, for both orders and both values it can take: the raw difference, or
        # one less when only the smaller operand is subnormal (effective exponent 1, field
        # 0).  The swap stage then only selects.
        def saturated(diff):
            # Any shift of at least ``align_max`` moves the whole field out, so differences
            # too wide for ``align_bits`` saturate to all ones (an OR, shorter than a
            # comparison with ``align_max``).
            diff = diff[:eb]
            high = diff[geo.align_bits:].any()
            return diff[:geo.align_bits] | high.replicate(geo.align_bits)

        s1 = stage("classify", a=self.a, b=self.b, a_ge_b=a_ge_b, a_top=a_top, b_top=b_top,
                   a_frac=a_frac, b_frac=b_frac,
                   a_hidden=a_hidden, b_hidden=b_hidden,
                   # x - y - 1 is x + ~y: one carry chain, like x - y.
                   d_ab=saturated(exp_a - exp_b), d_ab_sub=saturated(exp_a + ~exp_b),
                   d_ba=saturated(exp_b - exp_a), d_ba_sub=saturated(exp_b + ~exp_a))

        # 2. swap --------------------------------------------------------------------------
        a_inf = s1["a_top"] & ~s1["a_frac"]
        b_inf = s1["b_top"] & ~s1["b_frac"]
        # §6.2: a NaN operand gives a NaN; §7.2(b): inf - inf is invalid and gives one too.
        nan = ((s1["a_top"] & s1["a_frac"]) | (s1["b_top"] & s1["b_frac"])
               | (a_inf & b_inf & (s1["a"][width - 1] ^ s1["b"][width - 1])))
        # §6.1: otherwise an infinite operand gives an infinite sum.  It is then ``big``, so
        # the sum has ``big``'s sign.
        inf = a_inf | b_inf
        swap = ~s1["a_ge_b"]
        big = Mux(swap, s1["b"], s1["a"])
        small = Mux(swap, s1["a"], s1["b"])
        big_hidden = Mux(swap, s1["b_hidden"], s1["a_hidden"])
        small_hidden = Mux(swap, s1["a_hidden"], s1["b_hidden"])
        shift = Mux(swap,
                    Mux(s1["b_hidden"] & ~s1["a_hidden"], s1["d_ba_sub"], s1["d_ba"]),
                    Mux(s1["a_hidden"] & ~s1["b_hidden"], s1["d_ab_sub"], s1["d_ab"]))
        big_exp = big[mb:width - 1]
        s2 = stage("swap",
                   big_sig=Cat(big[:mb], big_hidden),
                   small_sig=Cat(small[:mb], small_hidden),
                   exp=Cat(big_exp[0] | ~big_hidden, big_exp[1:]),
                   shift=shift,
                   sign=big[width - 1],
                   sub=s1["a"][width - 1] ^ s1["b"][width - 1],
                   nan=nan, inf=inf)

        return s2

    def _align_and_add(self, stages, s2):
        """Stages 3 (align) and 4 (add)."""
        geo, stage = self._geometry, stages.stage
        # 3. align -------------------------------------------------------------------------
        carried = {key: s2[key] for key in ("big_sig", "exp", "sign", "sub", "nan", "inf")}
        sub = s2["sub"]
        aligned = Cat(Const(0, _EXTRA_BITS), s2["small_sig"])
        sticky = Const(0, 1)
        shift = s2["shift"]
        for index, levels in enumerate(geo.align_stages):
            for level in levels:
                amount = 1 << level
                lost = aligned[:amount].any()
                sticky = sticky | (shift[level] & lost)
                aligned = Mux(shift[level], aligned[amount:], aligned)[:geo.field]
            if index == len(geo.align_stages) - 1:
                # The last align stage prepares the adder's second operand, so the add
                # stage is a bare carry chain.  The sticky bit joins the least significant
                # position only now: jammed in earlier, later shifts would have to catch it
                # again.  Subtraction is x + ~y + 1: the ones' complement is taken here, the
                # +1 comes in the add stage.  The extra top bit (``sub``) is there to cancel
                # the carry out of x + ~y + 1, which is always set since |big| >= |small|.
                addend = Cat(aligned[0] | sticky, aligned[1:]) ^ sub.replicate(geo.field)
                st = stage("align", addend=Cat(addend, sub), **carried)
            else:
                st = stage("align", aligned=aligned, sticky=sticky, shift=shift, **carried)
                aligned, sticky, shift = st["aligned"], st["sticky"], st["shift"]
            carried = {key: st[key] for key in carried}
            sub = carried["sub"]

        # 4. add ---------------------------------------------------------------------------
        # One carry chain: the two bits below the operands (``sub`` + ``sub``) carry the +1
        # of the two's complement into it.
        x = Cat(Const(0, _EXTRA_BITS), carried["big_sig"], Const(0, 1))
        total = (Cat(sub, x) + Cat(sub, st["addend"]))[1:geo.sum_width + 1]
        # The left shift that normalizes the sum must stop at the smallest exponent (the
        # result is then subnormal): a marker bit ``exp`` places below the top makes the
        # leading-zero count never exceed the shift that brings the exponent down to 1.
        marker = Cat(*(carried["exp"] == (geo.sum_width - 1 - i)
                       for i in range(geo.sum_width)))
        s4 = stage("add", total=total, marker=marker, **{key: carried[key] for key in
                                                         ("exp", "sign", "sub", "nan", "inf")})

        return s4

    def _leading_zeros(self, stages, s4):
        """Stage 5 (two registers): the leading-zero count of the sum."""
        geo, stage = self._geometry, stages.stage
        # 5. leading zeros -----------------------------------------------------------------
        carried = {key: s4[key] for key in ("total", "exp", "sign", "sub", "nan", "inf")}
        padded_width = geo.lzc_groups * _LZC_GROUP
        limited = Cat(Const(0, padded_width - geo.sum_width), s4["total"] | s4["marker"])
        group_nonzero = []
        group_count = []
        for group in range(geo.lzc_groups):
            top = padded_width - group * _LZC_GROUP
            bits = limited[top - _LZC_GROUP:top]
            group_nonzero.append(bits.any())
            group_count.append(_first_one(bits, _LZC_GROUP))
        s5 = stage("lzc", nonzero=Cat(*group_nonzero), count=Cat(*group_count),
                   zero=~s4["total"].any(), **carried)

        local_bits = (_LZC_GROUP - 1).bit_length()
        nonzero = s5["nonzero"]
        count = Const(0, geo.norm_bits)
        for group in range(geo.lzc_groups):
            # The first nonzero group is selected by a one-hot AND-OR rather than a chain
            # of multiplexers, which keeps this two LUT levels deep for any group count.
            first = nonzero[group] & ~nonzero[:group].any() if group else nonzero[0]
            local = s5["count"][group * local_bits:(group + 1) * local_bits]
            value = Const(group * _LZC_GROUP, geo.norm_bits) | local
            count = count | (first.replicate(geo.norm_bits) & value)
        carried = {key: s5[key] for key in ("exp", "sign", "sub", "nan", "inf", "zero")}
        s6 = stage("lzc", norm=s5["total"], shift=count, **carried)

        return s6

    def _normalize_round_pack(self, m, stages, s6):
        """Stages 6 to 8: normalize, round, pack into ``result``."""
        fmt, geo, stage, loads = self._fmt, self._geometry, stages.stage, stages.loads
        width, eb = fmt.width, fmt.exp_bits
        # 6. normalize ---------------------------------------------------------------------
        # The biased exponent of the result before rounding: the sum's binary point sits
        # one bit above ``big``'s (room for the carry), and every left shift lowers it by one.
        exp = (s6["exp"] + 1 - s6["shift"])[:eb]
        norm = s6["norm"]
        shift = s6["shift"]
        carried = {key: s6[key] for key in ("sign", "sub", "nan", "inf", "zero")}
        for levels in geo.norm_stages:
            for level in levels:
                amount = 1 << level
                shifted = Cat(Const(0, amount), norm)[:geo.sum_width]
                norm = Mux(shift[level], shifted, norm)
            st = stage("norm", norm=norm, shift=shift, exp=exp, **carried)
            norm, shift, exp = st["norm"], st["shift"], st["exp"]
            carried = {key: st[key] for key in carried}

        # 7. round -------------------------------------------------------------------------
        # §4.3.1 roundTiesToEven: up when above half an ulp, or at exactly half with an odd
        # last bit.  Bits of ``norm``: leading bit, trailing significand, round, two below.
        lsb = norm[_EXTRA_BITS + 1]
        round_bit = norm[_EXTRA_BITS]
        sticky = norm[:_EXTRA_BITS].any()
        increment = round_bit & (sticky | lsb)
        # Without its leading bit the result is subnormal: the normalize shift stopped at
        # the smallest exponent.
        hidden = norm[geo.sum_width - 1]
        exp_field = Mux(hidden, exp, 0)
        packed = Cat(norm[_EXTRA_BITS + 1:geo.sum_width - 1], exp_field)
        # §7.4: a sum whose exponent already reaches the all-ones field overflows to
        # infinity (round to nearest); one that gets there by rounding needs no help, the
        # increment carries the significand's all-ones into the exponent, leaving an
        # infinity's encoding.
        overflow = exp == fmt.exp_max
        nan, inf, zero = carried["nan"], carried["inf"], carried["zero"]
        inf_mag = Const(fmt.exp_mask, width - 1)
        nan_mag = Const(fmt.qnan() & ~fmt.sign_mask, width - 1)
        special = nan | inf | zero | overflow
        special_mag = Mux(nan, nan_mag, Mux(inf | ~zero, inf_mag, 0))
        # §6.3: an exact zero sum of operands with opposite signs is +0 in
        # roundTiesToEven; x + x keeps the sign of x (including -0 + -0 = -0).
        sign = Mux(nan, 0, Mux(~inf & zero, carried["sign"] & ~carried["sub"],
                               carried["sign"]))
        s7 = stage("round", packed=packed, increment=increment, special=special,
                   special_mag=special_mag, sign=sign)

        # 8. pack --------------------------------------------------------------------------
        rounded = (s7["packed"] + s7["increment"])[:width - 1]
        result = Signal(width, reset_less=True)
        m.d.comb += self.result.eq(result)
        loads.append(result.eq(Cat(Mux(s7["special"], s7["special_mag"], rounded),
                                   s7["sign"])))


def _first_one(bits, width):
    """Leading zeros of ``bits`` (``width`` bits, a power of two), as a one-hot AND-OR of
    the positions; the all-zero case gives 0 (the caller knows it from ``any()``)."""
    count_bits = (width - 1).bit_length()
    count = Const(0, count_bits)
    for zeros in range(width):
        position = width - 1 - zeros
        first = bits[position] & ~bits[position + 1:].any() if zeros else bits[position]
        count = count | (first.replicate(count_bits) & Const(zeros, count_bits))
    return count
