# Ref: seed 003 (CN111614581, Mellanox), steps 7.3-7.6: units are assigned and freed; sources
#      and destinations are told on completion; a rank completes locally when all its data is
#      sent and all expected data received.
"""The repack control tree's run: :class:`RunActions`, RUN's priorities (the exchange's end,
TIMEOUT, a pending rank DONE, one unit event), the units' busy and stale bits, the rank counts
and the pushes into the notice queue.
"""

from types import SimpleNamespace

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .control_states import check_tree, state_members
from .formats import RANK_WIDTH, UNIT_EVENT_LAYOUT, RepackError, UnitEvent, _priority


__all__ = ["RunActions", "rank_counts_layout"]


def rank_counts_layout(max_ranks):
    """A rank's TAKEN and DELIVERED notices so far (the rank counts table)."""
    return data.StructLayout({"sent": range(max_ranks + 1), "recv": range(max_ranks + 1)})


class RunActions(wiring.Component):
    """RUN: per cycle, in this order: finish, TIMEOUT, a pending rank DONE notice, one
    unit event (with its notice), one scan step (:class:`~.control_scan.PairScan`).  Every
    condition is a flop, and so is `run_q`, RUN's flag, which enables them.  Also what the
    other states do to the same registers: IDLE frees the units of an aborted exchange,
    CONFIGURE marks its unit busy, CONFIGURE and SEND abort on TIMEOUT.

    Parameters
    ----------
    max_ranks : int
        Largest N, 2 .. 256.
    units : int
        Number of repack units, 1 .. 64.

    Members
    -------
    st_idle, st_clear, st_clear_pairs, st_run, st_configure, st_send : ``In(1)``
        The states' flags.
    start_valid : ``In(1)``
        A start offered (taken in IDLE: the exchange's result is reset to OK).
    sa_last, sb_last, pi : ``In``
        CLEAR_PAIRS's end and the number of pairs less one.
    i : ``In(range(max_ranks + 1))``
        CLEAR's index (CLEAR clears the rank counts).
    eq, eq_valid, eq_unit, eq_done, eq_stale, eq_quiet, sent_target, recv_target : ``In``
        The unit event register (:class:`~.control_events.EventIntake`).
    P, Q, p_last, q_last : ``In``
        Source and destination subgroups, and each less one.
    nq_room, nq_busy : ``In(1)``
        The notice queue takes a push; holds a notice.
    idle_out : ``In(1)``
        The watchdog has run out.
    cfg_ready, unit_sel : ``In``
        CONFIGURE's unit takes its configuration; that unit.
    free, sc_fresh : ``In``
        For the priorities' last choice (the scan's).
    cnt_r_data : ``In(rank_counts_layout(max_ranks))``
        The event's rank's counts.
    running_q, all_done : ``Out(1)``
        An exchange runs (RUN, GATHER, CONFIGURE or SEND); every sub-matrix is DONE.
    op_code : ``Out(RepackError)``
        First error a unit reported.
    ustale, free, free_unit : ``Out``
        Units left busy by an aborted exchange; units not busy; the first of them.
    end_ok : ``Out(1)``
        The exchange's end (every unit DONE, every notice taken), a cycle late.
    pend_done, done_rank : ``Out``
        A rank DONE notice waits, for that rank.
    nq_push, nq_flush, eq_take : ``Out(1)``
        Post a notice; withdraw the notices (TIMEOUT); take the unit event.
    cnt_r_addr, cnt_w_en, cnt_w_addr, cnt_w_data : ``Out``
        The rank counts' ports.
    """

    def __init__(self, max_ranks, units):
        check_tree(max_ranks, units)
        R, K, RB = max_ranks, units, (max_ranks - 1).bit_length()
        self._max_ranks, self._units = R, K
        self.mirrors = []
        super().__init__({
            **state_members("IDLE", "CLEAR", "CLEAR_PAIRS", "RUN", "CONFIGURE", "SEND"),
            "start_valid": In(1), "sa_last": In(1), "sb_last": In(1), "pi": In(range(R * R)),
            "i": In(range(R + 1)),
            "eq": In(UNIT_EVENT_LAYOUT), "eq_valid": In(1), "eq_unit": In(range(max(2, K))),
            "eq_done": In(1), "eq_stale": In(1), "eq_quiet": In(1),
            "sent_target": In(range(R + 1)), "recv_target": In(range(R + 1)),
            "P": In(range(R + 1)), "Q": In(range(R + 1)),
            "p_last": In(range(R)), "q_last": In(range(R)),
            "nq_room": In(1), "nq_busy": In(1), "idle_out": In(1),
            "cfg_ready": In(1), "unit_sel": In(range(max(2, K))), "sc_fresh": In(1),
            "cnt_r_data": In(rank_counts_layout(R)),
            "running_q": Out(1), "all_done": Out(1), "op_code": Out(RepackError),
            "ustale": Out(K), "free": Out(K), "free_unit": Out(range(max(2, K))),
            "end_ok": Out(1), "pend_done": Out(1), "done_rank": Out(RANK_WIDTH),
            "nq_push": Out(1), "nq_flush": Out(1), "eq_take": Out(1),
            "cnt_r_addr": Out(RB), "cnt_w_en": Out(1), "cnt_w_addr": Out(RB),
            "cnt_w_data": Out(rank_counts_layout(R)),
        })

    def elaborate(self, platform):
        m = Module()
        R, K = self._max_ranks, self._units
        v = SimpleNamespace()
        v.pairs_left = Signal(range(R * R + 1))  # sub-matrices not yet DONE
        # `all_done`: pairs_left == 0, kept a cycle ahead.  `running_q` is a flop equal to
        # "in RUN, GATHER, CONFIGURE or SEND" (entered from CLEAR_PAIRS, left at the
        # exchange's end in RUN or at a TIMEOUT in any of them): the registrations' ready
        # and the watchdog read it, not an OR of four states.  Tests check it against the
        # OR every cycle (`state_mirrors`), and that one state flag is set (`state_count`).
        v.ubusy = Signal(K)
        m.d.comb += self.free.eq(~v.ubusy)
        m.d.comb += self.free_unit.eq(_priority(m, self.free, "free_unit"))
        # `pend_done`: a rank DONE notice waits for the queue, for `done_rank`.
        v.pend_hold = Signal()                  # pend_done, kept from the cycle before
        v.pend_set = Signal()                   # a rank event was taken in the cycle before
        v.rank_complete = Signal()              # ... and completed its rank
        # What `rank_write`, `nq_push` and `eq_take` stand for: the choices of the states
        # (tests compare them every cycle, `state_mirrors`).
        v.eq_take_ref = Signal()
        v.nq_push_ref = Signal()
        v.rank_event_taken = Signal()
        self._counts(m, v)
        self._others(m, v)
        self._run(m, v)
        return m

    def _counts(self, m, v):
        """The rank counts: a rank event's counts (CLEAR writes zeros), and whether its rank
        completes with it."""
        eq = self.eq
        m.d.comb += [self.cnt_r_addr.eq(eq.rank),
                     self.cnt_w_addr.eq(Mux(self.st_clear, self.i, eq.rank))]
        # A rank event's counts; CLEAR writes zeros.
        ev_taken = eq.kind == UnitEvent.TAKEN
        new_sent = Signal(range(self._max_ranks + 1))
        new_recv = Signal(range(self._max_ranks + 1))
        m.d.comb += [new_sent.eq(self.cnt_r_data.sent + ev_taken),
                     new_recv.eq(self.cnt_r_data.recv + ~ev_taken)]
        with m.If(~self.st_clear):
            m.d.comb += [self.cnt_w_data.sent.eq(new_sent), self.cnt_w_data.recv.eq(new_recv)]
        # `pend_done` from three flops: the compares of the event's rank's counts are made
        # in every cycle, outside the state machine's choices (_rank_event sets `pend_set`
        # only), so the counts' read and the compares no longer reach `pend_done` through
        # those choices (the 64-bit core's path at seed 1 of 2b387db: eq.rank -> the counts'
        # LUT RAM -> the compares -> the choices -> pend_done, 6 levels, 7.46 ns).  The
        # rank's counts after this event against Q and P, as compares of the counts read
        # against Q, P or their flops less one (an event adds one to one of the two): the
        # sum in front of the compares was the tree's estimated worst path at be1c6fd
        # (`tests/test_logic_depth.py`).
        # The values compared with are flops chosen as the event loads (`sent_target`,
        # `recv_target`): chosen here by the event's kind, the choice was the tree's
        # estimated worst path at b861e0b (eq.rank -> the counts -> the compares -> the
        # choice -> rank_complete).  Tests check the flop against the compares with the
        # choice wherever it is read (`state_mirrors`).
        counts = self.cnt_r_data
        rank_complete = v.rank_complete
        m.d.comb += self.pend_done.eq(v.pend_hold | (v.pend_set & rank_complete))
        complete_ref = Signal()
        m.d.sync += complete_ref.eq(
            Mux(ev_taken, counts.sent == self.q_last, counts.sent == self.Q)
            & Mux(ev_taken, counts.recv == self.P, counts.recv == self.p_last))
        self.mirrors.append((rank_complete & v.pend_set, complete_ref & v.pend_set))
        # Defaults: the state machine's post and abort clear `pend_hold`, a rank event sets
        # `pend_set` (assigned after these, so theirs win).
        m.d.sync += [rank_complete.eq((counts.sent == self.sent_target)
                                      & (counts.recv == self.recv_target)),
                     v.pend_hold.eq(self.pend_done), v.pend_set.eq(0)]

    def _abort(self, m, v):
        # Ref: issue 5: every wait has a cycle budget; a missing rank becomes an error.
        # Notices not yet taken are dropped with the exchange (TIMEOUT is counted, and the
        # exchange ended, by ControlStates).
        m.d.comb += self.nq_flush.eq(1)
        m.d.sync += [self.ustale.eq(self.ustale | v.ubusy), v.pend_hold.eq(0),
                     v.pend_set.eq(0), self.running_q.eq(0)]

    def _others(self, m, v):
        """What the states other than RUN do to RUN's registers."""
        ustale = self.ustale
        with m.If(self.st_idle):
            m.d.comb += v.eq_take_ref.eq(1)
            # Units left busy by an aborted exchange report here; they are freed on DONE.
            with m.If(self.eq_valid & self.eq_done):
                m.d.sync += [v.ubusy.bit_select(self.eq_unit, 1).eq(0),
                             ustale.bit_select(self.eq_unit, 1).eq(0)]
        with m.If(self.st_clear):
            m.d.comb += self.cnt_w_en.eq(1)
        with m.If(self.st_clear_pairs):
            with m.If(self.sb_last):
                with m.If(self.sa_last):
                    m.d.sync += [v.pairs_left.eq(self.pi + 1), self.all_done.eq(0),
                                 self.running_q.eq(1)]
        with m.If(self.st_configure):
            with m.If(self.idle_out):
                self._abort(m, v)
            with m.Elif(self.cfg_ready):
                m.d.sync += v.ubusy.bit_select(self.unit_sel, 1).eq(1)
        with m.If(self.st_send):
            with m.If(self.idle_out):
                self._abort(m, v)
            with m.Elif(self.nq_room):
                m.d.comb += v.nq_push_ref.eq(1)
        # The start's result, reset as the start is taken (see ControlSetup's `_start`).
        with m.If(self.st_idle & self.start_valid):
            m.d.sync += self.op_code.eq(RepackError.OK)

    def _run(self, m, v):
        run_q, eq_valid, eq_quiet = self.st_run, self.eq_valid, self.eq_quiet
        pend_done, nq_room, idle_out = self.pend_done, self.nq_room, self.idle_out
        # The exchange's end (every unit DONE, every notice taken) as a flop, a cycle late.
        # Once true in RUN the condition stays true: every unit has reported DONE, after
        # its TAKEN and DELIVERED events (one FIFO per unit), so the only events left are
        # stale units', which are quiet; nothing pushes a notice or sets `pend_done`, and
        # `all_done` is cleared only at a start.  The three-term AND at the head of RUN's
        # priorities was the 64-bit core's routed path at seed 3 of f99efcb (spare_valid
        # -> the end -> the next state, 6 levels, 8.20 ns).
        end_ok = self.end_ok
        m.d.sync += end_ok.eq(run_q & self.all_done & ~self.nq_busy & ~pend_done)
        # The rank counts' write enable as the AND of the flops that choose a rank event in
        # RUN's priorities below (`_rank_event`): made at the end of those priorities, it
        # was the 64-bit core's routed path at seed 3 of 87ae9b9 (eq_quiet -> the choices
        # -> the LUT RAM's write enable, 7.95 ns).  A rank event needs no notice already
        # pending and room for its own, and is not quiet (so neither DONE nor stale); tests
        # check the AND against the priorities' choice every cycle (`state_mirrors`).
        rank_write = Signal()
        m.d.comb += rank_write.eq(run_q & ~end_ok & ~idle_out & eq_valid & ~eq_quiet
                                  & nq_room & ~pend_done)
        with m.If(rank_write):
            # The rank's DONE may follow: `pend_done` watches its counts from the next cycle.
            # Loaded at the end of RUN's priorities, `done_rank` was the 64-bit core's
            # latest pin at seed 1 of ff0ac7f (its enable, 7.35 ns).
            m.d.comb += self.cnt_w_en.eq(1)
            m.d.sync += [v.pend_set.eq(1), self.done_rank.eq(self.eq.rank)]
        self.mirrors.append((rank_write, v.rank_event_taken))
        # The notice queue's push the same way: RUN posts a pending DONE (first among the
        # notices) or a rank event's notice (rank_write), SEND one per source while the
        # queue has room, neither once the watchdog has run out.  Made at the end of RUN's
        # priorities, with `pend_done` at their head, it was the 64-bit core's routed path
        # at seed 1 of 7c4bfe1 (rank_complete -> the pending DONE -> the push -> the
        # queue's valid, 6 LUTs, 6.92 ns).  The decisions that post a notice set the
        # reference (`nq_push_ref`), which tests compare with it every cycle.
        m.d.comb += self.nq_push.eq(
            ~idle_out & nq_room
            & ((run_q & ~end_ok & (pend_done | (eq_valid & ~eq_quiet)))
               | self.st_send))
        self.mirrors.append((self.nq_push, v.nq_push_ref))
        # The event register's take the same way: IDLE takes every event; RUN takes one
        # after `end_ok`, the watchdog and a pending DONE's post (which needs room), if it is
        # quiet or has room for its notice with no DONE pending.  Made at the end of RUN's
        # priorities, it enabled ~50 flops (`eq`, its decoded flags and targets): the
        # 256-bit core's latest pin at seed 1 of 0141bc8 (rank_complete -> the choices ->
        # eq.rank's enable, 6 levels, 8.32 ns).
        m.d.comb += self.eq_take.eq(
            self.st_idle
            | (run_q & ~end_ok & ~idle_out & eq_valid
               & Mux(pend_done, eq_quiet & ~nq_room, eq_quiet | nq_room)))
        self.mirrors.append((self.eq_take, v.eq_take_ref))
        with m.If(run_q):
            eq = self.eq
            with m.If(end_ok):
                # Every unit has reported DONE and every notice has been taken.
                m.d.sync += self.running_q.eq(0)
            with m.Elif(idle_out):
                self._abort(m, v)
            with m.Elif(pend_done & nq_room):
                m.d.comb += v.nq_push_ref.eq(1)
                m.d.sync += v.pend_hold.eq(0)
            with m.Elif(eq_valid & (eq_quiet | (nq_room & ~pend_done))):
                # Unit events before the scan: they free units and complete ranks.  An event
                # and its notice take one cycle.
                m.d.comb += v.eq_take_ref.eq(1)
                with m.If(self.eq_stale):
                    with m.If(self.eq_done):
                        m.d.sync += [v.ubusy.bit_select(self.eq_unit, 1).eq(0),
                                     self.ustale.bit_select(self.eq_unit, 1).eq(0)]
                with m.Elif(self.eq_done):
                    m.d.sync += [v.ubusy.bit_select(self.eq_unit, 1).eq(0),
                                 v.pairs_left.eq(v.pairs_left - 1),
                                 self.all_done.eq(v.pairs_left == 1)]
                    with m.If((eq.code != RepackError.OK) & (self.op_code == RepackError.OK)):
                        m.d.sync += self.op_code.eq(eq.code)
                with m.Elif(~eq_quiet):
                    # A TAKEN or DELIVERED: tell the rank, and note a rank with all its
                    # sends and receives done.  Ref: seed 003, step 7.5 (told on
                    # completion) and 7.6 (a rank completes once all its sends and receives
                    # are done).  The counts, the notice and the completion's compares
                    # (`rank_complete`) are wired in `_counts` and NoticeQueue.  This
                    # cycle's event is taken only while no DONE notice is pending, so
                    # `pend_done` is then `pend_set & rank_complete` next cycle.
                    m.d.comb += v.rank_event_taken.eq(1)   # the counts' write: `rank_write`
                    # `pend_set` and `done_rank` load on `rank_write` (above).
                    m.d.comb += v.nq_push_ref.eq(1)
            with m.Elif(self.free.any() & self.sc_fresh):
                pass                    # one scan step: PairScan (and ControlStates)

