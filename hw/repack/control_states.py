# Ref: seed 003 (CN111614581, Mellanox), steps 7.1-7.6: the control tree's exchange, state by
#      state (see control.py).
"""The repack control tree's state machine: :class:`ControlStates`, one flop per state, with
every transition and the exchange's outcome (``fin``) and the errors it counts (``err``).  The
other parts of :class:`~.control.RepackControl` read its state flags.
"""

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..lib.builder import OneHotStates
from ..params import is_int
from .formats import MAX_RANKS, RepackError, _check_max_group


__all__ = ["CONTROL_STATES", "ControlStates", "state_members", "in_group", "check_tree",
           "check_units"]


#: The control tree's states, in the order an exchange passes them (see RepackControl).
CONTROL_STATES = ("IDLE", "DECODE", "CLEAR", "CHECK_SRC", "CHECK_DST", "SIZE", "CAPACITY",
                  "CLEAR_PAIRS", "RUN", "GATHER", "CONFIGURE", "SEND")


def state_members(*states):
    """``In(1)`` members ``st_<state>`` for the state flags a part reads."""
    return {f"st_{state.lower()}": In(1) for state in states}


def in_group(rank, n, max_ranks):
    """rank < n, knowing n <= max_ranks (DECODE refuses others): a compare of the low bits and
    a zero test of the rest, not a 16-bit carry chain."""
    NW = max_ranks.bit_length()
    return (rank[NW:] == 0) & (rank[:NW] < n[:NW])


def check_units(units):
    """The check of :class:`~.control.RepackControl`'s number of units."""
    if not is_int(units):
        raise TypeError(f"Number of units must be an integer, not {units!r}")
    if not 1 <= units <= 64:
        raise ValueError(f"Number of units must be between 1 and 64, not {units!r}")


def check_tree(max_ranks, units=1, max_group=1):
    """The checks of :class:`~.control.RepackControl`'s parameters that its parts share."""
    if not is_int(max_ranks):
        raise TypeError(f"Largest number of ranks must be an integer, not {max_ranks!r}")
    if not 2 <= max_ranks <= MAX_RANKS:
        raise ValueError(f"Largest number of ranks must be between 2 and {MAX_RANKS}, "
                         f"not {max_ranks!r}")
    check_units(units)
    _check_max_group(max_group)


class ControlStates(wiring.Component):
    """The control tree's states, one flop each (the logic reads a state's flop, never a
    decode of a binary state), their transitions, the exchange's end and the errors the
    states count.

    Parameters
    ----------
    max_ranks : int
        Largest N, 2 .. 256.
    units : int
        Number of repack units, 1 .. 64.

    Members
    -------
    st_<state> : ``Out(1)``
        The flag of each of :data:`CONTROL_STATES`, exactly one set in every cycle.
    order_valid, order_index, ow_checked : ``In(1)``, ``In(16)``, ``In(1)``
        An order offered in IDLE, its index, and whether it was looked at (an index out of
        range counts BAD_CONFIG).
    start_valid, start_bad : ``In(1)``
        A start offered in IDLE; DECODE's verdict on it.
    i_last, c_bad, c_last, cap_bad : ``In(1)``
        CLEAR's end; a list walk's refusal and end; CAPACITY's refusal.
    sa_last, sb_last : ``In(1)``
        CLEAR_PAIRS's end.
    end_ok, idle_out, pend_done, nq_room, eq_valid, eq_quiet, sc_fresh, sc_a, sc_go : ``In(1)``
        The flops RUN's priorities decide on (see :class:`~.control_run.RunActions`).
    free : ``In(units)``
        Units not busy.
    left_one, cfg_ready : ``In(1)``
        GATHER's and SEND's last step; the configured unit's ``ready``.
    op_code : ``In(RepackError)``
        The exchange's result when RUN ends it.
    fin, fin_code : ``Out(1)``, ``Out(RepackError)``
        The exchange ended in the previous cycle, with that status.
    err, err_code : ``Out(1)``, ``Out(RepackError)``
        An error the states count in this cycle.
    """

    def __init__(self, max_ranks, units):
        check_tree(max_ranks, units)
        self._max_ranks = max_ranks
        members = {f"st_{state.lower()}": Out(1) for state in CONTROL_STATES}
        members.update({
            "order_valid": In(1), "order_index": In(16), "ow_checked": In(1),
            "start_valid": In(1), "start_bad": In(1),
            "i_last": In(1), "c_bad": In(1), "c_last": In(1), "cap_bad": In(1),
            "sa_last": In(1), "sb_last": In(1),
            "end_ok": In(1), "idle_out": In(1), "pend_done": In(1), "nq_room": In(1),
            "eq_valid": In(1), "eq_quiet": In(1), "free": In(units), "sc_fresh": In(1),
            "sc_a": In(1), "sc_go": In(1), "left_one": In(1), "cfg_ready": In(1),
            "op_code": In(RepackError),
            "fin": Out(1), "fin_code": Out(RepackError),
            "err": Out(1), "err_code": Out(RepackError),
        })
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        fsm = OneHotStates(m, CONTROL_STATES, init="IDLE", name="control")
        for state in CONTROL_STATES:
            m.d.comb += getattr(self, f"st_{state.lower()}").eq(fsm[state])
        fin, fin_code = self.fin, self.fin_code
        # An exchange's end is registered (`fin`): the deciding cycle only picks the next
        # state; status and ops follow a cycle later, and busy stays high until they do.
        m.d.sync += fin.eq(0)

        def count(code):
            m.d.comb += [self.err.eq(1), self.err_code.eq(code)]

        def end(code):
            """finish()'s registers, without the state change (RUN's actions, which are
            outside a state's block, use it and name their source).  `running_q` is cleared
            where a running state ends (RUN's actions, the aborts), so the setup states'
            refusals do not load it."""
            m.d.sync += [fin.eq(1), fin_code.eq(code)]

        def finish(code):
            end(code)
            fsm.next("IDLE")

        def fail_setup(code):
            count(code)
            finish(code)

        def abort(leave=True):
            # Ref: issue 5: every wait has a cycle budget; a missing rank becomes an error.
            # `leave`: also go to IDLE (False for RUN, whose transition is beside it).
            count(RepackError.TIMEOUT)
            (finish if leave else end)(RepackError.TIMEOUT)

        self._setup(m, fsm, count, fail_setup)
        self._run(m, fsm, end, abort)
        return m

    def _setup(self, m, fsm, count, fail_setup):
        with fsm.state("IDLE"):
            with m.If(self.order_valid & ~self.ow_checked):
                with m.If(self.order_index >= self._max_ranks):
                    count(RepackError.BAD_CONFIG)     # the order itself: OrderWriter
            with m.If(self.start_valid):
                fsm.next("DECODE")         # the start's registers load in ControlSetup

        with fsm.state("DECODE"):
            with m.If(self.start_bad):
                fail_setup(RepackError.BAD_CONFIG)
            with m.Else():
                fsm.next("CLEAR")

        with fsm.state("CLEAR"):
            with m.If(self.i_last):
                fsm.next("CHECK_SRC")

        with fsm.state("SIZE"):
            fsm.next("CAPACITY")

        with fsm.state("CAPACITY"):
            # Ref: issue 5: refused at configuration, never overflowed.
            with m.If(self.cap_bad):
                fail_setup(RepackError.CAPACITY)
            with m.Else():
                fsm.next("CLEAR_PAIRS")

        with fsm.state("CLEAR_PAIRS"):
            with m.If(self.sb_last):
                with m.If(self.sa_last):
                    fsm.next("RUN")

        for state, nxt in (("CHECK_SRC", "CHECK_DST"), ("CHECK_DST", "SIZE")):
            with fsm.state(state):
                # C: a cycle after B (see ControlSetup's list walks).
                with m.If(self.c_bad):
                    fail_setup(RepackError.BAD_CONFIG)
                with m.Elif(self.c_last):
                    fsm.next(nxt)

    def _run(self, m, fsm, end, abort):
        with fsm.state("GATHER"):
            with m.If(self.left_one):
                fsm.next("CONFIGURE")

        with fsm.state("CONFIGURE"):
            with m.If(self.idle_out):
                abort()
            with m.Elif(self.cfg_ready):
                fsm.next("SEND")

        with fsm.state("SEND"):
            with m.If(self.idle_out):
                abort()
            with m.Elif(self.nq_room):
                with m.If(self.left_one):
                    fsm.next("RUN")

        # RUN: per cycle, in this order: finish, TIMEOUT, a pending rank DONE notice, one
        # unit event (with its notice), one scan step (see RunActions and PairScan).
        with fsm.state("RUN"):
            with m.If(self.end_ok):
                # Every unit has reported DONE and every notice has been taken.
                end(self.op_code)
                fsm.next("IDLE")
            with m.Elif(self.idle_out):
                abort(leave=False)
                fsm.next("IDLE")
            with m.Elif(self.pend_done & self.nq_room):
                pass
            with m.Elif(self.eq_valid & (self.eq_quiet | (self.nq_room & ~self.pend_done))):
                pass
            with m.Elif(self.free.any() & self.sc_fresh):
                with m.If(~self.sc_a):
                    pass
                with m.Elif(self.sc_go):
                    fsm.next("GATHER")
