"""The barrier unit's registered checks: the local tree checks (the configured ids against the
route table) and the root's controls (m, c, mode and sub-mode with their checks, and the
thresholds the count flags compare with), which share the configuration error register."""

from amaranth.hdl import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .gates import any_of, below, check_int, index_bits, routed_part
from .layouts import (AcSubMode, BarrierMode, BARRIER_ERROR_LAYOUT, MAX_CHILDREN_LIMIT,
                      MAX_NODES_LIMIT, TIME_WIDTH)
from ..net.packet import DEST_WIDTH


__all__ = ["ConfigChecks"]


class ConfigChecks(wiring.Component):
    """The configuration checks of one barrier unit and the root's registered controls.

    Parameters
    ----------
    max_nodes : int
        Node ids 0 .. max_nodes − 1 (1 .. 4096).
    max_children : int
        Child slots (1 .. 64).

    Members
    -------
    node_id : ``In(16)``
        This node's id, registered (the unit's ``node_id_q``).
    parent_id : ``In(16)``; has_parent : ``In(1)``
    child_id : ``In(ArrayLayout(16, max_children))``; child_valid : ``In(max_children)``
        The unit's configuration ports.
    routed_any, routed_to, size, total
        :class:`~.route.RouteTable`'s members of those names.
    cfg_write : ``In(1)``
        The sticky ``cfg_write`` error (a bad route write): it fails the tree checks too.
    m : ``In(16)``; c : ``In(64)``; mode : ``In(BarrierMode)``; ac_sub : ``In(AcSubMode)``
        The root's controls.
    cfg : ``Out(BARRIER_ERROR_LAYOUT)``
        The checks' error bits (``m_range``, ``c_zero``, ``mode`` and the ``cfg_*`` bits but
        ``cfg_write``; the others are 0): one register.
    shadow : ``Out(max_children)``
        A lower valid slot holds child j's id (a notice from it is taken as the lower slot's).
    cfg_ok : ``Out(1)``; root_ok : ``Out(1)``
        The tree checks (and ``cfg_write``) pass, a cycle behind them; the same at the root
        alone.
    can_all, can_count, can_time : ``Out(1)``
        Which rules may release (all done, the count, the time): flops.
    can_all_next, can_count_next, can_time_next : ``Out(1)``
        Their next values, for the decision made a cycle ahead.
    m_minus, total_minus : ``Out(ArrayLayout(range(max_nodes + 2), 5))``
        m − i and N − i (i = 0..4), clamped to 0 .. N + 1.
    ge_m_zero, eq_total_zero : ``Out(3)``
        m − i <= 0 and N − i == 0 (i = 0..2): the count flags for ones = 0.
    c_le : ``Out(2)``
        c <= 1, c <= 2.
    c_minus_3 : ``Out(signed(66))``
        c − 3, the time counter's value in the cycle after the first count.
    """

    def __init__(self, max_nodes, max_children):
        check_int("max_nodes", max_nodes, 1, MAX_NODES_LIMIT)
        check_int("max_children", max_children, 1, MAX_CHILDREN_LIMIT)
        self._max_nodes = max_nodes
        self._max_children = max_children
        n, k = max_nodes, max_children
        super().__init__({
            "node_id": In(DEST_WIDTH),
            "parent_id": In(DEST_WIDTH),
            "has_parent": In(1),
            "child_id": In(data.ArrayLayout(DEST_WIDTH, k)),
            "child_valid": In(k),
            "routed_any": In(n),
            "routed_to": In(data.ArrayLayout(n, k)),
            "size": In(data.ArrayLayout(range(n + 1), k)),
            "total": In(16),
            "cfg_write": In(1),
            "m": In(16),
            "c": In(TIME_WIDTH),
            "mode": In(BarrierMode),
            "ac_sub": In(AcSubMode, init=AcSubMode.COUNT),
            "cfg": Out(BARRIER_ERROR_LAYOUT),
            "shadow": Out(k),
            "cfg_ok": Out(1, init=1),
            "root_ok": Out(1),
            "can_all": Out(1), "can_count": Out(1), "can_time": Out(1),
            "can_all_next": Out(1), "can_count_next": Out(1), "can_time_next": Out(1),
            "m_minus": Out(data.ArrayLayout(range(n + 2), 5)),
            "total_minus": Out(data.ArrayLayout(range(n + 2), 5)),
            "ge_m_zero": Out(3),
            "eq_total_zero": Out(3),
            "c_le": Out(2),
            "c_minus_3": Out(signed(TIME_WIDTH + 2)),
        })

    def elaborate(self, platform):
        m = Module()
        self._tree_checks(m)
        self._control(m)
        return m

    # ---- Local tree checks (registered: they are wide and the tree is static) --------------
    def _tree_checks(self, m):
        """Two register stages: the route entries of the configured ids and the id
        comparisons, then the checks (the tree is static; errors show 2 cycles after a change
        of the ids, 3 after a route table write, whose routed-id vectors are a register
        stage of their own)."""
        n, k, valid = self._max_nodes, self._max_children, self.child_valid
        cid = [self.child_id[j] for j in range(k)]
        node_id, parent_id, has_parent = self.node_id, self.parent_id, self.has_parent
        ibits, lo = index_bits(n)

        def routed_at(vector, x):
            return below(x, n) & vector.bit_select(x[:ibits], 1)
        pairs = [(i, j) for j in range(k) for i in range(j)]
        # Whether the node's and the parent's ids are routed below, and child j's id to
        # slot j: one bit of a routed-id vector each, where an entry of the table was read
        # and compared (on the 85F, the 64-node unit's lookups of the 4-bit entries into
        # rt_parent and rt_child were among its latest pins at both seeds of 618a409:
        # 5.86 and 5.57 ns against 5 ns).
        rt_node, rt_parent = Signal(), Signal()
        # Child j's lookup in two halves, one per register stage: the part of slot j's
        # routed ids its high index bits select (and whether the id is in range), then the
        # bit its low bits select, as the notices' lookups (NoticeDecoder's boundary).  In
        # one stage, the 64:1 selection from the port was a late pin of the 64-node unit
        # alone at seeds 2 and 3 of the thirty-second pass (child_id -> rt_child_ok, 5.29 ns).
        rt_child_part = [Signal(1 << lo, name=f"rt_child_part_{j}") for j in range(k)]
        cid_low = [Signal(lo, name=f"cid_low_{j}") for j in range(k)]
        valid_q, child_is_me, same = Signal(k), Signal(k), Signal(max(len(pairs), 1))
        id_big, parent_bad = Signal(), Signal()
        m.d.sync += [
            rt_node.eq(routed_at(self.routed_any, node_id)),
            rt_parent.eq(routed_at(self.routed_any, parent_id)),
            *[rt_child_part[j].eq(Mux(below(cid[j], n),
                                      routed_part(self.routed_to[j], cid[j], n), 0))
              for j in range(k)],
            *[cid_low[j].eq(cid[j][:lo]) for j in range(k)],
            valid_q.eq(valid),
            child_is_me.eq(Cat(cid[j] == node_id for j in range(k))),
            same.eq(Cat(cid[i] == cid[j] for i, j in pairs)),
            id_big.eq(~below(node_id, n) | (has_parent & ~below(parent_id, n))
                      | any_of(valid[j] & ~below(cid[j], n) for j in range(k))),
            parent_bad.eq(has_parent & (parent_id == node_id)),
        ]
        cfg_reg = self.cfg
        m.d.sync += [
            cfg_reg.cfg_id.eq(id_big),
            cfg_reg.cfg_slot.eq(any_of(~valid_q[j] & (self.size[j] != 0) for j in range(k))),
            cfg_reg.cfg_self.eq(rt_node | (valid_q & child_is_me).any()),
            cfg_reg.cfg_parent.eq(parent_bad | (has_parent & rt_parent)),
            cfg_reg.cfg_dup.eq(any_of(valid_q[i] & valid_q[j] & same[x]
                                      for x, (i, j) in enumerate(pairs))),
            cfg_reg.cfg_child.eq(any_of(valid_q[j] & ~rt_child_part[j].bit_select(cid_low[j], 1)
                                        for j in range(k))),
        ]
        # shadow[j]: a lower valid slot holds child j's id, so a notice from that id is taken
        # as coming from the lower slot (the first match, as a priority encoder would pick).
        # The configuration is static, so the decode stage reads this from a flop.
        m.d.sync += self.shadow.eq(Cat(any_of(valid_q[i] & same[pairs.index((i, j))]
                                              for i in range(j)) for j in range(k)))
        # The gate itself is a flop, a cycle behind the checks (the tree is static while
        # barriers run): the OR of the seven flags in front of the decision was the 64-bit
        # core's path at seed 1 of the fifteenth pass (cfg_write -> decide, 7 levels, 7.81 ns).
        tree_ok = ~(cfg_reg.cfg_id | cfg_reg.cfg_slot | cfg_reg.cfg_self | cfg_reg.cfg_parent
                    | cfg_reg.cfg_dup | cfg_reg.cfg_child | self.cfg_write)
        # The same for the root alone (the decision's gate, _control): the root's id is
        # registered with the checks, as the AC parameters' checks register it.
        m.d.sync += [self.cfg_ok.eq(tree_ok), self.root_ok.eq(~self.has_parent & tree_ok)]

    # ---- The root's controls, registered -----------------------------------------------------
    def _control(self, m):
        """m, c, mode and sub-mode reach the decision through registers, and so do their
        checks: the thresholds the decision compares against and the checks that gate it
        always describe the same input values (those of three cycles before), so a bad m or c
        never acts, even for one cycle.  The comparisons are done a cycle ahead
        (:class:`~.count.CompletionCounter`)."""
        is_root, total, cfg_reg = ~self.has_parent, self.total, self.cfg
        m_q, c_q = Signal(16), Signal(TIME_WIDTH)
        mode_q, sub_q = Signal(BarrierMode), Signal(2)
        m.d.sync += [m_q.eq(self.m), c_q.eq(self.c), mode_q.eq(self.mode),
                     sub_q.eq(self.ac_sub.as_value())]
        in_ac_q = mode_q == BarrierMode.AC
        m.d.sync += [
            cfg_reg.m_range.eq(is_root & in_ac_q & sub_q[0] & ((m_q == 0) | (m_q > total))),
            cfg_reg.c_zero.eq(is_root & in_ac_q & sub_q[1] & (c_q == 0)),
            cfg_reg.mode.eq(is_root & ((mode_q.as_value() == 3) | (in_ac_q & (sub_q == 0)))),
        ]
        # Which rules may release, one flop each: all done; the count; the time.
        # Their next values, which the decision made a cycle ahead reads (CompletionCounter),
        # from four flops each at most: the root with its tree checks passed (`root_ok`,
        # loaded with cfg_ok), the AC rule's sub-mode bit (registered with the parameters'
        # checks, so both still describe the same m, c and mode), and the checks of m and c.
        # The mode check needs no term: an AC sub-mode bit set is a valid mode and sub-mode.
        # Seven terms, the root's id among them straight from its port, were in front of the
        # decision: the 8-node unit's path alone at seed 2 of 7286a74 (has_parent -> the
        # terms -> decide, 5 levels, 5.23 ns).
        in_ac_count, in_ac_time = Signal(), Signal()
        m.d.sync += [in_ac_count.eq(in_ac_q & sub_q[0]), in_ac_time.eq(in_ac_q & sub_q[1])]
        params_ok = ~(cfg_reg.m_range | cfg_reg.c_zero)
        can_next = (self.root_ok, self.root_ok & in_ac_count & params_ok,
                    self.root_ok & in_ac_time & params_ok)
        m.d.comb += [self.can_all_next.eq(can_next[0]), self.can_count_next.eq(can_next[1]),
                     self.can_time_next.eq(can_next[2])]
        m.d.sync += [flag.eq(value) for flag, value in
                     zip((self.can_all, self.can_count, self.can_time), can_next)]
        # m − i (i = 0..4) and N − i (i = 0..2): the count flags compare `ones` with them.
        # Both clamped to 0 .. N + 1, the range that decides against a count of 0 .. N, so
        # the compares are as wide as the count (an 18-bit signed compare was the 8-node
        # unit's critical path once the time compare had gone).
        n = self._max_nodes
        m_minus = [Signal(range(n + 2), name=f"m_minus_{i}") for i in range(5)]
        m.d.sync += [m_minus[i].eq(Mux(m_q <= i, 0, Mux(m_q > n + 1 + i, n + 1, m_q - i)))
                     for i in range(5)]
        # N − i in two register stages (N is static while barriers run): the difference and
        # its range test, then the clamp, where the compares' chains in front of the clamp
        # (a flop's reset pin) were the 64-node unit's latest pin alone at seed 2 of
        # 9418c18 (total -> the compare -> total_minus_3, 11 levels, 5.70 ns).
        total_minus = [Signal(range(n + 2), name=f"total_minus_{i}") for i in range(5)]
        total_out = [Signal(name=f"total_out_{i}") for i in range(5)]
        total_sub = [Signal(range(n + 2), name=f"total_sub_{i}") for i in range(5)]
        m.d.sync += [total_out[i].eq((total < i) | (total > n + i)) for i in range(5)]
        m.d.sync += [total_sub[i].eq(total - i) for i in range(5)]
        m.d.sync += [total_minus[i].eq(Mux(total_out[i], n + 1, total_sub[i]))
                     for i in range(5)]
        m.d.comb += [self.m_minus[i].eq(m_minus[i]) for i in range(5)]
        m.d.comb += [self.total_minus[i].eq(total_minus[i]) for i in range(5)]
        # The flags for ones = 0 (a release clears the count), in the same register stage as
        # the differences they stand for: m − i <= 0 and N − i == 0 as flops, so a release
        # loads the count flags from flops, not through a carry chain.
        ge_m_zero = [Signal(name=f"ge_m_zero_{i}") for i in range(3)]
        eq_total_zero = [Signal(name=f"eq_total_zero_{i}") for i in range(3)]
        m.d.sync += [ge_m_zero[i].eq(m_q <= i) for i in range(3)]
        m.d.sync += [eq_total_zero[i].eq(total == i) for i in range(3)]
        c_le = [Signal(name=f"c_le_{i}") for i in (1, 2)]     # c <= 1, c <= 2
        m.d.sync += [c_le[0].eq(c_q <= 1), c_le[1].eq(c_q <= 2)]
        m.d.comb += [self.ge_m_zero.eq(Cat(ge_m_zero)), self.eq_total_zero.eq(Cat(eq_total_zero)),
                     self.c_le.eq(Cat(c_le))]
        # c − 3, the time counter's value in the cycle after the first count
        # (CompletionCounter).
        m.d.sync += self.c_minus_3.eq(c_q - 3)
