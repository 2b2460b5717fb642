# Ref: Amaranth RFC 61 / amaranth.lib.stream (a transfer happens in a cycle where valid and
#      ready are both high; valid never waits for ready).
# Ref: AMBA 4 AXI4-Stream Protocol Specification (IHI0051A), 2.1 (TDATA, TKEEP, TLAST: the
#      beat layout mirrors them).
"""The row packer (transmit side).

:class:`RowPacker` takes the rows a memory read returns for a region's chunks
(:func:`~.regions.read_row_layout`) and packs their bytes into beats
(:func:`~.regions.beat_layout`): byte ``i`` of a message in beat ``i // W``, lane ``i % W``.
Every beat but the message's final one is full; the final one has ``keep`` set for its low
``len % W`` (or ``W``) lanes and ``last`` set; lanes whose ``keep`` is clear carry zeros.  The
next message starts in a new beat.  The regions and the memory's lanes are described in
:mod:`.regions`.
"""

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from ..params import check_data_width
from ..lib.mirrors import Mirrored
from ..lib.skid import SkidBuffer
from .regions import (_byte_mask_bits, _lane_bits, _lanes_below, _rotation_pipeline,
                      _rotation_stages, beat_layout, read_row_layout)


__all__ = ["RowPacker", "PACKER_BEATS"]

#: Beats the packer's output FIFO holds, and items its stages and FIFO hold at most: a beat
#: leaves the FIFO six cycles after its item entered at 256 bits (the plan slice's output,
#: three rotator stages, the merge, the FIFO), and the credit sees it a cycle later, so eight
#: keep an item entering in every cycle a beat leaves.
PACKER_BEATS = 8


def _packer_plan_layout(data_width):
    """A row (or a flush) of :class:`RowPacker` with its plan, as its skid buffer holds it.

    ``fill`` is the number of bytes of the beat being built before this row, ``end`` that
    number after it (up to ``2W - 1``); the row's bytes go to lanes ``fill .. end-1`` of the
    beat and, past ``W``, to lanes ``0 .. end-W-1`` of the next one.  ``rot`` brings lane
    ``lo`` of the row to lane ``fill``.  ``emit``: a beat leaves with this item; ``final``:
    that beat is the message's last.  A flush (the final beat of a message whose last row
    spilled over) has ``fill == end``, so it adds no bytes and sends what is held."""
    lane_bits = _lane_bits(data_width)
    return data.StructLayout({
        "data": data_width,
        "rot": lane_bits,
        "fill": lane_bits,
        "end": lane_bits + 1,
        "emit": 1,
        "final": 1,
    })


def _packer_control_layout(data_width):
    """What travels with a row of :class:`RowPacker` through its rotator stages: the
    rotation, and the lane masks of the merge decoded from the plan's fill levels.

    ``cur``: lanes of the rotated row that join the beat being built; ``take``: lanes that
    the holding register keeps afterwards (the spill-over when a beat leaves, else ``cur``);
    ``keep``: the ``keep`` of the beat that leaves.  A bubble has ``valid``, ``emit``,
    ``cur`` and ``take`` clear, so the merge stage needs no enable of its own.

    The first rotator stage registers the thermometer decodes of the plan's fill levels
    (``below``: lanes under the fill level, all set for a bubble; ``spill``: the lanes a
    leaving beat's row leaves behind); ``cur`` and ``take`` are one LUT from those, formed
    after that register (:meth:`RowPacker._masks`)."""
    lanes = data_width // 8
    return data.StructLayout({
        "valid": 1,
        "rot": _lane_bits(data_width),
        "cur": lanes,
        "take": lanes,
        "keep": lanes,
        "below": lanes,
        "spill": lanes,
        "emit": 1,
        "final": 1,
    })


class RowPacker(Mirrored, wiring.Component):
    """Packs the chunk bytes of memory rows into full beats (transmit side).

    Members
    -------
    rows : ``In(stream.Signature(read_row_layout(data_width)))``
        Rows whose lanes ``lo .. lo+n-1`` are the next ``n`` bytes of the message
        (``1 <= n``, ``lo + n <= W``); ``last`` on the message's final row.
    beats : ``Out(stream.Signature(beat_layout(data_width)))``
        The message packed from lane 0: full beats, then a final beat with ``keep`` set for
        its low ``len % W`` (or ``W``) lanes and ``last`` set.  Lanes with ``keep`` clear are
        zero.  The next message begins in a new beat.

    Register stages in the shape of a realigning DMA engine: the offset is a register,
    never computed in the cycle that shifts data.

    1. *Plan*, as a row is taken: from the fill level of the beat being built and the row's
       ``lo`` and ``n``, the rotation that brings lane ``lo`` to the fill level, the new
       fill level, whether a beat leaves and whether it is the message's last.  The row and
       its plan go into a :class:`~nicoll.hw.lib.skid.SkidBuffer`, so ``rows.ready`` is a flop.
    2. *Rotate*, ``W`` bytes around, by the planned amount in registered stages: the low
       three bits first, then one bit per stage (one stage at 64 bits, two at 128, three at
       256, four at 512).  The first stage also decodes the plan's fill levels into lane
       masks, which travel along.
    3. *Merge* into a ``W``-byte holding register: a leaving beat is the holding register
       with the row's first lanes ORed in; what spills past it stays in the holding
       register.

    4. *Out*: the beats wait in a FIFO of :data:`PACKER_BEATS` (distributed RAM).  The
       stages never stall: an item (a row, or a flush) enters them only with a credit, a
       flop set while the items in the stages and the beats in the FIFO are fewer than the
       FIFO holds, so the FIFO never refuses a beat.

    One row in and one beat out per clock at any alignment.  A beat is offered ``3 + s``
    cycles after the row that completes it is taken, ``s`` the number of rotator stages;
    ``beats.valid`` comes from the FIFO's flops, the beat from its RAM.  ``rows.ready``
    comes from flops (it does not depend on ``beats.ready`` in the same cycle).  When a
    message's last row leaves more than ``W`` bytes to send, its final beat takes a cycle
    of its own, in which no row is taken.
    """

    def __init__(self, data_width):
        check_data_width(data_width)
        self._data_width = data_width
        super().__init__({
            "rows": In(stream.Signature(read_row_layout(data_width))),
            "beats": Out(stream.Signature(beat_layout(data_width))),
        })

    @property
    def data_width(self):
        return self._data_width

    def elaborate(self, platform):
        m = Module()
        lane_bits = _lane_bits(self._data_width)
        m.submodules.planned = planned = SkidBuffer(_packer_plan_layout(self._data_width))
        self._plan(m, planned.i)
        # The stages never stall: an item enters only with a credit (`credit`, a flop), and
        # the beats go into a FIFO that the credits keep from filling.  A stall of every
        # stage from `beats.ready` was one enable on the ~1 000 flops of the 256-bit packer,
        # the 256-bit engine's routed path at seed 1 of 06ea76e (the beat slice's valid ->
        # the stall -> the plan slice, 5.37 ns, 4.41 of it routing).
        credit = Signal(init=1)
        m.d.comb += planned.o.ready.eq(credit)
        control = Signal(_packer_control_layout(self._data_width))
        self._decode(m, planned.o, control)
        rotated, control = _rotation_pipeline(m, Const(1), planned.o.payload.data, control,
                                              _rotation_stages(lane_bits),
                                              refine=lambda c: self._masks(m, c))
        # The merged beat has no reset (its valid has): no load on the clear net.
        beat = Signal(self.beats.payload.shape(), reset_less=True)
        beat_valid = Signal()
        self._merge(m, rotated, control, beat, beat_valid)
        m.submodules.out = out = SyncFIFO(width=len(beat.as_value()), depth=PACKER_BEATS)
        m.d.comb += [out.w_en.eq(beat_valid), out.w_data.eq(beat),
                     self.beats.valid.eq(out.r_rdy), self.beats.payload.eq(out.r_data),
                     out.r_en.eq(self.beats.ready)]
        held = self._credit(m, credit, entered=planned.o.valid & planned.o.ready,
                            left=control.valid & ~control.emit,
                            sent=self.beats.valid & self.beats.ready)
        # The credit is its compare, and the FIFO never refuses a beat (the tests hold both).
        self._mirrors = [(credit, held < PACKER_BEATS), (out.w_rdy | ~out.w_en, 1)]
        return m

    @staticmethod
    def _credit(m, credit, *, entered, left, sent):
        """Items in the stages or in the FIFO: each item entered takes a credit until it
        leaves the last stage without a beat, or its beat leaves the FIFO.  With at most
        PACKER_BEATS of them, the FIFO never refuses a beat."""
        held = Signal(range(PACKER_BEATS + 1))
        m.d.sync += held.eq(held + entered - left - sent)
        # The credit from the three strobes and two compares of `held` alone (it grows by
        # one at most), not from the count's sum: that sum's carry chain in front of the
        # compare was the packer's deepest path (the depth estimate, 4.90 ns).
        grows = entered & ~left & ~sent
        stays = (entered & (left ^ sent)) | (~entered & ~left & ~sent)
        m.d.sync += credit.eq(Mux(grows, held < PACKER_BEATS - 1,
                                  Mux(stays, held < PACKER_BEATS, 1)))
        return held

    def _plan(self, m, planned):
        """Stage 1: the per-row arithmetic, on narrow fields only, into the skid buffer."""
        lanes = self._data_width // 8
        lane_bits = _lane_bits(self._data_width)
        row = self.rows.payload
        plan = planned.payload

        fill = Signal(lane_bits)      # bytes of the message in the beat being built
        flush = Signal()              # a last row spilled: its final beat goes next, alone
        end = Signal(lane_bits + 1)
        m.d.comb += [
            end.eq(fill + row.n),
            planned.valid.eq(self.rows.valid | flush),
            self.rows.ready.eq(planned.ready & ~flush),
            plan.data.eq(row.data),
            plan.fill.eq(fill),
        ]
        with m.If(flush):
            m.d.comb += [plan.end.eq(fill), plan.emit.eq(1), plan.final.eq(1)]
        with m.Else():
            m.d.comb += [
                plan.rot.eq(row.lo - fill),
                plan.end.eq(end),
                plan.emit.eq(end[lane_bits] | row.last),
                plan.final.eq(row.last & (end <= lanes)),
            ]
        with m.If(planned.valid & planned.ready):
            with m.If(flush):
                m.d.sync += [fill.eq(0), flush.eq(0)]
            with m.Elif(row.last):
                spills = end > lanes
                m.d.sync += [fill.eq(Mux(spills, end[:lane_bits], 0)), flush.eq(spills)]
            with m.Else():
                m.d.sync += fill.eq(end[:lane_bits])

    def _decode(self, m, planned, control):
        """The plan's fill levels as thermometer masks, into the first rotator stage with the
        row."""
        lanes = self._data_width // 8
        lane_bits = _lane_bits(self._data_width)
        plan = planned.payload
        entered = planned.valid & planned.ready
        m.d.comb += [
            control.valid.eq(entered),
            control.rot.eq(plan.rot),
            control.keep.eq(_lanes_below(plan.end, lanes)),
            control.final.eq(plan.final),
            control.below.eq(~0),
        ]
        with m.If(entered):
            m.d.comb += [
                control.below.eq(_lanes_below(plan.fill, lanes)),
                control.emit.eq(plan.emit),
            ]
            with m.If(plan.emit & plan.end[lane_bits]):
                m.d.comb += control.spill.eq(_lanes_below(plan.end[:lane_bits], lanes))

    def _masks(self, m, first):
        """The merge's lane masks from the first stage's thermometers: one LUT each."""
        control = Signal.like(first, name="masks_control")
        cur = first.keep & ~first.below
        m.d.comb += [
            control.eq(first),
            control.cur.eq(cur),
            control.take.eq(Mux(first.emit, first.spill, cur)),
        ]
        return control

    def _merge(self, m, rotated, control, beat, beat_valid):
        """Last stage: merge the rotated row into the holding register, send a beat (into
        ``beat``, the register behind ``beats.payload``)."""
        # Bytes of the beat being built, at their final lanes; lanes at and above the fill
        # level are zero, so merging is an OR and a leaving beat has zeros past its keep.
        hold = Signal(self._data_width)
        m.d.sync += [
            hold.eq(Mux(control.emit, 0, hold) | (rotated & _byte_mask_bits(control.take))),
            beat_valid.eq(control.valid & control.emit),
            # Loaded every cycle the stage moves: without a beat, valid is low anyway.
            beat.data.eq(hold | (rotated & _byte_mask_bits(control.cur))),
            beat.keep.eq(control.keep),
            beat.last.eq(control.final),
        ]
