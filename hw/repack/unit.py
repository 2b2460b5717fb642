# Ref: seed 003 (CN111614581, Mellanox): in-network data repack circuits for small all-to-all
#      and all-to-all-v.  The N×N block matrix is cut into dh×dv sub-matrices (fig. 8); a repack
#      unit takes one message from each source of a sub-matrix, regroups the blocks by
#      destination and sends one message to each destination (fig. 9); a control tree registers
#      the ranks, marks subgroups ready, pairs them, hands the pair to a free unit and reports
#      completion (steps 7.1-7.6).
# Ref: Amaranth RFC 61 / amaranth.lib.stream (a transfer happens in a cycle where valid and
#      ready are both high; valid never waits for ready).
"""The repack (aggregator) unit.

:class:`RepackUnit` transposes one sub-matrix at a time: it takes one message from each source
of S (its blocks for D, in D order) and sends one message to each destination of D (its blocks
from S, in S order).  :mod:`.formats` describes the messages; ``docs/repack.md`` the protocol.

The unit joins its parts, each a component of its own module: the configuration's and the
input's register slices (:mod:`.unit_slices`), the input's parser (:mod:`.unit_input`), the
state machine and sender (:mod:`.unit_sequencer`, with the columns of :mod:`.unit_columns`),
the output pipeline (:mod:`.unit_output`), the cursors (:mod:`.unit_columns`), the event queue
and error count (:mod:`.unit_events`); it holds the data buffer and the length tables.
"""


from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..lib.memattrs import COLLISIONS_DONT_CARE
from ..params import check_data_width
from .formats import (LENGTH_WIDTH, UNIT_EVENT_LAYOUT, RepackError, _check_capacity,
                      _check_max_group, message_stream, unit_config_layout)
from .unit_columns import Cursors
from .unit_events import ErrorLog, EventQueue, Watchdog
from .unit_input import InputParser
from .unit_output import OutputPipeline
from .unit_sequencer import UnitSequencer
from .unit_slices import ConfigSlice, InputSums


__all__ = ["RepackUnit"]


class RepackUnit(wiring.Component):
    """Transposes one dh×dv sub-matrix of blocks at a time.

    Parameters
    ----------
    data_width : int
        Beat width, 64, 128, 256 or 512.
    capacity_bytes : int
        Bytes of the data buffer (a :class:`~amaranth.lib.memory.Memory` of
        ``capacity_bytes // (data_width // 8)`` rows); a positive multiple of the beat bytes.
    max_group : int
        Largest dh and dv, 1 .. 256.

    Members
    -------
    cfg : ``In(stream.Signature(unit_config_layout(max_group)))``
        A sub-matrix to transpose; taken only while the unit is idle.  A configuration out of
        range (BAD_CONFIG) or too large for the buffer (CAPACITY, see
        :func:`buffer_bytes_needed`) is refused with a DONE event carrying the code.
    i : ``In(message_stream(data_width))``
        Messages from the sources of S, in any order, one at a time.
    o : ``Out(message_stream(data_width))``
        One message per destination of D, in D order.
    event : ``Out(stream.Signature(UNIT_EVENT_LAYOUT))``
        TAKEN per good source message, DELIVERED per destination message, then DONE.
    busy : ``Out(1)``
        A sub-matrix is configured and not yet finished.
    active : ``Out(1)``
        A beat moved on ``i`` or ``o`` in this cycle (the control tree counts it as progress).
    errors : ``Out(32)``
        Number of errors seen (bad messages, refused configurations, timeouts); wraps.
    last_error : ``Out(RepackError)``
        Code of the latest of those.
    busy_cycles : ``Out(32)``
        Cycles with ``busy`` set; wraps.

    Behaviour
    ---------
    - Store and forward: every source message of the sub-matrix is stored before the first
      output beat leaves, so a bad message drops the whole sub-matrix and nothing is half
      delivered.
    - Rate: one input beat per cycle.  Output: one header beat, one table beat and one
      buffer row per cycle; a block costs one cycle per buffer row its bytes touch (blocks
      of whole beats move one beat per cycle; a small block straddling two rows costs two
      cycles), an empty block one cycle unless the message has ended.  The length tables
      sit in ``min(data_width // 16, max_group)`` banks so a table beat is read in a cycle.
    - While collecting, a message with another tag (WRONG_TAG), from a rank not in S
      (UNKNOWN_SOURCE), or arriving while no sub-matrix is configured (STRAY) is dropped and
      counted; the sub-matrix goes on.  A second message from one source (DUPLICATE), a block
      count other than dv or a non-zero length past it (OUTSIDE_D), a table that disagrees with
      the message's beats or ``keep`` (LENGTH), bytes beyond the budget (OVER_BUDGET) and
      ``timeout``
      cycles without an input beat (TIMEOUT) drop the sub-matrix: the unit drains the other
      sources' messages (or stops waiting, on TIMEOUT) and ends with DONE(code) and no
      output.  A message cut short by TIMEOUT has its remaining beats dropped.
    - Input is not parsed while the unit sends (its input register slice holds up to two
      beats); output waits for the receiver without a time limit (the control tree's budget
      covers a receiver that never drains).
    - Pipelined for its clock: input register slice and header-compare stage; on output, a
      registered buffer read, a two-stage byte rotator and a register slice.  Each stage
      adds a cycle per sub-matrix, not per beat (``docs/repack.md``, Pipeline).
    """

    def __init__(self, data_width, capacity_bytes, max_group):
        check_data_width(data_width)
        _check_capacity(capacity_bytes, data_width)
        _check_max_group(max_group)
        self._data_width = data_width
        self._capacity = capacity_bytes
        self._max_group = max_group
        self._parts = ()
        super().__init__({
            "cfg": In(stream.Signature(unit_config_layout(max_group))),
            "i": In(message_stream(data_width)),
            "o": Out(message_stream(data_width)),
            "event": Out(stream.Signature(UNIT_EVENT_LAYOUT)),
            "busy": Out(1),
            "active": Out(1),
            "errors": Out(32),
            "last_error": Out(RepackError),
            "busy_cycles": Out(32),
        })

    @property
    def data_width(self):
        return self._data_width

    @property
    def capacity_bytes(self):
        return self._capacity

    @property
    def max_group(self):
        return self._max_group

    @property
    def data_mirrors(self):
        """(flop, the expression it stands for) pairs of the unit's parts, which a test holds
        equal in every cycle (built by elaboration)."""
        return [pair for part in self._parts for pair in part.mirrors]

    def elaborate(self, platform):
        m = Module()
        W, G = self._data_width, self._max_group
        B = W // 8                              # bytes per beat
        E = W // LENGTH_WIDTH                   # length entries per table beat
        TBMAX = -(-G // E)                      # table beats per source, at most
        depth = self._capacity // B

        m.submodules.config = cfg_in = ConfigSlice(W, self._capacity, G)
        m.submodules.sums = sums = InputSums(W)
        m.submodules.input = inp = InputParser(W, self._capacity, G)
        m.submodules.sequencer = seq = UnitSequencer(W, self._capacity, G)
        m.submodules.output = out = OutputPipeline(W, depth)
        m.submodules.cursors = cursors = Cursors(W, self._capacity, G)
        m.submodules.events = events = EventQueue(G)
        m.submodules.errors = errors = ErrorLog()
        m.submodules.watchdog = watchdog = Watchdog()
        self._parts = (inp, seq, out)

        # Data buffer: each source's data from a row boundary on (buffer_bytes_needed).
        # Collecting (the only writer) and sending (the only reader) never overlap: the unit
        # sends only in HEADER .. DRAIN, after its last message is written, and collects only
        # in COLLECT.  A read and a write of one row in one cycle is impossible, so synthesis
        # may leave such collisions undefined (no read-first emulation in front of the port).
        m.submodules.buffer = buf = Memory(shape=W, depth=depth, init=[],
                                           attrs=COLLISIONS_DONT_CARE)
        wr = buf.write_port()
        rd = buf.read_port(domain="sync", transparent_for=())
        m.d.comb += [wr.addr.eq(inp.buf_addr), wr.data.eq(inp.buf_data), wr.en.eq(inp.buf_en),
                     rd.addr.eq(out.rd_addr), rd.en.eq(out.rd_en), out.rd_data.eq(rd.data)]
        # Length tables, stored as they arrive, in NB banks so that one output table beat (the
        # lengths of NB consecutive sources for one destination) is read in one cycle: table
        # beat t of source i is row (i // NB) * TBMAX + t of bank i % NB.  Small, read
        # combinationally (distributed RAM).  Each row keeps its entries' non-zero flags
        # beside them (the input beat's `nz`, computed before the unit): the table state
        # reads a flag, where a compare of the read entry was behind its flops (tab_row -> the
        # read -> the entry's zero test -> nz_q, the 64-bit unit's worst estimate), and
        # whether it is two rows' bytes or more (`big`), for the same reason: the zero test of
        # its high bits in front of `fitcol` was a late pin of the 256-bit unit alone at
        # seed 3 of abe24a0 (lens_q -> the test -> fitcol3, 5.12 ns).
        NB = min(E, G)
        BROWS = -(-G // NB) * TBMAX
        for b in range(NB):
            m.submodules[f"tables{b}"] = bank = Memory(shape=W + 2 * E, depth=BROWS, init=[])
            bank_w, bank_r = bank.write_port(), bank.read_port(domain="comb")
            m.d.comb += [bank_w.addr.eq(inp.tab_addr), bank_w.data.eq(inp.tab_data),
                         bank_w.en.eq(inp.tab_en[b]),
                         bank_r.addr.eq(seq.tab_addr), seq.tab_data[b].eq(bank_r.data)]

        # The configuration: checked (ConfigSlice), taken by the state machine.
        wiring.connect(m, wiring.flipped(self.cfg), cfg_in.i)
        wiring.connect(m, cfg_in.o, seq.cfg)
        # The input: summed (InputSums), parsed under the state machine's configuration.
        wiring.connect(m, wiring.flipped(self.i), sums.i)
        wiring.connect(m, sums.o, inp.i)
        m.d.comb += [
            inp.cfg.eq(cfg_in.o.payload), inp.cfg_take.eq(seq.cfg_take), inp.c.eq(seq.c),
            inp.idle.eq(seq.idle), inp.accepting.eq(seq.accepting), inp.st_idle.eq(seq.st_idle),
            inp.st_collect.eq(seq.st_collect), inp.timeout_fire.eq(watchdog.fire),
            inp.ev_free.eq(events.free),
            seq.take.eq(inp.take), seq.head.eq(inp.head), seq.arrived.eq(inp.arrived),
            seq.cur_rank.eq(inp.cur_rank), seq.taken_now.eq(inp.taken_now),
            self.active.eq(inp.take | (self.o.valid & self.o.ready)),
        ]
        # The cursors: set by the input, moved by the sender.
        m.d.comb += [
            cursors.set.eq(inp.cursor_set), cursors.set_index.eq(inp.cursor_index),
            cursors.set_row.eq(inp.cursor_row),
            cursors.move.eq(seq.move), cursors.move_index.eq(seq.move_index),
            cursors.move_to.eq(seq.move_to),
            seq.cur_addr.eq(cursors.addr), seq.cur_room.eq(cursors.room),
        ]
        # The output: operations issued by the sender.
        wiring.connect(m, seq.issue, out.issue)
        wiring.connect(m, out.o, wiring.flipped(self.o))
        m.d.comb += [
            out.ev_free.eq(events.free),
            seq.advance.eq(out.advance), seq.pipe_busy.eq(out.busy),
            seq.out_valid.eq(out.out_valid), seq.out_rank.eq(out.out_rank),
            seq.delivered.eq(out.delivered),
        ]
        # The watchdog: loaded at a configuration's take, run while collecting.
        m.d.comb += [
            watchdog.st_idle.eq(seq.st_idle), watchdog.cfg_take.eq(seq.cfg_take),
            watchdog.timeout.eq(cfg_in.o.payload.cfg.timeout),
            watchdog.st_collect.eq(seq.st_collect), watchdog.take.eq(inp.take),
            watchdog.c_timeout.eq(seq.c.timeout), seq.timeout_fire.eq(watchdog.fire),
        ]
        # Events and errors.
        wiring.connect(m, events.event, wiring.flipped(self.event))
        m.d.comb += [
            events.post.eq(seq.ev_post), events.data.eq(seq.ev_data),
            seq.ev_free.eq(events.free),
            errors.hits.eq(inp.hits), errors.timeout.eq(seq.err_timeout),
            errors.refuse.eq(seq.err_refuse), errors.refuse_code.eq(seq.refuse_code),
            errors.st_idle.eq(seq.st_idle), errors.cfg_take.eq(seq.cfg_take),
            seq.fail_now.eq(errors.fail_now), seq.fail_code_now.eq(errors.fail_code_now),
            self.errors.eq(errors.errors), self.last_error.eq(errors.last_error),
            self.busy.eq(seq.busy), self.busy_cycles.eq(seq.busy_cycles),
        ]
        return m
