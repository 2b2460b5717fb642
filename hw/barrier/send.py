"""The barrier unit's sending side: the notice ``tx`` sends next (a RELEASE or KILL owed to a
child, this node's own COMPLETE, or a queued one to forward), through a two-entry queue."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .gates import check_int, first_set, index_bits
from .layouts import (BarrierNoticeKind, MAX_CHILDREN_LIMIT, MAX_NODES_LIMIT, NOTICE_LAYOUT,
                      SEQ_WIDTH, TIME_WIDTH, notice_stream)
from ..net.packet import DEST_WIDTH


__all__ = ["NoticeSender"]


class NoticeSender(wiring.Component):
    """Sending: what the tx register loads is chosen from flops only (the owed flags and
    heads of :class:`~.fanout.ReleaseFanout`, the own COMPLETE's flag, the queue's head).
    Downward notices go first (the lowest slot owed), then this node's own COMPLETE, then
    the queued ones.

    Parameters
    ----------
    max_nodes : int
        Node ids 0 .. max_nodes − 1 (1 .. 4096).
    max_children : int
        Child slots (1 .. 64).

    Members
    -------
    tx : ``Out(notice_stream())``
        The unit's notices, ``valid``/``payload`` from flops.
    node_id : ``In(16)``
        This node's id, registered (the unit's ``node_id_q``).
    parent_id, has_parent, child_id : the unit's configuration ports.
    seq : ``In(16)``
        The unit's sequence number.
    d_count : ``In(1)``
        The host's done sets the own bit (:class:`~.execute.ExecuteStage`): at a node with a
        parent, its COMPLETE is owed.
    rel_now, start : ``In(1)``
        The unit leaves its barrier, starts: the own COMPLETE still owed is dropped (and a
        COMPLETE waiting in the queue's spare entry as the barrier is left).
    owed, owed_any, kill_head, head
        :class:`~.fanout.ReleaseFanout`'s members of those names.
    kill_est_now : ``In(64)``
        The estimate a KILL carries (:class:`~.kills.KillControl`).
    q_pending : ``In(1)``; q_head : ``In(ceil_log2(max_nodes))``
        :class:`~.queue.CompletionQueue`'s ``pending`` and ``head``.
    load : ``Out(1)``
        A notice owed is taken in this cycle (the spare entry is empty).
    pop : ``Out(1)``
        The queue's head is taken.
    """

    def __init__(self, max_nodes, max_children):
        check_int("max_nodes", max_nodes, 1, MAX_NODES_LIMIT)
        check_int("max_children", max_children, 1, MAX_CHILDREN_LIMIT)
        self._max_nodes = max_nodes
        self._max_children = max_children
        k = max_children
        ibits, _ = index_bits(max_nodes)
        super().__init__({
            "tx": Out(notice_stream()),
            "node_id": In(DEST_WIDTH),
            "parent_id": In(DEST_WIDTH),
            "has_parent": In(1),
            "child_id": In(data.ArrayLayout(DEST_WIDTH, k)),
            "seq": In(SEQ_WIDTH),
            "d_count": In(1), "rel_now": In(1), "start": In(1),
            "owed": In(k), "owed_any": In(1), "kill_head": In(k),
            "head": In(data.ArrayLayout(SEQ_WIDTH, k)),
            "kill_est_now": In(TIME_WIDTH),
            "q_pending": In(1), "q_head": In(ibits),
            "load": Out(1), "pop": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        k, node_id = self._max_children, self.node_id
        cid = [self.child_id[j] for j in range(k)]
        owed, kill_head = self.owed, self.kill_head
        own_pending = Signal()          # own COMPLETE still to send
        # The own COMPLETE is owed with the own bit (CompletionCounter), without this
        # cycle's release: a release clears it (later, wins).
        with m.If(self.d_count):
            with m.If(self.has_parent):
                m.d.sync += own_pending.eq(1)

        # The payload fields of the lowest slot owed something (ReleaseFanout's `pick`),
        # through balanced priority multiplexers (log2 k levels, not k).
        def picked(values):
            return first_set(list(owed), list(values))[1]
        pick_kill = picked([kill_head[j] for j in range(k)])

        # The notices leave through a two-entry queue (tx itself and `spare`), filled while
        # `spare` is empty: the sends below and the counts they move are decided on that
        # flop, and tx.ready loads only the queue.  Decided on tx's own `~valid | ready`,
        # they were the cores' routed paths at seed 2 of 8e689a2 (256-bit: the port slice's
        # full flag -> the send -> the RELEASE counts' enables, 8.25 ns) and of fd6301c
        # placed with a placer timing weight of 30 (64-bit, 7.45 ns).  While tx moves on at
        # once the notices leave in the same cycles as before.
        spare = Signal(NOTICE_LAYOUT)
        spare_valid = Signal()
        spare_up = Signal()                             # spare holds a COMPLETE
        load = self.load
        m.d.comb += load.eq(~spare_valid)
        # Whether any child is owed a notice: ReleaseFanout's `owed_any`, a flop.
        down = self.owed_any
        q_any = self.q_pending
        send_own = load & ~down & own_pending
        send_q = load & ~down & ~own_pending & q_any
        m.d.comb += self.pop.eq(send_q)
        # The notice a push would post: its fields depend only on which kind of notice goes
        # (meaningless without a push), so each bit has a short select.
        new = Signal(NOTICE_LAYOUT)
        m.d.comb += [
            new.kind.eq(Mux(down, Mux(pick_kill, BarrierNoticeKind.KILL, BarrierNoticeKind.RELEASE),
                            BarrierNoticeKind.COMPLETE)),
            new.seq.eq(Mux(down, picked([self.head[j] for j in range(k)]), self.seq)),
            new.src.eq(node_id),
            new.dst.eq(Mux(down, picked(cid), self.parent_id)),
            new.subject.eq(Mux(down, 0, Mux(own_pending, node_id, self.q_head))),
            # Masked on the way out by the entry's kind, so the KILL choice (a priority
            # pick) is no select of 64 payload bits (the 64-bit core's path at seed 2 of
            # dce7502: the pick -> the spare's estimate, 7.43 ns).
            new.estimate.eq(self.kill_est_now),
        ]
        tx_q = Signal(NOTICE_LAYOUT)
        m.d.comb += [self.tx.payload.eq(tx_q),
                     self.tx.payload.estimate.eq(
                         Mux(tx_q.kind == BarrierNoticeKind.KILL, tx_q.estimate, 0))]
        push = down | own_pending | q_any               # with `load`, a notice is posted
        out_free = ~self.tx.valid | self.tx.ready
        with m.If(out_free):
            m.d.sync += [tx_q.eq(Mux(spare_valid, spare, new)),
                         self.tx.valid.eq(spare_valid | push), spare_valid.eq(0)]
        with m.Elif(~spare_valid):
            m.d.sync += [spare.eq(new), spare_valid.eq(push), spare_up.eq(~down)]
        # A completion still in `spare` when this node leaves its barrier is dropped with the
        # queued ones (see CompletionQueue); one already in tx goes, as it did before the
        # queue.
        with m.If(self.rel_now & spare_valid & spare_up & ~out_free):
            m.d.sync += spare_valid.eq(0)
        with m.If(send_own):
            m.d.sync += own_pending.eq(0)
        # Leaving a barrier; start_ac_region (the tx queue is left to finish).
        with m.If(self.rel_now):
            m.d.sync += own_pending.eq(0)
        with m.If(self.start):
            m.d.sync += own_pending.eq(0)
        return m
