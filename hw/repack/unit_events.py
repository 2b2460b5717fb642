"""The repack unit's reports: its event queue (:class:`EventQueue`), its error count, last
error and the sub-matrix's failure (:class:`ErrorLog`), and the watchdog of its input
(:class:`Watchdog`).  :class:`~.unit.RepackUnit` joins them to its other parts."""

import functools
import operator

from amaranth.hdl import Module, Mux, Signal, Cat
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from .formats import UNIT_EVENT_LAYOUT, RepackError, _check_max_group

__all__ = ["FAILING", "EventQueue", "ErrorLog", "Watchdog"]


#: The errors that drop the sub-matrix being collected (the others drop one message or
#: refuse a configuration).
FAILING = (RepackError.TIMEOUT, RepackError.DUPLICATE, RepackError.OUTSIDE_D,
           RepackError.LENGTH, RepackError.OVER_BUDGET)


class EventQueue(wiring.Component):
    """The unit's events on their way to the control tree.

    A FIFO deep enough for one sub-matrix's events (dh TAKEN, dv DELIVERED, DONE), so the
    unit does not wait for the control tree to take each one.  At most one event is posted
    per cycle: TAKEN only while collecting, DELIVERED only while sending, DONE only once both
    are over.  A producer waits while ``free`` is low.

    Parameters
    ----------
    max_group : int
        Largest dh and dv, 1 .. 256.

    Members
    -------
    post : ``In(1)``
        Post ``data`` in this cycle (only while ``free``).
    data : ``In(UNIT_EVENT_LAYOUT)``
        The event posted.
    event : ``Out(stream.Signature(UNIT_EVENT_LAYOUT))``
        The unit's ``event``.
    free : ``Out(1, init=1)``
        Room for an event posted in this cycle (a flop).
    """

    def __init__(self, max_group):
        _check_max_group(max_group)
        self._max_group = max_group
        super().__init__({
            "post": In(1),
            "data": In(UNIT_EVENT_LAYOUT),
            "event": Out(stream.Signature(UNIT_EVENT_LAYOUT)),
            "free": Out(1, init=1),
        })

    def elaborate(self, platform):
        m = Module()
        G = self._max_group
        # A posted event is registered (`ev_q`) before it is written, so no decision logic
        # drives the FIFO's memory.  `ev_free` is a register of registers: `ev_held` counts
        # the events written into the FIFO (from `ev_q_valid`, a flop) and `ev_free` for the
        # next cycle assumes that this cycle posts and pops nothing, so neither late decision
        # reaches it.  The events held, `ev_q` included, are at most ev_held + ev_q_valid + 1
        # in the next cycle, and ev_free allows a post only while that leaves room for it.
        # The routed 64-bit core's path at seed 1 (tenth pass) ran from ev_free through the
        # input's take and the post into ev_held (7 LUTs).  The pessimism costs one entry of
        # depth (2 G + 3 where 2 G + 2 held as many): a sub-matrix's 2 G + 1 events, and one
        # more, still fit without a pop.
        EV_DEPTH = 2 * G + 3
        m.submodules.events = events = SyncFIFOBuffered(width=UNIT_EVENT_LAYOUT.size,
                                                        depth=EV_DEPTH)
        ev_q = Signal(UNIT_EVENT_LAYOUT)
        ev_q_valid = Signal()
        ev_held = Signal(range(EV_DEPTH + 1))
        ev_free = self.free
        m.d.comb += [
            self.event.valid.eq(events.r_rdy),
            self.event.payload.eq(events.r_data),
            events.r_en.eq(self.event.ready),
            events.w_en.eq(ev_q_valid),
            events.w_data.eq(ev_q),
        ]
        m.d.sync += [ev_q_valid.eq(self.post), ev_q.eq(self.data)]
        ev_pop = self.event.valid & self.event.ready
        m.d.sync += [
            ev_held.eq(ev_held + ev_q_valid - ev_pop),
            # ev_held + ev_q_valid + 1 < EV_DEPTH, as two compares with constants and a
            # choice (a sum before a compare was a carry chain into a carry chain: the
            # 64-bit unit's path at seed 1, 6.99 ns).
            ev_free.eq(Mux(ev_q_valid, ev_held < EV_DEPTH - 2, ev_held < EV_DEPTH - 1)),
        ]
        return m


class ErrorLog(wiring.Component):
    """The error count, the last error and the sub-matrix's failure.

    Members
    -------
    hits : ``In(len(RepackError))``
        The input's errors found in this cycle, one bit per code (one hot; the TIMEOUT bit
        is not read).
    timeout : ``In(1)``
        The watchdog fired in this cycle (TIMEOUT).
    refuse : ``In(1)``; refuse_code : ``In(RepackError)``
        A refused configuration is counted in this cycle; its code (a flop).
    st_idle, cfg_take : ``In(1)``
        The unit is idle; it takes a configuration (which clears the failure).
    errors : ``Out(32)``; last_error : ``Out(RepackError)``
        The unit's ``errors`` and ``last_error``.
    fail_now : ``Out(1)``; fail_code_now : ``Out(RepackError)``
        The sub-matrix has failed, counting the errors registered last cycle; the code of
        its first failure.
    """

    def __init__(self):
        super().__init__({
            "hits": In(len(RepackError)),
            "timeout": In(1),
            "refuse": In(1),
            "refuse_code": In(RepackError),
            "st_idle": In(1),
            "cfg_take": In(1),
            "errors": Out(32),
            "last_error": Out(RepackError),
            "fail_now": Out(1),
            "fail_code_now": Out(RepackError),
        })

    def elaborate(self, platform):
        m = Module()
        # ---- Errors -------------------------------------------------------------------------
        # An error found in a cycle sets its code's bit (`err_hits`, one hot: one input beat
        # per cycle, and the watchdog fires only without one) or `err_refuse` (a refused
        # configuration, whose code is the `refuse_code` flop); the bits are registered and
        # counted, coded and noted as the sub-matrix's failure a cycle later, so no decision
        # tree ends in the code's multiplexer or the counter.  The state machine reads the
        # failure through `fail_now` and `fail_code_now`, which count the registered bits.
        err_hits = Signal(len(RepackError))
        m.d.comb += err_hits.eq(Cat(self.timeout if k == RepackError.TIMEOUT.value
                                    else self.hits[k] for k in range(len(RepackError))))
        err_refuse = self.refuse
        err_hits_q = Signal(len(RepackError))
        err_refuse_q = Signal()
        m.d.sync += [err_hits_q.eq(err_hits), err_refuse_q.eq(err_refuse)]
        refuse_code = self.refuse_code          # set with the refusal (UnitSequencer)
        hit_code = Signal(RepackError)
        m.d.comb += hit_code.eq(functools.reduce(operator.or_, [
            Mux(err_hits_q[e.value], e.value, 0) for e in RepackError if e.value]))
        # A refusal comes while idle, when only a stray beat can be counted beside it: the
        # refusal's code is the one kept.
        err_code = Mux(err_refuse_q, refuse_code, hit_code)
        pending_fail = (err_hits_q & sum(1 << e.value for e in FAILING)).any()
        failed = Signal()
        fail_code = Signal(RepackError)
        m.d.comb += [self.fail_now.eq(failed | pending_fail),
                     self.fail_code_now.eq(Mux(failed, fail_code, hit_code))]
        with m.If(err_hits_q.any() | err_refuse_q):
            m.d.sync += [self.errors.eq(self.errors + 1), self.last_error.eq(err_code)]
        with m.If(pending_fail & ~failed):
            m.d.sync += [failed.eq(1), fail_code.eq(hit_code)]
        # Cleared at every configuration's take, refused or not (see UnitSequencer).
        with m.If(self.st_idle):
            with m.If(self.cfg_take):
                m.d.sync += [failed.eq(0), fail_code.eq(RepackError.OK)]
        return m


class Watchdog(wiring.Component):
    """Cycles without an input beat while collecting, counted down from the sub-matrix's
    ``timeout``.

    Members
    -------
    st_idle, cfg_take : ``In(1)``; timeout : ``In(32)``
        The unit is idle; it takes a configuration, whose timeout loads the count.
    st_collect : ``In(1)``
        The unit is collecting: the count runs.
    take : ``In(1)``; c_timeout : ``In(32)``
        An input beat is parsed, which loads the count again with the sub-matrix's timeout.
    fire : ``Out(1)``
        The count has run out, and no beat is parsed in this cycle (TIMEOUT).
    """

    def __init__(self):
        super().__init__({
            "st_idle": In(1), "cfg_take": In(1), "timeout": In(32),
            "st_collect": In(1), "take": In(1), "c_timeout": In(32),
            "fire": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        take = self.take
        # Cycles without an input beat, counted down from `timeout`; `idle_out` (they reached
        # `timeout`) is kept a cycle ahead, so the watchdog is a flop, not a 32-bit compare.
        idle_left = Signal(32)
        idle_out = Signal()
        m.d.comb += self.fire.eq(idle_out & ~take)
        # Loaded at every configuration's take, refused or not (see UnitSequencer._configure).
        with m.If(self.st_idle):
            with m.If(self.cfg_take):
                m.d.sync += [idle_left.eq(self.timeout), idle_out.eq(0)]
        with m.If(self.st_collect):
            m.d.sync += [
                idle_left.eq(Mux(take, self.c_timeout, idle_left - 1)),
                idle_out.eq(~take & (idle_out | (idle_left == 1))),
            ]
        return m
