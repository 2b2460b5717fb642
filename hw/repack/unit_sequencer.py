# Ref: seed 003 (CN111614581, Mellanox): a repack unit regroups the blocks by destination and
#      sends one message to each destination (fig. 9); it reports each step (7.5).
"""The repack unit's state machine (:class:`UnitSequencer`): it takes a configuration, waits
for the sources' messages, and sends each destination its header, its length table and its
blocks through the output pipeline; it chooses and posts the unit's events."""

from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..lib.builder import OneHotStates, share
from ..params import check_data_width
from .formats import (HEADER_LAYOUT, LENGTH_WIDTH, RANK_WIDTH, UNIT_EVENT_LAYOUT, RepackError,
                      UnitEvent, _check_capacity, _check_max_group, unit_config_layout)
from .unit_arith import _ends_in_row, _low_thermometer
from .unit_columns import Columns, TableReader
from .unit_output import KIND_FLUSH, KIND_LIT, KIND_ROW, issue_signature
from .unit_slices import checked_config_layout
from ..lib.mirrors import Mirrored

__all__ = ["UNIT_STATES", "UnitSequencer"]


#: A repack unit's states: configuration, the sources' messages, then per destination its
#: header, its length table, its data rows and a last partial row; DRAIN waits for the
#: output to empty, REPORT posts a failed sub-matrix's DONE.
UNIT_STATES = ("IDLE", "COLLECT", "REPORT", "HEADER", "TABLE", "DATA", "FLUSH", "DRAIN")


class UnitSequencer(Mirrored, wiring.Component):
    """The unit's states (:data:`UNIT_STATES`, one flop each) and the sending state's
    registers.

    Parameters
    ----------
    data_width, capacity_bytes, max_group : int
        As :class:`~.unit.RepackUnit`'s.

    Members
    -------
    cfg : ``In(stream.Signature(checked_config_layout(max_group)))``
        Configurations with their checks (:class:`~.unit_slices.ConfigSlice`).
    c : ``Out(unit_config_layout(max_group))``
        The sub-matrix being transposed.
    idle, accepting : ``Out(1, init=1)``
        Flops: idle; idle or collecting.
    st_idle, st_collect, cfg_take : ``Out(1)``
        Idle; collecting; a configuration is taken in this cycle.
    timeout_fire : ``In(1)``
        The watchdog fires (TIMEOUT, :class:`~.unit_events.Watchdog`).
    take, head, arrived, cur_rank, taken_now : ``In``
        The input's (:class:`~.unit_input.InputParser`).
    fail_now : ``In(1)``; fail_code_now : ``In(RepackError)``
        The sub-matrix's failure (:class:`~.unit_events.ErrorLog`).
    err_timeout, err_refuse : ``Out(1)``; refuse_code : ``Out(RepackError)``
        A timeout, a refused configuration counted in this cycle; the refusal's code.
    ev_free : ``In(1)``; ev_post : ``Out(1)``; ev_data : ``Out(UNIT_EVENT_LAYOUT)``
        The event queue (:class:`~.unit_events.EventQueue`).
    issue : ``Out(issue_signature(data_width, depth))``
        Operations into the output pipeline (:class:`~.unit_output.OutputPipeline`).
    advance, pipe_busy, out_valid, delivered : ``In(1)``; out_rank : ``In(RANK_WIDTH)``
        The output pipeline's.
    tab_addr : ``Out``; tab_data : ``In(data.ArrayLayout(data_width + 2 * E, NB))``
        The length tables' read ports (combinational).
    cur_addr, cur_room : ``In``; move, move_index, move_to : ``Out``
        The cursors (:class:`~.unit_columns.Cursors`) and the sender's write of them.
    busy : ``Out(1)``; busy_cycles : ``Out(32)``
        The unit's.
    """

    def __init__(self, data_width, capacity_bytes, max_group):
        check_data_width(data_width)
        _check_capacity(capacity_bytes, data_width)
        _check_max_group(max_group)
        self._data_width = data_width
        self._capacity = capacity_bytes
        self._max_group = max_group
        self._mirrors = []
        self._mirrored = ()
        W, G = data_width, max_group
        B = W // 8
        E = W // LENGTH_WIDTH
        NB = min(E, G)
        AB = capacity_bytes.bit_length()
        brows = -(-G // NB) * -(-G // E)
        super().__init__({
            "cfg": In(stream.Signature(checked_config_layout(G))),
            "c": Out(unit_config_layout(G)),
            "idle": Out(1, init=1), "accepting": Out(1, init=1),
            "st_idle": Out(1), "st_collect": Out(1), "cfg_take": Out(1), "timeout_fire": In(1),
            "take": In(1), "head": In(1), "arrived": In(range(G + 1)), "cur_rank": In(RANK_WIDTH),
            "taken_now": In(1),
            "fail_now": In(1), "fail_code_now": In(RepackError),
            "err_timeout": Out(1), "err_refuse": Out(1), "refuse_code": Out(RepackError),
            "ev_free": In(1), "ev_post": Out(1), "ev_data": Out(UNIT_EVENT_LAYOUT),
            "issue": Out(issue_signature(W, capacity_bytes // B)),
            "advance": In(1), "pipe_busy": In(1), "out_valid": In(1), "out_rank": In(RANK_WIDTH),
            "delivered": In(1),
            "tab_addr": Out(range(max(2, brows))),
            "tab_data": In(data.ArrayLayout(W + 2 * E, NB)),
            "cur_addr": In(data.ArrayLayout(AB, G)), "cur_room": In(data.ArrayLayout(range(B + 1), G)),
            "move": Out(1), "move_index": Out(range(max(2, G))), "move_to": Out(AB),
            "busy": Out(1), "busy_cycles": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        self._mirrors = []
        W = self._data_width
        B = W // 8                              # bytes per beat
        LB = B.bit_length() - 1                 # byte-in-beat bits
        E = W // LENGTH_WIDTH                   # length entries per table beat
        LE = E.bit_length() - 1
        G = self._max_group
        TBMAX = -(-G // E)                      # table beats per source, at most
        AB = self._capacity.bit_length()        # byte addresses 0 .. capacity
        NB = min(E, G)
        TBO = -(-G // NB)                       # output table beats, at most
        BROWS = -(-G // NB) * TBMAX
        c = self.c
        ev_free = self.ev_free
        cfg_in = self.cfg

        def post():
            """Post an event; its fields come from the unit's phase (_event_fields)."""
            return [self.ev_post.eq(1)]

        # TAKEN (the input's) and DELIVERED (the output's), posted before the states' own.
        with m.If(self.taken_now):
            m.d.comb += post()
        with m.If(self.delivered):
            m.d.comb += post()          # DELIVERED (the output holds a beat): its rank
        st_idle = self.st_idle
        st_collect = self.st_collect
        # `accepting` is st_idle | st_collect as a flop, set and cleared with the state
        # machine's moves into and out of those states (_sender), so the input's ready does
        # not decode the state.
        accepting = self.accepting
        # `idle` is st_idle as a flop, kept the same way: a configuration's take reads flops
        # only (it chooses what the input stage compares a header with, and decoding the
        # state there was the 64-bit core's critical path).  `refuse`: see _configure.
        idle = self.idle
        refuse = Signal()
        refuse_code = self.refuse_code
        m.d.comb += [self.busy.eq(~st_idle), cfg_in.ready.eq(idle & ev_free & ~refuse)]
        m.d.comb += self.cfg_take.eq(cfg_in.valid & cfg_in.ready)
        with m.If(~st_idle):
            m.d.sync += self.busy_cycles.eq(self.busy_cycles + 1)
        st_report = Signal()            # REPORT posts its DONE in this cycle
        take, advance, skid_valid = self.take, self.advance, self.out_valid
        issue, iss_kind, iss_lit, iss_off, iss_p, iss_emit, iss_last = (
            self.issue.valid, self.issue.kind, self.issue.lit, self.issue.off, self.issue.p,
            self.issue.emit, self.issue.last)
        v = SimpleNamespace(**{k: x for k, x in locals().items()
                               if k not in ("self", "platform")})
        self._sender(m, v)
        self._event_fields(m, v)
        self._mirrors.append((v.states.count(), Const(1)))
        return m

    def _event_fields(self, m, v):
        """The posted event's fields, chosen by the unit's phase (flops), not by the
        decision that posts it: that decision (a data beat's keep checks into the message's
        end) chose the fields' multiplexer, the 256-bit core's path at seed 1 of `1af2a45`
        (in_q.keep_low -> TAKEN -> the event register, 7.96 ns).  At most one event is
        posted per cycle, and the phase tells which: TAKEN only while accepting (idle or
        collecting; a refusal's DONE is the only other post while idle, with `refuse`
        set), DELIVERED only while the output slice holds a beat (while sending), DONE
        otherwise (a refusal; REPORT; DRAIN once the output is empty)."""
        taken = v.accepting & ~v.refuse
        delivered = self.out_valid
        ev_data = self.ev_data
        m.d.comb += [
            ev_data.kind.eq(Mux(taken, UnitEvent.TAKEN,
                                Mux(delivered, UnitEvent.DELIVERED, UnitEvent.DONE))),
            ev_data.rank.eq(Mux(taken, self.cur_rank, Mux(delivered, self.out_rank, 0))),
            ev_data.tag.eq(v.c.tag),
            ev_data.code.eq(Mux(v.refuse, v.refuse_code,
                                Mux(v.st_report, self.fail_code_now, RepackError.OK))),
        ]

    def _sender(self, m, v):
        """The states and the sending state's registers."""
        B, LB, G, AB, NB, TBO, TBMAX, c = v.B, v.LB, v.G, v.AB, v.NB, v.TBO, v.TBMAX, v.c
        advance, post = v.advance, v.post
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
        tab_row = Signal(range(max(2, v.BROWS)))    # row of the table banks being read
        last_nz = Signal(range(max(2, G)))      # source of the last non-empty block
        any_nz = Signal()                       # a non-empty block seen in the table so far
        m.submodules.columns = columns = Columns(v.W, self._capacity, G)
        col, fitcol, addrcol, roomcol = columns.col, columns.fitcol, columns.addrcol, columns.roomcol
        room = Signal(range(B + 1))             # bytes from rd_addr to the end of its row
        dv_last = Signal(range(max(2, G)))      # dv - 1, set with the configuration
        fill = Signal(LB)
        rd_addr = Signal(AB)
        # The buffer is read at the cursor's row in every cycle; only a row the data state
        # issues is used (p1.kind), so the block RAM's address is a flop, not the data
        # state's issue decision (the 256-bit unit's late pins alone at seed 1 of the
        # thirty-second pass: advance -> the block's end -> the address, 5.16 ns).
        m.d.comb += self.issue.row.eq(rd_addr[LB:])
        rd_left, left_zero, left_small, fits, data_active, set_block = self._block_length(
            m, LB, room)
        # A block's end moves its source's cursor (`moved`, set by the data state), a cycle
        # later (Cursors).
        moved_ei, moved_to, moved = self.move_index, self.move_to, self.move
        m.d.sync += moved.eq(0)

        m.submodules.tables = tables = TableReader(v.W, self._capacity, G)
        self._mirrored = (tables,)
        lens_q, nz_q, big_q, final_q = tables.lens_q, tables.nz_q, tables.big_q, tables.final_q
        col_shift_ref = Signal()                # next_source's choice (see `col_shift`)

        def next_source():
            # Load the next block (an empty one costs its cycle like any other).
            nxt = 1 if G > 1 else 0
            m.d.sync += [ei.eq(ei_next), ei_next.eq(ei_next + 1), rd_addr.eq(addrcol[nxt])]
            set_block(col[1] if G > 1 else Const(0, LENGTH_WIDTH), roomcol[nxt],
                      fitcol[1] if G > 1 else Const(1))
            m.d.comb += col_shift_ref.eq(1)
        m.d.comb += self.issue.rank.eq(c.dst[j])

        timeout_fire = self.timeout_fire

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
        v.states = OneHotStates(m, UNIT_STATES, init="IDLE", name="unit")
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
                m.d.sync += [j.eq(j + 1), *([tab_row.eq((j + 1) >> v.LE)] if load_row else [])]
                v.states.next("HEADER")

        with v.states.state("HEADER"):
            with m.If(advance):
                m.d.comb += [
                    v.issue.eq(1), v.iss_kind.eq(KIND_LIT), v.iss_lit.eq(header_beat),
                    v.iss_emit.eq(1),
                ]
                m.d.sync += [tt.eq(0), tab_row.eq(tab_row + TBMAX), any_nz.eq(0)]
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
                    v.issue.eq(1), v.iss_kind.eq(KIND_FLUSH), v.iss_p.eq(fill), v.iss_emit.eq(1),
                    v.iss_last.eq(1),
                ]
                m.d.sync += fill.eq(0)
                next_destination()

        with v.states.state("DRAIN"):
            with m.If(~self.pipe_busy & ~v.skid_valid & v.ev_free):
                m.d.comb += post()      # DONE (the output is empty)
                m.d.sync += [v.accepting.eq(1), v.idle.eq(1)]
                v.states.next("IDLE")

        self._idle_clears(m, v)

    def _column_moves(self, m, v, col_shift_ref):
        """Loads and shifts of the columns (:class:`~.unit_columns.Columns`), outside the
        states' decisions."""
        columns = v.columns
        col_shift = Signal()
        m.d.comb += col_shift.eq(v.states["DATA"] & v.advance & (v.left_zero | v.fits))
        self._mirrors.append((col_shift, col_shift_ref))
        # The table beat (TableReader): loaded in the header state (the first) and at each
        # table beat (the next), as the states advance.
        tables, tt, tbo_last = v.tables, v.tt, v.tbo_last
        m.d.comb += [self.tab_addr.eq(tables.tab_addr), tables.tab_data.eq(self.tab_data),
                     tables.tab_row.eq(v.tab_row), tables.j.eq(v.j), tables.tbo_mask.eq(v.tbo_mask),
                     tables.header.eq(v.states["HEADER"]), tables.table.eq(v.states["TABLE"]),
                     tables.advance.eq(v.advance), tables.final_header.eq(tbo_last == 0),
                     tables.final_table.eq((tt + 1)[:len(tt)] == tbo_last)]
        m.d.comb += [columns.shift.eq(col_shift), columns.table.eq(v.states["TABLE"]),
                     columns.tt.eq(v.tt), columns.big_q.eq(v.big_q),
                     *(columns.lens_q[b].eq(v.lens_q[b]) for b in range(v.NB)),
                     columns.cur_addr.eq(self.cur_addr), columns.cur_room.eq(self.cur_room)]

    @staticmethod
    def _idle_clears(m, v):
        """Registers the unit clears while idle."""
        j, tab_row = v.j, v.tab_row
        # Cleared in every idle cycle, after every other assignment, so that the IDLE flag
        # is each flop's reset (nothing reads them while idle: the first destination from
        # HEADER on, the sources' arrivals while collecting, and a header parsed while idle
        # is a stray).  Set at the configuration's take or at COLLECT's end, behind those
        # choices, they were the unit's latest pins alone (the 45F at seed 2 of 4eadde1:
        # cfg_slice.valid -> the take -> j, tab_row, arrived, received, 6 levels, 5.75 ns;
        # the 85F at seed 2 of the thirtieth pass: err_hits_q -> the failure -> j, 5.77 ns).
        # The input clears `received` and `arrived` the same way (InputParser).
        with m.If(v.states["IDLE"]):
            m.d.sync += [j.eq(0), tab_row.eq(0)]

    def _collect(self, m, v):
        """COLLECT and REPORT states: wait for the sources' messages (every source's header
        and table taken) within the input budget; a failure or a timeout drops the
        sub-matrix whole, reported by one DONE event."""
        c = v.c
        with v.states.state("COLLECT"):
            m.d.comb += v.st_collect.eq(1)     # the watchdog counts (Watchdog)
            with m.If(v.timeout_fire):
                m.d.comb += self.err_timeout.eq(1)
                # The input drops a message it is parsing (InputParser).
                m.d.sync += v.accepting.eq(0)
                v.states.next("REPORT")
            with m.Elif((self.arrived == c.dh) & self.head):
                m.d.sync += v.accepting.eq(0)
                with m.If(self.fail_now):
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
        NB, G, c, post, cfg_in = v.NB, v.G, v.c, v.post, v.cfg_in
        # A refused configuration posts its DONE (and counts its error) in the next cycle,
        # from flops: the refusal is not decided in the cycle the event's data is chosen.
        # The unit stays idle meanwhile and takes no configuration; the event's place was
        # checked (ev_free) as the configuration was taken, and nothing else posts while idle.
        refuse = v.refuse
        refuse_code = v.refuse_code
        m.d.comb += v.st_idle.eq(1)     # cfg_in.ready: idle, ev_free and ~refuse (elaborate)
        with m.If(refuse):
            m.d.comb += [self.err_refuse.eq(1), *post()]    # DONE (refuse), refuse_code
            m.d.sync += refuse.eq(0)
        p = cfg_in.payload.cfg
        taken = self.cfg_take
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
        # 8.18 and 7.42 ns).  The input's (the last table beat's count and mask, the budget,
        # the first row), the failure (ErrorLog) and the watchdog load the same way.
        with m.If(taken):
            m.d.sync += [
                v.tbo_last.eq(0 if NB == G else (p.dh - 1) >> v.LE),
                v.dv_last.eq(p.dv - 1),
                # (dh - 1) % NB + 1 valid entries in the last output table beat.
                v.tbo_mask.eq(_low_thermometer(p.dh, NB)),
            ]

    def _table_beat(self, m, v):
        """TABLE state: issue one output table beat; note empty blocks and the last one that
        is not; keep the column of lengths for the data state."""
        NB, G, TBMAX = v.NB, v.G, v.TBMAX
        tt = v.tt
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
                v.issue.eq(1), v.iss_kind.eq(KIND_LIT), v.iss_lit.eq(Cat(lens)),
                v.iss_emit.eq(1), v.iss_last.eq(final_beat & ~any_nz & ~nz.any()),
            ]
            # The destination's last beat moves `tab_row` to the next destination's first
            # row whether a data state follows or not (neither the data state nor FLUSH
            # reads the banks, and FLUSH's next_destination loads the same row): behind the
            # decision (any non-empty block), the load was the 64-bit core's path at seed 1
            # of d84feb2 (nz_q -> the decision -> tab_row, 6 levels, 6.81 ns).
            m.d.sync += [tt.eq(tt + 1),
                         v.tab_row.eq(Mux(final_beat, (v.j + 1) >> v.LE, v.tab_row + TBMAX))]
            with m.If(nz.any()):
                # tt·NB + top: NB is a power of two unless it is G (one table beat).
                m.d.sync += [any_nz.eq(1),
                             last_nz.eq(top if NB == G else Cat(top[:(NB - 1).bit_length()], tt))]
            with m.If(final_beat):
                m.d.sync += [
                    v.ei.eq(0), v.ei_next.eq(1), v.rd_addr.eq(self.cur_addr[0]),
                    v.fill.eq(0),
                ]
                # col[0] is written in this beat when it is the first one.
                room0 = self.cur_room[0]
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
        self._mirrors += [(left_zero, rd_left == 0), (left_small, rd_left[LB + 2:] == 0),
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
                    v.issue.eq(1), v.iss_kind.eq(KIND_ROW),
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
