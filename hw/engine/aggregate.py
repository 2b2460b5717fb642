# Ref: seed 003, steps 7.1-7.5: a rank's side of the repack exchange.
"""The aggregate command's sender: the repack hub's SEND notices, each turned into one
REPACK_IN message read from the rank's send region.

The send region holds ``send_tag`` slots of ``send.stride`` bytes; slot b starts with a row
whose low 32 bits are the length of the message for destination group b, which follows on the
next row.  Each SEND notice names a group: its message leaves as one REPACK_IN packet for the
named unit.  The messages from source group a land in slot a of the receive region
(``recv.stride`` bytes each), packet by packet at their offsets (the engine's receive half).
"""

from amaranth.hdl import Cat, Module, Mux, ResetInserter, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.utils import ceil_log2
from amaranth.lib.wiring import In, Out

from .regions import REGION_LAYOUT, at_most, region_checks, region_checks_layout
from ..params import check_data_width, check_int
from ..lib.mirrors import Mirrored

__all__ = ["NOTICE_WIDTH", "AggregateSender"]


#: Bits of a queued SEND notice: its tag (16), repack unit (8) and group (16), padded.
NOTICE_WIDTH = 48


def _registered_sum_tree(m, terms, out, *, name):
    """Sum ``terms`` two at a time, a register per sum, the last into ``out`` (its width:
    the sum modulo 2**len(out)); returns the number of register levels."""
    level, depth = list(terms), 0
    while len(level) > 1:
        depth += 1
        sums = []
        for i in range(0, len(level), 2):
            total = out if len(level) <= 2 else Signal(len(out), name=f"{name}{depth}_{i // 2}")
            m.d.sync += total.eq(level[i] + level[i + 1] if i + 1 < len(level) else level[i])
            sums.append(total)
        level = sums
    if depth == 0:
        raise ValueError(f"Need at least two terms to sum, not {len(terms)}")
    return depth


class AggregateSender(Mirrored, wiring.Component):
    """SEND notices to REPACK_IN messages, one at a time, through registered steps.

    Parameters
    ----------
    data_width : int
        Bits per row of device memory.
    max_nodes : int
        Node ids a build can name (groups are below it).
    length_bits : int
        Bits the region walkers count in.

    Members
    -------
    clear : ``In(1)``
        CONTROL.clear.
    in_aggregate : ``In(1)``
        An aggregate command runs: notices are taken, the counts count down.  Outside one the
        counts follow the current command.
    send_offset, send_stride : ``In(32)``; send_tag, recv_tag : ``In(16)``
        The current command's send region's offset and slot stride, its slot count (and
        SEND notices due) and the final packets due.
    tx_busy, stop : ``In(1)``
        The transmit half is busy; an error stands: no notice is taken.
    notices : ``In(stream.Signature(NOTICE_WIDTH))``
        SEND notices from the packet parser: tag, unit and group.
    final : ``In(1)``
        A group's final packet arrived.
    length_word : ``In(32)``
        The transmit read's data register, which holds the slot's length word in the step
        after ``reading``.
    reading : ``Out(1)``; slot : ``Out(32)``
        Read the row at byte ``slot`` (the transmit half is idle then).
    start : ``Out(1)``
        A message starts: ``tag``, ``unit``, ``length`` bytes at ``offset``, the walker's
        ``checks`` of that region.
    tag : ``Out(16)``; unit : ``Out(8)``; length, offset : ``Out(32)``;
    checks : ``Out(region_checks_layout(data_width))``
    in_flight : ``Out(1)``
        A notice is between the queue and its message's start (a flop).
    sends, finals : ``Out(16)``
        SEND notices and final packets still due.
    protocol_error, region_error : ``Out(1)``
        A notice names a group the rank has no slot for; a message is empty, longer than its
        slot or than a packet.
    """

    def __init__(self, *, data_width, max_nodes, length_bits):
        check_data_width(data_width)
        for name, value in (("max_nodes", max_nodes), ("length_bits", length_bits)):
            check_int(name, value, 1)
        self._data_width = data_width
        self._max_nodes = max_nodes
        self._length_bits = length_bits
        self._mirrors = []
        super().__init__({
            "clear": In(1), "in_aggregate": In(1),
            "send_offset": In(32), "send_stride": In(32), "send_tag": In(16), "recv_tag": In(16),
            "tx_busy": In(1), "stop": In(1),
            "notices": In(stream.Signature(NOTICE_WIDTH)),
            "final": In(1), "length_word": In(32),
            "reading": Out(1), "slot": Out(32),
            "start": Out(1), "tag": Out(16), "unit": Out(8), "length": Out(32),
            "offset": Out(32), "checks": Out(region_checks_layout(data_width)),
            "in_flight": Out(1), "sends": Out(16), "finals": Out(16),
            "protocol_error": Out(1), "region_error": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        p = self._slot_address(m)
        self._steps(m, p)
        self._length_check(m, p)
        return m

    def _slot_address(self, m):
        """The notices' queue, and a popped notice's slot address as a tree of sums."""
        beat_bytes = self._data_width // 8
        m.submodules.agg_sends_fifo = sends_fifo = ResetInserter(self.clear)(
            SyncFIFOBuffered(width=NOTICE_WIDTH, depth=max(self._max_nodes, 2)))
        m.d.comb += [sends_fifo.w_data.eq(self.notices.payload),
                     sends_fifo.w_en.eq(self.notices.valid),
                     self.notices.ready.eq(sends_fifo.w_rdy)]
        agg_group = Signal(16)
        # The message's start: a row after its slot's, where the length word is.
        m.d.comb += self.offset.eq(self.slot + beat_bytes)
        # A SEND notice goes through registered steps, so no sum or compare shares a cycle
        # with the next: its fields into flops (pop), the slot's offset as a tree of
        # registered two-input sums (summing: the first sums in the cycle after the pop,
        # the last into the slot), the length word read (reading), registered (len_valid),
        # checked (checking), and the message started.  The offset is
        # send.offset + group * stride, and the group is below send_tag, which the push
        # check holds to max_nodes: the product is a sum of the stride shifted by the
        # group's ceil(log2(max_nodes)) bits, each term a row of ANDs in front of a carry
        # chain.  Two MULT18X18Ds made it before: with no register of their own, the
        # multiplier's 3.07 ns and the routes to and from the DSP column were the 64-bit
        # core's path at seed 1 of 93026b6 (agg_group -> MULT18X18D -> agg_product_hi,
        # 7.11 ns) and at seed 2 of the fifteenth pass (7.57 ns).
        # The stride's and the offset's copies beside the sums, loaded a cycle after the
        # command (it enters AGGREGATE two cycles after it is loaded, and a pop comes later
        # still): read from the command across the block, the stride was the 64-bit core's
        # path at seed 1 of be1c6fd (cur -> the multiplier -> agg_product_lo, 7.39 ns).
        agg_send_stride = Signal(32)
        agg_send_base = Signal(32)
        m.d.sync += [agg_send_stride.eq(self.send_stride), agg_send_base.eq(self.send_offset)]
        agg_terms = [agg_send_base] + [Mux(agg_group[b], (agg_send_stride << b)[:32], 0)
                                       for b in range(max(1, ceil_log2(self._max_nodes)))]
        # Free-running: the terms hold from a pop to the next, so each level holds its sums
        # from a cycle later than the one before (the steps' flags say when).
        agg_levels = _registered_sum_tree(m, agg_terms, self.slot, name="agg_sum")
        return {"sends_fifo": sends_fifo, "agg_group": agg_group, "agg_levels": agg_levels,
                "agg_len_valid": Signal(), "agg_checking": Signal(), "agg_fits": Signal()}

    def _steps(self, m, p):
        """The registered steps from a pop to a message's start, and the counts."""
        beat_bytes = self._data_width // 8
        sends_fifo, agg_group = p["sends_fifo"], p["agg_group"]
        agg_reading, agg_len_valid, agg_checking = self.reading, p["agg_len_valid"], p["agg_checking"]
        agg_in_flight, agg_sends, agg_finals = self.in_flight, self.sends, self.finals
        # The steps' flags: agg_summing[j] in the cycle the sums of level j + 1 are made.
        agg_summing = Signal(p["agg_levels"])
        agg_starting = Signal()
        agg_fits = p["agg_fits"]        # the length check's result, registered
        agg_group_bad = Signal()        # the notice names a group this rank has no slot for
        agg_room = Signal(33)           # the most bytes a slot's message may have
        m.d.sync += agg_room.eq(self.send_stride - beat_bytes)
        # The room in the walkers' count bits, all ones for a room beyond them (a message
        # read from device memory is shorter than that anyway), so the length's check
        # (_length_check) compares that many bits: at 32 bits from the device memory's read
        # it was the 64-bit NicCore's latest pin at seeds 1 and 3 of 7ac16bd (devmem ->
        # agg_fits, 6.73 and 7.14 ns).  Loaded a cycle after agg_room, long before an
        # aggregate command reads a length (after its registration and a SEND notice).
        bits = self._length_bits
        p["agg_room_sat"] = agg_room_sat = Signal(bits)
        m.d.sync += agg_room_sat.eq(Mux(agg_room[bits:] != 0, (1 << bits) - 1, agg_room[:bits]))
        # Whether a step is in flight, a flop set with the steps' next values (a pop, the
        # levels that move on, the reading that follows the sums unless the group is bad,
        # the three steps after it); `mirrors` holds it to the OR of the flags.  As that OR
        # in front of the pop it was in front of the FIFO's level too, the 64-bit engine's
        # latest pins alone at seeds 1 and 2 of b0d651b (agg_summing -> the pop ->
        # agg_sends_fifo's level, 5.48 and 5.60 ns).
        steps_now = (agg_summing.any() | agg_reading | agg_len_valid | agg_checking
                     | agg_starting)
        self._mirrors.append((agg_in_flight, steps_now))
        in_aggregate = self.in_aggregate
        # An aggregate's counts follow the command outside an aggregate and count down
        # inside one, so they are current as DISPATCH enters AGGREGATE (the command is
        # loaded two cycles before) and the DISPATCH decision, with the state decode behind
        # it, is not the enable of their 32 flops (the 64-bit core's path at seed 1 of
        # 05f119b: state -> agg_sends, 7.69 ns).  Both count down only while in_aggregate.
        with m.If(~in_aggregate):
            m.d.sync += [agg_sends.eq(self.send_tag), agg_finals.eq(self.recv_tag)]
        pop = in_aggregate & sends_fifo.r_rdy & ~self.tx_busy & ~agg_in_flight & ~self.stop
        m.d.comb += sends_fifo.r_en.eq(pop)
        # The steps are one-hot (a pop waits for agg_in_flight to fall), so each acts on its
        # own flag, with no priority over the others: the start of a message is the AND of
        # two flops (agg_starting, agg_fits), the enable of every register the transmit
        # half loads, where a chain of the steps' flags behind the pop was in front of it
        # (the 256-bit core's path at seed 1 of 05f119b: agg_addressing -> tx_repack,
        # 8.45 ns).  A clear stops the steps; a start in the clear's cycle is overridden
        # by the clear where it matters (tx_busy).
        with m.If(pop):
            group = sends_fifo.r_data[24:40]
            m.d.sync += [self.tag.eq(sends_fifo.r_data[:16]),
                         self.unit.eq(sends_fifo.r_data[16:24]), agg_group.eq(group),
                         agg_group_bad.eq(group >= self.send_tag)]
        summed = agg_summing[-1]        # the slot (modulo 2**32) holds from the next cycle
        m.d.sync += agg_in_flight.eq(~self.clear & (
            pop | agg_summing[:-1].any() | (summed & ~agg_group_bad) | agg_reading
            | agg_len_valid | agg_checking))
        m.d.sync += [agg_summing.eq(Cat(pop, agg_summing[:-1])),
                     agg_reading.eq(summed & ~agg_group_bad),
                     agg_len_valid.eq(agg_reading), agg_checking.eq(agg_len_valid),
                     agg_starting.eq(agg_checking)]
        # The group's check, registered at the pop (not in front of the error register).
        m.d.comb += self.protocol_error.eq(summed & agg_group_bad)
        # agg_checking loads the length and agg_fits (_length_check).
        with m.If(agg_starting):
            with m.If(~agg_fits):
                m.d.comb += self.region_error.eq(1)
            with m.Else():
                m.d.comb += self.start.eq(1)
                m.d.sync += agg_sends.eq(agg_sends - 1)
        with m.If(self.clear):
            m.d.sync += [agg_summing.eq(0), agg_reading.eq(0),
                         agg_len_valid.eq(0), agg_checking.eq(0), agg_starting.eq(0)]
        # A group's final packet (the parser's decision) counts down.
        with m.If(self.final):
            m.d.sync += agg_finals.eq(agg_finals - 1)

    def _length_check(self, m, p):
        """The message's length word, checked, and the walker's checks of its region."""
        beat_bytes = self._data_width // 8
        agg_send_region = Signal(REGION_LAYOUT)
        m.d.comb += [agg_send_region.offset.eq(self.offset),
                     agg_send_region.length.eq(self.length_word)]
        with m.If(p["agg_checking"]):
            # The length word comes from the transmit read's data register, which loaded
            # the read at the end of agg_len_valid: the transmit half is idle from the pop on
            # (tx_busy fell as the packer's last beat left its slice, so none of its stages
            # holds a row and all advance every cycle), as `reading`'s override of the read's
            # address requires too.  A register of its own on the read's output kept the
            # block RAM from taking the data stage's register as its output register
            # (nicoll.hw.synth.bram_outreg: each data output must reach one flop).
            # A message must be non-empty, fit its slot and travel as one packet; the
            # compares are registered, and the start (which loads the transmit half) reads
            # only their flag.
            length = self.length_word
            bits = self._length_bits
            fits = (length != 0) & at_most(length, p["agg_room_sat"])
            if (1 << bits) - 1 > 0xFFFF * beat_bytes:
                fits &= length <= 0xFFFF * beat_bytes
            m.d.sync += [self.length.eq(length), p["agg_fits"].eq(fits)]
            # The walker's checks of the message's region (one run of `length` bytes a
            # row after the slot's start), loaded beside its length.
            m.d.sync += region_checks(self.checks, agg_send_region, self._data_width)
