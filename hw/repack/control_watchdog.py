# Ref: issue 5: every wait has a cycle budget; a rank that never registers or a receiver that
#      never drains becomes an error, not a hang.
"""The repack control tree's watchdog: :class:`ControlWatchdog` counts the cycles without
progress while an exchange runs.
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .control_states import check_units


__all__ = ["ControlWatchdog"]


class ControlWatchdog(wiring.Component):
    """Cycles without progress, counted down from timeout + REPORT_SLACK.  `idle_out` is
    kept a cycle ahead (a flop, not a 32-bit compare), and progress reaches the counter
    through a register: `hold_q` (progress, or not running, in the previous cycle)
    reloads it.  The fire falls on the cycle ``timeout + REPORT_SLACK`` cycles after the
    last progress (or after the running states are entered); a unit event taken is
    progress in the cycle after.

    Parameters
    ----------
    units : int
        Number of repack units, 1 .. 64.

    Members
    -------
    running_q : ``In(1)``
        An exchange runs (RUN, GATHER, CONFIGURE or SEND).
    wd_budget : ``In(33)``
        timeout + REPORT_SLACK - 1, loaded at start.
    reg_valid, reg_ready, notice_valid, notice_ready : ``In(1)``
        The registration and notice streams (a transfer is progress).
    event_moved, cfg_moved : ``In(1)``
        A unit event was taken from its slice; a unit took its configuration.
    unit_active : ``In(units)``
        Bit k: unit k moved a beat in this cycle.
    idle_out : ``Out(1)``
        The budget has run out (a flop).
    """

    def __init__(self, units):
        check_units(units)
        super().__init__({
            "running_q": In(1), "wd_budget": In(33),
            "reg_valid": In(1), "reg_ready": In(1), "notice_valid": In(1),
            "notice_ready": In(1), "event_moved": In(1), "cfg_moved": In(1),
            "unit_active": In(units), "idle_out": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        # A unit event counts in the cycle after the FSM took it (`event_taken`, a flop): its
        # `ready` is the RUN decision's take, which ran on into `idle_out` (the 256-bit
        # core's path at seed 1 of 392fc2e: the control state -> the take -> idle_out, 9
        # levels, 8.44 ns).  So the budget runs from the cycle after a take, and a take in
        # the budget's very last cycle no longer holds off the fire.
        event_taken = Signal()
        m.d.sync += event_taken.eq(self.event_moved)
        progress = Signal()
        m.d.comb += progress.eq(
            (self.reg_valid & self.reg_ready) |
            (self.notice_valid & self.notice_ready) |
            event_taken |
            self.cfg_moved |
            self.unit_active.any())
        hold_q = Signal(init=1)
        idle_left = Signal(33)
        idle_out = self.idle_out
        m.d.sync += [
            hold_q.eq(progress | ~self.running_q),
            idle_left.eq(Mux(hold_q, self.wd_budget, idle_left - 1)),
            idle_out.eq(self.running_q & ~progress & ~hold_q &
                        (idle_out | (idle_left == 1))),
        ]
        return m
