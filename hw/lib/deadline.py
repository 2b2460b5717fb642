"""A registered "the clock has reached cycle ``at``" flag.

Timed starts (the engine's START_AT, the barrier's DONE_AT) compare the 64-bit cycle counter
with a 64-bit register.  Done in the cycle that acts on it, that compare is a 64-bit carry
chain in front of a state machine's next-state logic.  :class:`Deadline` moves it into a flop
without making the start a cycle late: it registers ``now + 2`` (which is ``now + 1`` in the
next cycle, since ``now`` counts clock cycles) and from that ``now + 1 >= at``, which in the
next cycle is exactly ``now >= at``.  The increment and the compare are separate flop-to-flop
paths.
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


__all__ = ["Deadline"]


class Deadline(wiring.Component):
    """``reached`` is ``now >= at`` from a flop.

    Members
    -------
    now : ``In(64)``
        A cycle counter: one more in every cycle.
    at : ``In(64)``
        The cycle to wait for.
    reached : ``Out(1)``
        ``now >= at`` with ``at`` as it was in the previous cycle: a new ``at`` counts from
        the cycle after it is set, which is when anything armed in the same cycle first looks.

    In the first two cycles after reset ``reached`` is 0 whatever ``now`` and ``at`` are.
    """

    def __init__(self):
        super().__init__({
            "now": In(64),
            "at": In(64),
            "reached": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        ahead = Signal(64)           # now + 1, from the second cycle after reset on
        ahead_valid = Signal()
        m.d.sync += [ahead.eq(self.now + 2), ahead_valid.eq(1),
                     self.reached.eq(ahead_valid & (ahead >= self.at))]
        return m
