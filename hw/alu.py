# Ref: seed 000 (CN101206588): received segment j is reduced with the local segment while
#      segment j+1 travels, so the ALU must sustain one beat per clock.
# Ref: MPI 4.0 §6.9.2 (predefined reduction operations); IEEE 754-2019 §5.4.1, §9.6.
"""ReductionALU: element-wise ``a ∘ b`` over SIMD lanes, one beat per clock, fixed latency.

Two operand streams in (``a`` carries the op and element type of its beat, so switching
between packets costs nothing), one result stream out.  A beat is ``data_width`` bits of
elements packed little-endian, as numpy lays them out in memory: element k of a w-bit type
is bits ``[k·w, (k+1)·w)``.

The datapath is split into 64-bit lanes.  Each lane holds

- an integer unit: sum, min, max, the bitwise and the logical ops for 8/16/32/64-bit
  elements, and the floating-point min/max (an order-preserving integer compare);
- a two-stage integer multiplier for the low half of each product (MPI prod wraps);
- IEEE adders and multipliers (:mod:`nicoll.hw.fpadd`, :mod:`nicoll.hw.fpmul`) for each
  float type the build contains, one per element of the lane.

Every unit sits in one pipeline that advances only when its last stage can move on (the
``en`` of every stage register), so backpressure never loses, duplicates or reorders a
beat; results leave through a :class:`SkidBuffer` that keeps ``result.ready`` off the
long enable net.  Latency is :attr:`ReductionALU.latency` cycles from an accepted input
beat to its result beat being valid, whatever op and type.

A pair (op, type) that MPI leaves undefined (bitwise or logical ops on floats) or that the
build leaves out gives ``error = 1`` with data 0 for that beat: never a computed value.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .ops import DType, FLOAT_TYPES, INTEGER_TYPES, ReduceOp, op_supported_for
from .skid import SkidBuffer

__all__ = ["ReductionALU", "operand_layout", "result_layout", "all_capabilities",
           "check_capabilities", "capability_masks", "alu_verilog", "LANE_BITS"]

LANE_BITS = 64
_DATA_WIDTHS = (64, 128, 256, 512)


def operand_layout(data_width):
    """Payload of the ``a`` and ``b`` streams (``b`` ignores op and dtype)."""
    return data.StructLayout({"data": data_width, "op": ReduceOp, "dtype": DType, "last": 1})


def result_layout(data_width):
    return data.StructLayout({"data": data_width, "last": 1, "error": 1})


def all_capabilities():
    """Every (op, dtype) pair MPI defines: 10 ops on 8 integer types, 4 on 4 float types."""
    return frozenset((op, dtype) for dtype in DType for op in ReduceOp
                     if op_supported_for(op, dtype))


def check_capabilities(capabilities):
    """``capabilities`` as a frozenset of (ReduceOp, DType), checked; None means all."""
    if capabilities is None:
        return all_capabilities()
    capabilities = frozenset(capabilities)
    for pair in capabilities:
        if (not isinstance(pair, tuple) or len(pair) != 2
                or not isinstance(pair[0], ReduceOp) or not isinstance(pair[1], DType)):
            raise TypeError(f"capabilities must hold (ReduceOp, DType) pairs, not {pair!r}")
        if not op_supported_for(*pair):
            raise ValueError(f"capability {pair!r} is undefined in MPI: floating-point types "
                             f"take only sum, prod, min and max")
    return capabilities


def capability_masks(capabilities):
    """Per DType, the mask of ops computed on it (bit k = ReduceOp k): the ALU block's
    OPS_<TYPE> registers."""
    capabilities = check_capabilities(capabilities)
    return {dtype: sum(1 << op.value for op in ReduceOp if (op, dtype) in capabilities)
            for dtype in DType}


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


class _Pipeline:
    """Stage registers that load only while the pipeline advances (``en``)."""

    def __init__(self, m, en):
        self.m, self.en = m, en

    def stage(self, value, name):
        reg = Signal(Value.cast(value).shape(), name=name)
        with self.m.If(self.en):
            self.m.d.sync += reg.eq(value)
        return reg

    def delay(self, value, cycles, name):
        for k in range(cycles):
            value = self.stage(value, f"{name}_d{k}")
        return value


def _elements(value, width):
    return [value[k:k + width] for k in range(0, len(value), width)]


class ReductionALU(wiring.Component):
    """Element-wise reduction of two operand streams.

    :param data_width: bits per beat, one of 64, 128, 256, 512.
    :param capabilities: the (ReduceOp, DType) pairs this build computes; default all
        pairs MPI defines.  A float sum or prod left out saves its adders or multipliers.
    """

    def __init__(self, data_width=256, *, capabilities=None):
        if not isinstance(data_width, int) or data_width not in _DATA_WIDTHS:
            raise ValueError(f"data_width must be one of 64, 128, 256, 512, not {data_width!r}")
        capabilities = check_capabilities(capabilities)
        self.data_width = data_width
        self.capabilities = capabilities
        self.lanes = data_width // LANE_BITS
        self._float_units = {}
        latency_units = [2]         # the integer multiplier
        for dtype in FLOAT_TYPES:
            for op, cls in ((ReduceOp.SUM, "FloatAdder"), (ReduceOp.PROD, "FloatMultiplier")):
                if (op, dtype) in capabilities:
                    latency_units.append(_unit_latency(self._unit_class(cls), _float_format(dtype)))
        #: Cycles the longest unit takes; every result is aligned to it.
        self.unit_latency = max(latency_units)
        #: Clock edges from the edge that takes an input beat to the edge at which its result
        #: can be taken from ``result``: input register + units + select register + skid
        #: buffer output register.
        self.latency = 1 + self.unit_latency + 1 + 1
        super().__init__({
            "a": In(stream.Signature(operand_layout(data_width))),
            "b": In(stream.Signature(operand_layout(data_width))),
            "result": Out(stream.Signature(result_layout(data_width))),
        })

    @staticmethod
    def _unit_class(name):
        if name == "FloatAdder":
            from .fpadd import FloatAdder
            return FloatAdder
        from .fpmul import FloatMultiplier
        return FloatMultiplier

    def op_mask(self, dtype):
        """Bit k set when op k is computed on ``dtype`` (the ALU block's capability register)."""
        return capability_masks(self.capabilities)[dtype]

    # -- integer and compare unit, one stage -------------------------------------------

    def _simple_results(self, m, a, b, op, dtype):
        """Per dtype, the 64-bit lane result of the one-stage ops (all but prod, sum of floats)."""
        results = {}
        for dtype_member in DType:
            width = dtype_member.bits
            out = []
            for x, y in zip(_elements(a, width), _elements(b, width)):
                if dtype_member.is_float:
                    # Order-preserving map of IEEE bits onto unsigned integers: negative values
                    # reversed, positive ones above them; −0 sorts just below +0 (§9.6).
                    sx, sy = x[width - 1], y[width - 1]
                    kx = Mux(sx, ~x, x ^ (1 << (width - 1)))
                    ky = Mux(sy, ~y, y ^ (1 << (width - 1)))
                    fmt = _float_format(dtype_member)
                    exp_all_ones = (1 << fmt.exp_bits) - 1
                    nan_x = (x[fmt.man_bits:width - 1] == exp_all_ones) & (x[:fmt.man_bits] != 0)
                    nan_y = (y[fmt.man_bits:width - 1] == exp_all_ones) & (y[:fmt.man_bits] != 0)
                    qnan = Const((exp_all_ones << fmt.man_bits) | (1 << (fmt.man_bits - 1)), width)
                    lt = kx < ky
                    picked = Signal(width, name=f"minmax_{dtype_member.name.lower()}")
                    with m.Switch(op):
                        with m.Case(ReduceOp.MIN):
                            m.d.comb += picked.eq(Mux(lt, x, y))
                        with m.Default():
                            m.d.comb += picked.eq(Mux(lt, y, x))
                    out.append(Mux(nan_x | nan_y, qnan, picked))
                    continue
                signed = dtype_member.is_signed
                xs, ys = (x.as_signed(), y.as_signed()) if signed else (x, y)
                lt = xs < ys
                nz_x, nz_y = x.any(), y.any()
                r = Signal(width, name=f"int_{dtype_member.name.lower()}")
                with m.Switch(op):
                    with m.Case(ReduceOp.SUM):
                        m.d.comb += r.eq(x + y)
                    with m.Case(ReduceOp.MIN):
                        m.d.comb += r.eq(Mux(lt, x, y))
                    with m.Case(ReduceOp.MAX):
                        m.d.comb += r.eq(Mux(lt, y, x))
                    with m.Case(ReduceOp.BAND):
                        m.d.comb += r.eq(x & y)
                    with m.Case(ReduceOp.BOR):
                        m.d.comb += r.eq(x | y)
                    with m.Case(ReduceOp.BXOR):
                        m.d.comb += r.eq(x ^ y)
                    with m.Case(ReduceOp.LAND):
                        m.d.comb += r.eq(nz_x & nz_y)
                    with m.Case(ReduceOp.LOR):
                        m.d.comb += r.eq(nz_x | nz_y)
                    with m.Case(ReduceOp.LXOR):
                        m.d.comb += r.eq(nz_x ^ nz_y)
                out.append(r)
            results[dtype_member] = Cat(*out)
        return results

    def _int_products(self, m, pipe, a, b, lane):
        """Low halves of the products of 8/16/32/64-bit elements, two stages."""
        results = {}
        for width in (8, 16, 32, 64):
            needed = [d for d in INTEGER_TYPES if d.bits == width
                      and (ReduceOp.PROD, d) in self.capabilities]
            if not needed:
                continue
            out = []
            for k, (x, y) in enumerate(zip(_elements(a, width), _elements(b, width))):
                if width <= 16:
                    # One partial product fits a DSP; register it, pass it on.
                    p = pipe.stage((x * y)[:width], f"mul{width}_l{lane}_{k}_p")
                    out.append(pipe.stage(p, f"mul{width}_l{lane}_{k}"))
                    continue
                # Split into halves: the high×high term only affects bits ≥ width.
                h = width // 2
                xl, xh, yl, yh = x[:h], x[h:], y[:h], y[h:]
                low = pipe.stage(xl * yl, f"mul{width}_l{lane}_{k}_ll")
                cross = pipe.stage((xl * yh + xh * yl)[:h], f"mul{width}_l{lane}_{k}_x")
                out.append(pipe.stage((low + (cross << h))[:width], f"mul{width}_l{lane}_{k}"))
            product = Cat(*out)
            for d in needed:
                results[d] = product
        return results

    def _float_results(self, m, en, a, b, lane, unit_name, op):
        results = {}
        cls = None
        for dtype in FLOAT_TYPES:
            if (op, dtype) not in self.capabilities:
                continue
            cls = cls or self._unit_class(unit_name)
            fmt = _float_format(dtype)
            out = []
            for k, (x, y) in enumerate(zip(_elements(a, fmt.width), _elements(b, fmt.width))):
                unit = cls(fmt)
                m.submodules[f"{unit_name.lower()}_{dtype.name.lower()}_l{lane}_{k}"] = unit
                m.d.comb += [unit.a.eq(x), unit.b.eq(y), unit.en.eq(en)]
                pipe = _Pipeline(m, en)
                out.append(pipe.delay(unit.result, self.unit_latency - unit.latency,
                                      f"{unit_name.lower()}_{dtype.name.lower()}_l{lane}_{k}"))
            results[dtype] = Cat(*out)
        return results

    def elaborate(self, platform):
        m = Module()
        m.submodules.skid = skid = SkidBuffer(result_layout(self.data_width))
        wiring.connect(m, skid.o, wiring.flipped(self.result))

        # Ref: §"flow control" of the module docstring: one enable for every stage.
        out_valid = Signal()
        en = Signal()
        m.d.comb += en.eq(~out_valid | skid.i.ready)
        pipe = _Pipeline(m, en)

        both = self.a.valid & self.b.valid
        m.d.comb += [self.a.ready.eq(en & both), self.b.ready.eq(en & both)]

        # Stage 0: input registers.
        supported = Signal()
        with m.Switch(Cat(self.a.payload.op, self.a.payload.dtype)):
            for op, dtype in sorted(self.capabilities, key=lambda p: (p[1].value, p[0].value)):
                with m.Case(op.value | dtype.value << 4):
                    m.d.comb += supported.eq(1)
        v0 = pipe.stage(both, "v0")
        a0 = pipe.stage(self.a.payload.data, "a0")
        b0 = pipe.stage(self.b.payload.data, "b0")
        op0 = pipe.stage(self.a.payload.op, "op0")
        dtype0 = pipe.stage(self.a.payload.dtype, "dtype0")
        last0 = pipe.stage(self.a.payload.last, "last0")
        err0 = pipe.stage(~supported, "err0")

        # Control travels beside the data; it is valid at the unit outputs.
        depth = self.unit_latency
        v_u = pipe.delay(v0, depth, "v")
        op_u = pipe.delay(op0, depth, "op")
        dtype_u = pipe.delay(dtype0, depth, "dtype")
        last_u = pipe.delay(last0, depth, "last")
        err_u = pipe.delay(err0, depth, "err")

        selected_lanes = []
        for lane in range(self.lanes):
            sl = slice(lane * LANE_BITS, (lane + 1) * LANE_BITS)
            a, b = a0[sl], b0[sl]
            simple = {d: pipe.delay(pipe.stage(v, f"simple_{d.name.lower()}_l{lane}"),
                                    depth - 1, f"simple_{d.name.lower()}_l{lane}")
                      for d, v in self._simple_results(m, a, b, op0, dtype0).items()}
            products = {d: pipe.delay(v, depth - 2, f"prod_{d.name.lower()}_l{lane}")
                        for d, v in self._int_products(m, pipe, a, b, lane).items()}
            sums = self._float_results(m, en, a, b, lane, "FloatAdder", ReduceOp.SUM)
            fprods = self._float_results(m, en, a, b, lane, "FloatMultiplier", ReduceOp.PROD)

            lane_out = Signal(LANE_BITS, name=f"lane{lane}")
            with m.Switch(Cat(op_u, dtype_u)):
                for op, dtype in self.capabilities:
                    if dtype.is_float and op is ReduceOp.SUM:
                        value = sums[dtype]
                    elif op is ReduceOp.PROD:
                        value = (fprods if dtype.is_float else products)[dtype]
                    else:
                        value = simple[dtype]
                    with m.Case(op.value | dtype.value << 4):
                        m.d.comb += lane_out.eq(value)
            selected_lanes.append(lane_out)

        # Select register: the output of the pipeline, drained into the skid buffer.
        out_data = pipe.stage(Mux(err_u, 0, Cat(*selected_lanes)), "out_data")
        out_last = pipe.stage(last_u, "out_last")
        out_err = pipe.stage(err_u, "out_err")
        m.d.sync += out_valid.eq(Mux(en, v_u, out_valid))
        m.d.comb += [
            skid.i.valid.eq(out_valid),
            skid.i.payload.data.eq(out_data),
            skid.i.payload.last.eq(out_last),
            skid.i.payload.error.eq(out_err),
        ]
        return m


class _ALUVerilogTop(wiring.Component):
    """The ALU with AXI4-Stream port names for a Verilog top (cocotbext-axi drives them).

    ``s_axis_a``: tdata, tlast, tuser = op | dtype << 4 (the codes of nicoll.hw.ops);
    ``s_axis_b``: tdata, tlast; ``m_axis_result``: tdata, tlast, tuser = error.
    """

    def __init__(self, data_width, capabilities):
        self.alu = ReductionALU(data_width, capabilities=capabilities)
        members = {}
        for name, user in (("s_axis_a", 8), ("s_axis_b", 0)):
            members[f"{name}_tdata"] = In(data_width)
            members[f"{name}_tlast"] = In(1)
            if user:
                members[f"{name}_tuser"] = In(user)
            members[f"{name}_tvalid"] = In(1)
            members[f"{name}_tready"] = Out(1)
        members.update({"m_axis_result_tdata": Out(data_width), "m_axis_result_tlast": Out(1),
                        "m_axis_result_tuser": Out(1), "m_axis_result_tvalid": Out(1),
                        "m_axis_result_tready": In(1)})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.alu = alu = self.alu
        for port, name in ((alu.a, "s_axis_a"), (alu.b, "s_axis_b")):
            m.d.comb += [port.payload.data.eq(getattr(self, f"{name}_tdata")),
                         port.payload.last.eq(getattr(self, f"{name}_tlast")),
                         port.valid.eq(getattr(self, f"{name}_tvalid")),
                         getattr(self, f"{name}_tready").eq(port.ready)]
        m.d.comb += [alu.a.payload.op.eq(self.s_axis_a_tuser[:4]),
                     alu.a.payload.dtype.eq(self.s_axis_a_tuser[4:]),
                     self.m_axis_result_tdata.eq(alu.result.payload.data),
                     self.m_axis_result_tlast.eq(alu.result.payload.last),
                     self.m_axis_result_tuser.eq(alu.result.payload.error),
                     self.m_axis_result_tvalid.eq(alu.result.valid),
                     alu.result.ready.eq(self.m_axis_result_tready)]
        return m


def alu_verilog(data_width=256, capabilities=None):
    """Verilog of a ReductionALU as module ``nicoll_alu`` with AXI4-Stream port names
    (``s_axis_a_t*``, ``s_axis_b_t*``, ``m_axis_result_t*``); returns ``(text, latency)``."""
    from amaranth.back import verilog
    top = _ALUVerilogTop(data_width, capabilities)
    return verilog.convert(top, name="nicoll_alu"), top.alu.latency
