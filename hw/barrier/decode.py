"""The barrier unit's receiving stages 0 and 1: the boundary register a notice enters as it
arrives, and the decode of a notice (or of the host's ``done`` strobe) into flags, registered
in the cycle after."""

from types import SimpleNamespace

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .gates import below, check_int, index_bits, routed_part
from .layouts import (BarrierNoticeKind, MAX_CHILDREN_LIMIT, MAX_NODES_LIMIT, NOTICE_LAYOUT,
                      SEQ_WIDTH, TIME_WIDTH, notice_stream)
from ..net.packet import DEST_WIDTH


__all__ = ["decoded_layout", "NoticeDecoder"]


def decoded_layout(max_children):
    """What the decode registers about a notice and a ``done`` strobe (each field a flop of
    its own, named ``x_<field>``; see :meth:`NoticeDecoder._decode`)."""
    k = max_children
    return data.StructLayout({
        "valid": 1, "complete": 1, "release": 1, "rel_now": 1, "rel_inc": 1, "kill": 1,
        "first": k, "from_parent": 1, "to_me": 1, "kind": BarrierNoticeKind,
        "seq_now": 1, "seq_inc": 1, "routed": k, "count_hit": k, "bit": 1, "same": 1,
        "subject": DEST_WIDTH, "estimate": TIME_WIDTH,
        "done": 1, "done_ok": 1, "done_now": 1, "done_inc": 1, "done_ok_inc": 1,
        "done_ok_now": 1,
    })


class NoticeDecoder(wiring.Component):
    """Receiving, stages 0 and 1: the boundary register and the decode.

    Parameters
    ----------
    max_nodes : int
        Node ids 0 .. max_nodes − 1 (1 .. 4096).
    max_children : int
        Child slots (1 .. 64).
    dst_checked : bool
        The sender of ``rx`` compares the ids itself (``rx_to_me``, ``rx_from_parent``,
        ``rx_from_child``), as :class:`~.unit.BarrierUnit`'s parameter of that name.

    Members
    -------
    rx : ``In(notice_stream())``
        The unit's notices; ``ready`` is always 1.
    rx_to_me, rx_from_parent : ``In(1)``; rx_from_child : ``In(max_children)``
        With ``dst_checked`` only: the sender's id compares, with ``rx``.
    node_id : ``In(16)``
        The unit's ``node_id`` port (without ``dst_checked``, registered here inverted for
        the ``dst`` compare alone).
    node_id_q : ``In(16)``
        The unit's registered node id.
    parent_id, has_parent, child_id, child_valid
        The unit's configuration ports.
    routed_to : ``In(ArrayLayout(max_nodes, max_children))``
        :class:`~.route.RouteTable`'s routed-id vectors.
    shadow : ``In(max_children)``; cfg_ok : ``In(1)``
        :class:`~.checks.ConfigChecks`'s members of those names.
    seq, seq_inc : ``In(16)``
        The unit's sequence number and that number + 1 (kept beside it).
    vector : ``In(max_nodes)``
        The unit's completion bit vector.
    done : ``In(1)``; done_seq : ``In(16)``
        The host's done strobe.
    start : ``In(1)``
        Wipes what the two stages hold.
    x : ``Out(decoded_layout(max_children))``
        The decoded notice and done strobe, for the execute stage.
    """

    def __init__(self, max_nodes, max_children, *, dst_checked=False):
        check_int("max_nodes", max_nodes, 1, MAX_NODES_LIMIT)
        check_int("max_children", max_children, 1, MAX_CHILDREN_LIMIT)
        if not isinstance(dst_checked, bool):
            raise TypeError(f"dst_checked must be a bool, not {dst_checked!r}")
        self._max_nodes = max_nodes
        self._max_children = max_children
        self._dst_checked = dst_checked
        n, k = max_nodes, max_children
        super().__init__({
            "rx": In(notice_stream()),
            **({"rx_to_me": In(1), "rx_from_parent": In(1), "rx_from_child": In(k)}
               if dst_checked else {}),
            "node_id": In(DEST_WIDTH),
            "node_id_q": In(DEST_WIDTH),
            "parent_id": In(DEST_WIDTH),
            "has_parent": In(1),
            "child_id": In(data.ArrayLayout(DEST_WIDTH, k)),
            "child_valid": In(k),
            "routed_to": In(data.ArrayLayout(n, k)),
            "shadow": In(k),
            "cfg_ok": In(1),
            "seq": In(SEQ_WIDTH),
            "seq_inc": In(SEQ_WIDTH),
            "vector": In(n),
            "done": In(1),
            "done_seq": In(SEQ_WIDTH),
            "start": In(1),
            "x": Out(decoded_layout(k)),
        })

    def elaborate(self, platform):
        m = Module()
        r = self._boundary(m)
        self._decode(m, r)
        return m

    # ---- Receiving, stage 0: the unit's boundary register -----------------------------------
    def _boundary(self, m):
        """Notices are registered as they arrive, with what is decided from
        the input alone: who sent it and to whom (the id compares, or the receiver's flags
        with dst_checked), whether the subject is in range, and each slot's routed ids
        pre-selected by the subject's high index bits, so the decode that follows selects
        one of ``2**lo`` bits per slot where it selected one of ``n``.  Decoded straight
        from the port, the notice's 64:1 route lookups were the 64-node unit's latest pins
        alone at every seed of the thirty-second pass (the port -> the lookup ->
        x_count_hit, 5-6 levels, 5.27-5.77 ns).  ``start`` wipes what this stage holds as
        it wipes the decode's strobes.  ``rx.ready`` is always 1.

        Returns the register's flops (``r``, ``r_valid``, ``r_to_me``, ...)."""
        n, k = self._max_nodes, self._max_children
        cid = [self.child_id[j] for j in range(k)]
        p = self.rx.payload
        m.d.comb += self.rx.ready.eq(1)
        _, lo = index_bits(n)
        r = Signal(NOTICE_LAYOUT)
        r_valid = Signal()
        r_to_me, r_from_parent, r_from_child = Signal(), Signal(), Signal(k)
        r_in_range = Signal()
        r_routed = [Signal(1 << lo, name=f"r_routed_{j}") for j in range(k)]
        # With dst_checked, the receiver in front made the id compares (flops of
        # HeaderReceiver); else they are made here, before the register: behind it they
        # were the 64-bit core's routed paths (dst -> to_me -> x_count_hit, 7.46 ns at seed
        # 1 of 59f4419; src -> the parent compare -> x_release, 7.61 ns at seed 3 of
        # 4f4fba3).
        if self._dst_checked:
            to_me, from_parent, from_child = (self.rx_to_me, self.rx_from_parent,
                                              self.rx_from_child)
        else:
            # A second copy of the node's id (the unit's `node_id_q` is the first) for the
            # notices' `dst == node_id` compare alone, stored inverted so that synthesis
            # keeps it apart: `node_id_q` also feeds the route lookups and the member and
            # tree checks, and its fan-out put it far from the decode (the 64-bit core's
            # path at seed 1 of the sixteenth pass: node_id_q -> to_me -> x_count_hit, 6
            # levels, 6.36 of 7.85 ns routing).
            node_id_rx_n = Signal.like(self.node_id, name="node_id_rx_n", reset_less=True)
            m.d.sync += node_id_rx_n.eq(~self.node_id)
            to_me = p.dst == ~node_id_rx_n
            from_parent = p.src == self.parent_id
            from_child = Cat(cid[j] == p.src for j in range(k))
        m.d.sync += [
            r.eq(p), r_valid.eq(self.rx.valid),
            r_to_me.eq(to_me), r_from_parent.eq(from_parent),
            r_from_child.eq(from_child),
            r_in_range.eq(below(p.subject, n)),
            *[r_routed[j].eq(routed_part(self.routed_to[j], p.subject, n)) for j in range(k)],
        ]
        with m.If(self.start):
            m.d.sync += r_valid.eq(0)
        return SimpleNamespace(r=r, r_valid=r_valid, r_to_me=r_to_me,
                               r_from_parent=r_from_parent, r_from_child=r_from_child,
                               r_in_range=r_in_range, r_routed=r_routed)

    # ---- Receiving, stage 1: decode --------------------------------------------------------
    def _decode(self, m, b):
        """Everything about a notice or a done strobe that the configuration decides (sender,
        slot, route of the subject, kind) and its comparisons with the current state,
        registered in the cycle after it arrives (from the boundary register ``b``).  It acts
        one cycle later (:class:`~.execute.ExecuteStage`), which forwards what that cycle
        changed.  Ref: seed 004, figs. 9 and 11.  Nothing here ever waits; an input that
        comes with `start`, or sits in the boundary register then, is wiped by it."""
        k = self._max_children
        ibits, lo = index_bits(self._max_nodes)
        p = b.r
        seq_inc = self.seq_inc          # seq + 1, kept beside seq (by the unit)
        # A notice that comes with `start` is wiped by it: `start` resets the decode's
        # strobes below (a flop's reset pin) rather than gating `take` in their logic, where
        # its fan-out put it on the 64-bit core's routed path at seed 1 of 4c92990 (start ->
        # take -> x_count_hit, 5 levels, 6.2 of 7.5 ns routing).
        take = b.r_valid
        to_me = b.r_to_me
        from_parent = self.has_parent & b.r_from_parent
        x_valid = Signal()
        x_complete = Signal()           # a COMPLETE for this node
        x_release = Signal()            # a RELEASE for this node from its parent
        # ... and its sequence number the unit's seq of the decode cycle, or that seq + 1:
        # execute picks one by the release in between, so the release (`rel_now`, which
        # enables the send counts and flags of every slot) is one LUT from flops.  From
        # x_release and the two compares it was two, the 8-node unit's latest pins alone at
        # every seed of 7c81b75 (x_seq_now -> rel_now -> kill_head, owe, owed_any, 5.50 ns).
        x_rel_now = Signal()
        x_rel_inc = Signal()
        x_kill = Signal()               # a KILL for this node from its parent
        x_first = Signal(k)             # the sender is child slot j (the first such slot)
        x_from_parent = Signal()
        x_to_me = Signal()
        x_kind = Signal(BarrierNoticeKind)
        x_seq_now = Signal()            # seq matches the unit's seq of the decode cycle
        x_seq_inc = Signal()            # ... or that seq + 1 (a release in the decode cycle)
        x_routed = Signal(k)            # the subject is routed to slot j
        # A COMPLETE for this node that passes the tree checks (cfg_ok), from child slot j
        # with its subject routed there (x_first[j] & x_routed[j]), made here so that
        # the count's increment ORs k flops (the 64-bit core's path at seed 2 of c559aea:
        # x_first -> the slot and route AND-OR -> increment -> ge_m, 7.62 ns).
        x_count_hit = Signal(k)
        x_bit = Signal()                # the subject's bit in the decode cycle
        # Same subject as the notice then in execute, compared on the bits that index the
        # vector: a notice whose subject is out of range never counts (x_count_hit), so the
        # rest is never needed.
        x_same = Signal()
        # Whether a COMPLETE that hits (x_count_hit) counts is decided in execute from these
        # flops (x_seq_now, x_seq_inc, x_bit, x_same) and the forwarding from the cycle in
        # between: one 6-input function beside the OR of the hits.  Made here as two flags
        # (x_ok_other, x_ok_same), the AND of the sequence compare, the vector's bit and the
        # subject compare was the 64-node unit's latest pins alone at seed 1 of the
        # thirty-second pass (the notice -> x_ok_same, 6 levels, 5.30 ns).  The hit itself
        # stays a flop per slot: ORed here, behind the route lookup, it was 2 levels more
        # on the 64-node unit's worst path.
        x_subject = Signal(DEST_WIDTH)
        x_estimate = Signal(TIME_WIDTH)
        # The subject selects one bit per slot of the routed-id vectors (RouteTable), a
        # part of each pre-selected at the boundary (_boundary): a 64:1 selection of the
        # 4-bit entry followed by the slot compares was the 64-node unit's critical path
        # (6.85 ns), and with the compares before the selection in the same cycle, its
        # routed path at seed 1 of 1fbdf10 (the table -> x_routed, x_count_hit).
        complete = take & to_me & (p.kind == BarrierNoticeKind.COMPLETE)
        complete_ok = complete & self.cfg_ok
        first = [self.child_valid[j] & b.r_from_child[j] & ~self.shadow[j] for j in range(k)]
        routed = [b.r_in_range & b.r_routed[j].bit_select(p.subject[:lo], 1) for j in range(k)]
        bit = self.vector.bit_select(p.subject[:ibits], 1)
        same = p.subject[:ibits] == x_subject[:ibits]
        kill = take & to_me & (p.kind == BarrierNoticeKind.KILL) & from_parent
        release = take & to_me & (p.kind == BarrierNoticeKind.RELEASE) & from_parent
        m.d.sync += [
            x_valid.eq(take),
            x_complete.eq(complete),
            x_count_hit.eq(Cat(complete_ok & first[j] & routed[j] for j in range(k))),
            x_release.eq(release),
            x_rel_now.eq(release & (p.seq == self.seq)),
            x_rel_inc.eq(release & (p.seq == seq_inc)),
            x_kill.eq(kill),
            x_first.eq(Cat(first)),
            x_from_parent.eq(from_parent),
            x_to_me.eq(to_me),
            x_kind.eq(p.kind),
            x_seq_now.eq(p.seq == self.seq),
            x_seq_inc.eq(p.seq == seq_inc),
            x_routed.eq(Cat(routed)),
            x_bit.eq(bit),
            x_same.eq(same),
            x_subject.eq(p.subject),
            x_estimate.eq(p.estimate),
        ]
        # The host's done strobe goes through this stage but not the boundary register (it
        # comes from a register of the NIC's own): a done in cycle t is decoded with the
        # notices that arrived in cycle t - 1, and a notice and a done decoded together are
        # handled as they always were.  Through the boundary register too, it made every
        # barrier a cycle longer in the NIC (the leaf's done is on the release's path).
        x_done = Signal()
        x_done_ok = Signal()            # ... and the tree checks pass
        x_done_now = Signal()
        x_done_inc = Signal()
        # Whether the done counts, for each case of the forwarding (ExecuteStage): a release
        # in between (seq + 1) or not, each with its own sequence compares and a KILL of that
        # barrier in the same cycle.  Execute chooses one of two flops where it combined
        # five (the 64-bit core's routed path at seed 3 of e49e97b: rel_last -> the KILL's
        # seq check -> the done's -> own_pending's enable, 5 levels, 7.43 ns).
        x_done_ok_inc = Signal()
        x_done_ok_now = Signal()
        done_ok = self.done & self.cfg_ok
        m.d.sync += [
            x_done.eq(self.done),
            x_done_ok.eq(done_ok),
            x_done_now.eq(self.done_seq == self.seq),
            x_done_inc.eq(self.done_seq == seq_inc),
            x_done_ok_inc.eq(done_ok & (self.done_seq == seq_inc)
                             & ~(kill & (p.seq == seq_inc))),
            x_done_ok_now.eq(done_ok & (self.done_seq == self.seq)
                             & ~(kill & (p.seq == self.seq))),
        ]
        with m.If(self.start):
            m.d.sync += [flag.eq(0) for flag in (x_valid, x_complete, x_count_hit,
                                                 x_release, x_rel_now, x_rel_inc,
                                                 x_kill, x_done, x_done_ok,
                                                 x_done_ok_inc, x_done_ok_now)]
        # The flops, as the execute stage reads them.
        m.d.comb += self.x.eq(Cat(
            x_valid, x_complete, x_release, x_rel_now, x_rel_inc, x_kill, x_first,
            x_from_parent, x_to_me, x_kind, x_seq_now, x_seq_inc, x_routed, x_count_hit,
            x_bit, x_same, x_subject, x_estimate, x_done, x_done_ok, x_done_now, x_done_inc,
            x_done_ok_inc, x_done_ok_now))
