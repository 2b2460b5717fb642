# Ref: IEEE Std 754-2019 §5.4.1 (multiplication), §4.3.1 (roundTiesToEven), §3.4 (binary
#      interchange encodings, subnormals), §6.1 (infinity arithmetic), §6.2 (NaNs), §6.3 (sign
#      of a product), §7.2 (invalid operation: 0 × ∞), §7.4 (overflow), §7.5 (underflow).
"""Pipelined IEEE 754 binary floating-point multiplier for any :class:`FloatFormat`.

The product is computed exactly and rounded once (§5.4.1: "as if it first produced an
intermediate result correct to infinite precision and with unbounded range, and then rounded
that result"), with roundTiesToEven (§4.3.1), gradual underflow to subnormals (§7.5: no flush
to zero) and overflow to ±∞ (§7.4).  Every stage is short so that the unit runs at the
fabric's clock: latency is spent freely, one result leaves per clock.

Stages (registers after each), for a precision of ``p`` bits:

1. inputs are registered;
2. unpack: fields, classes (zero / ∞ / NaN), significand with its implicit bit, which
   8-bit groups of the significand are nonzero;
3. leading all-zero groups counted (nonzero for subnormal operands only), leading zeros
   within each group;
4. coarse left normalization of subnormal significands (by whole 8-bit groups);
5. fine left normalization (0..7 bits) and the exponent of the exact product;
6. limbs of at most 18 bits registered; exponent compared with the overflow and underflow
   thresholds;
7. partial products of the limbs (on ECP5 each one MULT18X18D, whose own input and output
   registers are the registers of stages 6 and 7); exponent field and underflow shift;
8. an adder tree over the partial products, one level per stage (none when one limb
   suffices);
9. coarse right shift (whole groups) for an underflowing (subnormal or zero) result;
10. fine right shift, guard bit, sticky bit;
11. round to nearest, ties to even, and pack (a carry out of the significand moves into the
    exponent, which also makes the largest finite number round up to ∞);
12. special results: NaN, ±∞, ±0.

bfloat16 and ml_dtypes: ml_dtypes multiplies two bfloat16 numbers by converting both to
binary32, multiplying in binary32 and rounding the binary32 product to bfloat16, so a product
can be rounded twice.  The exact product of two 8-bit significands has at most 16 significant
bits, which binary32 holds exactly in its normal range; but bfloat16 and binary32 share the
exponent range, so a product below 2^-126 is subnormal in binary32 and rounded there first,
to a multiple of 2^-149.  A product of at least 2^-134 has its lowest bit at 2^-149 or above
and passes exact; only products below 2^-134, half the smallest bfloat16 subnormal (2^-133),
are rounded twice.  Rounded once they go to ±0; rounded in binary32 first they become at most
2^-134, which again rounds to ±0 (2^-134 itself is a tie, and 0 is even).  So the double
rounding never changes a result: this unit rounds once and matches ml_dtypes bit for bit.
Checked exhaustively: every one of the 136 099 089 pairs of positive finite bfloat16 numbers
whose product lies below 2^-125 (the subnormal range and the lowest normal binade, which
share bfloat16's finest quantum 2^-133) gives the correctly rounded product in ml_dtypes 0.6.
"""

from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import wiring

from .fpformat import FloatFormat, binary_unit_signature
from .limbs import LIMB_MAX, LimbProduct


__all__ = ["FloatMultiplier"]


#: Granularity of the two-step shifts: a coarse step moves whole groups of this many bits,
#: a fine step moves 0..7 bits, so each step is one 8:1 multiplexer deep.
_GROUP = 8
_GROUP_BITS = 3


def _limb_widths(precision):
    """Widths of the limbs a ``precision``-bit significand is cut into, least significant
    first: as few as the multiplier blocks allow, as equal as possible."""
    count = -(-precision // LIMB_MAX)
    width = -(-precision // count)
    widths = [width] * (count - 1)
    widths.append(precision - width * (count - 1))
    return widths


def _sum_levels(limbs):
    """Adder-tree levels summing the partial products of ``limbs`` limbs per operand.

    The ``limbs ** 2`` products are first concatenated along the diagonals of the product
    matrix (products on one diagonal never overlap), leaving ``2 * limbs - 1`` terms to add
    two at a time.
    """
    terms = 2 * limbs - 1
    levels = 0
    while terms > 1:
        terms = -(-terms // 2)
        levels += 1
    return levels


class _Pipeline:
    """Stage registers of one pipeline, all loaded together when the pipeline advances."""

    def __init__(self):
        self.depth = 0
        self.loads = []

    def stage(self, values):
        """Register each value of the ``values`` dict; returns a dict of the registers."""
        self.depth += 1
        registers = {}
        for name, value in values.items():
            value = Value.cast(value)
            # No reset: the enclosing unit tracks which stages hold valid data, and reset
            # would only add fan-out to several hundred flip-flops.
            register = Signal(value.shape(), name=f"s{self.depth}_{name}", reset_less=True)
            self.loads.append(register.eq(value))
            registers[name] = register
        return registers


def _as_signed(value, width):
    """``value`` (unsigned) zero-extended to a signed value of ``width`` bits."""
    return Cat(value, Const(0, width - len(value))).as_signed()


def _first_set(bits, width):
    """Index of the first set bit of ``bits`` counted from its top (most significant) end,
    as a ``width``-bit value; unspecified when no bit is set."""
    index = Const(0, width)
    for position in reversed(range(len(bits))):
        index = Mux(bits[len(bits) - 1 - position], position, index)
    return index


class FloatMultiplier(wiring.Component):
    """IEEE 754 multiplication ``result = a × b`` in format ``fmt``, pipelined.

    Every clock cycle with ``en`` high, every stage register loads (the pipeline advances by
    one stage and ``a``/``b`` are taken); with ``en`` low every stage holds.  The product of
    operands present in a cycle with ``en`` high is on ``result`` once exactly
    :attr:`latency` clock edges with ``en`` high have passed, counting the edge that takes
    them: with ``en`` held high, operands of cycle ``n`` give their product in cycle
    ``n + latency``.  Which stages hold valid data is the user's business: there is no
    valid/ready inside.

    Rounding is roundTiesToEven; subnormal operands and results are exact (no flush to zero);
    overflow gives ±∞.  A NaN operand or an invalid product (0 × ∞, §7.2) gives the quiet NaN
    ``0 11..1 10..0`` (§6.2.3 leaves the payload of a result NaN open).  Exceptions are not
    signalled.

    Parameters
    ----------
    fmt : FloatFormat
        The operand and result format.

    Members
    -------
    a, b : ``In(fmt.width)``
        Operands, as bit patterns.
    en : ``In(1)``
        Pipeline advance.
    result : ``Out(fmt.width)``
        Output of the last stage register.

    Attributes
    ----------
    latency : int
        Pipeline depth in ``en``-high cycles: 11 for fp16 and bf16, 13 for fp32, 14 for fp64
        (the adder tree has no level for one 18-bit limb, two for two, three for three).
    """

    def __init__(self, fmt):
        if not isinstance(fmt, FloatFormat):
            raise TypeError(f"Format must be a FloatFormat, not {fmt!r}")
        self._fmt = fmt
        self._limbs = _limb_widths(fmt.precision)
        # Input, unpack, leading zero groups, coarse and fine normalization, partial
        # products (two stages), the adder tree, coarse and fine right shift, round and pack,
        # specials.
        self.latency = 7 + _sum_levels(len(self._limbs)) + 4
        super().__init__(binary_unit_signature(fmt))

    @property
    def fmt(self):
        return self._fmt

    def elaborate(self, platform):
        m = Module()
        fmt = self._fmt
        p = fmt.precision
        groups = -(-p // _GROUP)
        group_index_bits = max(1, (groups - 1).bit_length())
        # The sizes the stages share.  Exponents in flight: biased, and after normalization
        # of a subnormal operand as low as 1 - (p - 1) each; the exact product's as low as
        # twice that minus the bias, as high as twice the largest biased exponent.  Three
        # bits over the field width hold all of them with a sign.
        k = SimpleNamespace(
            fmt=fmt, e_bits=fmt.exp_bits, t_bits=fmt.man_bits, p=p, groups=groups,
            padded=groups * _GROUP,         # significand padded at its low end
            group_index_bits=group_index_bits,
            exp_width=max(fmt.exp_bits, _GROUP_BITS + group_index_bits + 1) + 3,
            shift_max=p + 2)
        pipe = _Pipeline()

        # 1. Inputs.
        s = pipe.stage({"a": self.a, "b": self.b})
        s = self._normalize(pipe, k, s)
        s, partial = self._partial_products(m, k, s)
        flags = self._exponent_cases(pipe, k, s)
        product, flags = self._sum_products(pipe, k, partial, flags)
        s = self._shift_right(pipe, k, product, flags)
        s = self._round(pipe, k, s)
        assert pipe.depth == self.latency

        m.d.comb += self.result.eq(s["result"])
        with m.If(self.en):
            m.d.sync += pipe.loads
        return m

    def _normalize(self, pipe, k, s):
        """Stages 2 to 5: unpack both operands and bring each significand's leading one to
        the top (a subnormal's), the exponent sum beside them."""
        fmt, e_bits, t_bits, p = k.fmt, k.e_bits, k.t_bits, k.p
        groups, padded, group_index_bits = k.groups, k.padded, k.group_index_bits
        exp_width = k.exp_width
        # 2. Unpack (§3.4): biased exponent field E, trailing significand T.  E = 0 encodes
        # zero or a subnormal with exponent emin, the same as E = 1, and no implicit bit;
        # E all-ones encodes ∞ (T = 0) or NaN (T ≠ 0).
        values = {"sign": s["a"][-1] ^ s["b"][-1]}
        for x in "ab":
            field_e = s[x][t_bits:t_bits + e_bits]
            field_t = s[x][:t_bits]
            e_zero = field_e == 0
            e_ones = field_e == fmt.exp_max
            t_zero = field_t == 0
            significand = Cat(field_t, ~e_zero)
            padded_significand = Cat(Const(0, padded - p), significand)
            values[f"zero_{x}"] = e_zero & t_zero
            values[f"inf_{x}"] = e_ones & t_zero
            values[f"nan_{x}"] = e_ones & ~t_zero
            values[f"m_{x}"] = significand
            # max(E, 1): the exponent of a subnormal is that of the smallest normal.
            values[f"e_{x}"] = Cat(field_e[0] | e_zero, field_e[1:])
            # Bit k flags group k, both counted from the least significant end, so the first
            # set bit from the top counts the leading all-zero groups.
            values[f"nonzero_groups_{x}"] = Cat(
                padded_significand[_GROUP * k:_GROUP * (k + 1)].any() for k in range(groups))
        s = pipe.stage(values)

        # 3. Count the leading all-zero groups of each significand (nonzero only for a
        # subnormal), and the leading zeros within each group.  The exponent sum (biased
        # twice, so less one bias) starts here, off the significands' path.
        zero_a, zero_b = s["zero_a"], s["zero_b"]
        inf_a, inf_b = s["inf_a"], s["inf_b"]
        values = {
            "sign": s["sign"],
            # §7.2: 0 × ∞ is invalid; §6.2.3: a NaN operand gives a NaN.
            "nan": s["nan_a"] | s["nan_b"] | (zero_a & inf_b) | (inf_a & zero_b),
            # §6.1: ∞ times a nonzero finite number (or ∞) is ∞.
            "inf": inf_a | inf_b,
            "zero": zero_a | zero_b,
            "e_sum": (_as_signed(s["e_a"], exp_width) + _as_signed(s["e_b"], exp_width)
                      - fmt.bias),
        }
        for x in "ab":
            padded_significand = Cat(Const(0, padded - p), s[f"m_{x}"])
            values[f"m_{x}"] = s[f"m_{x}"]
            values[f"group_{x}"] = _first_set(s[f"nonzero_groups_{x}"], group_index_bits)
            # Leading zeros within each group, groups counted from the top down.
            values[f"group_zeros_{x}"] = Cat(
                _first_set(padded_significand[padded - _GROUP * (k + 1):padded - _GROUP * k],
                           _GROUP_BITS)
                for k in range(groups))
        s = pipe.stage(values)

        # 4. Coarse normalization: shift a subnormal significand left by whole groups until
        # its first nonzero group is on top, and pick the leading zeros of that group.
        values = {key: s[key] for key in ("sign", "nan", "inf", "zero", "e_sum")}
        for x in "ab":
            padded_significand = Cat(Const(0, padded - p), s[f"m_{x}"])
            group = s[f"group_{x}"]
            values[f"coarse_{x}"] = Array(
                (padded_significand << (_GROUP * k))[:padded] for k in range(groups))[group]
            group_zeros = s[f"group_zeros_{x}"]
            values[f"lz_{x}"] = Cat(
                Array(group_zeros[_GROUP_BITS * k:_GROUP_BITS * (k + 1)]
                      for k in range(groups))[group],
                group)
        s = pipe.stage(values)

        # 5. Fine normalization: every nonzero significand now has its leading one on top,
        # in [1, 2) as a p-bit fixed-point number.  Exponent of the exact product, biased,
        # for the product of two significands in [1, 2) read as a number in [1, 4).
        values = {key: s[key] for key in ("sign", "nan", "inf", "zero")}
        values["e_product"] = s["e_sum"] - s["lz_a"] - s["lz_b"]
        for x in "ab":
            fine_shift = s[f"lz_{x}"][:_GROUP_BITS]
            values[f"m_{x}"] = Array(
                (s[f"coarse_{x}"] << k)[padded - p:padded] for k in range(_GROUP))[fine_shift]
        s = pipe.stage(values)

        return s

    def _partial_products(self, m, k, s):
        """Stages 6 and 7 of the significands: one LimbProduct per pair of limbs."""
        # 6-7. Partial products, limb by limb, each narrow enough for one multiplier block,
        # with a register before and after the multiplication (inside the block on ECP5).
        # Alongside, everything the later stages need from the exponent (_exponent_cases),
        # computed now so that it waits in registers for the significand product.
        limb_offsets = [sum(self._limbs[:i]) for i in range(len(self._limbs))]
        limbs = {x: [s[f"m_{x}"][offset:offset + width]
                     for offset, width in zip(limb_offsets, self._limbs)] for x in "ab"}
        n = len(self._limbs)
        partial = {}
        for i in range(n):
            for j in range(n):
                partial[i, j] = product = LimbProduct(self._limbs[i], self._limbs[j])
                m.submodules[f"product_{i}_{j}"] = product
                m.d.comb += [
                    product.a.eq(limbs["a"][i]),
                    product.b.eq(limbs["b"][j]),
                    product.en.eq(self.en),
                ]
        return s, partial

    def _exponent_cases(self, pipe, k, s):
        """Stages 6 and 7 of the exponent, beside the partial products; returns the flags
        that travel on with the product."""
        fmt, e_bits = k.fmt, k.e_bits
        # Exponent E' of the product once its significand is in [1, 2): E' = e_product + t,
        # where t is the product's top bit (significand in [2, 4)), known only later; both
        # cases are prepared, comparisons and differences in stage 6, choices in stage 7.
        values = {key: s[key] for key in ("sign", "nan", "inf", "zero")}
        e_product = s["e_product"]
        shift_max = k.shift_max
        shift_bits = shift_max.bit_length()
        values["normal"] = e_product >= 1
        # §7.4: E' ≥ all-ones overflows; rounding to nearest takes it to ∞.
        values["overflow_0"] = e_product >= fmt.exp_max
        values["overflow_1"] = e_product >= fmt.exp_max - 1
        values["e_less_1"] = (e_product - 1)[:e_bits]
        values["e"] = e_product[:e_bits]
        # §7.5: a product with E' < 1 is subnormal or zero before rounding: its significand
        # moves right by 1 - e_product bits, the encoding's exponent staying emin.  Shifts
        # over p + 2 leave every bit below the guard position, as p + 2 does: they saturate.
        values["shift_saturated"] = e_product <= 1 - shift_max
        values["shift"] = (1 - e_product)[:shift_bits]
        s = pipe.stage(values)

        values = {key: s[key] for key in ("sign", "nan", "inf", "zero", "overflow_0",
                                          "overflow_1")}
        normal = s["normal"]
        # The exponent field less one (the significand's implicit bit, added in when packing,
        # makes up the difference), 0 for a subnormal result.
        values["base_0"] = Mux(normal, s["e_less_1"], 0)
        values["base_1"] = Mux(normal, s["e"], 0)
        values["underflow"] = ~normal
        values["shift"] = Mux(s["shift_saturated"], shift_max, Mux(normal, 0, s["shift"]))
        return pipe.stage(values)

    def _sum_products(self, pipe, k, partial, flags):
        """Stage 8: the partial products' adder tree, one level per stage."""
        p = k.p
        n = len(self._limbs)
        s = {f"pp_{i}_{j}": product.p for (i, j), product in partial.items()}

        # 8. Adder tree.  Product (i, j) has weight 2^(offset_i + offset_j); along one
        # diagonal (j - i fixed) the products are spaced two limbs apart and never overlap,
        # so each diagonal is a plain concatenation.  Terms are added in pairs, nearest
        # offsets first, one level per stage; bits of the lower term below the upper term's
        # offset pass by the adder.
        width = self._limbs[0]
        terms = []
        for d in range(-(n - 1), n):
            parts = []
            for i in range(max(0, -d), min(n, n - d)):
                product = s[f"pp_{i}_{i + d}"]
                parts.append(product)
                parts.append(Const(0, 2 * width - len(product)))
            terms.append((width * abs(d), Cat(*parts)))
        terms.sort(key=lambda term: -term[0])
        while len(terms) > 1:
            paired = []
            for k in range(0, len(terms) - 1, 2):
                (high_offset, high), (low_offset, low) = terms[k], terms[k + 1]
                gap = high_offset - low_offset
                if len(low) <= gap:
                    total = Cat(low, Const(0, gap - len(low)), high)
                else:
                    total = Cat(low[:gap], low[gap:] + high)
                paired.append((low_offset, total))
            if len(terms) % 2:
                paired.append(terms[-1])
            s = pipe.stage({**flags, **{f"term_{k}": value
                                        for k, (_, value) in enumerate(paired)}})
            flags = {key: s[key] for key in flags}
            terms = [(offset, s[f"term_{k}"]) for k, (offset, _) in enumerate(paired)]
        offset, product = terms[0]
        assert offset == 0
        product = product[:2 * p]

        return product, flags

    def _shift_right(self, pipe, k, product, flags):
        """Stages 9 and 10: the product's significand, guard and sticky bits, shifted right
        for the product's top bit or its underflow."""
        p, shift_max = k.p, k.shift_max
        # 9. Coarse right shift.  The exact product's significand is `product` / 2^(2p - 2)
        # in [1, 4).  Result significand bits start at bit p - 1 + t (t: top bit), and at
        # bit p - 1 + shift for an underflowing product; the guard bit sits below, every bit
        # below the guard goes into the sticky bit.  Only bits from p - 2 up are shifted;
        # the rest feed the sticky bit directly.
        top = product[2 * p - 1]
        window = product[p - 2:]            # p + 2 bits: guard position p - 2 and up
        below = product[:p - 2].any() if p > 2 else Const(0)
        shift = flags["shift"]
        coarse = shift[_GROUP_BITS:]
        coarse_choices = range(shift_max // _GROUP + 1)
        values = {key: flags[key] for key in ("sign", "nan", "inf", "zero")}
        values["window"] = Array(window >> (_GROUP * k) for k in coarse_choices)[coarse]
        # Which groups the coarse shift may drop hold a one; stage 10 picks those it dropped.
        values["group_ones"] = Cat(window[_GROUP * k:_GROUP * (k + 1)].any()
                                   for k in coarse_choices[:-1])
        values["coarse"] = coarse
        values["sticky_below"] = below
        # A normal product moves right by t; an underflowing one by `shift`, whatever t.
        values["fine"] = Mux(flags["underflow"], shift[:_GROUP_BITS], top)
        values["overflow"] = Mux(top, flags["overflow_1"], flags["overflow_0"])
        values["base"] = Mux(top, flags["base_1"], flags["base_0"])
        s = pipe.stage(values)

        # 10. Fine right shift: significand (p bits) and guard bit, sticky bit.
        fine = s["fine"]
        shifted = Array((s["window"] >> k)[:p + 1] for k in range(_GROUP))[fine]
        sticky_fine = Array(s["window"][:k].any() if k else Const(0)
                            for k in range(_GROUP))[fine]
        sticky_coarse = Array(s["group_ones"][:k].any() if k else Const(0)
                              for k in coarse_choices)[s["coarse"]]
        values = {key: s[key] for key in ("sign", "nan", "inf", "zero", "overflow", "base")}
        values["significand"] = shifted[1:]
        values["guard"] = shifted[0]
        # Two halves of the sticky bit, ORed where they are used.
        values["sticky_shifted"] = sticky_coarse | s["sticky_below"]
        values["sticky_fine"] = sticky_fine
        s = pipe.stage(values)

        return s

    def _round(self, pipe, k, s):
        """Stages 11 and 12: round, pack, and the special results."""
        fmt, e_bits, t_bits = k.fmt, k.e_bits, k.t_bits
        # 11. §4.3.1 roundTiesToEven: round up when above half an ulp, or at half an ulp with
        # an odd significand.  Packing adds the significand, implicit bit included, to the
        # exponent field less one: a rounding carry out of the trailing significand, or the
        # implicit bit of a subnormal that rounded up to the smallest normal, lands in the
        # exponent field; the largest finite number rounding up lands on the ∞ encoding.
        significand = s["significand"]
        round_up = s["guard"] & (s["sticky_shifted"] | s["sticky_fine"] | significand[0])
        magnitude = (Cat(significand[:t_bits], s["base"])
                     + (round_up | (significand[t_bits] << t_bits)))[:e_bits + t_bits]
        values = {key: s[key] for key in ("sign", "nan", "inf", "zero", "overflow")}
        values["magnitude"] = magnitude
        s = pipe.stage(values)

        # 12. Special results.  §6.3: the sign of a product, zero and ∞ included, is the
        # exclusive OR of the operands' signs.
        infinity = Const(fmt.inf(), fmt.width)
        result = Mux(s["nan"], Const(fmt.qnan(), fmt.width),
                     Mux(s["inf"] | (s["overflow"] & ~s["zero"]),
                         infinity | (s["sign"] << (fmt.width - 1)),
                         Mux(s["zero"], s["sign"] << (fmt.width - 1),
                             Cat(s["magnitude"], s["sign"]))))
        s = pipe.stage({"result": result})
        return s
