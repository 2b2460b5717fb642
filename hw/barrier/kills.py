"""The barrier unit's kills (fig. 11) and the root's abort log: whether this node is aborted,
the estimate its KILLs carry on, which children a release sends a KILL, and the log of the
node ids each early release aborted."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .gates import check_int, check_log_depth
from .layouts import DEFAULT_LOG_DEPTH, MAX_CHILDREN_LIMIT, MAX_NODES_LIMIT, SEQ_WIDTH, TIME_WIDTH


__all__ = ["KillControl"]


class KillControl(wiring.Component):
    """Kills and the abort log.

    Parameters
    ----------
    max_nodes : int
        Node ids 0 .. max_nodes − 1 (1 .. 4096).
    max_children : int
        Child slots (1 .. 64).
    log_depth : int
        Entries of the abort log: a power of two, 16 .. 1024.

    Members
    -------
    kill_rx, early, rel_now, d_new : ``In(1)``
        :class:`~.execute.ExecuteStage`'s members of those names.
    own_done : ``In(1)``; vector : ``In(max_nodes)``
    done_in : ``In(ArrayLayout(range(max_nodes + 1), max_children))``
        :class:`~.count.CompletionCounter`'s members of those names.
    size : ``In(ArrayLayout(range(max_nodes + 1), max_children))``; member : ``In(max_nodes)``
        :class:`~.route.RouteTable`'s members of those names.
    has_parent : ``In(1)``; child_valid : ``In(max_children)``
        The unit's configuration ports.
    estimate : ``In(64)``
        The root's estimate (its host's).
    x_estimate : ``In(64)``
        The estimate of the decoded notice.
    seq : ``In(16)``; start : ``In(1)``
        The unit's sequence number and start strobe.
    aborted_cur : ``Out(1)``
        Aborted in the current barrier (aborted & (abort_seq == seq)): a flop.
    kill_est_now : ``Out(64)``
        The estimate the next KILLs carry.
    rel_kill : ``Out(max_children)``
        The children a release in this cycle sends a KILL.
    aborted : ``Out(1)``; abort_seq : ``Out(16)``; abort_estimate : ``Out(64)``
        The abort's status, as the unit's members of those names.
    log_index : ``In(range(log_depth))``; log_seq : ``Out(16)``; log_ids : ``Out(max_nodes)``
    log_count : ``Out(16)``; log_overflow : ``Out(1)``
        The abort log, as the unit's members of those names.
    """

    def __init__(self, max_nodes, max_children, *, log_depth=DEFAULT_LOG_DEPTH):
        check_int("max_nodes", max_nodes, 1, MAX_NODES_LIMIT)
        check_int("max_children", max_children, 1, MAX_CHILDREN_LIMIT)
        check_log_depth(log_depth)
        self._max_nodes = max_nodes
        self._max_children = max_children
        self._log_depth = log_depth
        #: (flop, the expression it stands for) pairs a test holds equal in every cycle.
        self.mirrors = []
        n, k = max_nodes, max_children
        super().__init__({
            "kill_rx": In(1), "early": In(1), "rel_now": In(1), "d_new": In(1),
            "own_done": In(1),
            "vector": In(n),
            "done_in": In(data.ArrayLayout(range(n + 1), k)),
            "size": In(data.ArrayLayout(range(n + 1), k)),
            "member": In(n),
            "has_parent": In(1),
            "child_valid": In(k),
            "estimate": In(TIME_WIDTH),
            "x_estimate": In(TIME_WIDTH),
            "seq": In(SEQ_WIDTH),
            "start": In(1),
            "aborted_cur": Out(1),
            "kill_est_now": Out(TIME_WIDTH),
            "rel_kill": Out(k),
            "aborted": Out(1),
            "abort_seq": Out(SEQ_WIDTH),
            "abort_estimate": Out(TIME_WIDTH),
            "log_index": In(range(log_depth)),
            "log_seq": Out(SEQ_WIDTH),
            "log_ids": Out(n),
            "log_count": Out(16),
            "log_overflow": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n, k, seq, early, kill_rx = (self._max_nodes, self._max_children, self.seq,
                                     self.early, self.kill_rx)
        is_root = ~self.has_parent
        killed = Signal()               # a KILL for the current seq came from the parent
        kill_est = Signal(TIME_WIDTH)   # the estimate the next KILLs carry
        own_kill = (kill_rx | early) & ~self.own_done
        # Only a KILL received sets aborted_cur: the root's early decision releases the
        # barrier in its own cycle, and the release clears aborted_cur (below, later,
        # wins), so the decision is not in front of this flop (the 64-bit core's path at
        # seed 1 of its ninth-pass commit: eq_total -> decide -> early -> aborted_cur, 5
        # LUTs, 7.52 ns).
        with m.If(kill_rx & ~self.own_done):
            m.d.sync += self.aborted_cur.eq(1)
        # The status of the abort (aborted, abort_seq, abort_estimate, read by the host) is
        # noted a cycle later, from flops: the decision enables one flop here, not the 64 of
        # abort_estimate (that fan-out ended the 8-node unit's critical path) nor the
        # sequence number.  A start in the kill's cycle clears it, as it would have; a start
        # or the host's done (below, later) in the cycle after wins over it, as it would
        # have over the status set a cycle earlier.
        est_q = Signal(TIME_WIDTH)
        seq_q = Signal(SEQ_WIDTH)
        note_est = Signal()
        m.d.sync += [est_q.eq(Mux(is_root, self.estimate, self.x_estimate)), seq_q.eq(seq),
                     note_est.eq(own_kill & ~self.start)]
        with m.If(note_est):
            m.d.sync += [self.abort_estimate.eq(est_q), self.aborted.eq(1),
                         self.abort_seq.eq(seq_q)]
        # A received KILL's estimate is taken from a copy of x_estimate made in every cycle
        # (`rx_est`, no enable) while `kill_fresh` says the KILL was the last to set it;
        # `kill_est` then loads that copy a cycle later.  The received KILL's sequence check
        # (behind the release flag) no longer enables the 64 estimate flops: it was the
        # 8-node unit's latest pin alone at seed 3 of f2f7e13 (rel_last -> the KILL's check
        # -> kill_est's enable, 5.48 ns).  `kill_est_now` is the value the old register
        # held (tests hold it to a reference register every cycle, `mirrors`).
        rx_est = Signal(TIME_WIDTH)
        kill_fresh = Signal()
        m.d.sync += [rx_est.eq(self.x_estimate), kill_fresh.eq(kill_rx & ~early & ~self.start)]
        m.d.comb += self.kill_est_now.eq(Mux(kill_fresh, rx_est, kill_est))
        with m.If(kill_rx):
            m.d.sync += killed.eq(1)
        with m.If(kill_fresh):
            m.d.sync += kill_est.eq(rx_est)
        with m.If(early):
            m.d.sync += kill_est.eq(self.estimate)
        kill_est_ref = Signal(TIME_WIDTH)
        with m.If(kill_rx):
            m.d.sync += kill_est_ref.eq(self.x_estimate)
        with m.If(early):
            m.d.sync += kill_est_ref.eq(self.estimate)
        with m.If(self.start):
            m.d.sync += kill_est_ref.eq(0)
        self.mirrors.append((self.kill_est_now, kill_est_ref))
        # Children that get a KILL for the barrier released now: those whose subtree is not
        # complete here, if this node was killed (or is the root releasing early).
        # Ref: seed 004, fig. 11 step s53.
        m.d.comb += self.rel_kill.eq(Cat(self.child_valid[j]
                                         & (self.done_in[j] != self.size[j])
                                         & Mux(is_root, early, killed) for j in range(k)))

        log_entry = data.StructLayout({"seq": SEQ_WIDTH, "ids": n})
        log = Memory(shape=log_entry, depth=self._log_depth, init=[])
        m.submodules.log = log
        lw = log.write_port()
        lr = log.read_port(domain="comb")
        log_ptr = Signal(range(self._log_depth))
        m.d.comb += [
            lw.addr.eq(log_ptr), lw.en.eq(early),
            lw.data.seq.eq(seq), lw.data.ids.eq(self.member & ~self.vector),
            lr.addr.eq(self.log_index),
            self.log_seq.eq(lr.data.seq), self.log_ids.eq(lr.data.ids),
        ]
        with m.If(early):
            m.d.sync += log_ptr.eq(log_ptr + 1)
            with m.If(self.log_count != 0xffff):
                m.d.sync += self.log_count.eq(self.log_count + 1)
            with m.If(self.log_count >= self._log_depth):
                m.d.sync += self.log_overflow.eq(1)

        # Leaving a barrier (after the sets above: the clears win).
        with m.If(self.rel_now):
            m.d.sync += [self.aborted_cur.eq(0), killed.eq(0)]
        with m.If(self.d_new):
            m.d.sync += [self.aborted.eq(0), self.aborted_cur.eq(0)]
        # start_ac_region: a clean slate.
        with m.If(self.start):
            m.d.sync += [
                self.aborted_cur.eq(0), killed.eq(0), kill_est.eq(0),
                self.aborted.eq(0), self.abort_seq.eq(0), self.abort_estimate.eq(0),
                log_ptr.eq(0), self.log_count.eq(0), self.log_overflow.eq(0),
            ]
        return m
