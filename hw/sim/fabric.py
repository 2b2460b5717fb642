# Ref: Amaranth RFC 61 / amaranth.lib.stream (a transfer happens in a cycle where valid and
#      ready are both high; valid must not wait for ready).
"""A link of the fabric between a NIC port and the switch, for the simulated cluster only.

:class:`FabricLink` sits on one packet stream (:func:`~nicoll.hw.net.packet.packet_stream`)
and models the wire of issue 20 per packet, in core cycles:

- a fixed **latency** of ``latency`` cycles: a beat taken on ``i`` in cycle ``t`` leaves on
  ``o`` in cycle ``t + latency`` at the earliest, beats keep their order, and one beat a
  cycle moves through when nothing else holds it;
- a **gap** of ``gap`` idle cycles on ``o`` after each packet's last beat: the bytes a packet
  carries on the wire besides its beats (preamble and SFD, inter-frame gap, headers, CRC,
  padding up to the minimum frame), in beat-cycles.

A beat leaves at the first cycle it may: its latency is over, the gap after the packet before
it is over, and ``o.ready`` is high.  The host computes both numbers from a
:class:`nicoll.Fabric` (``sw/fabric.py``); the gateware takes plain integers and imports
nothing of the driver.

With ``latency=0`` and ``gap=0`` the link is a wire: ``o`` is ``i`` (valid, payload, ready),
with no flop, so the ``"ideal"`` fabric keeps every cycle count of the cluster without it.
With ``latency=0`` and a gap it is a wire gated by the gap counter.  With ``latency >= 1``
the beats wait in a ring of ``latency + 1`` entries (a memory read combinationally:
simulation-only gateware), ``i.ready`` comes from a flop, and ``o.valid`` from a compare of
counters.  The ring holds every beat in flight at full rate, so with no gap and an
always-ready sink ``i.ready`` never drops; when ``o`` stalls the ring fills and ``i.ready``
drops a cycle later, so no beat is lost or duplicated and nothing waits on anything but
``o.ready``.

Only a single bit per beat is delayed, not the beat itself: a ``latency``-bit shift register
says when the beat taken ``latency - 1`` cycles ago becomes *ripe*, and a count of ripe beats
in the ring gives ``o.valid``.  Beats ripen in the order they arrived, so the head of the ring
is ripe whenever the count is not zero.
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..net.packet import packet_beat_layout, packet_stream


__all__ = ["FabricLink"]


def _check_cycles(component, what, value):
    if not isinstance(value, int) or isinstance(value, bool):
        component._MustUse__silence = True      # never built: no "unused" warning
        raise TypeError(f"{what} must be an integer number of cycles, not {value!r}")
    if value < 0:
        component._MustUse__silence = True
        raise ValueError(f"{what} must be a non-negative number of cycles, not {value!r}")


class FabricLink(wiring.Component):
    """Latency and per-packet gap on one packet stream ``data_width`` bits wide.

    Parameters
    ----------
    data_width : int
        As for :func:`~nicoll.hw.net.packet.packet_stream`.
    latency : int
        Cycles from a beat's arrival on ``i`` to the earliest cycle it may leave on ``o``.
    gap : int
        Idle cycles on ``o`` after each packet's last beat.

    Members
    -------
    i : ``In(packet_stream(data_width))``
    o : ``Out(packet_stream(data_width))``
    """

    def __init__(self, data_width, *, latency=0, gap=0):
        _check_cycles(self, "latency", latency)
        _check_cycles(self, "gap", gap)
        self._data_width = data_width
        self._latency = latency
        self._gap = gap
        # packet_stream() checks the data width.
        super().__init__({
            "i": In(packet_stream(data_width)),
            "o": Out(packet_stream(data_width)),
        })

    @property
    def latency(self):
        return self._latency

    @property
    def gap(self):
        return self._gap

    @property
    def depth(self):
        """Entries of the ring: 0 for a wire, else ``latency + 1``."""
        return self._latency + 1 if self._latency else 0

    def elaborate(self, platform):
        m = Module()
        if self._latency:
            source = self._delay(m)
        else:
            source = self.i
        self._gate(m, source)
        return m

    def _delay(self, m):
        """The ring and its counts; returns the stream of ripe beats (its ``ready`` to drive)."""
        depth = self.depth
        ring = Memory(shape=packet_beat_layout(self._data_width), depth=depth, init=[])
        m.submodules.ring = ring
        wr = ring.write_port()
        rd = ring.read_port(domain="comb")
        wr_ptr = Signal(range(depth))
        rd_ptr = Signal(range(depth))
        count = Signal(range(depth + 1))        # beats in the ring, ripe or not
        ripe = Signal(range(depth + 1))         # beats in the ring whose latency is over
        ready = Signal(init=1)                  # i.ready, a flop
        head = packet_stream(self._data_width).create(path=("head",))

        take = self.i.valid & ready
        give = head.valid & head.ready
        m.d.comb += [
            self.i.ready.eq(ready),
            wr.addr.eq(wr_ptr), wr.data.eq(self.i.payload), wr.en.eq(take),
            rd.addr.eq(rd_ptr),
            head.payload.eq(rd.data),
            head.valid.eq(ripe != 0),
        ]
        with m.If(take):
            m.d.sync += wr_ptr.eq(_next(wr_ptr, depth))
        with m.If(give):
            m.d.sync += rd_ptr.eq(_next(rd_ptr, depth))

        # A beat taken in cycle t is ripe from cycle t + latency: `arrived` carries the take
        # for latency - 1 cycles, and the ripe count takes it in at the edge after.
        if self._latency == 1:
            ripening = take
        else:
            arrived = Signal(self._latency - 1)
            m.d.sync += arrived.eq((arrived << 1) | take)
            ripening = arrived[-1]
        count_next = count + take - give
        m.d.sync += [
            count.eq(count_next),
            ripe.eq(ripe + ripening - give),
            ready.eq(count_next < depth),
        ]
        return head

    def _gate(self, m, source):
        """``o`` from ``source``, held idle for ``gap`` cycles after each packet's last beat."""
        if not self._gap:
            m.d.comb += [self.o.valid.eq(source.valid), self.o.payload.eq(source.payload),
                         source.ready.eq(self.o.ready)]
            return
        idle = Signal(range(self._gap + 1))     # idle cycles still owed
        open_ = idle == 0
        m.d.comb += [self.o.valid.eq(source.valid & open_), self.o.payload.eq(source.payload),
                     source.ready.eq(self.o.ready & open_)]
        with m.If(self.o.valid & self.o.ready & self.o.payload.last):
            m.d.sync += idle.eq(self._gap)
        with m.Elif(~open_):
            m.d.sync += idle.eq(idle - 1)


def _next(pointer, depth):
    """``pointer + 1`` around a ring of ``depth`` entries."""
    return Mux(pointer == depth - 1, 0, pointer + 1)
