# Ref: seed 003 (CN111614581, Mellanox), step 7.3: a ready source subgroup and a ready
#      destination subgroup are paired and given to a repack unit.
"""The repack control tree's scan: :class:`PairScan` clears the pair bits (CLEAR_PAIRS) and
walks the pairs of source and destination subgroups in RUN, one step per two cycles.
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .control_states import check_tree, state_members


__all__ = ["PairScan"]


class PairScan(wiring.Component):
    """The scan: pair (sa, sb) = entry pi of the pair bits.

    The scan reads the pair at its position into flags (`sc_*`) a cycle before it acts
    on them; `sc_fresh` says they are of the current position, so a step takes two
    cycles.  Flags a cycle old are safe: a group only becomes ready, and a pair is only
    marked done by the scan itself, which then moves on.

    Parameters
    ----------
    max_ranks : int
        Largest N, 2 .. 256.
    units : int
        Number of repack units, 1 .. 64.

    Members
    -------
    st_capacity, st_clear_pairs, st_run : ``In(1)``
        The states' flags.
    cap_bad : ``In(1)``
        CAPACITY's refusal.
    Q, p_last, q_last : ``In``
        Destination subgroups; source and destination subgroups less one.
    end_ok, idle_out, pend_done, nq_room, eq_valid, eq_quiet, free : ``In``
        RUN's priorities ahead of the scan (see :class:`~.control_run.RunActions`).
    sleft_scan_data, dleft_scan_data, pair_r_data : ``In``
        The groups' members not yet registered, and the pair's bit.
    sa, sb, pi : ``Out``
        The scan's position.
    sa_last, sb_last : ``Out(1)``
        ``sa == p_last`` and ``sb == q_last``, in CLEAR_PAIRS.
    sc_a, sc_go, sc_fresh : ``Out(1)``
        The source group is ready; the pair can be assigned; the flags are of this position.
    gs_scan_addr, gd_scan_addr, sleft_scan_addr, dleft_scan_addr, pair_r_addr : ``Out``
    pair_w_en, pair_w_addr, pair_w_data : ``Out``
        The tables' ports the scan drives.
    """

    def __init__(self, max_ranks, units):
        check_tree(max_ranks, units)
        R, RB = max_ranks, (max_ranks - 1).bit_length()
        self._max_ranks = R
        super().__init__({
            **state_members("CAPACITY", "CLEAR_PAIRS", "RUN"),
            "cap_bad": In(1),
            "Q": In(range(R + 1)), "p_last": In(range(R)), "q_last": In(range(R)),
            "end_ok": In(1), "idle_out": In(1), "pend_done": In(1), "nq_room": In(1),
            "eq_valid": In(1), "eq_quiet": In(1), "free": In(units),
            "sleft_scan_data": In(range(R + 1)), "dleft_scan_data": In(range(R + 1)),
            "pair_r_data": In(1),
            "sa": Out(range(R)), "sb": Out(range(R)), "pi": Out(range(R * R)),
            "sa_last": Out(1), "sb_last": Out(1),
            "sc_a": Out(1), "sc_go": Out(1), "sc_fresh": Out(1),
            "gs_scan_addr": Out(RB), "gd_scan_addr": Out(RB), "sleft_scan_addr": Out(RB),
            "dleft_scan_addr": Out(RB), "pair_r_addr": Out((R * R - 1).bit_length()),
            "pair_w_en": Out(1), "pair_w_addr": Out((R * R - 1).bit_length()),
            "pair_w_data": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        R = self._max_ranks
        sa, sb, pi = self.sa, self.sb, self.pi
        pi_row = Signal(range(R * R))
        # Writes of the pair bits leave from a register: CLEAR_PAIRS's zeros, and the one of
        # an assigned pair (written in GATHER; the scan reads the pairs again only in RUN).
        # The last zero lands in RUN's first cycle; the scan's first read may miss it only when
        # there is one pair, and then passes it once and finds it on the next lap.
        pw = Signal(data.StructLayout({"en": 1, "addr": range(R * R), "data": 1}))
        m.d.sync += pw.en.eq(0)
        m.d.comb += [
            self.gs_scan_addr.eq(sa), self.gd_scan_addr.eq(sb), self.pair_r_addr.eq(pi),
            self.sleft_scan_addr.eq(sa), self.dleft_scan_addr.eq(sb),
            self.pair_w_addr.eq(pw.addr), self.pair_w_data.eq(pw.data), self.pair_w_en.eq(pw.en),
        ]

        with m.If(self.st_capacity):
            # A refusal is ControlStates' (CAPACITY).
            with m.If(self.cap_bad):
                pass
            with m.Else():
                m.d.sync += [sa.eq(0), sb.eq(0), pi.eq(0), self.sa_last.eq(self.p_last == 0),
                             self.sb_last.eq(self.q_last == 0)]

        with m.If(self.st_clear_pairs):
            m.d.sync += [pw.en.eq(1), pw.addr.eq(pi), pw.data.eq(0)]
            m.d.sync += pi.eq(pi + 1)
            with m.If(self.sb_last):
                m.d.sync += [sb.eq(0), self.sb_last.eq(self.q_last == 0)]
                with m.If(self.sa_last):
                    # RunActions counts the pairs and starts running.
                    m.d.sync += [sa.eq(0), pi.eq(0), pi_row.eq(0)]
                with m.Else():
                    m.d.sync += [sa.eq(sa + 1), self.sa_last.eq(sa + 1 == self.p_last)]
            with m.Else():
                m.d.sync += [sb.eq(sb + 1), self.sb_last.eq(sb + 1 == self.q_last)]

        self._run(m, pw, pi_row)
        return m

    def _run(self, m, pw, pi_row):
        sa, sb, pi = self.sa, self.sb, self.pi
        # `sc_go`: both groups ready and the pair not yet done, one flop for the assignment.
        sc_a, sc_go, sc_fresh = self.sc_a, self.sc_go, self.sc_fresh
        # With them, the position's compares and the next row's first pair.
        sc_a_last, sc_b_last, sc_row_next = Signal(), Signal(), Signal.like(pi_row)
        sc_a_next = self.sleft_scan_data == 0
        m.d.sync += [sc_a.eq(sc_a_next),
                     sc_go.eq(sc_a_next & (self.dleft_scan_data == 0) & ~self.pair_r_data),
                     sc_fresh.eq(self.st_run),
                     sc_a_last.eq(sa == self.p_last), sc_b_last.eq(sb == self.q_last),
                     sc_row_next.eq(pi_row + self.Q)]
        with m.If(self.st_run):

            def next_row():
                m.d.sync += [sb.eq(0), sc_fresh.eq(0)]
                with m.If(sc_a_last):
                    m.d.sync += [sa.eq(0), pi.eq(0), pi_row.eq(0)]
                with m.Else():
                    m.d.sync += [sa.eq(sa + 1), pi.eq(sc_row_next), pi_row.eq(sc_row_next)]

            def step():
                with m.If(sc_b_last):
                    next_row()
                with m.Else():
                    m.d.sync += [sb.eq(sb + 1), pi.eq(pi + 1), sc_fresh.eq(0)]

            # RUN's priorities ahead of the scan (RunActions; ControlStates moves).
            pend_done, nq_room = self.pend_done, self.nq_room
            with m.If(self.end_ok):
                pass
            with m.Elif(self.idle_out):
                pass
            with m.Elif(pend_done & nq_room):
                pass
            with m.Elif(self.eq_valid & (self.eq_quiet | (nq_room & ~pend_done))):
                pass
            with m.Elif(self.free.any() & sc_fresh):
                # Ref: seed 003, step 7.3: a ready source subgroup and a ready destination
                # subgroup are paired and assigned to a free unit.  One pair is looked at
                # per step; a source subgroup that is not ready is skipped whole.
                with m.If(~sc_a):
                    next_row()
                with m.Elif(sc_go):
                    m.d.sync += [pw.en.eq(1), pw.addr.eq(pi), pw.data.eq(1)]
                    step()
                with m.Else():
                    step()
