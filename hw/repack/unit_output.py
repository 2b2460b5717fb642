"""The repack unit's output pipeline: literal beats and buffer rows issued by the sending
state machine (:class:`~.unit_sequencer.UnitSequencer`) go through a registered buffer read and a
two-stage byte rotator, are merged into beats and leave through a register slice
(:class:`OutputPipeline`)."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..lib.skid import SkidBuffer
from ..params import check_data_width, is_int
from .formats import RANK_WIDTH, message_beat_layout, message_stream
from .unit_arith import _rotate_bytes
from ..lib.mirrors import Mirrored

__all__ = ["KIND_LIT", "KIND_ROW", "KIND_FLUSH", "issue_signature", "OutputPipeline"]


#: What an issued operation is: a literal beat (header or table), a buffer row holding bytes
#: of a block from byte ``off``, or a flush of the accumulator.
KIND_LIT, KIND_ROW, KIND_FLUSH = range(3)


def issue_signature(data_width, depth):
    """One operation issued into the output pipeline (the issuer's view): ``valid`` (issue
    it in this cycle; only while ``advance``), ``kind``, ``lit`` (a literal beat), ``row``
    (the buffer row read in every cycle), ``off`` (the block's first byte in that row),
    ``p`` (bytes already in the accumulator), ``emit`` (the operation sends a beat), ``last``
    and ``rank`` (the beat's)."""
    lane_bits = (data_width // 8).bit_length() - 1
    return wiring.Signature({
        "valid": Out(1), "kind": Out(2), "lit": Out(data_width), "row": Out(range(max(2, depth))),
        "off": Out(lane_bits), "p": Out(lane_bits), "emit": Out(1), "last": Out(1),
        "rank": Out(RANK_WIDTH),
    })


class OutputPipeline(Mirrored, wiring.Component):
    """Issue (stage A) -> p1 (buffer read) -> p2 (row register, the block RAM's output
    register) -> p3 (rotator, low shift bits) -> p4 (rotator, high shift bits) -> merge ->
    skid -> o.

    Parameters
    ----------
    data_width : int
        Beat width, 64, 128, 256 or 512.
    depth : int
        Rows of the data buffer.

    Members
    -------
    issue : ``In(issue_signature(data_width, depth))``
        The operation issued in this cycle.
    rd_addr : ``Out(range(max(2, depth)))``; rd_en : ``Out(1)``; rd_data : ``In(data_width)``
        The data buffer's read port (registered).
    ev_free : ``In(1)``
        Room for an event: a message's last beat waits without it.
    o : ``Out(message_stream(data_width))``
        The unit's ``o``.
    advance : ``Out(1, init=1)``
        The pipeline moves in this cycle (a flop).
    busy : ``Out(1)``
        An operation is in the pipeline (not counting the output slice).
    out_valid : ``Out(1)``; out_rank : ``Out(RANK_WIDTH)``
        The output slice holds a beat; its rank.
    delivered : ``Out(1)``
        A message's last beat leaves in this cycle (DELIVERED).
    """

    def __init__(self, data_width, depth):
        check_data_width(data_width)
        if not is_int(depth):
            raise TypeError(f"Buffer depth must be an integer, not {depth!r}")
        if depth <= 0:
            raise ValueError(f"Buffer depth must be positive, not {depth!r}")
        self._data_width = data_width
        self._depth = depth
        self._mirrors = []
        super().__init__({
            "issue": In(issue_signature(data_width, depth)),
            "rd_addr": Out(range(max(2, depth))), "rd_en": Out(1), "rd_data": In(data_width),
            "ev_free": In(1),
            "o": Out(message_stream(data_width)),
            "advance": Out(1, init=1),
            "busy": Out(1),
            "out_valid": Out(1), "out_rank": Out(RANK_WIDTH),
            "delivered": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        W = self._data_width
        B = W // 8
        LB = B.bit_length() - 1
        ev_free = self.ev_free
        issue, iss_kind, iss_lit, iss_row, iss_off, iss_p, iss_emit, iss_last, emit_rank = (
            self.issue.valid, self.issue.kind, self.issue.lit, self.issue.row, self.issue.off,
            self.issue.p, self.issue.emit, self.issue.last, self.issue.rank)
        # Stage A issues one operation per cycle: a literal beat (header or table), a buffer
        # row holding bytes of a block from byte `off`, or a flush of the accumulator.  Its
        # rotation amount (`p - off`, bytes) is computed in stage A and travels as a register,
        # so no stage does arithmetic on the amount it shifts by; the buffer read is registered
        # before the rotator (p2).  Every stage moves together on `advance`.
        op_layout = data.StructLayout({
            "valid": 1,
            "kind": 2,
            "shift": LB,                        # rotate the row right by this many bytes
            "p": LB,                            # bytes already in the accumulator
            "emit": 1,                          # this operation sends a beat
            "last": 1,
            "rank": RANK_WIDTH,
        })
        p1, p2, p3, p4 = (Signal(op_layout, name=f"p{n}") for n in range(1, 5))
        p1_lit = Signal(W)
        # p2: the buffer row as read, in a register fed by the read port alone (the block
        # RAM's output register, `bram_outreg`), and the literal beside it; the choice is made
        # after the rotator's first stage, which a literal (shift 0) skips.  The choice in
        # front of the row register kept it out of the block RAM: the unit's path at seed 1
        # of 8e689a2 (the read's 4.26 ns clock-to-out, then the multiplexer, 5.51 ns).
        row = Signal(W)
        p2_lit, p2_lit_data = Signal(), Signal(W)
        rot_lo = Signal(W)                      # p3: rotated by the low shift bits
        rot = Signal(W)                         # p4: rotated by the whole shift
        acc = Signal(W)                         # bytes of the beat being assembled

        m.submodules.out_buffer = skid = SkidBuffer(message_beat_layout(W))
        consume = Signal()
        pipe_advance = Signal()
        pipe_busy = self.busy
        m.d.comb += [
            consume.eq(p4.valid & (~p4.emit | skid.i.ready)),
            pipe_advance.eq(~p4.valid | consume),
            pipe_busy.eq(p1.valid | p2.valid | p3.valid | p4.valid),
            self.rd_addr.eq(iss_row),
            # The read port keeps its data while the pipeline waits.
            self.rd_en.eq(pipe_advance),
        ]
        # The states' decisions read a flop of their own with the same value, made from the
        # next values of what `pipe_advance` is made of: `pipe_advance` enables every flop of
        # the pipeline, and from the output slice's flop through it into the states' choices
        # was the 64-bit core's routed path at seed 1 of dcdeba7 (the slice's valid -> the
        # data state's end of a block -> the enables of the length column `col`, 7 levels,
        # 7.60 ns).  Tests check it against `pipe_advance` every cycle (`data_mirrors`).
        advance = self.advance
        p4_valid_next = Mux(pipe_advance, p3.valid, p4.valid)
        p4_emit_next = Mux(pipe_advance, p3.emit, p4.emit)
        slice_free = ~skid.o.valid | skid.o.ready
        slice_ready_next = slice_free | (skid.i.ready & ~(skid.i.valid & skid.i.ready))
        m.d.sync += advance.eq(~p4_valid_next | ~p4_emit_next | slice_ready_next)
        self._mirrors = [(advance, pipe_advance)]
        low_bytes = Signal(B)                   # p4: bytes below p4.p (from the accumulator)
        p4_lit = Signal()                       # p4.kind == KIND_LIT
        p4_flush = Signal()                     # p4.kind == KIND_FLUSH
        SH = (LB + 1) // 2                      # shift bits the first rotator stage uses
        with m.If(pipe_advance):
            m.d.sync += [
                p1.valid.eq(issue),
                p1.kind.eq(iss_kind),
                p1.shift.eq(iss_off - iss_p),
                p1.p.eq(iss_p),
                p1.emit.eq(iss_emit),
                p1.last.eq(iss_last),
                p1.rank.eq(emit_rank),
                p1_lit.eq(iss_lit),
                p2.eq(p1),
                # A literal rides the rotator with a shift of 0.
                row.eq(self.rd_data),
                p2_lit.eq(p1.kind == KIND_LIT), p2_lit_data.eq(p1_lit),
                p3.eq(p2),
                rot_lo.eq(Mux(p2_lit, p2_lit_data, _rotate_bytes(row, p2.shift[:SH], 0))),
                p4.eq(p3),
                rot.eq(_rotate_bytes(rot_lo, p3.shift[SH:], SH)),
                # The merge's byte mask and kind decoded beside the rotator's last stage, so
                # the merge is a multiplexer on flops (no compare before the output slice).
                low_bytes.eq(Cat(p3.p > q for q in range(B))),
                p4_lit.eq(p3.kind == KIND_LIT),
                p4_flush.eq(p3.kind == KIND_FLUSH),
            ]

        # Merge: the rotated row has its byte `off` at byte `p`; bytes below `p` come from
        # the accumulator.  A full beat leaves; the rotated row's later bytes stay behind.
        low_mask = Cat(low_bytes[q].replicate(8) for q in range(B))
        merged = Signal(W)
        m.d.comb += merged.eq((acc & low_mask) | (rot & ~low_mask))
        with m.If(consume & (p4.kind == KIND_ROW)):
            m.d.sync += acc.eq(Mux(p4.emit, rot, merged))

        out_data = Signal(W)
        out_keep = Signal(B)
        with m.If(p4_lit):
            m.d.comb += [out_data.eq(rot), out_keep.eq(~0)]
        with m.Elif(p4_flush):
            m.d.comb += [out_data.eq(acc & low_mask), out_keep.eq(low_bytes)]
        with m.Else():
            m.d.comb += [out_data.eq(merged), out_keep.eq(~0)]
        m.d.comb += [
            skid.i.valid.eq(p4.valid & p4.emit),
            skid.i.payload.data.eq(out_data),
            skid.i.payload.keep.eq(out_keep),
            skid.i.payload.last.eq(p4.last),
            skid.i.payload.rank.eq(p4.rank),
        ]

        # A message's last beat waits while the event FIFO is full, so its DELIVERED event is
        # never lost.  Ref: seed 003, step 7.5.
        hold = Signal()
        m.d.comb += [
            hold.eq(skid.o.payload.last & ~ev_free),
            self.o.valid.eq(skid.o.valid & ~hold),
            self.o.payload.eq(skid.o.payload),
            skid.o.ready.eq(self.o.ready & ~hold),
            self.out_valid.eq(skid.o.valid),
            self.out_rank.eq(skid.o.payload.rank),
            # DELIVERED (the output holds a beat): its rank
            self.delivered.eq(self.o.valid & self.o.ready & skid.o.payload.last),
        ]
        return m
