# Ref: seed 002: a step's send half; seed 003, step 7.4: an aggregate message to a repack unit.
"""The engine's transmit half: a command's send region (or an aggregate message) read from
device memory, packed and cut into packets, once the receiver's clear-to-send has arrived.

Transfers are a rendezvous: the clear-to-send table holds, per peer, whether a clear-to-send
arrived and its tag; a send waits until its peer's entry is set, and a tag other than the
send's is a protocol error.  The region walker cuts the region into chunks, the read stage reads
their rows (waiting while the write half's scoreboard has a hazard), the packer packs them
into beats and the packetizer puts headers in front.
"""

from amaranth.hdl import Const, Module, Mux, ResetInserter, Signal
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .command import COMMAND_LAYOUT
from .packer import RowPacker
from .packetizer import Packetizer
from .regions import REGION_LAYOUT, region_checks, region_checks_layout
from .rows import ROW_CHECKS, check_rows, row_ring
from .walker import RegionWalker
from ..lib.skid import SkidBuffer
from ..net.packet import DEST_WIDTH, ClearCode, packet_stream
from ..params import check_data_width, check_int
from ..lib.mirrors import Mirrored

__all__ = ["Transmitter", "PROBE_CYCLES", "PROBE_TRIES"]

#: Cycles a send waits for its clear-to-send, or for the receiver's ACK once its pass has
#: ended, before it sends a PROBE (docs/faults.md, "Packet-level recovery"); a power of two,
#: so the wait's end is one bit of its count.  Far above a round trip (a few dozen cycles),
#: below the host's stall check (STALL_CYCLES, 20 000).
PROBE_CYCLES = 4096

#: PROBEs in a row without an answer after which the send stops with ERRORS.lost.
PROBE_TRIES = 4

#: Rows the read stages, the FIFO and the slice before the packer hold at most (the credit's
#: limit): a row issued in cycle c is read in c + 1, in the data register in c + 2, out of
#: the FIFO into the slice in c + 3, taken by the packer from c + 4, and the credit sees the
#: take a cycle later, so five keep a row moving in every cycle the packer takes one; one
#: more spares a cycle.
ROWS_IN_FLIGHT = 6


class Transmitter(Mirrored, wiring.Component):
    """A command's send half, or an aggregate message, from device memory into packets.

    Parameters
    ----------
    data_width : int
        Bits per beat and per row of device memory.
    max_nodes : int
        Entries of the clear-to-send table.
    row_bits : int
        Bits of a row's address in device memory.
    packet_beats : int
        The build's largest payload in beats.
    length_bits : int
        Bits the region walker counts in.
    head_register : bool
        The read stage's row slice keeps a head register (:class:`~nicoll.hw.lib.skid.CheckedRing`).

    Members
    -------
    clear : ``In(1)``
        CONTROL.clear.
    stop : ``In(1)``
        An error stands: no row is read, no clear-to-send is taken.
    hazard : ``In(1)``
        A write of an earlier receive is on its way (the write half's scoreboard).
    node_id : ``In(DEST_WIDTH)``
    command : ``In(COMMAND_LAYOUT)``
        The current command (its send half; held from two cycles before ``start``).
    start : ``In(1)``
        The command's send starts.
    agg_start : ``In(1)``; agg_tag : ``In(16)``; agg_unit : ``In(8)``; agg_length, agg_offset : ``In(32)``;
    agg_checks : ``In(region_checks_layout(data_width))``
        An aggregate message starts, and what it is (:class:`AggregateSender`).
    agg_reading : ``In(1)``; agg_slot : ``In(32)``
        The aggregate sender reads the row at byte ``agg_slot`` (the half is idle then).
    length_word : ``Out(32)``
        The low 32 bits of the read stage's data register.
    cleared : ``In(1)``; cleared_peer, cleared_tag : ``In(16)``
        A clear-to-send from ``cleared_peer`` for message ``cleared_tag`` (the parser's).
    event : ``In(1)``; event_code : ``In(ClearCode)``; event_addr : ``In(32)``; event_pass : ``In(8)``
        A RESEND, ACK or NOTREADY from ``cleared_peer`` about message ``cleared_tag``.
    probe : ``Out(1)``; probe_sent : ``In(1)``; peer, tag : ``Out(16)``; pass_number : ``Out(8)``
        A PROBE to ``peer`` about message ``tag`` (pass ``pass_number``) is due; it left.
    send_rd : ``Out(MemoryReadSignature)``
        Device memory's read port.
    packets : ``Out(packet_stream(data_width))``
        The data packets (from a register slice).
    busy : ``Out(1)``
        A send or a message is under way (until its last beat left the packetizer).
    send_to : ``Out(16)``
        The command's destination, a copy loaded a cycle after the command.
    protocol_error, region_error, lost_error : ``Out(1)``
        A clear-to-send with another tag; a strided region ran off memory; ``PROBE_TRIES``
        probes in a row went unanswered.
    bytes_sent : ``Out(32)``
        The counter's bump.
    """

    def __init__(self, *, data_width, max_nodes, row_bits, packet_beats, length_bits,
                 head_register):
        from ..bus.devmem import MemoryReadSignature
        check_data_width(data_width)
        for name, value in (("max_nodes", max_nodes), ("row_bits", row_bits),
                            ("packet_beats", packet_beats), ("length_bits", length_bits)):
            check_int(name, value, 1)
        self._data_width = data_width
        self._max_nodes = max_nodes
        self._row_bits = row_bits
        self._packet_beats = packet_beats
        self._length_bits = length_bits
        self._head_register = head_register
        self._mirrors = []
        super().__init__({
            "clear": In(1), "stop": In(1), "hazard": In(1), "node_id": In(DEST_WIDTH),
            "command": In(COMMAND_LAYOUT), "start": In(1),
            "agg_start": In(1), "agg_tag": In(16), "agg_unit": In(8), "agg_length": In(32),
            "agg_offset": In(32), "agg_checks": In(region_checks_layout(data_width)),
            "agg_reading": In(1), "agg_slot": In(32), "length_word": Out(32),
            "cleared": In(1), "cleared_peer": In(16), "cleared_tag": In(16),
            "event": In(1), "event_code": In(ClearCode), "event_addr": In(32),
            "event_pass": In(8),
            "probe": Out(1), "probe_sent": In(1), "peer": Out(16), "tag": Out(16),
            "pass_number": Out(8),
            "send_rd": Out(MemoryReadSignature(row_bits, data_width)),
            "packets": Out(packet_stream(data_width)),
            "busy": Out(1), "send_to": Out(16),
            "protocol_error": Out(1), "region_error": Out(1), "lost_error": Out(1),
            "bytes_sent": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        p = self._blocks(m)
        self._table(m, p)
        self._wait(m, p)
        self._read(m, p)
        self._packets(m, p)
        self._delivery(m, p)
        return m

    def _blocks(self, m):
        """The walker, the packer, the packetizer and the slices between them."""
        width = self._data_width
        reset = ResetInserter(self.clear)
        # The walker takes each region with its checks made a cycle or more before the
        # region is offered (_wait): made at the walker's input, from the region's flops,
        # they were the 64-bit core's routed path at seed 1 of d271a41 (tx_region.length ->
        # the walker's input slice, 6 LUTs, 7.39 ns).  The walker counts in length_bits (a
        # message sent from a slot fits the slot: AggregateSender).
        m.submodules.tx_walker = tx_walker = reset(
            RegionWalker(width, checked=True, length_bits=self._length_bits))
        m.submodules.packer = packer = reset(RowPacker(width))
        # The packer's beats reach the packetizer through a slice, so the packer's stall
        # (`advance`, the enable of its ~1 000 pipeline flops at 256 bits) is one LUT from
        # flops: from the packetizer's header flag and the data slice's room it was two, and
        # the 256-bit engine's latest pin at seed 2 of 5a1ddfb (in_header -> the packer's
        # stall -> its plan slice, 5.87 ns).
        m.submodules.tx_beats = tx_beats = reset(SkidBuffer(packer.beats.payload.shape()))
        wiring.connect(m, packer.beats, tx_beats.i)
        m.submodules.packetizer = packetizer = Packetizer(
            data_width=width, packet_beats=self._packet_beats, length_bits=self._length_bits)
        self._mirrored = (packetizer, packer)
        wiring.connect(m, tx_beats.o, packetizer.beats)
        # The packetizer's beats reach the engine's arbiter through a slice: the arbiter's
        # grant (from both inputs' valid) would otherwise chain into the packer's ready.
        m.submodules.tx_data = tx_data = reset(SkidBuffer(self.packets.payload.shape()))
        wiring.connect(m, packetizer.packets, tx_data.i)
        wiring.connect(m, tx_data.o, wiring.flipped(self.packets))
        return {"tx_walker": tx_walker, "packer": packer, "packetizer": packetizer,
                "tx_peer": self.peer, "reset": reset}

    def _table(self, m, p):
        """The clear-to-send table: the peers that cleared this node to send."""
        tx_peer = p["tx_peer"]
        cts_valid = Signal(self._max_nodes)
        cts_tags = Memory(shape=16, depth=self._max_nodes, init=[])
        m.submodules.cts_tags = cts_tags
        cts_wr = cts_tags.write_port()
        # Read at the peer of the current command, into a register (see _wait).
        cts_rd = cts_tags.read_port(domain="comb")
        # Which node a clear-to-send arrives from, and which one the sender takes.
        peer_bits = max(1, (self._max_nodes - 1).bit_length())
        cts_set_valid = Signal()
        cts_set_peer = Signal(peer_bits)
        cts_take_valid = Signal()
        cts_set = Signal(self._max_nodes)
        cts_take = Signal(self._max_nodes)
        # A clear-to-send lands in the table and its valid bit a cycle after the parser
        # decides it, from flops: the tag check in _wait compares the written tag from a
        # flop, not from the parser's decision.
        m.d.sync += [cts_wr.en.eq(0), cts_set_valid.eq(0)]
        with m.If(self.cleared):
            m.d.sync += [cts_wr.addr.eq(self.cleared_peer), cts_wr.data.eq(self.cleared_tag),
                         cts_wr.en.eq(1), cts_set_valid.eq(1),
                         cts_set_peer.eq(self.cleared_peer)]
        for k in range(self._max_nodes):
            m.d.comb += [cts_set[k].eq(cts_set_valid & (cts_set_peer == k)),
                         cts_take[k].eq(cts_take_valid & (tx_peer[:peer_bits] == k))]
        with m.If(self.clear):
            m.d.sync += cts_valid.eq(0)
        with m.Else():
            m.d.sync += cts_valid.eq((cts_valid & ~cts_take) | cts_set)
        p.update(cts_wr=cts_wr, cts_rd=cts_rd, cts_valid=cts_valid, peer_bits=peer_bits,
                 cts_take_valid=cts_take_valid, cts_set_valid=cts_set_valid,
                 cts_set_peer=cts_set_peer)

    def _wait(self, m, p):
        """The transmit half's start and its wait for the clear-to-send."""
        cur, tx_start, tx_busy = self.command, self.start, self.busy
        cts_wr, cts_rd, tx_peer = p["cts_wr"], p["cts_rd"], p["tx_peer"]
        tx_tag = self.tag
        tx_length = Signal(32)
        tx_packet = Signal(16)
        tx_region = Signal(REGION_LAYOUT)
        tx_checks = Signal(region_checks_layout(self._data_width))
        tx_wait = Signal()              # waiting for the clear-to-send
        tx_walk = Signal()              # the walker has not taken the region yet
        tx_repack = Signal()            # the message goes to a repack unit
        tx_unit = Signal(8)
        # Whether the table's tag for tx_peer matches tx_tag, kept in a flop (`tag_ok`): loaded
        # as a send starts, and again whenever a clear-to-send writes that peer's entry (from
        # the written tag), so it is current in every cycle the wait below reads it.  What a
        # start loads comes from two stages that follow the command (loaded two cycles
        # before DISPATCH can start a send): the entry at its send_to (`cur_entry`, a cycle
        # after the table read), then its compare with its send_tag (`cur_tag_ok`); each
        # stage takes a write of that entry in its cycle instead of the table's.  The table
        # read and the compare were one path behind the queue's output register (the 64-bit
        # core's critical path, 7.77 ns).
        # The second stage and the start compare with copies of send_to and send_tag loaded
        # a cycle after the command (current from the second stage on): the command is the
        # queue's distributed RAM read at a registered address, and from there the
        # forwarding's compare into `tag_ok` was the 64-bit core's routed path at seed 1 of
        # 0470cfa (the queue -> the write's address compare -> tag_ok, 7 levels, 7.00 ns).
        # Tests check both against the compares with the command in every cycle a send
        # starts (`mirrors`).
        tag_ok = Signal()
        table_bits = len(cts_wr.addr)
        m.d.comb += cts_rd.addr.eq(cur.send_to)
        writes_cur = Signal()
        m.d.comb += writes_cur.eq(cts_wr.en & (cts_wr.addr == cur.send_to[:table_bits]))
        send_to_q = self.send_to
        send_tag_q = Signal.like(cur.send_tag)
        m.d.sync += [send_to_q.eq(cur.send_to), send_tag_q.eq(cur.send_tag)]
        writes_cur_q = cts_wr.en & (cts_wr.addr == send_to_q[:table_bits])
        cur_entry = Signal(16)
        cur_tag_ok = Signal()
        cur_tag_ok_ref = Signal()       # the same from the command (the tests' mirror)
        m.d.sync += [cur_entry.eq(Mux(writes_cur, cts_wr.data, cts_rd.data)),
                     cur_tag_ok.eq(Mux(writes_cur_q, cts_wr.data == send_tag_q,
                                       cur_entry == send_tag_q)),
                     cur_tag_ok_ref.eq(Mux(writes_cur, cts_wr.data == cur.send_tag,
                                           cur_entry == cur.send_tag))]
        start_tag_ok = Mux(writes_cur_q, cts_wr.data == send_tag_q, cur_tag_ok)
        start_tag_ref = Mux(writes_cur, cts_wr.data == cur.send_tag, cur_tag_ok_ref)
        self._mirrors.append((tx_start & start_tag_ok, tx_start & start_tag_ref))
        with m.If(tx_start):
            m.d.sync += tag_ok.eq(start_tag_ok)
        with m.Elif(cts_wr.en & (cts_wr.addr == tx_peer[:table_bits])):
            m.d.sync += tag_ok.eq(cts_wr.data == tx_tag)
        # The walker's checks of the region a start loads: of the command's send region,
        # made every cycle (the command holds from two cycles before DISPATCH can start a
        # send), or of an aggregate message's region, made with its length check
        # (AggregateSender).  From a copy of the region (loaded a cycle after the command),
        # so the compares read flops beside them: from the command itself, beside the
        # queue's block, they were late at every seed of the 64-bit core at 3089b59
        # (`whole`, `first_fits`, 6.9-7.2 ns).  The start comes two cycles after the command
        # loads at the earliest, so the checks are current.
        cur_send = Signal(REGION_LAYOUT)
        cur_send_checks = Signal.like(tx_checks)
        m.d.sync += cur_send.eq(cur.send)
        m.d.sync += region_checks(cur_send_checks, cur_send, self._data_width)
        # The region and its checks follow the start's sources while no send runs, and
        # hold from the start on (a start comes only while idle: `mirrors`): loaded under
        # the starts' priority, their 180 enables were the 256-bit engine's late pins at
        # every seed of bbe37ff (the aggregate's start -> 4 LUTs -> tx_walker.command's
        # enables, 5.49 ns).  The pass's seek reloads them while busy (_delivery).
        self._mirrors.append(((tx_start | self.agg_start) & tx_busy, Const(0)))
        with m.If(~tx_busy):
            with m.If(self.agg_start):
                m.d.sync += [tx_region.offset.eq(self.agg_offset),
                             tx_region.length.eq(self.agg_length), tx_region.run.eq(0),
                             tx_region.stride.eq(0), tx_checks.eq(self.agg_checks)]
            with m.Else():
                m.d.sync += [tx_region.eq(cur.send), tx_checks.eq(cur_send_checks)]
        with m.If(self.clear):
            m.d.sync += [tx_busy.eq(0), tx_wait.eq(0), tx_walk.eq(0)]
        with m.Elif(self.agg_start):
            m.d.sync += [tx_busy.eq(1), tx_wait.eq(0), tx_walk.eq(1), tx_peer.eq(cur.send_to),
                         tx_tag.eq(self.agg_tag), tx_length.eq(self.agg_length),
                         tx_repack.eq(1), tx_unit.eq(self.agg_unit), tx_packet.eq(0xFFFF)]
        with m.Elif(tx_start):
            m.d.sync += [tx_busy.eq(1), tx_wait.eq(1), tx_peer.eq(cur.send_to), tx_repack.eq(0),
                         tx_tag.eq(cur.send_tag), tx_length.eq(cur.send.length),
                         tx_packet.eq(Mux(cur.packet_beats == 0, self._packet_beats,
                                          cur.packet_beats))]
        peer_ready = p["cts_valid"].bit_select(tx_peer[:p["peer_bits"]], 1)
        with m.If(tx_wait & peer_ready & ~self.stop):
            with m.If(~tag_ok):
                m.d.comb += self.protocol_error.eq(1)
            with m.Else():
                m.d.comb += p["cts_take_valid"].eq(1)
                m.d.sync += [tx_wait.eq(0), tx_walk.eq(1)]
        tx_walker = p["tx_walker"]
        m.d.comb += [tx_walker.command.valid.eq(tx_walk),
                     tx_walker.command.payload.region.eq(tx_region),
                     tx_walker.command.payload.checks.eq(tx_checks)]
        with m.If(tx_walker.command.valid & tx_walker.command.ready):
            m.d.sync += tx_walk.eq(0)
        p.update(tx_tag=tx_tag, tx_packet=tx_packet, tx_wait=tx_wait, tx_repack=tx_repack,
                 tx_unit=tx_unit, tx_region=tx_region, tx_checks=tx_checks, tx_walk=tx_walk,
                 cur_whole=cur_send_checks.whole)

    def _read(self, m, p):
        """The transmit read stage: device memory rows into the packer."""
        lane_bits = (self._data_width // 8).bit_length() - 1
        tx_walker, packer = p["tx_walker"], p["packer"]
        send_rd = self.send_rd
        # Read stage: one row per clock into the packer, unless the row is still being written.
        t_valid = Signal()
        t_lo = Signal(lane_bits)
        t_n = Signal(lane_bits + 1)
        t_last = Signal()
        # The walker's chunks into a two-entry slice whose entries carry their checks, made
        # a cycle ahead, and their memory rows (check_rows); its input ready is a flop, so
        # the walker's chunk decision does not chain into the issue.
        m.submodules.tx_checked = tx_checked = p["reset"](
            row_ring(tx_walker.chunks.payload.shape(), row_bits=self._row_bits,
                     head_register=self._head_register))
        wiring.connect(m, tx_walker.chunks, tx_checked.i)
        check_rows(m, tx_checked, self.hazard, row_bits=self._row_bits)
        chunk = tx_checked.o.payload
        # Data stage: the row read into a register (read latency two, the block RAM's
        # output register where synthesis absorbs it: the read's clock-to-out drove the
        # packer's input slice directly, the 64-bit core's path at seed 1 of 26dfd56, the
        # DP16KD's 4.26 ns clock-to-out, 7.79 ns in all), then a FIFO of `ROWS_IN_FLIGHT`
        # rows into the packer.  A row is issued only with a credit: the rows issued and not
        # yet taken by the packer (in the read stage, the data stage, the FIFO or the slice
        # behind it) never exceed the FIFO's depth, so the two stages never stall, and the
        # FIFO always has room.  The issue reads one flop (`credit`) where it read the packer's ready
        # through the stages' advance, and the block RAMs, the stages' fields and the
        # data register load in every cycle: the advance, with the 256-bit data register's
        # enables behind it, was the 256-bit engine's routed path at seed 1 of 4ddfb85
        # (packer.flush -> advance -> issue -> the row slice's loads, 5.30 ns, 4.42 of it
        # routing).
        r_valid = Signal()
        r_data = Signal(len(send_rd.data), reset_less=True)
        r_lo = Signal(lane_bits)
        r_n = Signal(lane_bits + 1)
        r_last = Signal()
        credit = Signal(init=1)
        in_flight = Signal(range(ROWS_IN_FLIGHT + 1))
        t_outside = tx_checked.o_blocked[1]
        t_issue = tx_checked.o.valid & credit & ~tx_checked.o_blocked[0] & ~self.stop
        # A strided region ran off memory.
        m.d.comb += self.region_error.eq(tx_checked.o.valid & t_outside)
        # The row is read, and the stages' fields load, in every cycle: what is read or
        # loaded without an issue is never used (t_valid stays low), and the issue, with
        # its checks, drives only the slice's pointers, t_valid and the credit.
        issued = t_issue & ~t_outside
        m.d.comb += [tx_checked.o.ready.eq(issued),
                     send_rd.addr.eq(tx_checked.o_blocked[ROW_CHECKS:]),
                     send_rd.en.eq(1)]
        m.d.sync += [t_valid.eq(issued),
                     t_lo.eq(chunk.lo), t_n.eq(chunk.n), t_last.eq(chunk.last),
                     r_valid.eq(t_valid), r_data.eq(send_rd.data),
                     r_lo.eq(t_lo), r_n.eq(t_n), r_last.eq(t_last)]
        with m.If(self.agg_reading):
            m.d.comb += send_rd.addr.eq(self.agg_slot[lane_bits:])
        # The aggregate sender's length word, read while the transmit half is idle.
        m.d.comb += self.length_word.eq(r_data[:32])
        m.submodules.tx_rows = tx_rows = p["reset"](
            SyncFIFO(width=len(packer.rows.payload.as_value()), depth=ROWS_IN_FLIGHT))
        row_in = Signal(packer.rows.payload.shape())
        m.d.comb += [row_in.data.eq(r_data), row_in.lo.eq(r_lo), row_in.n.eq(r_n),
                     row_in.last.eq(r_last)]
        # The FIFO's rows (an asynchronous read of distributed RAM) reach the packer through
        # a slice: read straight into the packer's plan arithmetic, the FIFO's read was the
        # front of a 7-level path into its plan slice (seed 1, 5.80 ns).
        m.submodules.tx_row_slice = row_slice = p["reset"](SkidBuffer(row_in.shape()))
        m.d.comb += [tx_rows.w_en.eq(r_valid),
                     tx_rows.w_data.eq(row_in),
                     row_slice.i.valid.eq(tx_rows.r_rdy),
                     row_slice.i.payload.eq(tx_rows.r_data),
                     tx_rows.r_en.eq(row_slice.i.ready)]
        wiring.connect(m, row_slice.o, packer.rows)
        # The credit: the rows in flight after this cycle below the FIFO's depth.
        taken = packer.rows.valid & packer.rows.ready
        with m.If(self.clear):
            m.d.sync += [t_valid.eq(0), r_valid.eq(0), in_flight.eq(0), credit.eq(1)]
        with m.Elif(issued & ~taken):
            m.d.sync += [in_flight.eq(in_flight + 1),
                         credit.eq(in_flight < ROWS_IN_FLIGHT - 1)]
        with m.Elif(~issued & taken):
            m.d.sync += [in_flight.eq(in_flight - 1), credit.eq(1)]
        # The credit is its compare, and the FIFO never refuses a row (the tests hold both).
        self._mirrors += [(credit, in_flight < ROWS_IN_FLIGHT),
                          (tx_rows.w_rdy | ~tx_rows.w_en, 1)]

    def _packets(self, m, p):
        """The packetizer's inputs; the half ends with the message's last beat."""
        packetizer, cur = p["packetizer"], self.command
        m.d.comb += [packetizer.start.eq(self.start), packetizer.agg_start.eq(self.agg_start),
                     packetizer.send_length.eq(cur.send.length),
                     packetizer.cmd_packet_beats.eq(cur.packet_beats),
                     packetizer.agg_length.eq(self.agg_length),
                     packetizer.busy.eq(self.busy),
                     packetizer.node_id.eq(self.node_id), packetizer.peer.eq(p["tx_peer"]),
                     packetizer.tag.eq(p["tx_tag"]), packetizer.unit.eq(p["tx_unit"]),
                     packetizer.repack.eq(p["tx_repack"]),
                     packetizer.limit_beats.eq(p["tx_packet"]),
                     self.bytes_sent.eq(packetizer.bytes_sent)]

    def _delivery(self, m, p):
        """The send's delivery (docs/faults.md, "Packet-level recovery"): after its pass the
        send waits for the receiver's ACK; a RESEND starts another pass from the offset it
        names (from the start, for a strided region); a wait without news sends a PROBE."""
        packetizer, cur = p["packetizer"], self.command
        tx_wait, tx_walk, tx_peer, tx_tag = p["tx_wait"], p["tx_walk"], p["tx_peer"], p["tx_tag"]
        tx_region, tx_checks = p["tx_region"], p["tx_checks"]
        ack_wait = Signal()             # the pass ended; waiting for the ACK
        acked = Signal()                # the ACK came during the pass
        resend = Signal()               # a RESEND came during the pass: another follows
        resend_at = Signal(32)          # the latest RESEND's offset
        resume_at = Signal(32)          # where the next pass starts (0 for a strided region)
        seek = Signal(range(4))         # 1: the region, 2: its checks, 3: the pass starts
        tx_pass = self.pass_number
        base = Signal(REGION_LAYOUT)    # the command's send region
        base_whole = Signal()           # ... is one run: a pass may start at any offset
        timer = Signal(range(PROBE_CYCLES + 1))
        tries = Signal(range(PROBE_TRIES + 1))

        # The event, registered: its compares with the running send read flops.
        ev = Signal()
        ev_code = Signal(ClearCode)
        ev_addr = Signal(32)
        ev_mine = Signal()              # about this send (its peer, its tag, not a repack one)
        ev_this_pass = Signal()
        # The pass compare is made as the event is registered: if the pass moves on in that
        # cycle, an event of the pass that ends is taken as the new one's, which at worst
        # costs a needless pass (a RESEND names bytes the receiver holds or awaits).
        m.d.sync += [ev.eq(self.event & ~self.stop), ev_code.eq(self.event_code),
                     ev_addr.eq(self.event_addr),
                     ev_this_pass.eq(self.event_pass == tx_pass),
                     ev_mine.eq((self.cleared_peer == tx_peer) & (self.cleared_tag == tx_tag)
                                & ~p["tx_repack"])]
        mine = ev & ev_mine & self.busy
        got_resend = mine & (ev_code == ClearCode.RESEND) & ev_this_pass
        got_ack = mine & ((ev_code == ClearCode.ACK)
                          | ((ev_code == ClearCode.NOTREADY) & ev_this_pass & ack_wait))
        got_notready = mine & (ev_code == ClearCode.NOTREADY) & ev_this_pass

        # A copy of the clear-to-send this send took (a duplicate: it follows the original
        # on the same links) leaves the table as it is: set again, it would be a clear-to-send
        # with a tag the next send to that peer does not wait for.
        with m.If(self.cleared & (self.cleared_peer == tx_peer) & (self.cleared_tag == tx_tag)
                  & self.busy & ~tx_wait & ~p["tx_repack"]):
            m.d.sync += p["cts_set_valid"].eq(0)

        # The header waits outside a pass.
        m.d.comb += [packetizer.waiting.eq(tx_wait | ack_wait | (seek != 0)),
                     packetizer.pass_number.eq(tx_pass)]

        def start_pass():
            return [seek.eq(1), resend.eq(0), acked.eq(0), ack_wait.eq(0), tx_wait.eq(0)]

        # The offset of every RESEND of this pass is kept, by one enable: the next pass
        # starts from the latest (a pass's RESENDs name one offset: the receiver's bytes do
        # not move past a gap).  As one of several loads under the state's priority its
        # enable was the 256-bit engine's late pin alone at seed 1 (tx_repack -> the event's
        # decode -> resend_at's enables, 5 levels, 5.80 ns).
        with m.If(got_resend):
            m.d.sync += resend_at.eq(ev_addr)

        with m.If(self.start):
            m.d.sync += [base.eq(cur.send), base_whole.eq(p["cur_whole"]), tx_pass.eq(0),
                         ack_wait.eq(0), acked.eq(0), resend.eq(0), seek.eq(0)]
        with m.If(p["cts_take_valid"]):
            m.d.sync += tx_pass.eq(tx_pass + 1)

        # A pass ends with the message's last beat.
        with m.If(packetizer.ended):
            with m.If(p["tx_repack"] | acked | got_ack):
                m.d.sync += self.busy.eq(0)     # aggregate messages are the host's to recover
            with m.Elif(resend | got_resend):
                m.d.sync += start_pass()
            with m.Else():
                m.d.sync += ack_wait.eq(1)
        with m.Elif(got_ack & ~tx_wait):
            with m.If(ack_wait):
                m.d.sync += [self.busy.eq(0), ack_wait.eq(0)]
            with m.Else():
                m.d.sync += acked.eq(1)
        with m.Elif(got_resend & ack_wait):
            m.d.sync += start_pass()
        with m.Elif(got_resend & (seek == 0) & ~tx_wait):
            m.d.sync += resend.eq(1)
        # A RESEND while the send waits for its clear-to-send answers a probe: the
        # clear-to-send was lost.  It is written into the table as the clear-to-send itself
        # (from flops, a cycle after the parser's decision, as a clear-to-send is; the parser
        # decides a packet every other cycle at most, so no clear-to-send is written then),
        # and the send starts as from one, from byte 0.
        cts_wr = p["cts_wr"]
        with m.If(got_resend & tx_wait & ~self.cleared):
            m.d.sync += [cts_wr.addr.eq(tx_peer), cts_wr.data.eq(tx_tag), cts_wr.en.eq(1),
                         p["cts_set_valid"].eq(1), p["cts_set_peer"].eq(tx_peer)]

        # Another pass: from the offset named (a region of one run), else from the start
        # (the receiver drops what it has); the region, its checks and the pass's start a
        # cycle apart, so no sum feeds a compare in one cycle.
        # The checks are made every cycle from the region into `seek_checks` and copied in
        # the pass's start: made in the cycle that loads them, they chose among the loads of
        # tx_checks behind a 32-bit compare, the 256-bit engine's path at seed 3 of 4d70ce7
        # (`tx_walker.command` -> a carry chain -> `checks.first_fits`, 8 levels, 5.32 ns).
        seek_checks = Signal.like(tx_checks)
        m.d.sync += region_checks(seek_checks, tx_region, self._data_width)
        seek_at = Mux(base_whole, resend_at, 0)
        with m.Switch(seek):
            with m.Case(1):
                m.d.sync += [tx_region.offset.eq(base.offset + seek_at),
                             tx_region.length.eq(base.length - seek_at),
                             tx_region.run.eq(Mux(base_whole, 0, base.run)),
                             tx_region.stride.eq(base.stride),
                             resume_at.eq(seek_at), seek.eq(2)]
            with m.Case(2):
                m.d.sync += seek.eq(3)          # seek_checks follows the new region
            with m.Case(3):
                m.d.comb += packetizer.resume.eq(1)
                m.d.sync += [seek.eq(0), tx_walk.eq(1), tx_pass.eq(tx_pass + 1),
                             tx_checks.eq(seek_checks)]
        m.d.comb += [packetizer.resume_length.eq(tx_region.length),
                     packetizer.resume_offset.eq(resume_at)]

        # The probe: after PROBE_CYCLES without news while waiting; PROBE_TRIES in a row
        # unanswered stop the send.
        waiting = (tx_wait | ack_wait) & ~self.stop & ~p["tx_repack"]
        with m.If(~waiting | mine):
            m.d.sync += timer.eq(0)
        with m.Elif(timer[-1]):
            m.d.sync += [timer.eq(0), tries.eq(tries + 1), self.probe.eq(1)]
            with m.If(tries == PROBE_TRIES - 1):
                m.d.comb += self.lost_error.eq(1)
        with m.Else():
            m.d.sync += timer.eq(timer + 1)
        with m.If(~waiting | got_notready | got_resend | got_ack):
            m.d.sync += tries.eq(0)
        # A probe is taken by the engine's header register (probe_sent) and leaves from
        # there, even if the send has ended meanwhile; its answer then names a message no
        # send waits for, and is ignored.
        with m.If(self.probe_sent):
            m.d.sync += self.probe.eq(0)
        with m.If(self.clear):
            m.d.sync += [ack_wait.eq(0), acked.eq(0), resend.eq(0), seek.eq(0), timer.eq(0),
                         tries.eq(0), self.probe.eq(0), self.busy.eq(0), tx_wait.eq(0),
                         tx_walk.eq(0)]
