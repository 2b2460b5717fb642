# Ref: IEEE 802.3, 3.2.9 (the frame check sequence: CRC-32 over the frame, appended by the
#      sender, checked by every receiver, a frame that fails it discarded).
"""One direction of a simulated link that can lose, corrupt, duplicate and delay packets.

:class:`FaultyLink` joins three simulation-only blocks on one packet stream::

    i ─► FcsAppend ─► FaultInjector ─► FcsCheck ─► o

- :class:`~nicoll.hw.sim.fcs.FcsAppend` puts the packet's CRC-32 beside its last beat, as
  the sending MAC does;
- :class:`~nicoll.hw.sim.faults.FaultInjector` drops, flips a bit of, duplicates or delays
  packets at the rates of ``config``, from a seeded PRNG (the wire's faults);
- :class:`~nicoll.hw.sim.fcs.FcsCheck` stores each packet whole and forwards it only if its
  CRC matches, as the receiving MAC or switch port does: a corrupted packet never reaches a
  core or the switch, it is lost, and counted.

A simulated cluster built with ``faults=True`` puts one on each direction of every switch
port (:class:`~nicoll.hw.sim.cluster.ClusterTop`); the NIC cores are unchanged.  On a board
the MACs do the CRC, and the cores see only what passes it: the same as here.
"""

from amaranth.hdl import Module
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..net.packet import header_beats, packet_stream
from .faults import FaultInjector, fault_config_layout, fault_counters_layout
from .fcs import FcsAppend, FcsCheck


__all__ = ["FaultyLink", "link_counters_layout", "max_packet_beats"]


def link_counters_layout():
    """What one faulty link counts: the injector's counters, then the check's drops
    (``fcs_bad``: a CRC that did not match; ``too_long``: a packet longer than the check
    stores)."""
    fields = dict(fault_counters_layout().members)
    fields.update({"fcs_bad": 32, "too_long": 32})
    return data.StructLayout(fields)


def max_packet_beats(data_width, *, packet_beats, repack_capacity):
    """The longest packet a core of these parameters sends, in beats: a header and either a
    data packet's ``packet_beats`` or a repack message of ``repack_capacity`` bytes (one
    packet, with a row of lengths ahead of its blocks)."""
    row = data_width // 8
    return header_beats(data_width) + max(packet_beats, -(-repack_capacity // row) + 1)


class FaultyLink(wiring.Component):
    """A packet stream through a CRC, a fault injector and a CRC check.

    Parameters
    ----------
    data_width : int
        As for :func:`~nicoll.hw.net.packet.packet_stream`.
    link : int
        This link's index, which the injector mixes into its seed.
    max_packet_beats : int
        The longest packet that must pass (the check stores packets whole).

    Members
    -------
    i : ``In(packet_stream(data_width))``
    o : ``Out(packet_stream(data_width))``
    config : ``In(fault_config_layout())``
    counters : ``Out(link_counters_layout())``
    """

    def __init__(self, data_width, *, link, max_packet_beats):
        self._append = FcsAppend(data_width)
        self._injector = FaultInjector(data_width, link=link, max_packet_beats=max_packet_beats)
        self._check = FcsCheck(data_width, max_packet_beats=max_packet_beats)
        super().__init__({
            "i": In(packet_stream(data_width)),
            "o": Out(packet_stream(data_width)),
            "config": In(fault_config_layout()),
            "counters": Out(link_counters_layout()),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.append = append = self._append
        m.submodules.injector = injector = self._injector
        m.submodules.check = check = self._check
        wiring.connect(m, wiring.flipped(self.i), append.i)
        wiring.connect(m, append.o, injector.i)
        wiring.connect(m, injector.o, check.i)
        wiring.connect(m, check.o, wiring.flipped(self.o))
        m.d.comb += injector.config.eq(self.config)
        for name in fault_counters_layout().members:
            m.d.comb += self.counters[name].eq(injector.counters[name])
        m.d.comb += [self.counters.fcs_bad.eq(check.bad), self.counters.too_long.eq(check.too_long)]
        return m
