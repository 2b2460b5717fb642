# Ref: seed 000 (CN101206588): received data is reduced while the next data travels.
"""The engine's write half: received rows go to device memory, stored as they come (copy) or
read with the local row and reduced through the ALU, and a scoreboard of the rows on their way
tells the engine's read stages when a row read must wait.

Rows whose reduced value is on its way to memory are the beat read for the local operand
(stage 1) and every beat inside the ALU.  The ALU's result is always taken, so it comes a fixed
``latency`` cycles after its operands (tests/test_hw_alu.py::test_one_beat_per_clock_and_fixed_latency):
the rows in it travel beside it in a delay line, and the row a result is written to is the
line's last stage, a flop (no read of a FIFO at a moving head).  The result passes a register
of the writer's first (``res_*``), so the line is a stage longer than the ALU.
"""

from amaranth.hdl import Cat, Module, Mux, ResetInserter, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .regions import write_row_layout
from .rows import ROW_CHECKS, check_rows, row_ring
from ..ops import DType, ReduceOp
from ..lib.mirrors import Mirrored

__all__ = ["RowWriter"]


class RowWriter(Mirrored, wiring.Component):
    """Received rows into device memory, through the ALU when they reduce.

    Parameters
    ----------
    alu : :class:`~nicoll.hw.alu.ReductionALU`
        The reduction ALU, built without an output FIFO (its result is taken every cycle);
        the writer adds it as a submodule.
    data_width, row_bits : int
        Bits per row, and bits of a row's address in device memory.
    head_register : bool
        The received rows' slice keeps a head register (:class:`~nicoll.hw.lib.skid.CheckedRing`).

    Members
    -------
    rows : ``In(stream.Signature(write_row_layout(data_width, row_bits + 1)))``
        The unpacker's rows; a row whose top address bit is set lies past memory's end.
    reduce : ``In(1)``
        The running receive reduces (else it stores).
    stop : ``In(1)``
        An error stands: no row is taken.
    age : ``In(1)``
        A send or a receive starts: every row on its way is an earlier receive's from now on.
    clear : ``In(1)``
        CONTROL.clear.
    op, dtype : ``In(ReduceOp)``, ``In(DType)``
        The reduction.
    local_rd : ``Out(MemoryReadSignature)``; wr : ``Out(MemoryWriteSignature)``
        Device memory's ports (writes leave from flops).
    hazard : ``Out(1)``
        A row of an earlier receive is on its way: a row read waits.
    empty : ``Out(1)``
        No write in flight (a flop, never true too early).
    ended : ``Out(1)``
        The receive's last row was taken last cycle (a flop).
    region_error, alu_error, alu_beat : ``Out(1)``
        A row lies past memory's end; the ALU flagged a result; the ALU took a beat.
    """

    def __init__(self, alu, *, data_width, row_bits, head_register):
        from ..bus.devmem import MemoryReadSignature, MemoryWriteSignature
        self._alu = alu
        self._data_width = data_width
        self._row_bits = row_bits
        self._head_register = head_register
        self._mirrors = []
        super().__init__({
            "rows": In(stream.Signature(write_row_layout(data_width, row_bits + 1))),
            "reduce": In(1), "stop": In(1), "age": In(1), "clear": In(1),
            "op": In(ReduceOp), "dtype": In(DType),
            "local_rd": Out(MemoryReadSignature(row_bits, data_width)),
            "wr": Out(MemoryWriteSignature(row_bits, data_width)),
            "hazard": Out(1), "empty": Out(1), "ended": Out(1),
            "region_error": Out(1), "alu_error": Out(1), "alu_beat": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.alu = ResetInserter(self.clear)(self._alu)
        p = self._pipeline(m)
        self._rows_in(m, p)
        self._alu_write(m, p)
        return m

    def _pipeline(self, m):
        """The write register and the scoreboard's flags; returns the stages' signals."""
        beat_bytes, row_bits = self._data_width // 8, self._row_bits
        depth = self._alu.latency + 1
        p = {
            "depth": depth,
            "pend_row": [Signal(row_bits, name=f"pend_row{k}") for k in range(depth)],
            "pend_valid": Signal(depth),
            "pend_mask": [Signal(beat_bytes, name=f"pend_mask{k}") for k in range(depth)],
            "s1_valid": Signal(), "s1_row": Signal(row_bits),
            "wr_addr": Signal(row_bits), "wr_data": Signal(self._data_width),
            "wr_en": Signal(beat_bytes),
            # A write is issued (set beside wr_en): its mask may be empty, which only makes
            # the scoreboard wait a cycle longer, and no OR over the mask precedes the flag.
            "wr_issue": Signal(),
            "s1_early": Signal(), "pend_early": Signal(depth), "wr_early": Signal(),
            "rx_enter": Signal(), "rx_may_enter": Signal(),
        }
        # Writes to memory leave from flops (``wr`` is registered): the write port fans out
        # to every block RAM and to the host port's write arbitration, so nothing may reach
        # it combinationally.  A row in that register is not in memory yet: it counts in the
        # scoreboard for one more cycle.
        wr_pending = self.wr.issue      # wr holds a write landing this cycle
        # The written data has no reset (the byte enables have): no load on the clear net.
        wr_data_q = Signal(self._data_width, reset_less=True)
        m.d.comb += self.wr.data.eq(wr_data_q)
        m.d.sync += [self.wr.addr.eq(p["wr_addr"]), wr_data_q.eq(p["wr_data"]),
                     self.wr.en.eq(p["wr_en"]), wr_pending.eq(p["wr_issue"])]

        # Only the rows of an earlier receive count.  A command's own reads never need to
        # wait for its own receive: a region covers each byte once (a run is never longer
        # than its stride) and a command's send and receive regions do not overlap, so the
        # writes of one receive change no byte that a later row of the same receive, or the
        # same command's send, reads (writes are byte-masked; the rest of the row read for
        # the ALU is not written back).  `*_early` marks a slot holding such a row: set for
        # every row in the pipeline at `age`, the strobe of a send's or receive's start, and
        # shifted with the rows; a row entering the pipeline is of the running receive.
        # After a start no row becomes early until the next one, so the early rows only
        # drain, within the pipeline's latency.  A read waits while any is in flight,
        # whatever its row: no row compare.  The compares (the read's row against each of
        # the depth + 2 slots, then an OR) were the 64-bit engine's critical path alone and
        # in the core's estimate (pipeline row -> the slices' flags, 7 levels, 6.53 ns
        # routed), and 1 400 of its LUT4 at 64 bits; waiting for every early row instead of
        # those of the same row costs a command at most the pipeline's latency once, at its
        # start, and the demo's cycle counts did not move.
        m.d.comb += self.hazard.eq(Cat(p["s1_early"], p["wr_early"], p["pend_early"]).any())

        # The row reads check the scoreboard a cycle ahead (CheckedRing): the flag a read
        # stage acts on was computed against last cycle's rows.  Rows of an earlier receive
        # only leave the scoreboard between those two moments, except at `age`, when every
        # row becomes one; no read of the new command is in either slice then (its send's
        # first chunk reaches the transmit slice three cycles after the start at the
        # earliest, its received rows follow a clear-to-send and a packet through the
        # network), and none of the previous command's (it started when they were all
        # taken).  So the flag errs on the safe side by at most a cycle.
        # No write in flight, from a flop: last cycle's rows, and none that could enter
        # last cycle (rows only enter through rx_enter, a subset of rx_may_enter), so it is
        # never true too early.  A row that could enter but waits (for the scoreboard)
        # holds the flag low a little longer.  Not the take itself: the receive's mode
        # and the scoreboard's flag in front of the take were the 256-bit engine's routed
        # path at seed 1 with the credit-read transmit (reduce -> the take -> empty,
        # 5.54 ns, 4.79 of it routing).
        empty = Signal(init=1)
        m.d.comb += self.empty.eq(empty)
        m.d.sync += empty.eq(~p["s1_valid"] & ~p["pend_valid"].any() & ~wr_pending
                             & ~p["rx_may_enter"])
        return p

    def _rows_in(self, m, p):
        """Received rows: stored at once (copy) or read with the local row (reduce)."""
        # Rows into a two-entry slice whose entries carry their checks, made a cycle ahead,
        # and their memory rows (check_rows): stored at once (copy) or reduced with the
        # local row.  The take reads the head's flags and loads only the slice's pointers,
        # not its 256-bit entries (CheckedRing): the routed 256-bit core's critical path was
        # that take as the enable of every payload flop of a one-entry slice (11.2 ns, 10.2
        # of it routing).
        m.submodules.rx_checked = rx_checked = ResetInserter(self.clear)(
            row_ring(self.rows.payload.shape(), row_bits=self._row_bits,
                     head_register=self._head_register))
        wiring.connect(m, wiring.flipped(self.rows), rx_checked.i)
        rows_in = rx_checked.o
        p["row"] = row = rows_in.payload
        m.d.comb += p["rx_enter"].eq(rows_in.valid & rows_in.ready)
        # `empty` counts on every take being one of rx_may_enter (the tests hold it).
        self._mirrors += [(p["rx_enter"] & ~p["rx_may_enter"], 0)]
        check_rows(m, rx_checked, self.hazard, row_bits=self._row_bits)
        r_outside = rx_checked.o_blocked[1]
        m.d.comb += self.region_error.eq(rows_in.valid & r_outside)
        s1_valid, s1_early = p["s1_valid"], p["s1_early"]
        p["s1_mask"] = s1_mask = Signal(self._data_width // 8)
        # Meaningful only while s1_valid.
        p["s1_data"] = s1_data = Signal(self._data_width, reset_less=True)
        p["alu_take"] = alu_take = s1_valid & self._alu.a.ready  # both operands at once
        # Always true with the engine's ALU (no output FIFO: its inputs are ready whenever
        # valid); kept so the stage stays right with any ALU.
        s1_advance = ~s1_valid | alu_take
        # A copied row is written as it is taken (the write itself: _alu_write).
        p["copy_take"] = copy_take = rows_in.valid & ~r_outside & ~self.stop
        m.d.comb += p["rx_may_enter"].eq(copy_take)
        with m.If(~self.reduce):
            m.d.comb += rows_in.ready.eq(copy_take)
        with m.Else():
            take = (rows_in.valid & ~r_outside & ~self.stop & s1_advance
                    & ~rx_checked.o_blocked[0])
            # The local row is read whenever s1 advances: a row read without a take is
            # never used (s1_valid stays low), and the enable of every block RAM of the
            # read port is then not the take.
            m.d.comb += [rows_in.ready.eq(take),
                         self.local_rd.addr.eq(rx_checked.o_blocked[ROW_CHECKS:]),
                         self.local_rd.en.eq(s1_advance)]
            # s1's payload loads whenever s1 advances (it means nothing without s1_valid),
            # so its enable is not the take with its scoreboard and error terms.
            with m.If(self.age):
                m.d.sync += s1_early.eq(s1_valid)
            with m.If(s1_advance):
                m.d.sync += [s1_valid.eq(take), p["s1_row"].eq(row.row), s1_mask.eq(row.mask),
                             s1_data.eq(row.data), s1_early.eq(take & self.age)]
        # The receive ends a cycle after its last row's take, from a flop: the take (the
        # head's flags, the error flop, the ALU's readiness) was the reset of rx_busy, the
        # 64-bit core's path at seed 2 of 05f119b (8.41 ns).  rx_busy high a cycle longer
        # delays only decisions that wait for it to fall; no packet of a next receive can
        # arrive in that cycle, as the next receive's clear-to-send is not yet sent.
        m.d.sync += self.ended.eq(rows_in.valid & rows_in.ready & row.last & ~self.clear)

    def _alu_write(self, m, p):
        """The ALU: operands in, results written back, the scoreboard kept."""
        alu, depth = self._alu, p["depth"]
        s1_valid, s1_early, s1_mask = p["s1_valid"], p["s1_early"], p["s1_mask"]
        pend_row, pend_mask = p["pend_row"], p["pend_mask"]
        pend_valid, pend_early = p["pend_valid"], p["pend_early"]
        alu_take, wr_issue = p["alu_take"], p["wr_issue"]
        result = alu.result
        # The result into a register before the write's choices: from the ALU's output
        # flops across the block to the write port's 32 byte enables, the result's valid
        # was the 256-bit engine's routed path at seed 1 of d271a41 (3 LUTs, 7.27 ns, 6.4
        # of it wire).  A cycle of latency on each reduced row, not of throughput.
        res_valid = Signal()
        res_error = Signal()
        res_data = Signal(len(result.payload.data), reset_less=True)
        m.d.sync += [res_valid.eq(result.valid & ~self.clear), res_error.eq(result.payload.error),
                     res_data.eq(result.payload.data)]
        # The result's write decided in that register too: `res_write`, a valid result
        # without an error.  Made there from the valid and error flags, the decision was two
        # LUTs and three long wires in front of the write register's byte enables, the
        # 256-bit engine's latest pin at seeds 1 and 2 of 75a8966 with the unpacker's beat
        # slice multiplexed (res_valid -> the write's choice -> wr.en, 6.4-6.7 ns, 5.9 of it
        # routing).  Its byte enables are the delay line's last mask behind that one flop:
        # a register of enables zeroed unless it wrote put CONTROL.clear (a flop driving
        # about 1 300 pins) and a LUT in front of their reset, the 256-bit NicCore's critical
        # path at seed 1 of b69f8e2 (clear -> res_en's reset, 7.96 ns, 7.1 of it routing)
        # and the 256-bit engine's alone at seed 1 of 05244bd (5.06 ns).  Tests hold
        # res_write to its reference every cycle.
        res_write = Signal()
        m.d.sync += res_write.eq(result.valid & ~self.clear & ~result.payload.error)
        self._mirrors += [(res_write, res_valid & ~res_error)]
        # Operand order: the local row is always `a`.  Every op of the ALU gives the same
        # bits either way (tests/test_hw_alu.py::test_every_op_is_commutative_bit_for_bit),
        # so the block RAM's read goes to the ALU's operand registers with no multiplexer in
        # between (the routed 64-bit core's seed-1 path at 7acef53, 7.21 ns); the action's
        # order matters only where a NaN keeps a payload (the device model's numpy).
        m.d.comb += [alu.a.valid.eq(s1_valid),
                     alu.b.valid.eq(s1_valid),
                     alu.a.payload.data.eq(self.local_rd.data),
                     alu.b.payload.data.eq(p["s1_data"]),
                     alu.a.payload.op.eq(self.op), alu.a.payload.dtype.eq(self.dtype),
                     alu.result.ready.eq(1),
                     self.alu_beat.eq(alu_take)]
        # The delay line: stage 0 takes the row the ALU takes, the last stage is the row of
        # the result coming out.  Each stage's row counts as an earlier receive's (see
        # _pipeline) when it was one a stage before, or at `age`.
        age = self.age
        m.d.sync += [pend_valid.eq(Cat(alu_take, pend_valid[:-1])),
                     pend_row[0].eq(p["s1_row"]), pend_mask[0].eq(s1_mask),
                     pend_early.eq(Cat(alu_take & (s1_early | age),
                                       pend_early[:-1] | Mux(age, pend_valid[:-1], 0))),
                     p["wr_early"].eq(wr_issue & ((res_valid & pend_early[-1]) | age))]
        for k in range(1, depth):
            m.d.sync += [pend_row[k].eq(pend_row[k - 1]), pend_mask[k].eq(pend_mask[k - 1])]
        m.d.comb += self.alu_error.eq(res_valid & res_error)
        # The write: a result's, else a copied row's as it is taken.  Address and data
        # select by the result's flag alone (they count only where a byte is enabled), so
        # no mode or take is in front of the 256-bit data; a result's enables are zero
        # unless it writes, so the copy's are ORed in behind one select.
        row = p["row"]
        copy_write = ~self.reduce & p["copy_take"] & ~res_write
        m.d.comb += [p["wr_addr"].eq(Mux(res_write, pend_row[-1], row.row)),
                     p["wr_data"].eq(Mux(res_write, res_data, row.data)),
                     p["wr_en"].eq(Mux(res_write, pend_mask[-1], 0) | Mux(copy_write, row.mask, 0)),
                     wr_issue.eq(res_write | copy_write)]
        with m.If(self.clear):
            m.d.sync += [s1_valid.eq(0), pend_valid.eq(0), s1_early.eq(0), pend_early.eq(0)]
