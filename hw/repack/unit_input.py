# Ref: seed 003 (CN111614581, Mellanox): a repack unit takes one message from each source of
#      a sub-matrix (fig. 9).
"""The repack unit's input: each source's message parsed and checked (header, length table,
data), its table written to the length tables and its data to the buffer
(:class:`InputParser`)."""

from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..engine.regions import low_mask_count
from ..lib.builder import share
from ..params import check_data_width
from .formats import (HEADER_LAYOUT, LENGTH_WIDTH, RANK_WIDTH, RepackError, _check_capacity,
                      _check_max_group, _priority, message_beat_layout, unit_config_layout)
from .unit_arith import _exceeds, _low_thermometer
from .unit_slices import checked_config_layout, summed_beat_layout
from ..lib.mirrors import Mirrored

__all__ = ["InputParser"]


class InputParser(Mirrored, wiring.Component):
    """Parses, checks and stores the sources' messages.

    Parameters
    ----------
    data_width : int
        Beat width, 64, 128, 256 or 512.
    capacity_bytes : int
        Bytes of the data buffer.
    max_group : int
        Largest dh and dv, 1 .. 256.

    Members
    -------
    i : ``In(stream.Signature(summed_beat_layout(data_width)))``
        The beats, with their length entries summed (:class:`~.unit_slices.InputSums`).
    cfg : ``In(checked_config_layout(max_group))``; cfg_take : ``In(1)``
        The configuration offered to the unit, and its take in this cycle.
    c : ``In(unit_config_layout(max_group))``
        The sub-matrix being transposed (set at the take).
    idle, accepting : ``In(1)``
        Flops of the unit's state: idle; idle or collecting.
    st_idle, st_collect : ``In(1)``
        The unit is idle; collecting.
    timeout_fire : ``In(1)``
        The watchdog fires: a message being parsed is dropped.
    ev_free : ``In(1)``
        Room for an event (TAKEN): a message's last beat waits without it.
    take : ``Out(1)``
        A beat is parsed in this cycle.
    head : ``Out(1)``
        The next beat is a message's header.
    arrived : ``Out(range(max_group + 1))``
        Sources whose message has begun.
    cur_rank : ``Out(RANK_WIDTH)``
        The rank of the message being taken.
    taken_now : ``Out(1)``
        A message was taken whole in this cycle (TAKEN).
    hits : ``Out(len(RepackError))``
        Errors found in this cycle, one bit per code.
    buf_addr, buf_data, buf_en : ``Out``
        The data buffer's write port.
    tab_addr, tab_data : ``Out``; tab_en : ``Out(NB)``
        The length tables' write ports (one enable per bank).
    cursor_set : ``Out(1)``; cursor_index : ``Out(range(max(2, max_group)))``; cursor_row : ``Out``
        Set the cursor of a source to the start of a row (a strobe from a flop).
    """

    def __init__(self, data_width, capacity_bytes, max_group):
        check_data_width(data_width)
        _check_capacity(capacity_bytes, data_width)
        _check_max_group(max_group)
        self._data_width = data_width
        self._capacity = capacity_bytes
        self._max_group = max_group
        self._mirrors = []
        W, G = data_width, max_group
        E = W // LENGTH_WIDTH
        NB = min(E, G)
        depth = capacity_bytes // (W // 8)
        brows = -(-G // NB) * -(-G // E)
        super().__init__({
            "i": In(stream.Signature(summed_beat_layout(W))),
            "cfg": In(checked_config_layout(G)), "cfg_take": In(1),
            "c": In(unit_config_layout(G)),
            "idle": In(1), "accepting": In(1), "st_idle": In(1), "st_collect": In(1),
            "timeout_fire": In(1), "ev_free": In(1),
            "take": Out(1), "head": Out(1), "arrived": Out(range(G + 1)),
            "cur_rank": Out(RANK_WIDTH), "taken_now": Out(1),
            "hits": Out(len(RepackError)),
            "buf_addr": Out(range(max(2, depth))), "buf_data": Out(W), "buf_en": Out(1),
            "tab_addr": Out(range(max(2, brows))), "tab_data": Out(W + 2 * E), "tab_en": Out(NB),
            "cursor_set": Out(1), "cursor_index": Out(range(max(2, G))),
            "cursor_row": Out(range(max(2, depth))),
        })

    def elaborate(self, platform):
        m = Module()
        self._valid_copies = []
        W = self._data_width
        B = W // 8                              # bytes per beat
        LB = B.bit_length() - 1                 # byte-in-beat bits
        E = W // LENGTH_WIDTH                   # length entries per table beat
        LE = E.bit_length() - 1
        G = self._max_group
        TBMAX = -(-G // E)                      # table beats per source, at most
        depth = self._capacity // B
        AB = self._capacity.bit_length()        # byte addresses 0 .. capacity
        NB = min(E, G)
        BROWS = -(-G // NB) * TBMAX
        c = self.c
        ev_free = self.ev_free
        st_collect = self.st_collect

        def count(code):
            return self.hits[code.value].eq(1)

        v = SimpleNamespace(**{k: x for k, x in locals().items()
                               if k not in ("self", "platform")})
        self._input_stage(m, v)
        self._registers(m, v)
        self._taken_post(m, v)
        self._input_beat(m, v)
        self._configured(m, v)
        self._mirrors = [(v.taken_now, v.taken_in_fsm), v.all_zero_mirror, *self._valid_copies]
        return m

    def _input_stage(self, m, v):
        """The input's second register stage: each beat with its header compares and flags."""
        W, B, LB, E, LE, G, c = v.W, v.B, v.LB, v.E, v.LE, v.G, v.c
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
        cfg_take = self.cfg_take
        idle = self.idle
        p = self.cfg.cfg
        src_on = Signal(G)                      # entries of S in use: k < dh
        with m.If(cfg_take):
            m.d.sync += src_on.eq(self.cfg.src_on)
        sk = self.i.payload
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
        m.d.comb += self.i.ready.eq(load)
        sk_full_keep = sk.full_keep
        sk_pad_nz = (sk.nz & ~tb_mask).any()
        with m.If(load):
            m.d.sync += [
                in_q_valid.eq(self.i.valid),
                in_q.beat.keep.eq(sk.beat.keep), in_q.beat.last.eq(sk.beat.last),
                in_q.beat.rank.eq(sk.beat.rank), in_q.tsum.eq(sk.tsum), in_q.nz.eq(sk.nz),
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
                                self.cfg.src_on & Cat(p.src[k] == sk_hdr.rank
                                                      for k in range(G)),
                                src_on & Cat(c.src[k] == sk_hdr.rank for k in range(G)))),
            ]

        # The beat's data in 64-bit groups, each loaded by a copy of the stage's load made
        # from a copy of its valid flop (each copy's enable reads its own output, so
        # synthesis keeps them apart): one enable onto the ~W data flops was the front of
        # the 256-bit unit's late pins (`in_q:M`, 4.98 ns at seed 1 of a063892).  The
        # copies equal in_q_valid every cycle (mirrors).
        for g in range(0, len(sk.beat.data), 64):
            valid_copy = Signal(name=f"in_q_valid_{g // 64}")
            with m.If(~valid_copy | in_ready):
                m.d.sync += [valid_copy.eq(self.i.valid),
                             in_q.beat.data[g:g + 64].eq(sk.beat.data[g:g + 64])]
            self._valid_copies.append((valid_copy, in_q_valid))
        beat = in_q.beat
        # A beat that ends a message may post TAKEN, so it waits while the event FIFO is full.
        m.d.comb += in_ready.eq(self.accepting & (v.ev_free | ~beat.last))
        take = self.take
        m.d.comb += take.eq(in_q_valid & in_ready)
        m.d.comb += self.head.eq(in_state == IN_HEAD)
        share(v, locals())

    def _registers(self, m, v):
        """The message's and the sub-matrix's registers, and the budget flags of the beat
        entering the input stage."""
        B, LB, G, TBMAX, depth, AB, NB, BROWS = (v.B, v.LB, v.G, v.TBMAX, v.depth, v.AB, v.NB,
                                                 v.BROWS)
        in_q, beat, in_state, IN_HEAD, IN_DROP = v.in_q, v.beat, v.in_state, v.IN_HEAD, v.IN_DROP
        hdr = HEADER_LAYOUT(beat.data[:HEADER_LAYOUT.size])
        hit = in_q.hit
        idx = _priority(m, hit, "src_index")

        received = Signal(G)                    # sources whose message has begun
        arrived = self.arrived
        room_bytes = Signal(32)                 # total_bytes less the bytes accepted so far
        alloc_row = Signal(range(depth + 1))

        cur = Signal(range(max(2, G)))          # index in S of the message being taken
        cur_rank = self.cur_rank
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
        all_zero_mirror = (in_q.all_zero & v.in_q_valid, msg_zero & in_q.zero & v.in_q_valid)
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
        beat = v.beat
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
        taken_now = self.taken_now
        m.d.comb += taken_now.eq(v.in_q_valid & self.accepting & v.ev_free & beat.last
                                 & (((in_state == IN_DATA) & v.data_final & tail_ok)
                                    | ((in_state == IN_TABLE) & ends_table)))
        taken_in_fsm = Signal()

        def taken():
            return taken_in_fsm.eq(1)

        share(v, locals())

    def _input_beat(self, m, v):
        """The input states' decisions on the beat parsed in this cycle, and the buffer's and
        the tables' writes."""
        LB, in_state, in_q = v.LB, v.in_state, v.in_q
        msg_bytes, data_left, data_final, wr_row = v.msg_bytes, v.data_left, v.data_final, v.wr_row
        # msg_bytes + tsum <= B without the 32-bit sum: both small (flags kept beside them),
        # and their low LB + 1 bits' sum at most B (a sum and a compare in sequence, each 32
        # bits, were the 64-bit unit's critical path).
        msg_small = Signal(init=1)              # msg_bytes <= B
        sum_small = (msg_small & in_q.small
                     & ((msg_bytes[:LB + 1] + in_q.tsum[:LB + 1]) <= v.B))
        with m.If(in_state == v.IN_TABLE):
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
                         v.tail_bytes.eq(msg_bytes[:LB] + in_q.tsum[:LB]),
                         wr_row.eq(v.alloc_row)]
        # A cursor write a cycle after the decision that asks for it (Cursors): the strobe,
        # set by that decision, writes the first row to the cursor of `cur` from flops.
        cursor_set = self.cursor_set
        m.d.sync += cursor_set.eq(0)
        m.d.comb += [self.cursor_index.eq(v.cur), self.cursor_row.eq(wr_row)]
        # The buffer's address and data whatever the state, its enable alone decided: set
        # only in the data state's take, the data's ~W bits were ANDed with that decision,
        # the 256-bit unit's latest pins alone at seed 3 of 155b759 (ev_free -> the take ->
        # the block RAMs' data inputs, 5.12 ns).
        m.d.comb += [self.buf_addr.eq(wr_row), self.buf_data.eq(v.beat.data)]
        self._table_writes(m, v)
        share(v, {"msg_small": msg_small, "sum_small": sum_small, "cursor_set": cursor_set})
        with m.If(v.take):
            with m.Switch(in_state):
                with m.Case(v.IN_HEAD):
                    self._header(m, v)
                with m.Case(v.IN_TABLE):
                    self._table_beat(m, v)
                with m.Case(v.IN_DATA):
                    self._data_beat(m, v)
                with m.Case(v.IN_DROP):
                    with m.If(v.beat.last):
                        m.d.sync += in_state.eq(v.IN_HEAD)

    def _table_writes(self, m, v):
        """The length tables' write ports."""
        beat, in_q, tab_wrow, tab_wsel = v.beat, v.in_q, v.tab_wrow, v.tab_wsel
        in_state, IN_TABLE = v.in_state, v.IN_TABLE
        # A table beat is written whenever one waits in the table state and the unit
        # accepts, taken or not: one not taken (only a message's last beat, waiting for room
        # for events) is written again, unchanged, in the cycle it is taken, and `tab_wrow`
        # moves only at a take.  So the banks' ~W enables read four flops, where the take's
        # decision (`ev_free` -> `take` -> each bank's enable) was the 256-bit core's path at
        # seed 2 of 0141bc8 (4 levels, 9.36 ns, mostly the enables' routing).
        table_write = Signal()
        m.d.comb += table_write.eq(v.in_q_valid & self.accepting & (in_state == IN_TABLE))
        m.d.comb += [self.tab_addr.eq(tab_wrow), self.tab_data.eq(Cat(beat.data, in_q.nz,
                                                                      in_q.big)),
                     self.tab_en.eq(Cat(table_write & tab_wsel[b] for b in range(v.NB)))]

    @staticmethod
    def _header(m, v):
        """A header's checks (IN_HEAD)."""
        G, LE, NB, TBMAX, count, head_or_drop = v.G, v.LE, v.NB, v.TBMAX, v.count, v.head_or_drop
        in_q, beat, hdr, hit, idx, in_state = v.in_q, v.beat, v.hdr, v.hit, v.idx, v.in_state
        received, arrived = v.received, v.arrived
        # The message's registers load at every header, taken or refused: only
        # the table and data states read them, and a refused header never gets
        # there.  The header's checks then decide the state alone, not the
        # enables of these (the 256-bit unit's path, in_q -> checks -> `cur`).
        m.d.sync += [v.cur.eq(idx), v.cur_rank.eq(hdr.rank), v.t.eq(0),
                     v.t_last.eq(v.tb_last == 0), v.msg_bytes.eq(0), v.msg_small.eq(1),
                     v.room_left.eq(v.room_bytes), v.msg_zero.eq(1),
                     v.tab_wsel.eq(Const(1, NB) << (idx if NB == G else idx & (NB - 1))),
                     v.tab_wrow.eq(0 if NB == G else (idx >> LE) * TBMAX)]
        with m.If(~v.st_collect):
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
            with m.Elif(beat.last | ~v.full_keep):
                m.d.comb += count(RepackError.LENGTH)
                m.d.sync += head_or_drop()
            with m.Else():
                m.d.sync += in_state.eq(v.IN_TABLE)

    @staticmethod
    def _table_beat(m, v):
        """A length table's beat (IN_TABLE)."""
        count, head_or_drop, in_q, beat, in_state = (v.count, v.head_or_drop, v.in_q, v.beat,
                                                     v.in_state)
        t, t_last, msg_bytes, full_keep, taken = v.t, v.t_last, v.msg_bytes, v.full_keep, v.taken
        IN_HEAD, IN_DROP = v.IN_HEAD, v.IN_DROP
        pad_bad = t_last & in_q.pad_nz
        tsum = in_q.tsum
        beat_zero = in_q.zero
        new_bytes = Signal(32)
        m.d.comb += new_bytes.eq(msg_bytes + tsum)
        m.d.sync += [
            v.tab_wrow.eq(v.tab_wrow + 1),
            t.eq(t + 1), t_last.eq(t + 1 == v.tb_last),
            msg_bytes.eq(new_bytes), v.msg_small.eq(v.sum_small),
            v.room_left.eq(v.room_left - tsum),
            v.msg_zero.eq(v.msg_zero & beat_zero),
        ]
        # Accepted first (flags of the beat's stage and three registers).
        with m.If(t_last & in_q.final_ok & ~in_q.over & ~in_q.all_zero):
            m.d.sync += [v.cursor_set.eq(1), v.room_commit.eq(1), in_state.eq(v.IN_DATA)]
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

    def _data_beat(self, m, v):
        """A data beat, written to the buffer (IN_DATA)."""
        B, count, head_or_drop, beat, in_state = v.B, v.count, v.head_or_drop, v.beat, v.in_state
        data_left, wr_row, taken = v.data_left, v.wr_row, v.taken
        # The next message starts on the row after this one (rows are allocated
        # as they are written; OVER_BUDGET already bounds their number).
        final_row = v.data_final
        m.d.comb += self.buf_en.eq(1)
        m.d.sync += [wr_row.eq(wr_row + 1), v.alloc_row.eq(wr_row + 1),
                     data_left.eq(data_left - B), v.data_final.eq(data_left <= 2 * B)]
        tail_ok = v.tail_ok
        with m.If(~Mux(final_row, tail_ok, v.full_keep)):
            # Ref: issue 5: a length table that disagrees with the message length.
            m.d.comb += count(RepackError.LENGTH)
            m.d.sync += head_or_drop()
        with m.Elif(final_row):
            with m.If(beat.last):
                m.d.comb += taken()
                m.d.sync += in_state.eq(v.IN_HEAD)
            with m.Else():
                m.d.comb += count(RepackError.LENGTH)
                m.d.sync += in_state.eq(v.IN_DROP)
        with m.Elif(beat.last):
            m.d.comb += count(RepackError.LENGTH)
            m.d.sync += in_state.eq(v.IN_HEAD)

    def _configured(self, m, v):
        """The registers a configuration's take loads, a timeout's drop of the message being
        parsed, and the registers cleared while idle: set by the unit's state machine
        (:class:`~.unit_sequencer.UnitSequencer`), after the input's own assignments."""
        p = self.cfg.cfg
        # The sub-matrix's registers load at every take, refused or not (see
        # UnitSequencer._configure).
        with m.If(self.st_idle):
            with m.If(self.cfg_take):
                m.d.sync += [
                    v.tb_last.eq((p.dv - 1) >> v.LE),
                    # (dv - 1) % E + 1 valid entries in the last table beat.
                    v.tb_mask.eq(_low_thermometer(p.dv, v.E)),
                    v.room_bytes.eq(p.total_bytes),
                    v.alloc_row.eq(0),
                ]
        # COLLECT's timeout: a message cut short has its remaining beats dropped.
        with m.If(self.st_collect):
            with m.If(self.timeout_fire):
                with m.If(v.in_state != v.IN_HEAD):
                    m.d.sync += v.in_state.eq(v.IN_DROP)
        # Cleared in every idle cycle, after every other assignment (see
        # UnitSequencer._idle_clears).
        with m.If(self.st_idle):
            m.d.sync += [v.received.eq(0), v.arrived.eq(0)]
