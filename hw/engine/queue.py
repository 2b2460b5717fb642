"""The engine's command queue and its push-time checks: nothing refused is queued.

A push is checked in two registered steps and acts in the cycle after them, so no check is in
series with the queue's write or with the engine's error register: the push registers the
command with its checks (each a compare or a sum of its own fields), the regions' ends are
bounded a cycle later, and the write (or the refusal) follows.  The rules are the device
model's too (:func:`nicoll.model.engine.push_refusals`; a test holds the two together on
random command words).
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .command import COMMAND_LAYOUT, ENGINE_ERROR_LAYOUT, StepAction, walker_length_bits
from ..lib.memattrs import COLLISIONS_DONT_CARE

__all__ = ["CommandQueue"]


class CommandQueue(wiring.Component):
    """The step commands pushed since the last clear, with the push-time checks.

    Parameters
    ----------
    data_width, max_nodes, mem_size, depth, packet_beats : int
        The engine's build (:class:`~nicoll.hw.engine.Engine`'s parameters of the same
        meaning; ``depth`` is its ``queue_depth``).

    Members
    -------
    cmd : ``In(COMMAND_LAYOUT)``; push, clear : ``In(1)``
        The command CONTROL.push appends, sampled with the strobe, and CONTROL.clear, which
        empties the queue (and wins over a push in its cycle).
    running : ``In(1)``
        The engine runs: a push reaching the write is refused.
    queued : ``Out(16)``; empty, full : ``Out(1)``
        Commands held, and ``queued`` == 0 and == ``depth``, each a flop.
    checking : ``Out(1)``
        A push is in its checks (the engine's start waits for it).
    refused : ``Out(ENGINE_ERROR_LAYOUT)``
        The error bits a push sets, in the cycle it is refused (``running``, else
        ``queue_full``, else every one of ``region``, ``peer``, ``command`` that applies);
        the other bits are 0.
    read_addr : ``In(range(depth))``; read_data : ``Out(COMMAND_LAYOUT)``
        The queue's read port, its data a cycle after its address (block RAM).
    """

    def __init__(self, *, data_width, max_nodes, mem_size, depth, packet_beats):
        self._beat_bytes = data_width // 8
        self._max_nodes = max_nodes
        self._mem_size = mem_size
        self._depth = depth
        self._packet_beats = packet_beats
        self._length_bits = walker_length_bits(mem_size)
        #: (flop, the expression it stands for) pairs a test holds equal in every cycle.
        self.mirrors = []
        super().__init__({
            "cmd": In(COMMAND_LAYOUT), "push": In(1), "clear": In(1), "running": In(1),
            "queued": Out(16), "empty": Out(1, init=1), "full": Out(1), "checking": Out(1),
            "refused": Out(ENGINE_ERROR_LAYOUT),
            "read_addr": In(range(depth)), "read_data": Out(COMMAND_LAYOUT),
        })

    def _high(self, value):
        """Whether ``value`` has a bit set at or above the walkers' count bits."""
        B = self._length_bits
        return value[B:].any() if B < len(value) else Const(0, 1)

    def _region_parts(self, region):
        """A region's checks in two registered steps: its end (a sum) and the compares of
        its own fields at the push, the end's bound a cycle later, so no compare follows
        a sum in one cycle.  Each on the walkers' count bits (B, enough for mem_size) with
        the high bits' zero tests beside it: a field of 2**B or more is past the memory
        (the region is refused whatever the rest says), and with every field below 2**B
        the narrow sum and compares are the whole ones.  As 32-bit carry chains behind
        the pushed command they were the 64-bit engine's latest pin alone at seed 1 of
        2ab2ae4 (cmd -> the end's chain -> pushed_send, 5.21 ns).

        Four flags follow the end, each a zero test or one narrow compare, so none follows
        another: a field past the memory or no bytes; a run in range and not zero; the run
        shorter than the length (with the length below 2**B, run < length needs the run
        below it too); the run longer than the stride (likewise).  As one OR of them the
        flag was the 64-bit engine's latest pin alone at seed 2 of b0d651b (cmd -> a
        narrow chain -> 4 LUTs -> pushed_send, 5.59 ns)."""
        B, high = self._length_bits, self._high
        return Cat(region.offset[:B] + region.length[:B],
                   high(region.offset) | high(region.length) | (region.length[:B] == 0),
                   (region.run[:B] != 0) & ~high(region.run),
                   region.run[:B] < region.length[:B],
                   ~high(region.stride) & (region.run[:B] > region.stride[:B]))

    def _region_bad(self, parts):
        """Whether :meth:`_region_parts`' registered ``parts`` refuse the region."""
        B = self._length_bits
        past, run_ok, shorter, overlap = parts[B + 1:B + 5]
        return (parts[:B + 1] > self._mem_size) | past | (run_ok & shorter & overlap)

    def _field_checks(self, cmd):
        """The peer, command and aggregate checks of a command's own fields (each a compare
        or an OR of flags), made as it is pushed."""
        beat_bytes = self._beat_bytes
        # An aggregate command (seed 003): slots of whole rows, more than one row each.
        slot_mask = beat_bytes - 1
        # At most max_nodes destination groups (one per rank at most): the slot offset's
        # product is a sum over the group's ceil(log2(max_nodes)) bits (Engine._aggregate).
        # In two flops, the send stride's compares in one: as one OR of every check the
        # flop was the 64-bit engine's latest push-time pin at seed 1 once its multipliers
        # were gone (cmd.recv -> pushed_aggregate_bad, 5.81 ns).
        aggregate_bad = Cat(
            (cmd.send_tag > self._max_nodes) | (cmd.send.stride <= beat_bytes)
            | ((cmd.send.stride & slot_mask) != 0) | (cmd.send.run != 0),
            cmd.barrier | ~cmd.has_send | ~cmd.has_recv | (cmd.action != StepAction.COPY)
            | (cmd.recv.stride == 0) | (cmd.recv.run != 0))
        peer_bad = ((cmd.has_send & (cmd.send_to >= self._max_nodes))
                    | (cmd.has_recv & (cmd.recv_from >= self._max_nodes)))
        command_bad = ((cmd.action == 3)
                       | (cmd.barrier & (cmd.has_send | cmd.has_recv))
                       | (~cmd.barrier & ~cmd.has_send & ~cmd.has_recv)
                       | ((cmd.action != StepAction.COPY) & ~cmd.has_recv)
                       | (cmd.packet_beats > self._packet_beats))
        return peer_bad, command_bad, Mux(cmd.aggregate, aggregate_bad, 0)

    def elaborate(self, platform):
        m = Module()
        # A row is written only while the engine is not running (a push then is refused)
        # and read only while it is, so a read meeting a write of its row is never used:
        # collisions may be undefined.  Defined, yosys kept a copy of every read bit and a
        # multiplexer after the block RAM, which then could not take the engine's `cur` as
        # its output register (nicoll.hw.synth.bram_outreg).
        m.submodules.queue = queue = Memory(shape=COMMAND_LAYOUT, depth=self._depth, init=[],
                                            attrs=COLLISIONS_DONT_CARE)
        q_wr = queue.write_port()
        q_rd = queue.read_port(domain="sync", transparent_for=())
        m.d.comb += [q_rd.addr.eq(self.read_addr), self.read_data.eq(q_rd.data)]
        cmd, clear, running = self.cmd, self.clear, self.running
        queued, full = self.queued, self.full

        B = self._length_bits
        peer_bad, command_bad, aggregate_bad = self._field_checks(cmd)
        pushed = Signal()
        pushed_cmd = Signal(COMMAND_LAYOUT)
        pushed_send = Signal(B + 5)     # _region_parts of each region
        pushed_recv = Signal(B + 5)
        pushed_peer_bad = Signal()
        # The aggregate checks in a flop of their own, ORed with the rest a stage later: in
        # one flop the OR of every check was the 64-bit core's latest pin at seed 1 of
        # d84feb2 (send.stride -> pushed_command_bad, 7 levels, 7.21 ns).
        pushed_command_bad = Signal()
        pushed_aggregate_bad = Signal(2)
        m.d.sync += pushed.eq(self.push & ~clear)
        with m.If(self.push):
            m.d.sync += [pushed_cmd.eq(cmd), pushed_send.eq(self._region_parts(cmd.send)),
                         pushed_recv.eq(self._region_parts(cmd.recv)),
                         pushed_peer_bad.eq(peer_bad), pushed_command_bad.eq(command_bad),
                         pushed_aggregate_bad.eq(aggregate_bad)]
        checked = Signal()
        checked_cmd = Signal(COMMAND_LAYOUT)
        checked_bad = Signal(data.StructLayout({"region": 1, "peer": 1, "command": 1}))
        bad_next = Signal.like(checked_bad)
        m.d.comb += [bad_next.region.eq((pushed_cmd.has_send & self._region_bad(pushed_send))
                                        | (pushed_cmd.has_recv & self._region_bad(pushed_recv))),
                     bad_next.peer.eq(pushed_peer_bad),
                     bad_next.command.eq(pushed_command_bad | pushed_aggregate_bad.any())]
        m.d.sync += checked.eq(pushed & ~clear)
        with m.If(pushed):
            m.d.sync += [checked_cmd.eq(pushed_cmd), checked_bad.eq(bad_next)]
        m.d.comb += self.checking.eq(pushed | checked)

        # `full` is queued >= depth as a flop, kept with queued's moves: the queue's write
        # enable is the block RAM's byte enables, and the compare's carry chain in front of
        # them was the 64-bit engine's latest pin at seed 2 once the walkers' counts
        # narrowed (queued -> queue.0.9:ADA1, 6.07 ns).
        # The write's decision, but for `running` and a clear in its own cycle, a stage
        # ahead: the queue's byte enables then follow a flop, the state's decode and the
        # clear (the checked command's flags ANDed with the state's decode were the 64-bit
        # engine's latest pins at seeds 1 and 3 once the walkers' routes were cut, state ->
        # queue.0.7:ADA2, 5.89 and 6.42 ns, 4.4 of them routing).  `full` a stage ahead is
        # the value a write in this cycle leaves; no start comes while a push is in its
        # checks, so `running` cannot rise in between.
        write_ok = Signal()
        full_next = Mux(q_wr.en, queued == self._depth - 1, full)
        m.d.sync += write_ok.eq(pushed & ~clear & ~full_next & ~bad_next.as_value().any())
        m.d.comb += q_wr.en.eq(write_ok & ~running & ~clear)
        self.mirrors += [(full, queued >= self._depth),
                         (q_wr.en, checked & ~clear & ~running & ~full
                          & ~checked_bad.as_value().any())]
        m.d.comb += [q_wr.addr.eq(queued), q_wr.data.eq(checked_cmd)]
        # A clear in the same cycle wins over these bits where the engine stores them, so
        # they need not wait for it: ANDed here, the clear input was the front of the
        # 256-bit engine's path into its any_error flop at seed 1 of 2b6ff9d (6.13 ns).
        with m.If(checked):
            with m.If(running):
                m.d.comb += self.refused.running.eq(1)
            with m.Elif(full):
                m.d.comb += self.refused.queue_full.eq(1)
            with m.Elif(checked_bad.as_value().any()):
                m.d.comb += [self.refused.region.eq(checked_bad.region),
                             self.refused.peer.eq(checked_bad.peer),
                             self.refused.command.eq(checked_bad.command)]
        with m.If(clear):
            m.d.sync += [queued.eq(0), self.empty.eq(1), full.eq(0)]
        with m.Elif(q_wr.en):
            m.d.sync += [queued.eq(queued + 1), self.empty.eq(0),
                         full.eq(queued == self._depth - 1)]
        return m
