"""The barrier unit's error bits and its count of stale notices and ``done`` strobes."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .layouts import BARRIER_ERROR_LAYOUT


__all__ = ["ErrorFlags"]


class ErrorFlags(wiring.Component):
    """The error bits (the checks' and the sticky ones) and the stale count.

    Members
    -------
    cfg : ``In(BARRIER_ERROR_LAYOUT)``
        :class:`~.checks.ConfigChecks`'s error bits.
    write_bad : ``In(1)``; route_clear : ``In(1)``
        A bad route write (:class:`~.route.RouteTable`) sets ``cfg_write``; a clear of the
        table clears it.
    outside, malformed : ``In(1)``
        A COMPLETE outside its sender's subtree, a malformed notice
        (:class:`~.execute.ExecuteStage`): they set ``outside``, ``notice``.
    rx_stale, late, d_stale : ``In(1)``
        A notice, a COMPLETE that came too late for the decision, a done strobe dropped.
    start : ``In(1)``
        Clears the stale count and the ``outside`` and ``notice`` bits.
    cfg_write : ``Out(1)``
        The sticky ``cfg_write`` bit.
    errors : ``Out(BARRIER_ERROR_LAYOUT)``; error : ``Out(1)``; stale : ``Out(32)``
        As the unit's members of those names.
    """

    def __init__(self):
        super().__init__({
            "cfg": In(BARRIER_ERROR_LAYOUT),
            "write_bad": In(1), "route_clear": In(1),
            "outside": In(1), "malformed": In(1),
            "rx_stale": In(1), "late": In(1), "d_stale": In(1),
            "start": In(1),
            "cfg_write": Out(1),
            "errors": Out(BARRIER_ERROR_LAYOUT),
            "error": Out(1),
            "stale": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        sticky = Signal(BARRIER_ERROR_LAYOUT)   # only cfg_write, outside, notice are used
        m.d.comb += [
            self.errors.eq(self.cfg.as_value() | sticky.as_value()),
            self.error.eq(self.errors.as_value().any()),
            self.cfg_write.eq(sticky.cfg_write),
        ]
        # What is dropped in a cycle is registered first and added a cycle later (the count
        # runs a cycle behind), so the late drop signals, which follow the root's decision,
        # end at two flops and not at a 32-bit counter's enable.  `start` drops what was
        # counted in its cycle.
        one = Signal(name="stale_one")
        two = Signal(name="stale_two")
        drops = Cat(self.rx_stale | self.late, self.d_stale)
        m.d.sync += [one.eq((drops == 0b01) | (drops == 0b10)), two.eq(drops == 0b11)]
        stale = self.stale
        m.d.sync += stale.eq(Mux(two, stale + 2, Mux(one, stale + 1, stale)))
        # A bad route write stays flagged across `start` (the table it left is still wrong)
        # until the table is cleared.
        with m.If(self.write_bad):
            m.d.sync += sticky.cfg_write.eq(1)
        with m.If(self.route_clear):
            m.d.sync += sticky.cfg_write.eq(0)
        with m.If(self.outside):
            m.d.sync += sticky.outside.eq(1)
        with m.If(self.malformed):
            m.d.sync += sticky.notice.eq(1)
        # start_ac_region: a clean slate.
        with m.If(self.start):
            m.d.sync += [stale.eq(0), one.eq(0), two.eq(0),
                         sticky.outside.eq(0), sticky.notice.eq(0)]
        return m
