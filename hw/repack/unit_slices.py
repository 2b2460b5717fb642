"""The repack unit's two inputs, each behind register slices: the configuration with its
checks (:class:`ConfigSlice`) and the message beats with their length entries summed
(:class:`InputSums`).  :class:`~.unit.RepackUnit` joins them to its other parts."""

from amaranth.hdl import Array, Cat, Const, Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..lib.builder import carry_save_sum
from ..lib.skid import OneEntrySlice, SkidBuffer
from ..params import check_data_width
from .formats import (LENGTH_WIDTH, _check_capacity, _check_max_group, length_table_layout,
                      message_beat_layout, message_stream, unit_config_layout)
from .unit_arith import _greater, _tree_sum

__all__ = ["checked_config_layout", "summed_beat_layout", "ConfigSlice", "InputSums"]


def checked_config_layout(max_group):
    """A configuration with its checks: out of range (``bad``), too large for the buffer
    (``too_big``), and the entries of S in use (``src_on``: bit k is k < dh)."""
    return data.StructLayout({"cfg": unit_config_layout(max_group), "bad": 1, "too_big": 1,
                              "src_on": max_group})


def summed_beat_layout(data_width):
    """A message beat with, as a table beat, its entries' sum (``tsum``), which of them are
    non-zero (``nz``) and two rows' bytes or more (``big``); and whether its keep is whole."""
    entries = data_width // LENGTH_WIDTH
    return data.StructLayout({
        "beat": message_beat_layout(data_width),
        "tsum": LENGTH_WIDTH + entries.bit_length() - 1,
        "nz": entries, "big": entries,
        "full_keep": 1,
    })


class ConfigSlice(wiring.Component):
    """The configuration's way in: two register slices, the second holding with each
    configuration its checks.

    Parameters
    ----------
    data_width : int
        Beat width, 64, 128, 256 or 512.
    capacity_bytes : int
        Bytes of the unit's data buffer.
    max_group : int
        Largest dh and dv, 1 .. 256.

    Members
    -------
    i : ``In(stream.Signature(unit_config_layout(max_group)))``
        The unit's ``cfg``.
    o : ``Out(stream.Signature(checked_config_layout(max_group)))``
        Each configuration with its checks, from flops.
    """

    def __init__(self, data_width, capacity_bytes, max_group):
        check_data_width(data_width)
        _check_capacity(capacity_bytes, data_width)
        _check_max_group(max_group)
        self._beat_bytes = data_width // 8
        self._capacity = capacity_bytes
        self._max_group = max_group
        super().__init__({
            "i": In(stream.Signature(unit_config_layout(max_group))),
            "o": Out(stream.Signature(checked_config_layout(max_group))),
        })

    def elaborate(self, platform):
        m = Module()
        B, G = self._beat_bytes, self._max_group
        # Two register slices on cfg (ready from a flop): one at the boundary, then one
        # holding with each configuration its checks, made from the first's flops, so the
        # idle state's decision on it reads flops.  The checks made from the port itself
        # were the 256-bit core's latest pins at two seeds of 7286a74 (the hub's cfg register
        # -> 3.0 ns of wire -> too_big's 16-bit compare, 8.15 ns); the first slice costs one
        # cycle per sub-matrix.  It has one entry (a configuration every other cycle at
        # most, where one per sub-matrix comes): as a SkidBuffer its second entry was ~390
        # flops that never helped.
        # Too big: total_bytes + dh * (B - 1) > capacity, i.e. total_bytes > capacity -
        # dh * (B - 1).  The right side depends on dh alone, and only dh in 1 .. G matters
        # (`bad` takes precedence), so it is a constant chosen by dh's low bits: one compare,
        # not an addition before it (the 64-bit unit's critical path, two carry chains).
        # The constant is chosen as the configuration enters the first slice (one LUT per
        # bit from dh), so the compare behind it starts at flops: with the choice in front
        # of it, it was 7 levels and the 256-bit core's late pin at seeds 2 and 3 of d5c4b8b
        # (cfg_port -> too_big, 8.10 ns).
        dh_bits = G.bit_length()
        limits = [self._capacity - d * (B - 1) for d in range(1 << dh_bits)]
        m.submodules.cfg_port = cfg_port = OneEntrySlice(data.StructLayout({
            "cfg": unit_config_layout(G), "limit": self._capacity.bit_length(),
            "over_always": 1}))
        m.submodules.cfg_slice = cfg_slice = SkidBuffer(checked_config_layout(G))
        dh_in = self.i.payload.dh[:dh_bits]
        m.d.comb += [
            cfg_port.i.valid.eq(self.i.valid),
            self.i.ready.eq(cfg_port.i.ready),
            cfg_port.i.payload.cfg.eq(self.i.payload),
            cfg_port.i.payload.limit.eq(Array(Const(max(x, 0)) for x in limits)[dh_in]),
            cfg_port.i.payload.over_always.eq(
                Const(sum(1 << d for d, x in enumerate(limits) if x < 0),
                      len(limits)).bit_select(dh_in, 1)),
        ]
        p_in = cfg_port.o.payload.cfg
        m.d.comb += [
            cfg_slice.i.valid.eq(cfg_port.o.valid),
            cfg_port.o.ready.eq(cfg_slice.i.ready),
            cfg_slice.i.payload.cfg.eq(p_in),
            cfg_slice.i.payload.bad.eq((p_in.dh == 0) | (p_in.dh > G) | (p_in.dv == 0)
                                       | (p_in.dv > G) | (p_in.timeout == 0)),
            cfg_slice.i.payload.too_big.eq(cfg_port.o.payload.over_always
                                           | _greater(p_in.total_bytes,
                                                     cfg_port.o.payload.limit, 16)),
            # The entries of S in use (k < dh), decoded here: the input stage reads them for
            # the configuration being taken, and a compare there was on the 64-bit core's
            # critical path.
            cfg_slice.i.payload.src_on.eq(Cat(p_in.dh > k for k in range(G))),
        ]
        wiring.connect(m, cfg_slice.o, wiring.flipped(self.o))
        return m


class InputSums(wiring.Component):
    """The input's first register stages: a beat with its length entries summed.

    Parameters
    ----------
    data_width : int
        Beat width, 64, 128, 256 or 512.

    Members
    -------
    i : ``In(message_stream(data_width))``
        The unit's ``i``.
    o : ``Out(stream.Signature(summed_beat_layout(data_width)))``
        Each beat with its entries' sum and flags, from a skid buffer.
    """

    def __init__(self, data_width):
        check_data_width(data_width)
        self._data_width = data_width
        super().__init__({
            "i": In(message_stream(data_width)),
            "o": Out(stream.Signature(summed_beat_layout(data_width))),
        })

    def elaborate(self, platform):
        m = Module()
        W = self._data_width
        E = W // LENGTH_WIDTH                   # length entries per table beat
        LE = E.bit_length() - 1
        LB = (W // 8).bit_length() - 1          # byte-in-beat bits
        # A register slice at the block boundary, then two stages that sum each beat's E
        # length entries and note which of them are non-zero, so a table beat's adder tree is
        # not in the cycle that checks it.  The boundary slice keeps the sender's logic out of
        # the tree: without it, the hub's routing of a beat to its unit (hub state -> valid
        # and payload) ran into the first adders, the 256-bit core's path at seed 1 of
        # 60d6189 (9 levels and a carry chain, 8.40 ns).  The sum covers every entry:
        # entries past dv must be zero (else OUTSIDE_D drops the message), so it equals the sum
        # of the valid ones whenever it is used.
        # The adder tree is split: a first register stage (ready from the skid buffer's
        # flop) holds the beat with its entries summed down to partial sums, and the rest
        # of the tree is on the way into the skid buffer, half of its log2(E) levels on
        # each side (two and two at 256 bits, where three before the register were the
        # 256-bit unit's estimated worst path).
        m.submodules.in_slice = in_slice = SkidBuffer(message_beat_layout(W))
        wiring.connect(m, wiring.flipped(self.i), in_slice.i)
        beat_in = in_slice.o
        in_entries = length_table_layout(W)(beat_in.payload.data)
        parts = 1 << ((E.bit_length() - 1) // 2)
        partials = [_tree_sum(in_entries[e] for e in range(k, E, parts)) for k in range(parts)]
        pre = Signal(data.StructLayout({
            "beat": message_beat_layout(W),
            "part": data.ArrayLayout(LENGTH_WIDTH + LE, parts),
            "nz": E, "big": E,
        }))
        pre_valid = Signal()
        m.submodules.in_buffer = in_skid = SkidBuffer(summed_beat_layout(W))
        m.d.comb += beat_in.ready.eq(~pre_valid | in_skid.i.ready)
        with m.If(beat_in.valid & beat_in.ready):
            m.d.sync += [pre_valid.eq(1), pre.beat.eq(beat_in.payload),
                         pre.nz.eq(Cat(in_entries[e] != 0 for e in range(E))),
                         pre.big.eq(Cat(in_entries[e][LB + 1:] != 0 for e in range(E)))]
            m.d.sync += [pre.part[k].eq(h) for k, h in enumerate(partials)]
        with m.Elif(in_skid.i.ready):
            m.d.sync += pre_valid.eq(0)
        m.d.comb += [
            in_skid.i.valid.eq(pre_valid),
            in_skid.i.payload.beat.eq(pre.beat),
            in_skid.i.payload.tsum.eq(carry_save_sum((pre.part[k] for k in range(parts)),
                                                      LENGTH_WIDTH + LE)),
            in_skid.i.payload.nz.eq(pre.nz), in_skid.i.payload.big.eq(pre.big),
            # Whole beat, decoded here from flops: after the slice, the B-bit compare shared
            # LUTs with `keep_low`'s and was the front of the 256-bit core's path into
            # `in_q.final_ok` at seed 1 of 0141bc8 (6 levels, 8.02 ns).
            in_skid.i.payload.full_keep.eq(pre.beat.keep == (1 << (W // 8)) - 1),
        ]
        wiring.connect(m, in_skid.o, wiring.flipped(self.o))
        return m
