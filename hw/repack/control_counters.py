"""The repack control tree's counters: :class:`ControlCounters` keeps ``errors``,
``last_error``, ``status``, ``ops``, ``busy`` and ``cycles``.
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .control_states import state_members
from .formats import RepackError


__all__ = ["ControlCounters"]


class ControlCounters(wiring.Component):
    """Errors, status and ops.  An error is registered before it is counted, so no
    decision drives the 32-bit counter; the FSM and the registration pipeline each count
    at most one a cycle.

    Members
    -------
    err, err_code : ``In(1)``, ``In(RepackError)``
        An error of the states (:class:`~.control_states.ControlStates`) in this cycle.
    rerr, rerr_code : ``In(1)``, ``In(RepackError)``
        A registration's error (:class:`~.control_registrations.Registrations`).
    fin, fin_code : ``In(1)``, ``In(RepackError)``
        The exchange ended in the previous cycle, with that status.
    st_idle, start_valid : ``In(1)``
        IDLE's flag and a start offered (taken in IDLE: ``cycles`` restarts).
    busy, status, errors, last_error, cycles, ops : ``Out``
        As :class:`~.control.RepackControl`'s.
    """

    def __init__(self):
        super().__init__({
            "err": In(1), "err_code": In(RepackError),
            "rerr": In(1), "rerr_code": In(RepackError),
            "fin": In(1), "fin_code": In(RepackError),
            **state_members("IDLE"), "start_valid": In(1),
            "busy": Out(1), "status": Out(RepackError), "errors": Out(32),
            "last_error": Out(RepackError), "cycles": Out(32), "ops": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        e1, c1 = Signal(), Signal(RepackError)
        e2, c2 = Signal(), Signal(RepackError)
        m.d.sync += [e1.eq(self.err), c1.eq(self.err_code), e2.eq(self.rerr),
                     c2.eq(self.rerr_code)]
        with m.If(e1 | e2):
            # Both in one cycle (a TIMEOUT and a late registration's error) count two and
            # name the FSM's.
            m.d.sync += [self.errors.eq(self.errors + e1 + e2),
                         self.last_error.eq(Mux(e1, c1, c2))]

        # An exchange's end is registered too (`fin`, ControlStates'): the deciding cycle only
        # picks the next state; status and ops follow a cycle later, and busy stays high
        # until they do.
        with m.If(self.fin):
            m.d.sync += [self.status.eq(self.fin_code), self.ops.eq(self.ops + 1)]
        m.d.comb += self.busy.eq(~self.st_idle | self.fin)
        with m.If(self.busy):
            m.d.sync += self.cycles.eq(self.cycles + 1)
        # A start's clear of `cycles` comes after the count, so it wins.
        with m.If(self.st_idle & self.start_valid):
            m.d.sync += self.cycles.eq(0)
        return m
