"""Per-source registers of the repack unit: each source's cursor in the data buffer
(:class:`Cursors`); the table beat the sending state reads from the length tables
(:class:`TableReader`), and its columns, one entry per source of the destination being sent
(:class:`Columns`)."""

from amaranth.hdl import Array, Cat, Module, Mux, Signal, Value
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..params import check_data_width
from .formats import LENGTH_WIDTH, _check_capacity, _check_max_group
from .unit_arith import _ends_in_row
from ..lib.mirrors import Mirrored

__all__ = ["Cursors", "TableReader", "Columns"]


def _check(data_width, capacity_bytes, max_group):
    check_data_width(data_width)
    _check_capacity(capacity_bytes, data_width)
    _check_max_group(max_group)


class Cursors(wiring.Component):
    """Each source's cursor: the byte address of its next block in the data buffer, and its
    room in its row (B less its low bits, 1 .. B), written with it.

    A cursor write comes a cycle after the decision that asks for it: a strobe, set by that
    decision, writes the value from flops.  A decision tree ending in every cursor's enable
    through the decode of its index was the critical path twice: the input's table beat (the
    256-bit unit, 7.50 ns) and the sender's block end (`fits`, the 64-bit unit, 6.56 ns).
    Neither cursor is read in the next cycle: the input's only once every source has
    arrived, after this message's data beats; the sender's for the next destination, after
    the HEADER and TABLE states.

    Parameters
    ----------
    data_width, capacity_bytes, max_group : int
        As :class:`~.unit.RepackUnit`'s.

    Members
    -------
    set : ``In(1)``; set_index : ``In(range(max(2, max_group)))``; set_row : ``In(range(max(2, depth)))``
        The input's write: the cursor of source ``set_index`` to the start of row ``set_row``.
    move : ``In(1)``; move_index : ``In(range(max(2, max_group)))``; move_to : ``In(AB)``
        The sender's write (after the input's): the cursor of ``move_index`` to ``move_to``.
    addr : ``Out(data.ArrayLayout(AB, max_group))``; room : ``Out(data.ArrayLayout(range(B + 1), max_group))``
        The cursors and their room (``AB`` bits address the bytes 0 .. capacity).
    """

    def __init__(self, data_width, capacity_bytes, max_group):
        _check(data_width, capacity_bytes, max_group)
        self._beat_bytes = B = data_width // 8
        self._max_group = G = max_group
        AB = capacity_bytes.bit_length()
        depth = capacity_bytes // B
        super().__init__({
            "set": In(1), "set_index": In(range(max(2, G))), "set_row": In(range(max(2, depth))),
            "move": In(1), "move_index": In(range(max(2, G))), "move_to": In(AB),
            "addr": Out(data.ArrayLayout(AB, G)),
            "room": Out(data.ArrayLayout(range(B + 1), G)),
        })

    def elaborate(self, platform):
        m = Module()
        B, G = self._beat_bytes, self._max_group
        LB = B.bit_length() - 1
        AB = len(self.move_to)
        cur_addr = Array(Signal(AB, name=f"cursor{k}") for k in range(G))   # byte addresses
        # The sender's checks of a block's first row read the room from a flop, where the
        # subtraction in front of the compare was the 256-bit core's path at seed 1 of
        # d9e83fe (lens_q -> B - cursor -> fitcol0, 8 levels, 8.73 ns).
        cur_room = Array(Signal(range(B + 1), init=B, name=f"cursor_room{k}")
                         for k in range(G))
        for strobe, index, value in ((self.set, self.set_index, self.set_row << LB),
                                     (self.move, self.move_index, self.move_to)):
            with m.If(strobe):
                m.d.sync += [cur_addr[index].eq(value),
                             cur_room[index].eq(B - Value.cast(value)[:LB])]
        m.d.comb += [self.addr[k].eq(cur_addr[k]) for k in range(G)]
        m.d.comb += [self.room[k].eq(cur_room[k]) for k in range(G)]
        return m


class TableReader(Mirrored, wiring.Component):
    """The length tables' read side: the banks at ``tab_row``, destination ``j``, and the
    registers a table beat is loaded into, in the header state (the first beat) and in each
    table-state cycle (the next), as the state machine advances.

    Parameters
    ----------
    data_width, capacity_bytes, max_group : int
        As :class:`~.unit.RepackUnit`'s.

    Members
    -------
    tab_addr : ``Out(range(max(2, BROWS)))``; tab_data : ``In(data.ArrayLayout(data_width + 2 * E, NB))``
        The banks' read ports (combinational).
    tab_row : ``In(range(max(2, BROWS)))``; j : ``In(range(max(2, max_group)))``
        The banks' row and the destination.
    tbo_mask : ``In(NB)``
        Valid entries of the destination's last table beat.
    header, table, advance : ``In(1)``
        The header state, the table state, the state machine advances.
    final_header, final_table : ``In(1)``
        The beat loaded in the header state, in the table state, is the last.
    lens_q : ``Out(data.ArrayLayout(LENGTH_WIDTH, NB))``; nz_q, big_q : ``Out(NB)``; final_q : ``Out(1)``
        The beat loaded: its lengths (entries past dh empty), which are non-zero and which
        two rows' bytes (2B) or more, and whether it is the destination's last.
    """

    def __init__(self, data_width, capacity_bytes, max_group):
        _check(data_width, capacity_bytes, max_group)
        self._data_width = W = data_width
        self._max_group = G = max_group
        E = W // LENGTH_WIDTH
        NB = min(E, G)
        brows = -(-G // NB) * -(-G // E)
        self._mirrors = []
        super().__init__({
            "tab_addr": Out(range(max(2, brows))), "tab_data": In(data.ArrayLayout(W + 2 * E, NB)),
            "tab_row": In(range(max(2, brows))), "j": In(range(max(2, G))), "tbo_mask": In(NB),
            "header": In(1), "table": In(1), "advance": In(1),
            "final_header": In(1), "final_table": In(1),
            "lens_q": Out(data.ArrayLayout(LENGTH_WIDTH, NB)), "nz_q": Out(NB), "big_q": Out(NB),
            "final_q": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        W, G = self._data_width, self._max_group
        LB = (W // 8).bit_length() - 1
        E = W // LENGTH_WIDTH
        NB = min(E, G)
        j, tab_row, tbo_mask = self.j, self.tab_row, self.tbo_mask
        # Each table beat's lengths are read a cycle ahead into `lens_q` (with which are
        # non-zero, `nz_q`): the header cycle reads the first, each table beat the next.
        # The banks' address is `tab_row` alone, a flop: set to the destination's first
        # row (j >> LE) with j, then moved on a table row at each beat, so no state decode
        # or mux sits in front of the distributed RAM's read.
        lens_q = [Signal(LENGTH_WIDTH, name=f"lens_q{b}") for b in range(NB)]
        nz_q = self.nz_q
        bank_len = []                           # lengths of sources at tab_row, destination j
        bank_nz = []                            # and whether each is non-zero
        bank_big = []                           # and two rows' bytes (2B) or more
        big_q = self.big_q
        m.d.comb += self.tab_addr.eq(tab_row)
        for b in range(NB):
            bank = self.tab_data[b]
            bank_len.append(bank[:E * LENGTH_WIDTH].word_select(j & (E - 1), LENGTH_WIDTH))
            bank_nz.append(bank[E * LENGTH_WIDTH:][:E].bit_select(j & (E - 1), 1))
            bank_big.append(bank[E * LENGTH_WIDTH + E:].bit_select(j & (E - 1), 1))
        # The beat being read is masked as it is loaded (entries past dh in the last beat
        # read as empty), and whether it is the last one is a flop beside it: the table
        # state decides on flops and an OR of them (the 256-bit unit's path when the beat
        # was masked in the table cycle: the state -> tt == tbo_last -> the mask ->
        # nz.any() -> j, 8 levels, 7.43 ns).  The OR stays after the flops: loaded as a flop
        # too, behind the read at j and the compares, it was the next path (6.97 ns).
        final_q = self.final_q

        def load_table_beat(final):
            valid = Mux(final, tbo_mask, (1 << NB) - 1)
            m.d.sync += [*(lens_q[b].eq(Mux(valid[b], bank_len[b], 0)) for b in range(NB)),
                         nz_q.eq(Cat(bank_nz) & valid), big_q.eq(Cat(bank_big) & valid),
                         final_q.eq(final)]

        # The header state loads the destination's first beat, each table beat the next.
        with m.If(self.header):
            with m.If(self.advance):
                load_table_beat(self.final_header)
        with m.If(self.table):
            with m.If(self.advance):
                load_table_beat(self.final_table)
        m.d.comb += [self.lens_q[b].eq(lens_q[b]) for b in range(NB)]
        # Tests check the flags against the lengths every cycle.
        self._mirrors = [(big_q[b], lens_q[b][LB + 1:] != 0) for b in range(NB)]
        return m


class Columns(wiring.Component):
    """The sending state's columns, one entry per source of the destination being sent: its
    block's length, whether the block ends in its first row, its cursor and its room in
    that row.

    Parameters
    ----------
    data_width, capacity_bytes, max_group : int
        As :class:`~.unit.RepackUnit`'s.

    Members
    -------
    shift : ``In(1)``
        Move the columns on a source (a block's end in the data state).
    table : ``In(1)``; tt : ``In(range(max(2, TBO)))``
        The table state, and its output table beat: the beat held (``lens_q``, ``big_q``)
        loads its entries, the cursors load every entry.
    lens_q : ``In(data.ArrayLayout(LENGTH_WIDTH, NB))``; big_q : ``In(NB)``
        The table beat held: its lengths, and which are two rows' bytes or more.
    cur_addr, cur_room : ``In``
        The cursors (:class:`Cursors`).
    col, fitcol, addrcol, roomcol : ``Out``
        The columns, entry i for source i of the beat (shifted down as blocks end).
    """

    def __init__(self, data_width, capacity_bytes, max_group):
        _check(data_width, capacity_bytes, max_group)
        self._beat_bytes = B = data_width // 8
        self._max_group = G = max_group
        E = data_width // LENGTH_WIDTH
        self._banks = NB = min(E, G)
        AB = capacity_bytes.bit_length()
        super().__init__({
            "shift": In(1), "table": In(1), "tt": In(range(max(2, -(-G // NB)))),
            "lens_q": In(data.ArrayLayout(LENGTH_WIDTH, NB)), "big_q": In(NB),
            "cur_addr": In(data.ArrayLayout(AB, G)),
            "cur_room": In(data.ArrayLayout(range(B + 1), G)),
            "col": Out(data.ArrayLayout(LENGTH_WIDTH, G)), "fitcol": Out(G),
            "addrcol": Out(data.ArrayLayout(AB, G)),
            "roomcol": Out(data.ArrayLayout(range(B + 1), G)),
        })

    def elaborate(self, platform):
        m = Module()
        B, G, NB = self._beat_bytes, self._max_group, self._banks
        LB = B.bit_length() - 1
        AB = len(self.cur_addr[0])
        tt, lens_q, cur_addr, cur_room = self.tt, self.lens_q, self.cur_addr, self.cur_room
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
        # The column moves on a source at each block's end in the data state, and its
        # entries load in every table-state cycle from the beat held there (the beat and
        # the cursors' room do not change until the state advances, so the cycle that
        # advances loads what it always did).  Both conditions are flat ANDs of flops:
        # inside the states' decisions, the columns' enables were the 256-bit core's late
        # pins at seed 1 of 0141bc8 (advance -> the data state's choices -> col3, 7 levels,
        # 8.04 ns; lens_q -> the compare -> the choices -> fitcol3, 8.23 ns).  Tests check
        # the shift against the data state's choice every cycle (`data_mirrors`).
        with m.If(self.shift):
            for column in (col, fitcol, addrcol, roomcol):
                m.d.sync += [column[i].eq(column[i + 1]) for i in range(G - 1)]
        with m.If(self.table):
            m.d.sync += [addrcol[i].eq(cur_addr[i]) for i in range(G)]
            m.d.sync += [roomcol[i].eq(cur_room[i]) for i in range(G)]
        for i in range(G):
            with m.If(self.table & (tt == i // NB)):
                m.d.sync += [col[i].eq(lens_q[i % NB]),
                             fitcol[i].eq(_ends_in_row(lens_q[i % NB], cur_room[i], LB,
                                                      ~self.big_q[i % NB]))]
        m.d.comb += [self.col[i].eq(col[i]) for i in range(G)]
        m.d.comb += self.fitcol.eq(Cat(fitcol))
        m.d.comb += [self.addrcol[i].eq(addrcol[i]) for i in range(G)]
        m.d.comb += [self.roomcol[i].eq(roomcol[i]) for i in range(G)]
        return m
