# Ref: seed 000 (CN101206588): received segment j is reduced with the local segment while
#      segment j+1 travels, so the ALU must sustain one beat per clock.
# Ref: MPI 4.0 §6.9.2 (predefined reduction operations); IEEE 754-2019 §5.4.1, §9.6.
"""ReductionALU: element-wise ``a ∘ b`` over SIMD lanes, one beat per clock, fixed latency.

Two operand streams in (``a`` carries the op and element type of its beat, so switching
between packets costs nothing), one result stream out.  A beat is ``data_width`` bits of
elements packed little-endian, as numpy lays them out in memory: element k of a w-bit type
is bits ``[k·w, (k+1)·w)``.

The datapath is split into 64-bit lanes.  Each lane holds

- a three-stage unit for sum, min, max, the bitwise and the logical ops on 8/16/32/64-bit
  integers and for the floating-point min/max (an order-preserving integer compare): the
  first stage holds the carry chains (sums, compares per type and element), the second
  reduces them to per-byte masks for the beat's type, the third picks each byte;
- integer multipliers for the low half of each product (MPI prod wraps): 16-bit limb
  products in MULT18X18D blocks, then an adder tree with one adder level per stage;
- IEEE adders and multipliers (:mod:`nicoll.hw.alu.fpadd`, :mod:`nicoll.hw.alu.fpmul`) for each
  float type the build contains, one per element of the lane.

The units' results are merged into a single 64-bit delay line per lane as they become
ready (each beat selects one source, one-hot), so a lane costs one word of delay per stage
whatever the number of types.

Flow control: the pipeline never stalls.  A beat is accepted only while the output FIFO
(:attr:`ReductionALU.fifo_depth` entries) has room for it and for every beat accepted
before it that has not been taken from ``result`` yet; the ALU counts those beats.  So
backpressure on any stream never loses, duplicates or reorders a beat, no enable signal
fans out to the thousands of stage registers, and one beat per clock flows while both
inputs are valid and ``result`` is ready.  Latency is :attr:`ReductionALU.latency` clock
edges from taking an input beat to its result being taken, whatever op and type.

A consumer that takes every result in the cycle it is offered (the engine writes each one
back at once) builds the ALU with ``output_fifo=False``: no FIFO and no count, the inputs are
ready whenever both are valid, ``result.ready`` is ignored, and the latency is two edges
shorter.

A pair (op, type) that MPI leaves undefined (bitwise or logical ops on floats) or that the
build leaves out gives ``error = 1`` with data 0 for that beat: never a computed value.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from amaranth.lib.fifo import SyncFIFOBuffered

from .capabilities import capability_masks, check_capabilities
from .limbs import LimbProduct
from ..ops import DType, FLOAT_TYPES, INTEGER_TYPES, ReduceOp
from ..params import check_data_width

__all__ = ["ReductionALU", "operand_layout", "result_layout", "LANE_BITS"]

LANE_BITS = 64


def operand_layout(data_width):
    """Payload of the ``a`` and ``b`` streams (``b`` ignores op and dtype)."""
    return data.StructLayout({"data": data_width, "op": ReduceOp, "dtype": DType, "last": 1})


def result_layout(data_width):
    return data.StructLayout({"data": data_width, "last": 1, "error": 1})


def _float_format(dtype):
    from .fpformat import BF16, FP16, FP32, FP64
    return {DType.FLOAT16: FP16, DType.BFLOAT16: BF16, DType.FLOAT32: FP32,
            DType.FLOAT64: FP64}[dtype]


def _unit_latency(cls, fmt):
    """A float unit's latency without building one (a built, unused unit draws a warning)."""
    if hasattr(cls, "latency_for"):
        return cls.latency_for(fmt)
    unit = cls(fmt)
    unit._MustUse__silence = True       # only asked for its latency; never elaborated
    return unit.latency


def _unit_class(name):
    if name == "FloatAdder":
        from .fpadd import FloatAdder
        return FloatAdder
    from .fpmul import FloatMultiplier
    return FloatMultiplier


def _elements(value, width):
    return [value[k:k + width] for k in range(0, len(value), width)]


def _stage(m, value, name, *, reset_less=True):
    """One pipeline register.  The pipeline never stalls (see the module docstring), so
    stage registers have no enable; data registers need no reset either, only valid bits."""
    value = Value.cast(value)
    reg = Signal(value.shape(), name=name, reset_less=reset_less)
    m.d.sync += reg.eq(value)
    return reg


def _delay(m, value, cycles, name, *, reset_less=True):
    for k in range(cycles):
        value = _stage(m, value, f"{name}_d{k}", reset_less=reset_less)
    return value


def _any_of(values, width):
    """OR of ``values`` (each zero unless selected): the multiplexer of one-hot sources."""
    result = Const(0, width)
    for value in values:
        result = result | value
    return result


# -- integer products --------------------------------------------------------------------
#
# MPI prod on integers wraps (the low ``w`` bits of the product).  A 16-, 32- or 64-bit
# element is cut into 16-bit limbs; the low half of its product is the sum of the limb
# products x_i·y_j with 16·(i + j) < w, each shifted by 16·(i + j).  Every product is one
# MULT18X18D with its input and output registers inside (LimbProduct), and the terms are
# added two at a time, one adder level per stage, so no stage holds more than one carry
# chain.  Terms whose bit ranges do not overlap are first concatenated into one (at most
# w bits wide), which shortens the tree.  An 8-bit product needs only 36 partial-product
# bits: it is added up in the fabric and keeps the multiplier blocks for the wide types.

_LIMB = 16


def _limb_terms(width):
    """(i, j, shift, bits) of the limb products contributing to a ``width``-bit low half."""
    limbs = width // _LIMB
    return [(i, j, _LIMB * (i + j), min(2 * _LIMB, width - _LIMB * (i + j)))
            for i in range(limbs) for j in range(limbs) if i + j < limbs]


def _pack_rows(terms):
    """Greedy packing of (shift, bits, item) terms into rows of non-overlapping terms."""
    rows = []
    for term in sorted(terms, key=lambda t: t[0]):
        for row in rows:
            if row[-1][0] + row[-1][1] <= term[0]:
                row.append(term)
                break
        else:
            rows.append([term])
    return rows


def _tree_levels(count):
    levels = 0
    while count > 1:
        count = -(-count // 2)
        levels += 1
    return levels


def _int_product_latency(width):
    """Stages from the operand register to the ``width``-bit product."""
    if width == 8:
        return _tree_levels(8)
    rows = _pack_rows([(shift, bits, None) for _, _, shift, bits in _limb_terms(width)])
    return 2 + _tree_levels(len(rows))      # LimbProduct's two registers, then the tree


def _add_tree(m, terms, width, name):
    """Sum of ``(value, shift)`` terms modulo 2**width, one registered adder level per stage.

    Only the bits where two terms overlap go through a carry chain: below the higher
    shift the lower term's bits pass unchanged."""
    level = 0
    terms = sorted(((Value.cast(v)[:width - sh], sh) for v, sh in terms), key=lambda t: t[1])
    while len(terms) > 1:
        merged = []
        for k in range(0, len(terms) - 1, 2):
            (a, sa), (b, sb) = terms[k], terms[k + 1]
            gap = sb - sa
            low = a[:gap]
            if len(low) < gap:
                low = Cat(low, Const(0, gap - len(low)))
            high = (a[gap:] + b)[:width - sb]
            merged.append((_stage(m, Cat(low, high), f"{name}_t{level}_{k // 2}"), sa))
        if len(terms) % 2:
            a, sa = terms[-1]
            merged.append((_stage(m, a, f"{name}_t{level}_{len(terms) // 2}"), sa))
        terms = merged
        level += 1
    value, shift = terms[0]
    return Cat(Const(0, shift), value)[:width] if shift else value


class ReductionALU(wiring.Component):
    """Element-wise reduction of two operand streams.

    :param data_width: bits per beat, one of 64, 128, 256, 512.
    :param capabilities: the (ReduceOp, DType) pairs this build computes; default all
        pairs MPI defines.  A float sum or prod left out saves its adders or multipliers.
    :param output_fifo: keep results in a FIFO until ``result`` is ready (default).  With
        ``False`` the result register drives ``result`` directly and ``result.ready`` is
        ignored: only for a consumer that takes every result the cycle it is offered.
    """

    def __init__(self, data_width=256, *, capabilities=None, output_fifo=True):
        check_data_width(data_width)
        if not isinstance(output_fifo, bool):
            raise TypeError(f"output_fifo must be a bool, not {output_fifo!r}")
        capabilities = check_capabilities(capabilities)
        self.output_fifo = output_fifo
        self.data_width = data_width
        self.capabilities = capabilities
        self.lanes = data_width // LANE_BITS
        # Every source of a lane result and the stage (counted from the operand register)
        # at which it is ready; results are merged into one delay line as they become ready.
        # The shared integer / compare unit only where a pair needs it: with float sums alone
        # it would be built, never selected, and still cost its logic in every simulated cycle.
        self._sources = {}
        if not capabilities or any(self._source_of(op, dtype) == "simple"
                                   for op, dtype in capabilities):
            self._sources["simple"] = self._SIMPLE_LATENCY
        for width in self._product_widths():
            self._sources["int", width] = _int_product_latency(width)
        for dtype in FLOAT_TYPES:
            for op, cls in ((ReduceOp.SUM, "FloatAdder"), (ReduceOp.PROD, "FloatMultiplier")):
                if (op, dtype) in capabilities:
                    self._sources[op, dtype] = _unit_latency(_unit_class(cls), _float_format(dtype))
        #: Stages from the operand register to the last unit's result.
        self.unit_latency = max(self._sources.values())
        #: Clock edges from the edge that takes an input beat to the edge at which its result
        #: is taken from ``result`` (output always ready): operand register, units, result
        #: register, then (with the output FIFO) two through it (write, read register).
        self.latency = 1 + self.unit_latency + 1 + (2 if output_fifo else 0)
        #: Beats the output FIFO holds: every beat in flight fits, and one per clock flows
        #: while ``result`` is ready (a beat occupies a place from acceptance until taken).
        self.fifo_depth = self.latency + 2
        super().__init__({
            "a": In(stream.Signature(operand_layout(data_width))),
            "b": In(stream.Signature(operand_layout(data_width))),
            "result": Out(stream.Signature(result_layout(data_width))),
        })

    #: Stages of the one-cycle-class ops (all but prod and float sum): compare, reduce to
    #: per-byte masks, select.
    _SIMPLE_LATENCY = 3

    def _product_widths(self):
        return sorted({d.bits for d in INTEGER_TYPES if (ReduceOp.PROD, d) in self.capabilities})

    def _source_of(self, op, dtype):
        if op is ReduceOp.PROD:
            return ("int", dtype.bits) if not dtype.is_float else (op, dtype)
        if op is ReduceOp.SUM and dtype.is_float:
            return (op, dtype)
        return "simple"

    def op_mask(self, dtype):
        """Bit k set when op k is computed on ``dtype`` (the ALU block's capability register)."""
        return capability_masks(self.capabilities)[dtype]

    # -- integer, bitwise, logical and compare ops: two stages --------------------------

    def _simple_result(self, m, x, y, op, dtype, lane):
        """The lane result of every op but prod and float sum, three stages after ``x``/``y``.

        Stage 1 holds what needs a carry chain: sums per element width, and per type and
        element the compare, NaN and logical bits.  Stage 2 reduces those to per-byte masks
        for the beat's type; stage 3 picks each byte from them.  (With the per-byte reduction
        in the compare's stage, the 64-bit compare and the type selection made one 8.3 ns path
        at data_width 256, below the 125 MHz target.)"""
        tag = f"l{lane}"
        is_dtype = {d: dtype == d for d in DType}
        is_op = {o: op == o for o in ReduceOp}
        by_width = {w: _any_of([is_dtype[d] for d in INTEGER_TYPES if d.bits == w], 1)
                    for w in (8, 16, 32, 64)}

        # Stage 1 -----------------------------------------------------------------------
        sums = [Cat(*[(a + b)[:w] for a, b in zip(_elements(x, w), _elements(y, w))])
                & by_width[w].replicate(LANE_BITS) for w in (8, 16, 32, 64)]
        # Per type, per element: does min/max pick y; is the result a NaN; the 0/1 of a
        # logical op.
        take_y_of, nan_of, logic_of = {}, {}, {}
        for d in DType:
            w = d.bits
            take_y_of[d], nan_of[d], logic_of[d] = [], [], []
            for a, b in zip(_elements(x, w), _elements(y, w)):
                if d.is_float:
                    # Order-preserving map of IEEE bits onto unsigned integers: negative
                    # values reversed, positive ones above them; −0 sorts just below +0
                    # (IEEE 754-2019 §9.6, as numpy.minimum/maximum order zeros).
                    ka = Mux(a[w - 1], ~a, a ^ (1 << (w - 1)))
                    kb = Mux(b[w - 1], ~b, b ^ (1 << (w - 1)))
                    lt = ka < kb
                    fmt = _float_format(d)
                    ones = (1 << fmt.exp_bits) - 1
                    nan_a = (a[fmt.man_bits:w - 1] == ones) & a[:fmt.man_bits].any()
                    nan_b = (b[fmt.man_bits:w - 1] == ones) & b[:fmt.man_bits].any()
                    nan_of[d].append(nan_a | nan_b)
                else:
                    lt = (a.as_signed() < b.as_signed()) if d.is_signed else (a < b)
                    nz_a, nz_b = a.any(), b.any()
                    logic_of[d].append((is_op[ReduceOp.LAND] & nz_a & nz_b)
                                       | (is_op[ReduceOp.LOR] & (nz_a | nz_b))
                                       | (is_op[ReduceOp.LXOR] & (nz_a ^ nz_b)))
                # MIN keeps x when x < y; MAX keeps y then.
                take_y_of[d].append(lt ^ is_op[ReduceOp.MIN])
        qnan = _any_of([is_dtype[d].replicate(LANE_BITS) & Const(
            ((((1 << _float_format(d).exp_bits) - 1) << _float_format(d).man_bits)
             | (1 << (_float_format(d).man_bits - 1))) * sum(
                1 << (k * d.bits) for k in range(LANE_BITS // d.bits)), LANE_BITS)
            for d in FLOAT_TYPES], LANE_BITS)
        is_minmax = is_op[ReduceOp.MIN] | is_op[ReduceOp.MAX]
        is_logic = is_op[ReduceOp.LAND] | is_op[ReduceOp.LOR] | is_op[ReduceOp.LXOR]

        def stage(values, k):
            return {name: _stage(m, value, f"simple_{tag}_{name}_{k}")
                    for name, value in values.items()}

        carried = {
            "x": x, "y": y, "sum": _any_of(sums, LANE_BITS), "qnan": qnan,
            "sel_sum": is_op[ReduceOp.SUM], "sel_minmax": is_minmax,
            "sel_band": is_op[ReduceOp.BAND], "sel_bor": is_op[ReduceOp.BOR],
            "sel_bxor": is_op[ReduceOp.BXOR], "sel_logic": is_logic}
        s1 = stage(carried, 1)
        s1_type = {d: _stage(m, is_dtype[d], f"simple_{tag}_is_{d.name.lower()}") for d in DType}
        s1_bits = {}
        for name, table in (("take_y", take_y_of), ("nan", nan_of), ("logic", logic_of)):
            s1_bits[name] = {d: _stage(m, Cat(*table[d]), f"simple_{tag}_{name}_{d.name.lower()}")
                             for d in DType if table[d]}

        # Stage 2: per byte, the bit of the beat's type ---------------------------------
        def per_byte(bits, byte, first_byte_only=False):
            return _any_of([s1_type[d] & bits[d][byte * 8 // d.bits] for d in bits
                            if not (first_byte_only and byte * 8 % d.bits)], 1)
        masks = {
            "take_y": Cat(*[per_byte(s1_bits["take_y"], b) for b in range(LANE_BITS // 8)]),
            "nan": Cat(*[per_byte(s1_bits["nan"], b) for b in range(LANE_BITS // 8)]),
            "logic": Cat(*[per_byte(s1_bits["logic"], b, first_byte_only=True)
                           for b in range(LANE_BITS // 8)]),
        }
        s2 = stage({**s1, **masks}, 2)

        # Stage 3 -----------------------------------------------------------------------
        out = []
        for byte in range(LANE_BITS // 8):
            sl = slice(byte * 8, byte * 8 + 8)
            xb, yb = s2["x"][sl], s2["y"][sl]
            picked = Mux(s2["nan"][byte], s2["qnan"][sl], Mux(s2["take_y"][byte], yb, xb))
            out.append(_any_of([
                s2["sel_sum"].replicate(8) & s2["sum"][sl],
                s2["sel_minmax"].replicate(8) & picked,
                s2["sel_band"].replicate(8) & (xb & yb),
                s2["sel_bor"].replicate(8) & (xb | yb),
                s2["sel_bxor"].replicate(8) & (xb ^ yb),
                Cat(s2["sel_logic"] & s2["logic"][byte], Const(0, 7)),
            ], 8))
        return _stage(m, Cat(*out), f"simple_{tag}")

    def _int_product(self, m, x, y, width, lane, limb_product):
        """The ``width``-bit low halves of the element products of one lane.

        ``limb_product(i, j)`` gives the registered product of the lane's 16-bit limbs i of
        ``x`` and j of ``y``: the 16-, 32- and 64-bit products share them (a lane needs 14
        distinct ones for the three widths, not 4 + 6 + 10)."""
        tag = f"mul{width}_l{lane}"
        products = []
        for k, (a, b) in enumerate(zip(_elements(x, width), _elements(y, width))):
            name = f"{tag}_{k}"
            if width == 8:
                terms = [(Mux(b[i], a, 0)[:8 - i], i) for i in range(8)]
                products.append(_add_tree(m, terms, 8, name))
                continue
            base = k * width // _LIMB
            terms = [(shift, bits, limb_product(base + i, base + j)[:bits])
                     for i, j, shift, bits in _limb_terms(width)]
            rows = [(Cat(*[Cat(Const(0, sh - (prev[0] + prev[1])), v) if prev else v
                           for prev, (sh, _, v) in zip([None] + row[:-1], row)]), row[0][0])
                    for row in _pack_rows(terms)]
            products.append(_add_tree(m, rows, width, name))
        return Cat(*products)

    @staticmethod
    def _limb_products(m, x, y, lane):
        """A cached ``limb_product(i, j)`` for :meth:`_int_product`."""
        cache = {}

        def limb_product(i, j):
            if (i, j) not in cache:
                unit = LimbProduct(_LIMB, _LIMB)
                m.submodules[f"limb_l{lane}_x{i}_y{j}"] = unit
                m.d.comb += [unit.a.eq(x[i * _LIMB:(i + 1) * _LIMB]),
                             unit.b.eq(y[j * _LIMB:(j + 1) * _LIMB]), unit.en.eq(1)]
                cache[i, j] = unit.p
            return cache[i, j]
        return limb_product

    def _float_unit(self, m, x, y, op, dtype, lane):
        cls = _unit_class("FloatAdder" if op is ReduceOp.SUM else "FloatMultiplier")
        fmt = _float_format(dtype)
        out = []
        for k, (a, b) in enumerate(zip(_elements(x, fmt.width), _elements(y, fmt.width))):
            unit = cls(fmt)
            m.submodules[f"{cls.__name__.lower()}_{dtype.name.lower()}_l{lane}_{k}"] = unit
            m.d.comb += [unit.a.eq(a), unit.b.eq(b), unit.en.eq(1)]
            out.append(unit.result)
        return Cat(*out)

    def _flow_fifo(self, m):
        """The output FIFO and the count that keeps a place in it for every beat taken."""
        # Ref: module docstring, "flow control".  A beat is accepted only while the output
        # FIFO has room for it and for every beat before it that has not left yet, so the
        # pipeline itself never has to stop: no enable fans out to its registers.
        m.submodules.fifo = fifo = SyncFIFOBuffered(width=self.data_width + 2,
                                                    depth=self.fifo_depth)
        in_flight = Signal(range(self.fifo_depth + 1))
        in_flight_next = Signal.like(in_flight)
        room = Signal(init=1)       # in_flight < fifo_depth, from a flop: ready is a flop's AND
        take = self.a.valid & self.b.valid & room
        pop = self.result.valid & self.result.ready
        m.d.comb += [self.a.ready.eq(room & self.b.valid), self.b.ready.eq(room & self.a.valid),
                     in_flight_next.eq(in_flight + take - pop)]
        m.d.sync += [in_flight.eq(in_flight_next), room.eq(in_flight_next < self.fifo_depth)]
        return take, fifo

    def elaborate(self, platform):
        m = Module()
        depth = self.unit_latency

        if self.output_fifo:
            take, fifo = self._flow_fifo(m)
        else:
            # Every result is taken as it comes out, so nothing can fill: both inputs are
            # taken whenever both are valid.
            take = self.a.valid & self.b.valid
            m.d.comb += [self.a.ready.eq(self.b.valid), self.b.ready.eq(self.a.valid)]
            fifo = None

        # Stage 0: operand registers.
        supported = Signal()
        with m.Switch(Cat(self.a.payload.op, self.a.payload.dtype)):
            for op, dtype in sorted(self.capabilities, key=lambda p: (p[1].value, p[0].value)):
                with m.Case(op.value | dtype.value << 4):
                    m.d.comb += supported.eq(1)
        v0 = _stage(m, take, "v0", reset_less=False)
        a0 = _stage(m, self.a.payload.data, "a0")
        b0 = _stage(m, self.b.payload.data, "b0")
        op0 = _stage(m, self.a.payload.op, "op0")
        dtype0 = _stage(m, self.a.payload.dtype, "dtype0")
        last0 = _stage(m, self.a.payload.last, "last0")
        err0 = _stage(m, ~supported, "err0")

        # Which source gives the beat's result, one hot (none for an error: data 0).
        keys = list(self._sources)
        select = Signal(len(keys), name="select0")
        with m.Switch(Cat(op0, dtype0)):
            for op, dtype in self.capabilities:
                with m.Case(op.value | dtype.value << 4):
                    m.d.comb += select.eq(1 << keys.index(self._source_of(op, dtype)))
        selects = [None, _stage(m, select, "select1")]
        for t in range(2, depth + 1):
            selects.append(_stage(m, selects[-1], f"select{t}"))

        ready_at = {}
        for lane in range(self.lanes):
            sl = slice(lane * LANE_BITS, (lane + 1) * LANE_BITS)
            x, y = a0[sl], b0[sl]
            values = {}
            if "simple" in self._sources:
                values["simple"] = self._simple_result(m, x, y, op0, dtype0, lane)
            limb_product = self._limb_products(m, x, y, lane)
            for width in self._product_widths():
                values["int", width] = self._int_product(m, x, y, width, lane, limb_product)
            for key in keys:
                if isinstance(key[0], ReduceOp):
                    values[key] = self._float_unit(m, x, y, *key, lane)
            ready_at[lane] = values

        # One delay line per lane: at each stage the sources ready there are merged in.
        lanes_out = []
        for lane, values in ready_at.items():
            acc = None
            for t in range(min(self._sources.values()), depth + 1):
                merged = [selects[t][keys.index(k)].replicate(LANE_BITS) & values[k]
                          for k in keys if self._sources[k] == t]
                if acc is not None:
                    merged.append(acc)
                acc = _any_of(merged, LANE_BITS)
                if t < depth:
                    acc = _stage(m, acc, f"lane{lane}_s{t + 1}")
            lanes_out.append(acc)

        # Result register, then the FIFO (or the result stream itself).
        v_out = _delay(m, v0, depth + 1, "v", reset_less=False)
        last_out = _delay(m, last0, depth + 1, "last")
        err_out = _delay(m, err0, depth + 1, "err")
        data_out = _stage(m, Cat(*lanes_out), "out_data")
        if fifo is None:
            m.d.comb += [self.result.valid.eq(v_out),
                         self.result.payload.data.eq(data_out),
                         self.result.payload.last.eq(last_out),
                         self.result.payload.error.eq(err_out)]
            return m
        m.d.comb += [
            fifo.w_data.eq(Cat(data_out, last_out, err_out)),
            fifo.w_en.eq(v_out),
            self.result.valid.eq(fifo.r_rdy),
            self.result.payload.data.eq(fifo.r_data[:self.data_width]),
            self.result.payload.last.eq(fifo.r_data[self.data_width]),
            self.result.payload.error.eq(fifo.r_data[self.data_width + 1]),
            fifo.r_en.eq(self.result.ready),
        ]
        return m
