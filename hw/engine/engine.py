# Ref: seed 002 (ICT/CAS): collectives over a general logical topology as data, not hardware.
# Ref: seed 000 (CN101206588): received data is reduced while the next data travels, and an
#      iteration's last reduction overlaps the next iteration's first exchange.
# Ref: seed 001: a barrier between batches of an in-place all-to-all (S23).
"""The collective engine: runs one rank's schedule of step commands (seed 002).

The host compiles a collective into per-rank schedules (:mod:`nicoll.schedule`), lowers each
:class:`~nicoll.schedule.Step` into a :data:`COMMAND_LAYOUT` command, pushes the commands
into the engine's queue through the register map and starts every node at the same cycle.
The engine knows nothing of rings, trees or recursive halving.

Commands and messages
---------------------
A command has a send half (the bytes of region ``send`` go to node ``send_to`` as message
``send_tag``) and a receive half (message ``recv_tag`` from node ``recv_from`` lands in region
``recv``: stored, or reduced with the bytes already there; the two reduce actions name an
operand order, which the ALU's results do not depend on: its ops are commutative bit for
bit).  A region is ``length`` bytes of device memory taken ``run`` bytes at a time, each run
``stride`` bytes after the one before (``run`` 0 or ≥ ``length``: contiguous).
A message is the region's bytes as one packed stream; the sender and the receiver may lay
them out differently (any alignment, contiguous or strided).

Transfers are a rendezvous, so a receiver never holds data it has no place for: on reaching
a receive, the engine sends the source a clear-to-send control packet (kind
:attr:`~nicoll.hw.net.packet.PacketKind.CLEAR`, ``seq`` = tag); a sender streams a message only
after its clear-to-send arrived.  The messages between a pair of nodes are handled in the same
order by both, so each node waits for at most one clear-to-send per peer.  Data packets
(kind :attr:`~nicoll.hw.net.packet.PacketKind.DATA`) carry at most ``packet_beats`` beats of the
stream each; their header names the tag and the stream offset, which the receiver checks.

Overlap (seed 000): received beats are reduced as they arrive, so segment j+1 always travels
while segment j is reduced, at beat granularity.  A command starts as soon as the previous one
has sent its last beat and taken its last received beat, while that beat's reduction is
still in the ALU; a row read that would see a write of an earlier receive still in flight
waits for it (a scoreboard of the rows in the write pipeline), so the overlap can never
read stale data.
A command with ``fence`` set, a barrier, and a command whose receive stores where the previous
one reduced (or the reverse) wait for every earlier write instead.
"""

from types import SimpleNamespace

from amaranth.hdl import Cat, Module, Mux, ResetInserter, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .command import (COMMAND_LAYOUT, DEFAULT_PACKET_BEATS, DEFAULT_QUEUE_DEPTH,
                      ENGINE_ERROR_LAYOUT, walker_length_bits)
from .queue import CommandQueue
from .receive import Receiver
from .control import EngineControl
from .transmit import Transmitter
from .aggregate import AggregateSender
from ..ops import DType, ReduceOp
from ..net.packet import (ClearCode, HeaderSender, PacketArbiter, PacketKind, header_beats,
                          packet_header_layout)
from ..lib.builder import share
from ..params import check_data_width, check_int
from ..lib.mirrors import Mirrored

__all__ = ["COUNTERS", "Engine"]


#: The counters the engine keeps (register names in lower case).
COUNTERS = ("bytes_sent", "bytes_received", "packets_sent", "packets_received", "alu_beats",
            "busy_cycles", "stall_cycles")


class Engine(Mirrored, wiring.Component):
    """The collective engine of one node (see the module docstring).

    Parameters
    ----------
    data_width : int
        Bits per beat of the packet streams and of device memory rows.
    max_nodes : int
        Node ids this build can name (clear-to-send table entries).
    mem_size : int
        Bytes of device memory; commands naming bytes beyond it are refused.
    alu_capabilities : set of (ReduceOp, DType) or None
        The pairs the reduction ALU computes (None: every pair).
    queue_depth : int
        Commands the queue holds.
    packet_beats : int
        Largest payload of a data packet, in beats.

    Members
    -------
    cmd : ``In(COMMAND_LAYOUT)``
        The command ``push`` appends (the CMD registers).
    push, go, arm, clear : ``In(1)``
        One-cycle strobes of CONTROL.  A push is checked in two registered steps and acts
        in the cycle after them: ``queued`` and ``errors`` show it three cycles after the
        strobe (``cmd`` is sampled with the strobe).  A start (GO, or START_AT reached while
        armed) waits while a push is in its checks, so it acts after every push strobed
        before it.
    start_at, now : ``In(64)``
        START_AT and the cycle counter.
    node_id : ``In(16)``
    op, dtype : ``In(ReduceOp)``, ``In(DType)``
        The REDUCTION register.
    queued, step : ``Out(16)``; armed, busy, done : ``Out(1)``; errors : ``Out(ENGINE_ERROR_LAYOUT)``
    started_at, finished_at : ``Out(64)``; one ``Out(32)`` per name of :data:`COUNTERS`.
        A counter runs a cycle behind what it counts: its final value stands the cycle
        after ``done`` rises.
    barrier_seq : ``In(16)``
        The barrier unit's current barrier number.
    barrier_done : ``Out(1)``, barrier_done_seq : ``Out(16)``
        Signal this node's completion of a barrier (a barrier command).
    send_rd, local_rd : ``Out(MemoryReadSignature)``; wr : ``Out(MemoryWriteSignature)``
        Device memory ports.
    tx : ``Out(packet_stream(data_width))``; rx : ``In(packet_stream(data_width))``
        Packets of kinds CLEAR and DATA.
    """

    def __init__(self, *, data_width=256, max_nodes=64, mem_size=65536, alu_capabilities=None,
                 queue_depth=DEFAULT_QUEUE_DEPTH, packet_beats=DEFAULT_PACKET_BEATS):
        from ..alu.capabilities import check_capabilities
        from ..bus.devmem import MemoryReadSignature, MemoryWriteSignature
        from ..net.packet import DEST_WIDTH, packet_stream
        self.check_params(data_width=data_width, max_nodes=max_nodes, mem_size=mem_size,
                          queue_depth=queue_depth, packet_beats=packet_beats)
        beat_bytes = data_width // 8
        self._data_width = data_width
        # The two checked rings' flags: one head register above 64 bits; each entry's own
        # below.  Measured, not derived: at 64 bits the routed core's critical path was the
        # rx ring's entry -> scoreboard compares -> head register (7.9 ns, 11 levels), and the
        # engine alone gained 130 -> 143 / 135 MHz without it; the 256-bit core without it
        # fell to 96 MHz (docs/engine.md).
        self._ring_head_register = data_width > 64
        self._max_nodes = max_nodes
        self._mem_size = mem_size
        self._caps = check_capabilities(alu_capabilities)
        self._queue_depth = queue_depth
        self._packet_beats = packet_beats
        self._rows = mem_size // beat_bytes
        self.row_bits = max(1, (self._rows - 1).bit_length())
        members = {
            "cmd": In(COMMAND_LAYOUT),
            "push": In(1), "go": In(1), "arm": In(1), "clear": In(1),
            "start_at": In(64), "now": In(64), "node_id": In(DEST_WIDTH),
            "op": In(ReduceOp), "dtype": In(DType),
            "queued": Out(16), "step": Out(16),
            "armed": Out(1), "busy": Out(1), "done": Out(1),
            "errors": Out(ENGINE_ERROR_LAYOUT),
            "started_at": Out(64), "finished_at": Out(64),
            "barrier_seq": In(16), "barrier_done": Out(1), "barrier_done_seq": Out(16),
            "send_rd": Out(MemoryReadSignature(self.row_bits, data_width)),
            "local_rd": Out(MemoryReadSignature(self.row_bits, data_width)),
            "wr": Out(MemoryWriteSignature(self.row_bits, data_width)),
            "tx": Out(packet_stream(data_width)),
            "rx": In(packet_stream(data_width)),
        }
        members.update({name: Out(32) for name in COUNTERS})
        super().__init__(members)
        self._alu = None

    @staticmethod
    def check_params(*, data_width, max_nodes, mem_size, queue_depth, packet_beats):
        """Raise TypeError / ValueError naming a build parameter the engine cannot take."""
        from ..net.packet import DEST_WIDTH
        for name, value, low, high in (("queue_depth", queue_depth, 1, 65535),
                                       ("packet_beats", packet_beats, 1, 65535),
                                       ("max_nodes", max_nodes, 1, 1 << DEST_WIDTH),
                                       ("mem_size", mem_size, 1, 1 << 32)):
            check_int(name, value, low, high)
        check_data_width(data_width)
        beat_bytes = data_width // 8
        if mem_size & (mem_size - 1) or mem_size % beat_bytes:
            raise ValueError(f"mem_size must be a power of two and a multiple of {beat_bytes}, "
                             f"not {mem_size!r}")

    @property
    def alu(self):
        """The reduction ALU (built on first use)."""
        if self._alu is None:
            from ..alu.reduction import ReductionALU
            # Every result is written back the cycle it comes out: no output FIFO.
            self._alu = ReductionALU(self._data_width, capabilities=self._caps,
                                     output_fifo=False)
        return self._alu

    @property
    def queue_depth(self):
        return self._queue_depth

    @property
    def _walker_length_bits(self):
        # Bits for any byte count of a region that fits the memory (see _datapath).
        return walker_length_bits(self._mem_size)

    @property
    def packet_beats(self):
        return self._packet_beats

    def elaborate(self, platform):
        m = Module()
        width = self._data_width
        beat_bytes = width // 8
        lane_bits = beat_bytes.bit_length() - 1
        hbeats = header_beats(width)
        header_size = packet_header_layout().size
        # Everything that holds state about a running schedule restarts on CONTROL.clear.
        reset = ResetInserter(self.clear)

        # Each builder adds its locals to ``v``, where the builders after it find them.  They
        # run in the order of the sections they build: a signal assigned in two sections takes
        # the later one's value (Amaranth's last assignment wins), as in one long elaborate.
        v = SimpleNamespace(**{k: x for k, x in locals().items()
                               if k not in ("self", "platform", "m")})
        self._mirrors = []
        self._queue(m, v)
        self._datapath(m, v)
        self._control(m, v)
        self._counters(m, v)
        self._aggregate(m, v)
        self._transmit(m, v)
        self._receive(m, v)
        self._cts_sender(m, v)
        self._mirrored = (self._command_queue, self._receiver, self._aggregate_block,
                          self._transmitter)
        return m

    def _queue(self, m, v):
        """The command queue (CommandQueue: the push-time checks), the error register and
        the state the sections after this one read."""
        errors = Signal(ENGINE_ERROR_LAYOUT)
        m.d.comb += self.errors.eq(errors)
        raise_error = Signal(ENGINE_ERROR_LAYOUT)     # bits set this cycle
        with m.If(self.clear):
            m.d.sync += errors.eq(0)
        with m.Else():
            m.d.sync += errors.eq(errors.as_value() | raise_error.as_value())
        # any_error fans out to every issue decision; from its own flop, set with the same
        # value errors.any() has in the next cycle, it leaves the OR tree out of them.
        # errors.any() is any_error itself (both clear together), so only this cycle's bits
        # are ORed.
        any_error = Signal()
        m.d.sync += any_error.eq(~self.clear & (any_error | raise_error.as_value().any()))

        # The state machine (joined in _control): the queue refuses a push while it runs.
        m.submodules.control = control = EngineControl()
        running, in_aggregate, cur = control.running, control.in_aggregate, control.command
        tx_start, rx_start = control.tx_start, control.rx_start

        m.submodules.command_queue = queue = self._command_queue = CommandQueue(
            data_width=self._data_width, max_nodes=self._max_nodes, mem_size=self._mem_size,
            depth=self._queue_depth, packet_beats=self._packet_beats)
        m.d.comb += [queue.cmd.eq(self.cmd), queue.push.eq(self.push),
                     queue.clear.eq(self.clear), queue.running.eq(running),
                     self.queued.eq(queue.queued),
                     # The push-time bits; the sections after this one add theirs.
                     raise_error.eq(queue.refused)]
        queued, queue_empty = queue.queued, queue.empty
        share(v, locals())

    def _datapath(self, m, v):
        """The engine's blocks: the transmit and receive halves, the aggregate sender, the
        clear-to-send sender and the arbiter of their packets."""
        reset, width = v.reset, v.width
        # The halves' walkers count bytes in mem_size.bit_length() bits: a pushed region's
        # length is at most mem_size (its end is checked) and so is a strided region's run
        # (below its length); an aggregate packet's length is checked as the parser takes
        # it (PacketParser, agg_long); a message sent from a slot fits the slot
        # (AggregateSender).  Their addresses keep 32 bits, so a stride past the memory
        # still reaches the row checks.
        # Ref: 32-bit counts were the 64-bit engine's latest pins at seed 3 of 447ddd7
        # (tx_walker.run_left, 5.87 ns, a 32-bit subtraction and 3 LUTs; rest_zero, 5.80).
        length_bits = self._walker_length_bits
        # A command's receive, or an aggregate packet, into device memory (joined in
        # _receive), with the write half's scoreboard the transmit read checks (hazard) and
        # the control waits on (pipeline_empty).
        m.submodules.receiver = receiver = self._receiver = Receiver(
            self.alu, data_width=width, max_nodes=self._max_nodes, row_bits=self.row_bits,
            length_bits=length_bits, head_register=self._ring_head_register)
        wiring.connect(m, wiring.flipped(self.rx), receiver.rx)
        wiring.connect(m, receiver.local_rd, wiring.flipped(self.local_rd))
        wiring.connect(m, receiver.wr, wiring.flipped(self.wr))
        hazard, pipeline_empty, age_rows = receiver.hazard, receiver.empty, receiver.age
        # The aggregate command's SEND notices to messages (joined in _aggregate).
        m.submodules.aggregate = aggregate = self._aggregate_block = AggregateSender(
            data_width=width, max_nodes=self._max_nodes, length_bits=length_bits)
        m.submodules.clear_tx = clear_tx = reset(HeaderSender(width))
        first_sent = Signal()       # a clear-to-send or registration was taken (_cts_sender)
        # The grant is a flop (a clear-to-send's or registration's valid would otherwise
        # chain through the choice into the data slice's enables: the 256-bit core's
        # critical path at 117.4 MHz).
        m.submodules.tx_arbiter = arbiter = reset(PacketArbiter(2, width, registered_grant=True))
        wiring.connect(m, arbiter.o, wiring.flipped(self.tx))
        wiring.connect(m, clear_tx.packets, arbiter.i_0)     # clear-to-send first
        # A command's send, or an aggregate message, into packets (joined in _transmit).
        m.submodules.transmitter = transmitter = self._transmitter = Transmitter(
            data_width=width, max_nodes=self._max_nodes, row_bits=self.row_bits,
            packet_beats=self._packet_beats, length_bits=length_bits,
            head_register=self._ring_head_register)
        wiring.connect(m, transmitter.packets, arbiter.i_1)
        wiring.connect(m, transmitter.send_rd, wiring.flipped(self.send_rd))
        share(v, locals())

    def _control(self, m, v):
        """The state machine (EngineControl, built in _queue): what it waits on, and the
        run's registers."""
        control, queue, clear_tx = v.control, v.queue, v.clear_tx
        transmitter, receiver, aggregate = v.transmitter, v.receiver, v.aggregate
        m.d.comb += [control.clear.eq(self.clear), control.go.eq(self.go),
                     control.arm.eq(self.arm), control.start_at.eq(self.start_at),
                     control.now.eq(self.now), control.error.eq(v.any_error),
                     control.queued.eq(queue.queued), control.queue_empty.eq(queue.empty),
                     control.queue_checking.eq(queue.checking),
                     control.queue_data.eq(queue.read_data),
                     queue.read_addr.eq(control.queue_addr),
                     control.tx_busy.eq(transmitter.busy), control.rx_busy.eq(receiver.busy),
                     control.writes_empty.eq(v.pipeline_empty),
                     control.agg_sends.eq(aggregate.sends),
                     control.agg_finals.eq(aggregate.finals),
                     control.agg_in_flight.eq(aggregate.in_flight),
                     control.agg_started.eq(receiver.agg_started),
                     control.agg_done_seen.eq(receiver.agg_done),
                     control.tx_valid.eq(self.tx.valid),
                     control.reg_sent.eq(v.first_sent & control.reg_pending),
                     control.barrier_seq.eq(self.barrier_seq),
                     self.armed.eq(control.armed), self.busy.eq(control.running),
                     self.done.eq(control.done), self.step.eq(control.step),
                     self.started_at.eq(control.started_at),
                     self.finished_at.eq(control.finished_at),
                     self.barrier_done.eq(control.barrier_done),
                     self.barrier_done_seq.eq(self.barrier_seq),
                     # A send or a receive starts: every row in the write pipeline is an
                     # earlier receive's from now on (RowWriter).
                     v.age_rows.eq(v.tx_start | v.rx_start | receiver.agg_started)]
        counters = {name: getattr(self, name) for name in COUNTERS}
        bump = {name: Signal(32, name=f"bump_{name}") for name in COUNTERS}
        share(v, locals())

    def _counters(self, m, v):
        """The counters and what bumps them each cycle."""
        counters, bump, running = v.counters, v.bump, v.running
        # Each bump is registered before its adder (the counters run a cycle behind), so
        # what the engine decides in a cycle and a 32-bit carry chain are not in series.  A
        # start clears the counters, dropping what was bumped in its cycle and the one
        # before.  The start is registered too (`restart_q`) and clears a cycle later, when
        # those two bumps are in the counter and in `bumped`: the start's decision does not
        # fan out to every counter's and bump's flops (the 256-bit engine's critical path).
        # CONTROL.clear (a register's strobe) clears at once and again a cycle later.
        restart_q = Signal()
        m.d.sync += restart_q.eq(self.clear | v.control.restart)
        for name in COUNTERS:
            bumped = Signal(32, name=f"bumped_{name}")
            m.d.sync += bumped.eq(bump[name])
            with m.If(self.clear | restart_q):
                m.d.sync += counters[name].eq(0)
            with m.Else():
                m.d.sync += counters[name].eq(counters[name] + bumped)
        m.d.comb += [bump["busy_cycles"].eq(running),
                     bump["stall_cycles"].eq(running & self.tx.valid & ~self.tx.ready)]
        # Data packets as they leave; clear-to-send packets and registrations as the header
        # sender takes them.  The delivery protocol's packets (RESEND, ACK, NOTREADY, PROBE)
        # are not counted (docs/faults.md).
        m.d.comb += bump["packets_sent"].eq(
            (self.tx.valid & self.tx.ready & self.tx.payload.last & ~self.tx.payload.control)
            + v.first_sent)
        with m.If(v.receiver.alu_beat):
            m.d.comb += bump["alu_beats"].eq(1)
        share(v, locals())

    def _aggregate(self, m, v):
        """The aggregate command's SEND notices (AggregateSender, built in _datapath), each
        to a REPACK_IN message of the transmit half."""
        aggregate, cur, raise_error = v.aggregate, v.cur, v.raise_error
        m.d.comb += [aggregate.clear.eq(self.clear), aggregate.in_aggregate.eq(v.in_aggregate),
                     aggregate.send_offset.eq(cur.send.offset),
                     aggregate.send_stride.eq(cur.send.stride),
                     aggregate.send_tag.eq(cur.send_tag), aggregate.recv_tag.eq(cur.recv_tag),
                     aggregate.tx_busy.eq(v.transmitter.busy), aggregate.stop.eq(v.any_error)]
        with m.If(aggregate.protocol_error):
            m.d.comb += raise_error.protocol.eq(1)      # a group this rank has no slot for
        with m.If(aggregate.region_error):
            m.d.comb += raise_error.region.eq(1)
        agg_tx_start, agg_tag, agg_unit = aggregate.start, aggregate.tag, aggregate.unit
        agg_length, agg_slot, agg_reading = aggregate.length, aggregate.slot, aggregate.reading
        agg_send_offset, agg_send_checks = aggregate.offset, aggregate.checks
        share(v, locals())

    def _transmit(self, m, v):
        """The transmit half (Transmitter, built in _datapath): a command's send, or an
        aggregate message, once its clear-to-send arrived."""
        transmitter, aggregate, raise_error = v.transmitter, v.aggregate, v.raise_error
        m.d.comb += [transmitter.clear.eq(self.clear), transmitter.stop.eq(v.any_error),
                     transmitter.hazard.eq(v.hazard), transmitter.node_id.eq(self.node_id),
                     transmitter.command.eq(v.cur), transmitter.start.eq(v.tx_start),
                     transmitter.agg_start.eq(aggregate.start),
                     transmitter.agg_tag.eq(aggregate.tag),
                     transmitter.agg_unit.eq(aggregate.unit),
                     transmitter.agg_length.eq(aggregate.length),
                     transmitter.agg_offset.eq(aggregate.offset),
                     transmitter.agg_checks.eq(aggregate.checks),
                     transmitter.agg_reading.eq(aggregate.reading),
                     transmitter.agg_slot.eq(aggregate.slot),
                     aggregate.length_word.eq(transmitter.length_word),
                     v.bump["bytes_sent"].eq(transmitter.bytes_sent)]
        with m.If(transmitter.protocol_error):
            m.d.comb += raise_error.protocol.eq(1)      # a clear-to-send with another tag
        with m.If(transmitter.region_error):
            m.d.comb += raise_error.region.eq(1)        # a strided region ran off memory
        with m.If(transmitter.lost_error):
            m.d.comb += raise_error.lost.eq(1)          # probes went unanswered

    def _receive(self, m, v):
        """The receive half (Receiver, built in _datapath): a command's receive, or an
        aggregate packet; its results into the clear-to-send table, the aggregate sender,
        the counters and the errors."""
        receiver, aggregate, raise_error = v.receiver, v.aggregate, v.raise_error
        got = receiver.header
        m.d.comb += [receiver.clear.eq(self.clear), receiver.stop.eq(v.any_error),
                     receiver.op.eq(self.op), receiver.dtype.eq(self.dtype),
                     receiver.command.eq(v.cur), receiver.start.eq(v.rx_start),
                     receiver.loading.eq(v.control.loading),
                     receiver.in_aggregate.eq(v.in_aggregate),
                     receiver.send_to.eq(v.transmitter.send_to),
                     receiver.notice_room.eq(aggregate.notices.ready)]
        # A SEND notice's entry, offered in every cycle and written when the parser sets
        # w_en: given only under that decision, each data bit was ANDed with it, and the
        # decision then reached the queue's LUT RAM inputs as well as its write enable (the
        # 64-bit engine's latest pin at seed 3 once its multipliers were gone: clear -> the
        # decision -> agg_sends_fifo.storage:WD, 6.05 ns).
        m.d.comb += [aggregate.notices.payload.eq(Cat(got.seq, got.arg[:8], got.addr[:16])),
                     aggregate.notices.valid.eq(receiver.notice_push),
                     aggregate.final.eq(receiver.agg_final),
                     v.bump["packets_received"].eq(receiver.packets_received),
                     v.bump["bytes_received"].eq(receiver.bytes_received)]
        # A clear-to-send lands in the transmitter's table from flops a cycle after the
        # parser's decision.
        m.d.comb += [v.transmitter.cleared.eq(receiver.cleared),
                     v.transmitter.cleared_peer.eq(got.src),
                     v.transmitter.cleared_tag.eq(got.seq),
                     v.transmitter.event.eq(receiver.event),
                     v.transmitter.event_code.eq(got.code),
                     v.transmitter.event_addr.eq(got.addr),
                     v.transmitter.event_pass.eq(got.arg[:8])]
        for bit in ("region", "alu", "unexpected", "protocol", "length"):
            with m.If(getattr(receiver.errors, bit)):
                m.d.comb += getattr(raise_error, bit).eq(1)

    def _cts_sender(self, m, v):
        """The clear-to-send (and registration) packets this node sends, and the delivery
        protocol's replies and probes (docs/faults.md, "Packet-level recovery")."""
        clear_tx, cur, receiver, transmitter = v.clear_tx, v.cur, v.receiver, v.transmitter
        reg_pending = v.control.reg_pending
        cts_pending, rx_peer, rx_tag = receiver.cts_pending, receiver.peer, receiver.tag
        got = receiver.header
        # The receive half's reply, held until it leaves; one at a time: a reply due while
        # one waits is dropped (the sender's probe asks again).
        reply_valid = Signal()
        reply = Signal(packet_header_layout())
        # The reply's fields follow the parser's header while none waits, and hold once
        # one does: only the valid flag reads the parser's decision.  Loaded under the
        # decision, their enables were the 256-bit engine's late pins at seed 3 (rx_busy ->
        # the parser's data checks -> reply's 100 enables, 5 levels, 5.21 ns).
        with m.If(~reply_valid):
            m.d.sync += [reply.kind.eq(PacketKind.CLEAR),
                         reply.code.eq(receiver.reply_code), reply.src.eq(self.node_id),
                         reply.dst.eq(got.src), reply.seq.eq(got.seq),
                         reply.arg.eq(got.arg[:8]), reply.addr.eq(receiver.bytes_taken)]
        with m.If(receiver.reply):
            m.d.sync += reply_valid.eq(1)
        probe = Signal(packet_header_layout())
        m.d.comb += [probe.kind.eq(PacketKind.CLEAR), probe.code.eq(ClearCode.PROBE),
                     probe.src.eq(self.node_id), probe.dst.eq(transmitter.peer),
                     probe.seq.eq(transmitter.tag), probe.arg.eq(transmitter.pass_number)]
        # The clear-to-send: the source may now stream the message.
        # An aggregate command's registration (seed 003, step 7.1) leaves the same way.
        first = Signal(packet_header_layout())
        m.d.comb += [first.kind.eq(Mux(reg_pending, PacketKind.REPACK_REGISTER, PacketKind.CLEAR)),
                     first.src.eq(self.node_id),
                     first.dst.eq(Mux(reg_pending, cur.send_to, rx_peer)), first.seq.eq(rx_tag)]
        # The header offered is a register (`offer`), loaded while empty with the first due
        # of the three, which is taken from its source as it loads: the offer then holds
        # until taken (the stream rule) with no choice in front of it, and the choice reads
        # flops only.  Chosen in front of the sender, from the sources and the offer's
        # state, it was the 256-bit engine's routed path at seed 2 of 4d70ce7
        # (reg_pending -> cts_pending -> the pick -> the sources' resets, 6 levels,
        # 5.38 ns).  A header leaves a cycle later than it did, and back-to-back headers a
        # cycle apart more: they are a few per message.
        offer_valid = Signal()
        offer = Signal(packet_header_layout())
        load = ~offer_valid & ~self.clear
        pick = Signal(2)                # 0: clear-to-send or registration, 1: reply, 2: probe
        with m.If(cts_pending | reg_pending):
            m.d.comb += pick.eq(0)
        with m.Elif(reply_valid):
            m.d.comb += pick.eq(1)
        with m.Else():
            m.d.comb += pick.eq(2)
        due = Cat(cts_pending | reg_pending, reply_valid, transmitter.probe)
        loads = load & due.any()
        with m.If(loads):
            m.d.sync += [offer_valid.eq(1),
                         offer.eq(Mux(pick == 0, first, Mux(pick == 1, reply, probe)))]
        with m.If(clear_tx.header.valid & clear_tx.header.ready):
            m.d.sync += offer_valid.eq(0)
        m.d.comb += [clear_tx.header.valid.eq(offer_valid), clear_tx.header.payload.eq(offer)]
        # Busy while a header is offered or due (the control's FINISH waits for both).
        m.d.comb += v.control.sender_busy.eq(offer_valid | due.any())
        m.d.comb += [v.first_sent.eq(loads & (pick == 0)),
                     transmitter.probe_sent.eq(loads & (pick == 2))]
        with m.If(loads & (pick == 1)):
            m.d.sync += reply_valid.eq(0)
        with m.If(self.clear):
            m.d.sync += [reply_valid.eq(0), offer_valid.eq(0)]
        # The receive's clear-to-send is due until it leaves (the registration likewise:
        # EngineControl's reg_sent).
        m.d.comb += receiver.cts_sent.eq(v.first_sent)
