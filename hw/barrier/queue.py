"""The barrier unit's queue of completions to forward up: ``max_nodes`` entries, which cannot
overflow (a subject enters at most once per barrier and the queue is flushed when the barrier
changes: its contents are stale by then)."""

from amaranth.hdl import Module, Mux, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .gates import check_int, index_bits
from .layouts import MAX_NODES_LIMIT
from ..net.packet import DEST_WIDTH


__all__ = ["CompletionQueue"]


class CompletionQueue(wiring.Component):
    """Forwarding completions up: a queue that cannot overflow.

    Parameters
    ----------
    max_nodes : int
        Node ids 0 .. max_nodes − 1 (1 .. 4096); the queue holds ``max(max_nodes, 2)``.

    Members
    -------
    c_count : ``In(1)``; has_parent : ``In(1)``
        A COMPLETE sets a new bit (:class:`~.execute.ExecuteStage`), at a node with a
        parent: its subject is queued.
    subject : ``In(16)``
        The subject of the decoded notice.
    pop : ``In(1)``
        The head goes (as a COMPLETE, :class:`~.send.NoticeSender`).
    rel_now, start : ``In(1)``
        The unit leaves its barrier, starts: the queue is emptied.
    head : ``Out(ceil_log2(max_nodes))``
        The oldest subject queued (meaningless while ``pending`` is 0).
    pending : ``Out(1)``
        A subject is queued.
    """

    def __init__(self, max_nodes):
        check_int("max_nodes", max_nodes, 1, MAX_NODES_LIMIT)
        self._max_nodes = max_nodes
        ibits, _ = index_bits(max_nodes)
        super().__init__({
            "c_count": In(1), "has_parent": In(1),
            "subject": In(DEST_WIDTH),
            "pop": In(1),
            "rel_now": In(1), "start": In(1),
            "head": Out(ibits),
            "pending": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        ibits, _ = index_bits(self._max_nodes)
        qdepth = max(self._max_nodes, 2)
        upq = Memory(shape=unsigned(ibits), depth=qdepth, init=[])
        m.submodules.upq = upq
        qw = upq.write_port()
        qr = upq.read_port(domain="comb")
        q_wr = Signal(range(qdepth))
        q_rd = Signal(range(qdepth))
        q_count = Signal(range(qdepth + 1))
        # c_new without the root's decision: a node with a parent is not the root, so it
        # never decides (can_all, can_count and can_time hold is_root), and the queue's
        # write enable does not wait for the decision's terms.
        push = self.c_count & self.has_parent
        # The free entry at q_wr is written in every cycle the queue is not full, and a push
        # only moves q_wr past it: the write enable comes from the count's flops, not from
        # the notice's checks (the 64-node unit's path, x_first -> push -> the LUT RAM's
        # write enable, 6.13 ns).  A full queue takes no push (it cannot overflow).
        m.d.comb += [qw.addr.eq(q_wr), qw.data.eq(self.subject[:ibits]),
                     qw.en.eq(q_count != qdepth), qr.addr.eq(q_rd)]
        m.d.comb += [self.head.eq(qr.data), self.pending.eq(q_count != 0)]

        send_q = self.pop
        with m.If(send_q):
            m.d.sync += q_rd.eq(Mux(q_rd == qdepth - 1, 0, q_rd + 1))
        with m.If(push):
            m.d.sync += q_wr.eq(Mux(q_wr == qdepth - 1, 0, q_wr + 1))
        m.d.sync += q_count.eq(Mux(push, Mux(send_q, q_count, q_count + 1),
                                   Mux(send_q, q_count - 1, q_count)))
        # Queued completions of the old barrier are stale at the parent, which left it before
        # this node did: drop them.
        with m.If(self.rel_now):
            m.d.sync += [q_wr.eq(0), q_rd.eq(0), q_count.eq(0)]
        # start_ac_region: a clean slate.
        with m.If(self.start):
            m.d.sync += [q_wr.eq(0), q_rd.eq(0), q_count.eq(0)]
        return m
