"""The barrier unit's receiving stage 2: a decoded notice or ``done`` strobe acts, with
forwarding from the cycle in between, and the root's decision releases (fig. 10)."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .decode import decoded_layout
from .gates import check_int
from .layouts import BarrierNoticeKind, MAX_CHILDREN_LIMIT


__all__ = ["ExecuteStage"]


class ExecuteStage(wiring.Component):
    """Receiving, stage 2: execute, and the root's decision (fig. 10).  Comb but for two
    forwarding flops.

    Parameters
    ----------
    max_children : int
        Child slots (1 .. 64).

    Members
    -------
    x : ``In(decoded_layout(max_children))``
        :class:`~.decode.NoticeDecoder`'s decoded notice and done strobe.
    nonzero, decide, time_hit : ``In(1)``; ge_m, eq_total : ``In(3)``
        :class:`~.count.CompletionCounter`'s count flags and decision (flops).
    can_all, can_count, can_time : ``In(1)``
        :class:`~.checks.ConfigChecks`'s rule flags.
    own_done : ``In(1)``
        This node's own bit of the vector.
    aborted_cur : ``In(1)``
        This node is aborted in its current barrier (:class:`~.kills.KillControl`).
    rel_now : ``Out(1)``
        This node leaves barrier ``seq`` in this cycle.
    early : ``Out(1)``
        The root releases early (before every node completed).
    kill_rx : ``Out(1)``
        A KILL for the current barrier acts.
    c_count, d_count : ``Out(1)``
        A COMPLETE sets a new bit, the host's done sets the own bit (without the release of
        this cycle); c_new, d_new : ``Out(1)`` the same with it.
    late : ``Out(1)``
        Root only: a COMPLETE came in the cycle of the decision, which was taken without it.
    rx_stale, d_stale : ``Out(1)``
        A notice, a done strobe dropped as stale.
    outside : ``Out(1)``
        A COMPLETE whose subject is not routed to its sender's slot.
    malformed : ``Out(1)``
        A notice not for this node, from neither parent nor child, or of a kind that cannot
        come from its sender.
    """

    def __init__(self, max_children):
        check_int("max_children", max_children, 1, MAX_CHILDREN_LIMIT)
        self._max_children = max_children
        #: (flop, the expression it stands for) pairs a test holds equal in every cycle.
        self.mirrors = []
        super().__init__({
            "x": In(decoded_layout(max_children)),
            "nonzero": In(1), "decide": In(1), "time_hit": In(1),
            "ge_m": In(3), "eq_total": In(3),
            "can_all": In(1), "can_count": In(1), "can_time": In(1),
            "own_done": In(1), "aborted_cur": In(1),
            "rel_now": Out(1), "early": Out(1), "kill_rx": Out(1),
            "c_count": Out(1), "d_count": Out(1), "c_new": Out(1), "d_new": Out(1),
            "late": Out(1), "rx_stale": Out(1), "d_stale": Out(1),
            "outside": Out(1), "malformed": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        x = self.x
        # Forwarding from the cycle in between: a release there moved seq on by one and
        # cleared the vector; a completion there may have set this notice's subject bit.
        rel_last = Signal()             # rel_now, registered
        c_new_last = Signal()           # c_new, registered
        seq_ok = Mux(rel_last, x.seq_inc, x.seq_now)
        done_ok = Mux(rel_last, x.done_inc, x.done_now)
        new_bit = Mux(rel_last, 1, ~x.bit & ~(x.same & c_new_last))
        kind = x.kind
        down = (kind == BarrierNoticeKind.RELEASE) | (kind == BarrierNoticeKind.KILL)
        well_formed = x.to_me & (((kind == BarrierNoticeKind.COMPLETE) & x.first.any())
                                 | (down & x.from_parent))
        inside = (x.routed & x.first).any()
        m.d.comb += self.rx_stale.eq(x.valid & well_formed & ~seq_ok)
        rel_rx = Mux(rel_last, x.rel_inc, x.rel_now)
        m.d.comb += self.kill_rx.eq(x.kill & seq_ok)

        # The root's decision reads only flops: the count and time flags are computed a cycle
        # ahead (see CompletionCounter), so the release comes in the same cycles as a
        # same-cycle compare would give (the cycle after the count reached m or N; the cycle
        # now = s + c).  nonzero: ones != 0; ge_m[i]: ones + i >= m; eq_total[i]: ones + i ==
        # N; time_hit: now − s >= c, with s recorded.
        # The decision itself is a flop too (`decide`), made a cycle ahead from the flags'
        # next values (CompletionCounter) and cleared with them; `decide_ref` is the same
        # decision made from the flags, which the tests compare with it every cycle
        # (`mirrors`).  Made from the flags in its cycle, it began the 64-node unit's routed
        # critical path at seed 1 of 392fc2e (eq_total -> decision -> release -> the flags,
        # 7.07 ns).
        decide_ref = Signal()
        m.d.comb += [
            decide_ref.eq(self.nonzero & ((self.can_all & self.eq_total[0])
                                          | (self.can_count & self.ge_m[0])
                                          | (self.can_time & self.time_hit))),
            self.early.eq(self.decide & ~self.eq_total[0]),
        ]
        self.mirrors += [(self.decide, decide_ref), (rel_rx, x.release & seq_ok)]
        # rel_now: this node leaves barrier `seq` in this cycle
        m.d.comb += self.rel_now.eq(rel_rx | self.decide)
        m.d.sync += rel_last.eq(self.rel_now)

        # Completions (figs. 8, 9).  The own bit and "aborted in this barrier" are flags kept
        # beside the vector and abort_seq (a node leaves a barrier only finished or aborted,
        # so abort_seq is seq or seq − 1 whenever `aborted` is set).  A COMPLETE is never
        # received in the cycle of a RELEASE (one notice per cycle), so only the root's
        # decision can release in its cycle.
        # own_done == vector[node_id]; aborted_cur == aborted & (abort_seq == seq)
        c_cur = x.complete & x.first.any() & seq_ok
        # c_new: a COMPLETE that sets a new bit; d_new: the host's done that sets the own bit.
        # The same without the release of this cycle, for the registers a release clears
        # anyway (the release's assignments come later and win): the count, its flags and
        # the time flag then do not wait for the root's decision (c_count, d_count).
        d_count_ref = Signal()          # the same from the done's and the KILL's flags
        self.mirrors.append((self.d_count, d_count_ref))
        m.d.comb += [
            self.c_count.eq(x.count_hit.any() & seq_ok & new_bit),
            self.d_count.eq(Mux(rel_last, x.done_ok_inc, x.done_ok_now)
                            & ~self.aborted_cur & ~self.own_done),
            d_count_ref.eq(x.done_ok & done_ok & ~self.aborted_cur & ~self.own_done
                           & ~self.kill_rx),
            self.c_new.eq(self.c_count & ~self.decide),
            self.d_new.eq(self.d_count & ~self.rel_now),
            # A done for another barrier, for one this node is aborted in (or in the cycle
            # the KILL comes), or in the cycle its barrier is released, never counts.
            self.d_stale.eq(x.done & (~done_ok | self.aborted_cur | self.kill_rx
                                      | self.rel_now)),
        ]
        m.d.sync += c_new_last.eq(self.c_new)
        # late: root only, the decision was taken without it.
        m.d.comb += self.late.eq(c_cur & self.decide)
        m.d.comb += [self.outside.eq(c_cur & ~inside),
                     self.malformed.eq(x.valid & ~well_formed)]
        return m
