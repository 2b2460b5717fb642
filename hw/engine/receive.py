# Ref: seed 000 (CN101206588): received data is reduced while the next data travels.
# Ref: seed 003, step 7.5: an aggregate command's REPACK_OUT packets land in their slots.
"""The engine's receive half: a command's receive (or an aggregate packet) from the network
into device memory.

A receive starts by sending its source a clear-to-send (``cts_pending`` until it leaves); the
packet parser then takes the message's data packets, checks each against the receive, and
passes their payload to the unpacker, which scatters it into the receive region's rows as the
region walker cuts it; the row writer stores each row, or reduces it with the local row
through the ALU.  An aggregate packet is a receive of its own, started by the parser.
"""

from amaranth.hdl import Cat, Module, Mux, ResetInserter, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .command import COMMAND_LAYOUT, ENGINE_ERROR_LAYOUT, StepAction
from .parser import PacketParser
from .regions import REGION_LAYOUT, chunk_layout, region_checks, region_checks_layout
from .rows import row_outside
from .unpacker import RowUnpacker
from .walker import RegionWalker
from .writer import RowWriter
from ..lib.builder import carry_save_sum
from ..lib.skid import SkidBuffer
from ..net.packet import ClearCode, packet_header_layout, packet_stream
from ..ops import DType, ReduceOp
from ..params import check_data_width, check_int
from ..lib.mirrors import Mirrored

__all__ = ["Receiver"]


class Receiver(Mirrored, wiring.Component):
    """A command's receive half, or an aggregate packet, from packets into device memory.

    Parameters
    ----------
    alu : :class:`~nicoll.hw.alu.ReductionALU`
        The reduction ALU (built without an output FIFO), for the row writer.
    data_width : int
        Bits per beat and per row of device memory.
    max_nodes : int
        Node ids a build can name.
    row_bits : int
        Bits of a row's address in device memory.
    length_bits : int
        Bits the region walker counts in.
    head_register : bool
        The row writer's slice keeps a head register (:class:`~nicoll.hw.lib.skid.CheckedRing`).

    Members
    -------
    rx : ``In(packet_stream(data_width))``
        Received packets of kinds CLEAR, DATA, REPACK_NOTICE and REPACK_OUT.
    clear, stop, age : ``In(1)``
        CONTROL.clear; an error stands (no row is taken); a send or a receive starts (the
        write half's scoreboard ages its rows).
    op, dtype : ``In(ReduceOp)``, ``In(DType)``
    command : ``In(COMMAND_LAYOUT)``
        The current command (held from two cycles before ``start``).
    start : ``In(1)``
        The command's receive starts.
    loading : ``In(1)``
        A command is being loaded or decoded: the parser's checks made now are stale.
    in_aggregate : ``In(1)``
        An aggregate command runs.
    send_to : ``In(16)``
        The transmit half's copy of the command's destination (the repack hub).
    notice_room : ``In(1)``
        The aggregate sender can queue a SEND notice.
    cts_sent : ``In(1)``
        The clear-to-send left.
    local_rd : ``Out(MemoryReadSignature)``; wr : ``Out(MemoryWriteSignature)``
    busy : ``Out(1)``
        A receive (or an aggregate packet) is under way, until its last row was taken.
    cts_pending : ``Out(1)``; peer, tag : ``Out(16)``
        The receive's clear-to-send is due, to ``peer`` for message ``tag``.
    agg_started : ``Out(1)``
        An aggregate packet's receive starts (a flop, a cycle after the parser's decision).
    hazard, empty : ``Out(1)``
        The write half's scoreboard: a row read must wait; no write is in flight.
    header : ``Out(packet_header_layout())``
        The parser's stored header.
    cleared : ``Out(1)``
        A clear-to-send from ``header.src`` for tag ``header.seq`` was taken.
    event, reply : ``Out(1)``; reply_code : ``Out(ClearCode)``; bytes_taken : ``Out(32)``
        The parser's delivery-protocol results (:class:`PacketParser`), and the receive's
        bytes taken so far (a RESEND's offset).
    notice_push, agg_done, agg_final : ``Out(1)``
        A SEND notice (``header``) to queue; the hub's DONE notice; a group's final packet.
    errors : ``Out(ENGINE_ERROR_LAYOUT)``
        The bits the receive half raises (``region``, ``alu``, ``unexpected``, ``protocol``,
        ``length``).
    packets_received, alu_beat : ``Out(1)``; bytes_received : ``Out(32)``
        The counters' bumps.
    """

    def __init__(self, alu, *, data_width, max_nodes, row_bits, length_bits, head_register):
        from ..bus.devmem import MemoryReadSignature, MemoryWriteSignature
        check_data_width(data_width)
        for name, value in (("max_nodes", max_nodes), ("row_bits", row_bits),
                            ("length_bits", length_bits)):
            check_int(name, value, 1)
        self._alu = alu
        self._data_width = data_width
        self._max_nodes = max_nodes
        self._row_bits = row_bits
        self._length_bits = length_bits
        self._head_register = head_register
        self._mirrors = []
        super().__init__({
            "rx": In(packet_stream(data_width)),
            "clear": In(1), "stop": In(1), "age": In(1),
            "op": In(ReduceOp), "dtype": In(DType),
            "command": In(COMMAND_LAYOUT), "start": In(1), "loading": In(1),
            "in_aggregate": In(1), "send_to": In(16), "notice_room": In(1), "cts_sent": In(1),
            "local_rd": Out(MemoryReadSignature(row_bits, data_width)),
            "wr": Out(MemoryWriteSignature(row_bits, data_width)),
            "busy": Out(1), "cts_pending": Out(1), "peer": Out(16), "tag": Out(16),
            "agg_started": Out(1), "hazard": Out(1), "empty": Out(1),
            "header": Out(packet_header_layout()),
            "cleared": Out(1), "event": Out(1), "reply": Out(1), "reply_code": Out(ClearCode),
            "bytes_taken": Out(32), "notice_push": Out(1), "agg_done": Out(1), "agg_final": Out(1),
            "errors": Out(ENGINE_ERROR_LAYOUT),
            "packets_received": Out(1), "alu_beat": Out(1), "bytes_received": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        p = self._blocks(m)
        self._state(m, p)
        self._parser_results(m, p)
        return m

    def _blocks(self, m):
        """The walker, the parser, the unpacker, the writer and the slices between them."""
        width, row_bits = self._data_width, self._row_bits
        lane_bits = (width // 8).bit_length() - 1
        reset = ResetInserter(self.clear)
        m.submodules.rx_walker = rx_walker = reset(
            RegionWalker(width, checked=True, length_bits=self._length_bits))
        # The received rows carry row_bits of address and one more bit, set for a row past
        # the end of memory (worked out as a chunk enters rx_chunks): the rows' slice then
        # checks one bit where it ORed the address's high bits, with the unpacker's output
        # register in front and its head choice behind (the 256-bit engine's late pins at
        # every seed of 5a1ddfb, unpacker row -> 4 LUTs -> rx_checked's flags, 5.0-5.5 ns).
        rx_row_bits = row_bits + 1
        m.submodules.unpacker = unpacker = reset(
            RowUnpacker(width, addr_width=rx_row_bits + lane_bits))
        # Register slices where a walker's chunk decision (a 32-bit compare) or the packet
        # parser's state would otherwise chain into the unpacker's ready logic.
        m.submodules.rx_chunks = rx_chunks = reset(SkidBuffer(chunk_layout(width, rx_row_bits)))
        # The beat slice keeps its entries in place (read through a 2:1 multiplexer): the
        # unpacker's ready then loads its pointers only.  As a slice with an output
        # register, that ready (the unpacker's held beat and slot count) enabled all of the
        # output's beat flops and was the 256-bit engine's latest pin at every seed of
        # c2dace3 (held_valid -> the slice's valid and 288 beat enables, 6.0-6.3 ns, 5.3
        # of it routing).
        m.submodules.rx_beats = rx_beats = reset(
            SkidBuffer(unpacker.beats.payload.shape(), mux_output=True))
        wiring.connect(m, rx_beats.o, unpacker.beats)
        # Received rows to memory, through the ALU when they reduce, with the scoreboard the
        # read stages check (hazard) and the control waits on (empty).
        m.submodules.writer = writer = self._writer = RowWriter(
            self._alu, data_width=width, row_bits=row_bits, head_register=self._head_register)
        wiring.connect(m, unpacker.rows, writer.rows)
        wiring.connect(m, writer.local_rd, wiring.flipped(self.local_rd))
        wiring.connect(m, writer.wr, wiring.flipped(self.wr))
        m.d.comb += [writer.clear.eq(self.clear), writer.stop.eq(self.stop),
                     writer.age.eq(self.age), writer.op.eq(self.op), writer.dtype.eq(self.dtype),
                     self.hazard.eq(writer.hazard), self.empty.eq(writer.empty),
                     self.alu_beat.eq(writer.alu_beat)]
        with m.If(writer.region_error):
            m.d.comb += self.errors.region.eq(1)        # a strided region ran off memory
        with m.If(writer.alu_error):
            m.d.comb += self.errors.alu.eq(1)
        # Received packets classed and checked; a data packet's payload to the beat slice.
        m.submodules.parser = parser = self._parser = PacketParser(
            data_width=width, max_nodes=self._max_nodes, length_bits=self._length_bits)
        self._mirrored = (writer, parser)
        return {"rx_walker": rx_walker, "unpacker": unpacker, "rx_chunks": rx_chunks,
                "rx_beats": rx_beats, "writer": writer, "parser": parser,
                "rx_bytes": Signal(32), "rx_left": Signal(32)}

    def _state(self, m, p):
        """The receive half's state, set by a receive or an aggregate packet."""
        cur, rx_start, rx_busy = self.command, self.start, self.busy
        rx_walker, rx_chunks, parser = p["rx_walker"], p["rx_chunks"], p["parser"]
        rx_peer, rx_tag = self.peer, self.tag
        rx_bytes, rx_left = p["rx_bytes"], p["rx_left"]   # the message's bytes taken, to come
        rx_reduce = Signal()
        rx_walk = Signal()
        rx_region = Signal(REGION_LAYOUT)
        rx_checks = Signal(region_checks_layout(self._data_width))
        cts_pending = self.cts_pending
        agg_rx_start = self.agg_started
        got = parser.header
        # An aggregate packet's slot offset, in parts the parser registers a cycle ahead: the
        # slot × stride product as two carry-save terms (a shifted stride per slot bit,
        # reduced three to two per LUT level: no carry chain, no multiplier in that cycle),
        # and the base; summed as the packet starts.
        d_agg_terms, d_agg_base = list(parser.agg_terms), parser.agg_base
        m.d.sync += agg_rx_start.eq(0)         # a strobe, set by the parser (_parser_results)
        # The walker's checks, as on the transmit side (Transmitter): of the command's
        # receive region, made every cycle, or of an aggregate packet's region.
        cur_recv = Signal(REGION_LAYOUT)
        cur_recv_checks = Signal.like(rx_checks)
        m.d.sync += cur_recv.eq(cur.recv)
        m.d.sync += region_checks(cur_recv_checks, cur_recv, self._data_width)
        # An aggregate packet's region: its offset's parts are registered every cycle from
        # the stored header, which holds from a cycle before P_DECIDE takes the packet, and
        # their sum registered from them, so the offset holds when the start (a cycle after
        # the take) loads it.  The checks are made from that registered offset, in the
        # start's cycle, and held while the walker's command waits; the command gives them
        # in place of `rx_checks` for an aggregate packet (`rx_agg`, a flop).  Made from
        # the sum's adders, they were the 256-bit engine's latest pin at both seeds of
        # 679fafa (d_agg_base -> the sum -> first_room -> first_fits, 11 levels, 5.85 ns).
        agg_offset = Signal(32)
        agg_region = Signal(REGION_LAYOUT)
        agg_checks = Signal.like(rx_checks)
        rx_agg = Signal()                       # the receive is an aggregate packet's
        m.d.sync += agg_offset.eq(carry_save_sum([d_agg_base, *d_agg_terms], 32))
        m.d.comb += [agg_region.offset.eq(agg_offset), agg_region.length.eq(got.length)]
        with m.If(~rx_walk):
            m.d.sync += region_checks(agg_checks, agg_region, self._data_width)
        with m.If(self.clear):
            m.d.sync += [rx_busy.eq(0), rx_walk.eq(0), cts_pending.eq(0)]
        with m.Elif(agg_rx_start):
            # One REPACK_OUT packet: its bytes go to slot a at the packet's offset.
            m.d.sync += [rx_busy.eq(1), rx_walk.eq(1), rx_reduce.eq(0), rx_agg.eq(1),
                         rx_region.eq(agg_region)]
        with m.Elif(rx_start):
            m.d.sync += [rx_busy.eq(1), rx_walk.eq(1), cts_pending.eq(1), rx_agg.eq(0),
                         rx_peer.eq(cur.recv_from), rx_tag.eq(cur.recv_tag),
                         rx_region.eq(cur.recv), rx_checks.eq(cur_recv_checks),
                         rx_reduce.eq(cur.action != StepAction.COPY)]
        m.d.comb += [rx_walker.command.valid.eq(rx_walk),
                     rx_walker.command.payload.region.eq(rx_region),
                     rx_walker.command.payload.checks.eq(Mux(rx_agg, agg_checks, rx_checks))]
        with m.If(rx_walker.command.valid & rx_walker.command.ready):
            m.d.sync += rx_walk.eq(0)
        walked = rx_walker.chunks.payload
        m.d.comb += [rx_chunks.i.valid.eq(rx_walker.chunks.valid),
                     rx_walker.chunks.ready.eq(rx_chunks.i.ready),
                     rx_chunks.i.payload.row.eq(Cat(walked.row[:self._row_bits],
                                                    row_outside(walked.row, self._row_bits))),
                     rx_chunks.i.payload.lo.eq(walked.lo), rx_chunks.i.payload.n.eq(walked.n),
                     rx_chunks.i.payload.last.eq(walked.last)]
        wiring.connect(m, rx_chunks.o, p["unpacker"].chunks)
        # The rows the unpacker makes go to the writer, which ends the receive.
        m.d.comb += p["writer"].reduce.eq(rx_reduce)
        with m.If(p["writer"].ended):
            m.d.sync += rx_busy.eq(0)
        # The clear-to-send is sent (the engine's header sender).
        with m.If(self.cts_sent):
            m.d.sync += cts_pending.eq(0)

    def _parser_results(self, m, p):
        """The parser's inputs, and its results into the receive's state."""
        parser, rx_busy, cur = p["parser"], self.busy, self.command
        rx_bytes, rx_left = p["rx_bytes"], p["rx_left"]
        wiring.connect(m, wiring.flipped(self.rx), parser.rx)
        wiring.connect(m, parser.beats, p["rx_beats"].i)
        m.d.comb += [parser.clear.eq(self.clear),
                     parser.rx_bytes.eq(rx_bytes), parser.rx_left.eq(rx_left),
                     parser.rx_peer.eq(self.peer), parser.rx_tag.eq(self.tag),
                     parser.rx_busy.eq(rx_busy), parser.cts_pending.eq(self.cts_pending),
                     parser.in_aggregate.eq(self.in_aggregate),
                     parser.rewriting.eq(self.start | self.loading),
                     parser.send_to.eq(self.send_to), parser.recv_tag.eq(cur.recv_tag),
                     parser.recv_offset.eq(cur.recv.offset),
                     parser.recv_stride.eq(cur.recv.stride),
                     parser.notice_room.eq(self.notice_room),
                     self.header.eq(parser.header),
                     self.cleared.eq(parser.cts_valid), self.notice_push.eq(parser.notice_push),
                     self.event.eq(parser.event), self.reply.eq(parser.reply),
                     self.reply_code.eq(parser.reply_code), self.bytes_taken.eq(rx_bytes),
                     self.agg_done.eq(parser.agg_done), self.agg_final.eq(parser.agg_final),
                     self.packets_received.eq(parser.packets_received),
                     self.bytes_received.eq(parser.bytes_received)]
        # The hub's copy is the transmit half's; the parser's checks read it.
        self._mirrors.append((Mux(parser.deciding, self.send_to, 0),
                              Mux(parser.deciding, cur.send_to, 0)))
        with m.If(parser.accept):
            m.d.sync += [rx_bytes.eq(parser.after), rx_left.eq(parser.left)]
        # A start (only while no receive runs, so never with an accept) comes after the
        # accept, so it is the counts' reset on its own, a flop: under the accept, the
        # parser's decision was in front of rx_bytes' reset, the 256-bit engine's path at
        # seed 2 of bbe37ff (cts_pending -> the data checks -> rx_bytes:LSR, 5.38 ns).
        with m.If(self.start):
            m.d.sync += [rx_bytes.eq(0), rx_left.eq(cur.recv.length)]
        with m.If(parser.agg_start):
            m.d.sync += self.agg_started.eq(1)
        for bit in ("unexpected", "protocol", "length"):
            with m.If(getattr(parser.errors, bit)):
                m.d.comb += getattr(self.errors, bit).eq(1)
        unpacker = p["unpacker"]
        with m.If(unpacker.overrun | unpacker.underrun):
            m.d.comb += self.errors.length.eq(1)
        m.d.comb += unpacker.clear.eq(self.clear)
