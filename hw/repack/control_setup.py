# Ref: seed 003 (CN111614581, Mellanox): the SRC and DST lists cut the ranks into the source
#      and destination subgroups of the N×N block matrix (fig. 8).
"""The repack control tree's setup: :class:`ControlSetup` latches and decodes ``start``,
clears the per-rank tables (CLEAR), walks the SRC and DST lists (CHECK_SRC, CHECK_DST), and
sizes the largest source group against the units' buffer (SIZE, CAPACITY).
"""

from types import SimpleNamespace

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..params import check_data_width
from .control_orders import list_entry_layout
from .control_states import check_tree, in_group, state_members
from .formats import RANK_WIDTH, REPORT_SLACK, START_LAYOUT, _check_capacity


__all__ = ["ControlSetup", "group_layout"]


def group_layout(max_ranks):
    """A group's first list entry and size (the SRC and DST group tables)."""
    return data.StructLayout({"base": (max_ranks - 1).bit_length(), "members": range(max_ranks + 1)})


class ControlSetup(wiring.Component):
    """The start's registers, CLEAR, the list walks and the capacity check.

    Parameters
    ----------
    max_ranks : int
        Largest N, 2 .. 256.
    max_group : int
        The units' ``max_group``.
    data_width, capacity_bytes : int
        The units' beat width and buffer size (for the capacity check at start).

    Members
    -------
    start : ``In(stream.Signature(START_LAYOUT))``
        Starts an exchange, taken while idle.
    st_idle, st_clear, st_check_src, st_check_dst : ``In(1)``
        The states' flags.
    n, n_last, budget, timeout, wd_budget, start_bad : ``Out``
        The start's fields (``n_last`` = n - 1, ``wd_budget`` = timeout + REPORT_SLACK - 1 for
        the watchdog) and DECODE's verdict.
    i, i_last : ``Out(range(max_ranks + 1))``, ``Out(1)``
        CLEAR's and the walks' index, and ``i == n_last`` (in CLEAR).
    a_done, c_bad, c_last : ``Out(1)``
        A walk has read its last entry; refused an entry; checked its last entry.
    P, Q, p_last, q_last : ``Out``
        Source and destination subgroups, and each less one.
    cap_bad : ``Out(1)``
        The largest source group's buffer need exceeds ``capacity_bytes``.
    r1_valid, r1_sgrp, r1_dgrp : ``In``
        A registration's third stage (it counts its groups' members down).
    src_r_data, dst_r_data, seen_r_data, sleft_r_data, dleft_r_data : ``In``
        The tables' reads (addresses: the lists' from PairAssign, `sleft_r`'s and `dleft_r`'s
        from Registrations).
    seen_r_addr, and ``<t>_en``, ``<t>_addr``, ``<t>_data`` for t in seen_w, sgrp_w, dgrp_w,
    gs_w, gd_w, sleft_w, dleft_w : ``Out``
        The tables the walks write.
    """

    def __init__(self, max_ranks, max_group, data_width, capacity_bytes):
        check_tree(max_ranks, 1, max_group)
        check_data_width(data_width)
        _check_capacity(capacity_bytes, data_width)
        R, RB = max_ranks, (max_ranks - 1).bit_length()
        self._max_ranks, self._max_group = R, max_group
        self._lb = (data_width // 8).bit_length() - 1
        self._capacity = capacity_bytes
        members = {
            "start": In(stream.Signature(START_LAYOUT)),
            **state_members("IDLE", "CLEAR", "CHECK_SRC", "CHECK_DST"),
            "n": Out(16), "n_last": Out(range(R)), "budget": Out(32), "timeout": Out(32),
            "wd_budget": Out(33), "start_bad": Out(1),
            "i": Out(range(R + 1)), "i_last": Out(1),
            "a_done": Out(1), "c_bad": Out(1), "c_last": Out(1),
            "P": Out(range(R + 1)), "Q": Out(range(R + 1)),
            "p_last": Out(range(R)), "q_last": Out(range(R)), "cap_bad": Out(1),
            "r1_valid": In(1), "r1_sgrp": In(RB), "r1_dgrp": In(RB),
            "src_r_data": In(list_entry_layout()), "dst_r_data": In(list_entry_layout()),
            "seen_r_data": In(1), "sleft_r_data": In(range(R + 1)),
            "dleft_r_data": In(range(R + 1)),
            "seen_r_addr": Out(RB),
        }
        for name, shape in (("seen_w", 1), ("sgrp_w", RB), ("dgrp_w", RB),
                            ("gs_w", group_layout(R)), ("gd_w", group_layout(R)),
                            ("sleft_w", range(R + 1)), ("dleft_w", range(R + 1))):
            members.update({f"{name}_en": Out(1), f"{name}_addr": Out(RB),
                            f"{name}_data": Out(shape)})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        R, G, RB = self._max_ranks, self._max_group, (self._max_ranks - 1).bit_length()
        v = SimpleNamespace(G=G)
        v.in_group = lambda rank: in_group(rank, self.n, R)
        # The largest source group: max_th[k] says a group of more than k ranks was seen (a
        # thermometer code, set by OR, no compare loop); max_dh is its value a cycle later.
        v.max_th = Signal(G)
        v.max_dh = Signal(range(G + 1))
        for k in range(G):
            with m.If(v.max_th[k]):
                m.d.sync += v.max_dh.eq(k + 1)
        with m.If(~v.max_th[0]):
            m.d.sync += v.max_dh.eq(0)
        v.need = Signal(34)                     # buffer_bytes_needed(budget, max_dh)
        # `cap_bad`: need > capacity, a cycle behind `need`.  `wd_budget`: the watchdog's
        # budget, loaded once at start (timeout >= 1, so no underflow).  `start_bad`: decoded
        # from the start payload as it is taken.  `i`: the list walks' index.
        v.grp = Signal(range(R + 1))
        # The walk's current group: its size with this entry (gsize), and flags kept a
        # cycle ahead: this entry is the group's first (g_first), the group is already G
        # ranks (g_full).
        v.gsize = Signal(range(R + 1))
        v.g_first, v.g_full = Signal(), Signal()

        def group_reset():
            m.d.sync += [v.grp.eq(0), v.gsize.eq(1), v.g_first.eq(1), v.g_full.eq(0)]
        v.group_reset = group_reset
        v.gbase = Signal(RB)
        # The list walks' first stages: entry i read (e0), then compared with n (ca).
        v.ca_valid = Signal()
        v.e0_valid = Signal()
        v.e0 = Signal(data.StructLayout({"rank": RANK_WIDTH, "end": 1, "last": 1, "idx": RB}))
        v.ca = Signal(data.StructLayout({
            "rank": RANK_WIDTH, "end": 1, "last": 1, "ok": 1, "idx": RB,
        }))
        # The walk's verdict on the entry B checked, registered (C): the state acts on two
        # flops, not on B's compares and the `seen` bit's read (the 64-bit core's path at
        # every seed of 90c3bcf: control_state -> the read -> ca.ok/ca.last -> the next
        # state and the enables of the registers a refusal or the walk's end loads, 6-7
        # levels, 8.7-9.3 ns).
        self._tables(m, v)
        self._clear(m, v)
        self._check_list(m, v, self.st_check_src, self.src_r_data,
                         (self.sgrp_w_en, self.gs_w_en, self.sleft_w_en),
                         first=True, count_reg=self.P, last_reg=self.p_last)
        self._check_list(m, v, self.st_check_dst, self.dst_r_data,
                         (self.dgrp_w_en, self.gd_w_en, self.dleft_w_en),
                         first=False, count_reg=self.Q, last_reg=self.q_last)
        self._start(m)
        return m

    def _tables(self, m, v):
        """The walks' writes: a rank's group, its group's first entry and size, the group's
        members not yet registered; the address and data the same in every state, so only
        the write enables carry decisions."""
        ca, grp, gsize = v.ca, v.grp, v.gsize
        m.d.comb += [
            self.seen_r_addr.eq(ca.rank),
            self.seen_w_addr.eq(Mux(self.st_clear, self.i, ca.rank)),
            self.seen_w_data.eq(self.st_check_src),
        ]
        # The list walks write a rank's group and its group's first entry and size.
        for grp_w, group_w in (("sgrp_w", "gs_w"), ("dgrp_w", "gd_w")):
            group_data = getattr(self, f"{group_w}_data")
            m.d.comb += [
                getattr(self, f"{grp_w}_addr").eq(ca.rank), getattr(self, f"{grp_w}_data").eq(grp),
                getattr(self, f"{group_w}_addr").eq(grp),
                group_data.base.eq(Mux(v.g_first, ca.idx, v.gbase)),
                group_data.members.eq(gsize),
            ]
        # Members not yet registered: set by the walks, counted down by registrations.
        for left_w, left_r, r1_grp, walk in (("sleft_w", self.sleft_r_data, self.r1_sgrp,
                                              self.st_check_src),
                                             ("dleft_w", self.dleft_r_data, self.r1_dgrp,
                                              self.st_check_dst)):
            m.d.comb += [getattr(self, f"{left_w}_addr").eq(Mux(walk, grp, r1_grp)),
                         getattr(self, f"{left_w}_data").eq(Mux(walk, gsize, left_r - 1))]
            with m.If(self.r1_valid):
                m.d.comb += getattr(self, f"{left_w}_en").eq(1)

    def _clear(self, m, v):
        """CLEAR (DECODE's verdict is `start_bad`, acted on by ControlStates) and the
        capacity check."""
        i = self.i
        with m.If(self.st_clear):
            # `registered` and the rank counts are cleared by Registrations and RunActions.
            m.d.comb += self.seen_w_en.eq(1)
            m.d.sync += [i.eq(i + 1), self.i_last.eq(i + 1 == self.n_last)]
            with m.If(self.i_last):
                # The list read addresses are reset by PairAssign.
                m.d.sync += [i.eq(0), v.max_th.eq(0), v.ca_valid.eq(0), v.e0_valid.eq(0),
                             self.a_done.eq(0), self.c_bad.eq(0), self.c_last.eq(0)]
                v.group_reset()

        # dh * (B - 1) as a shift and a subtraction.  max_th is final from the first cycle
        # of CHECK_DST, max_dh from its second, `need` from the third, `cap_bad` from the
        # fourth: CHECK_DST lasts at least three cycles, SIZE one more.
        m.d.sync += [v.need.eq(self.budget + (v.max_dh << self._lb) - v.max_dh),
                     self.cap_bad.eq(v.need > self._capacity)]

    def _check_list(self, m, v, st, list_r, writes, *, first, count_reg, last_reg):
        """Walk a rank list once: check it is a permutation of 0..n-1 cut into groups of at
        most G, and note each rank's group and each group's first entry and members.

        Four stages: A reads entry i into `e0`; A1 compares it with n into `ca`; B checks and
        notes it; C acts on B's verdict (a refusal, or the walk's end).  The `seen` bit is
        read in B, after the previous entry's write.  It is cleared before the SRC walk,
        which requires 0 and sets 1; the DST walk requires 1 and sets 0, so each walk sees
        each rank once."""
        ca, G = v.ca, v.G
        with m.If(st):
            entry, e0 = list_r, v.e0
            i_last = self.i == self.n_last
            with m.If(~self.a_done):
                m.d.sync += [
                    v.e0_valid.eq(1), e0.rank.eq(entry.rank), e0.end.eq(entry.end | i_last),
                    e0.last.eq(i_last), e0.idx.eq(self.i),
                    # Back to 0 after the last entry, for the next walk (or RUN): the
                    # walk's end need not load it (its check of the seen bit was the
                    # estimated path ca -> i of the 256-bit core, 8 levels).  The list's
                    # read address steps in PairAssign.
                    self.i.eq(Mux(i_last, 0, self.i + 1)),
                    self.a_done.eq(i_last),
                ]
            with m.Else():
                m.d.sync += v.e0_valid.eq(0)
            m.d.sync += [v.ca_valid.eq(v.e0_valid), ca.rank.eq(e0.rank), ca.end.eq(e0.end),
                         ca.last.eq(e0.last), ca.idx.eq(e0.idx), ca.ok.eq(v.in_group(e0.rank))]

            gsize, grp = v.gsize, v.grp
            with m.If(v.ca_valid):
                # The writes and the group counters do not wait for the check: after a bad
                # entry the walk is refused and nothing it wrote is read (the next start
                # clears and walks again).  Written: the rank's group, its group's first
                # entry and size, the group's members not yet registered (see `_tables`).
                m.d.comb += [self.seen_w_en.eq(1), *(w.eq(1) for w in writes)]
                with m.If(v.g_first):
                    m.d.sync += v.gbase.eq(ca.idx)
                if first:
                    m.d.sync += v.max_th.eq(v.max_th | Cat(gsize > k for k in range(G)))
                with m.If(ca.end):
                    m.d.sync += [grp.eq(grp + 1), gsize.eq(1), v.g_first.eq(1),
                                 v.g_full.eq(0)]
                with m.Else():
                    m.d.sync += [gsize.eq(gsize + 1), v.g_first.eq(0),
                                 v.g_full.eq(gsize >= G)]
            bad = ~ca.ok | (self.seen_r_data != int(not first)) | v.g_full
            m.d.sync += [self.c_bad.eq(v.ca_valid & bad),
                         self.c_last.eq(v.ca_valid & ~bad & ca.last)]
            # C: a cycle after B.  No entry follows the last one, so `grp` then counts the
            # last group too; after a bad entry B may write one more, which nothing reads.
            # A refusal is ControlStates' (BAD_CONFIG).
            with m.If(self.c_bad):
                pass
            with m.Elif(self.c_last):
                m.d.sync += [count_reg.eq(grp), last_reg.eq(grp - 1),
                             v.ca_valid.eq(0), v.e0_valid.eq(0), self.a_done.eq(0)]
                v.group_reset()

    def _start(self, m):
        """The start, outside the states' blocks: taken while `idle_q` (IDLE's flop), its
        fields latched and decoded for DECODE to act on, so
        the compares of the payload and the watchdog's add are between the port and flops.
        Ready is that flop, and so is the term that enables the ~150 flops loaded here:
        enabled from IDLE's decode, the load was the end of the 64-bit core's routed path at
        seeds 1 and 3 of 52284e5 (control_state -> ... -> `n`'s enable, 6 levels, 8.0 to
        8.3 ns).  `cycles` (ControlCounters) and `op_code` (RunActions) load beside these."""
        s = self.start.payload
        m.d.comb += self.start.ready.eq(self.st_idle)
        with m.If(self.st_idle & self.start.valid):
            m.d.sync += [
                self.n.eq(s.n), self.n_last.eq(s.n - 1), self.budget.eq(s.budget),
                self.timeout.eq(s.timeout),
                self.wd_budget.eq(s.timeout + (REPORT_SLACK - 1)),
                self.start_bad.eq((s.n == 0) | (s.n > self._max_ranks) | (s.timeout == 0)),
                self.i.eq(0), self.i_last.eq(s.n == 1),
            ]
