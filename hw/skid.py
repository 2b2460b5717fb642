# Ref: Amaranth RFC 61 / amaranth.lib.stream (transfer rules: a transfer happens in a cycle
#      where valid and ready are both high; valid must not wait for ready).
"""A two-entry register slice for streams.

:class:`SkidBuffer` cuts every combinational path between its input and its output (valid
and payload come from flops, so does the ready it gives upstream) while still moving one
transfer per cycle: the second entry catches the transfer accepted in the cycle the output
stalls.  It is built from plain flops rather than a memory-backed FIFO, which keeps it small
in hardware and cheap in simulation.
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out


__all__ = ["SkidBuffer"]


class SkidBuffer(wiring.Component):
    """Register slice for a stream of ``shape`` payloads.

    Members
    -------
    i : ``In(stream.Signature(shape))``
    o : ``Out(stream.Signature(shape))``
    """

    def __init__(self, shape):
        self._shape = shape
        super().__init__({
            "i": In(stream.Signature(shape)),
            "o": Out(stream.Signature(shape)),
        })

    def elaborate(self, platform):
        m = Module()
        # The second entry; the first is o.payload / o.valid themselves.
        skid_valid = Signal()
        skid_payload = Signal(self._shape)

        m.d.comb += self.i.ready.eq(~skid_valid)
        take = self.i.valid & self.i.ready
        out_free = ~self.o.valid | self.o.ready

        with m.If(out_free):
            with m.If(skid_valid):
                m.d.sync += [
                    self.o.payload.eq(skid_payload),
                    self.o.valid.eq(1),
                    skid_valid.eq(0),
                ]
                # i.ready is low while the second entry is full: nothing is taken now.
            with m.Else():
                m.d.sync += [self.o.payload.eq(self.i.payload), self.o.valid.eq(take)]
        with m.Elif(take):
            m.d.sync += [skid_payload.eq(self.i.payload), skid_valid.eq(1)]
        return m
