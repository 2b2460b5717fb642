# Ref: IEEE Std 802.3 (Ethernet framing: preamble, SFD, header, FCS, minimum frame, IPG);
#      InfiniBand Architecture Specification Vol. 1, Annex A17 (RoCEv2: BTH, ICRC over UDP/IPv4).
"""The network between the NICs: its parameters, and what they cost in core cycles.

A :class:`Fabric` is a frozen set of numbers with units: the link rate (Gb/s), the bytes
every packet carries besides its payload (preamble and SFD, inter-frame gap, L2 header, FCS,
L3/L4 headers, the transport's header and trailer), the minimum frame, the largest L3 packet
(MTU), and the latencies of one hop from a NIC through the switch to another NIC (MAC/PHY of
each side, RS-FEC, cable, the switch's port-to-port latency), all in ns.  Its methods convert
them to cycles of the core clock at a given data width.

:data:`FABRICS` holds the named profiles: ``"ideal"``, today's simulated wire (nothing per
packet, nothing per hop beyond what the gateware itself takes: one beat per cycle, the
switch's one-cycle output buffer), and ``"roce100"``, RoCEv2 over 100 GbE through one
cut-through switch.  ``docs/fabric.md`` gives the source of every number.

The cost models (:mod:`nicoll.plan.schedule_cost`, :mod:`nicoll.plan.repack_cost`) take a
fabric, and the simulated clusters put one between each NIC port and the switch
(:meth:`Fabric.sim_links`: a latency and a gap per packet on each link, in cycles).
"""

from dataclasses import dataclass
from fractions import Fraction
import math

from .errors import NicollError

__all__ = ["Fabric", "FABRICS", "NOMINAL_MHZ", "SimLinks", "resolve_fabric"]

#: The core clock (MHz) the cost models convert a fabric's figures at when given none: the
#: nominal clock used where no synthesis figure is recorded.
NOMINAL_MHZ = 125.0

#: Fields in ns (non-negative numbers).
_NS_FIELDS = ("cable_ns", "mac_phy_tx_ns", "mac_phy_rx_ns", "fec_tx_ns", "fec_rx_ns",
              "switch_ns")
#: Fields in bytes (non-negative integers).
_BYTE_FIELDS = ("preamble_bytes", "ifg_bytes", "l2_header_bytes", "fcs_bytes",
                "l3_header_bytes", "l4_header_bytes", "transport_header_bytes",
                "transport_trailer_bytes", "min_frame_bytes")


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class SimLinks:
    """The fabric of a simulated cluster, in cycles: each NIC's link to the switch
    (``uplink``) and back (``downlink``) delays every beat by that many cycles, and each link
    leaves ``gap`` idle cycles after every packet (:class:`nicoll.hw.sim.fabric.FabricLink`)."""
    uplink: int = 0
    downlink: int = 0
    gap: int = 0

    @property
    def ideal(self):
        """No link adds anything: the links are wires and the cluster is built without them."""
        return self.uplink == self.downlink == self.gap == 0

    def slug(self):
        """A short name for build folders ('' when ideal)."""
        return "" if self.ideal else f"_f{self.uplink}-{self.downlink}-{self.gap}"


@dataclass(frozen=True)
class Fabric:
    """The parameters of the network between the NICs (every field keyword, with its unit).

    Per packet on a link: ``payload`` bytes become a frame of
    ``max(min_frame_bytes, l2_header + l3_header + l4_header + transport_header + payload +
    transport_trailer + fcs)`` bytes, and ``preamble_bytes + ifg_bytes`` more go on the wire
    with it; the wire carries them at ``link_gbps``.  A message longer than
    :attr:`max_payload_bytes` goes as several packets.

    One hop, NIC to NIC through the switch: the sender's MAC/PHY transmit side, a link, the
    switch (port to port, cut-through), a link, the receiver's MAC/PHY receive side; a link
    is RS-FEC encoding, the cable and RS-FEC decoding (the switch's own MAC/PHY are in its
    port-to-port latency).
    """
    #: Link rate in Gb/s (10**9 bits per second); ``math.inf``: as fast as the datapath, so a
    #: packet takes its beats, one a cycle, and nothing more.
    link_gbps: float = math.inf
    #: Preamble and start-of-frame delimiter, bytes.
    preamble_bytes: int = 0
    #: Minimum inter-frame (inter-packet) gap, bytes.
    ifg_bytes: int = 0
    #: L2 (MAC) header: destination, source, EtherType, bytes.
    l2_header_bytes: int = 0
    #: Frame check sequence, bytes.
    fcs_bytes: int = 0
    #: L3 header (IPv4 without options), bytes.
    l3_header_bytes: int = 0
    #: L4 header (UDP), bytes.
    l4_header_bytes: int = 0
    #: Transport header (RoCEv2: the InfiniBand base transport header, BTH), bytes.
    transport_header_bytes: int = 0
    #: Transport trailer (RoCEv2: the invariant CRC, ICRC), bytes.
    transport_trailer_bytes: int = 0
    #: Minimum frame from L2 header to FCS, bytes; a shorter frame is padded to it.
    min_frame_bytes: int = 0
    #: Largest L3 packet (MTU), bytes; None: no limit (a message is one packet).
    mtu_bytes: int | None = None
    #: Propagation along one cable, one way, ns.
    cable_ns: float = 0
    #: MAC and PHY (PCS, PMA) of one side, transmit path, ns.
    mac_phy_tx_ns: float = 0
    #: MAC and PHY (PCS, PMA) of one side, receive path, ns.
    mac_phy_rx_ns: float = 0
    #: RS-FEC encoding at one end of a link, ns.
    fec_tx_ns: float = 0
    #: RS-FEC decoding at one end of a link, ns.
    fec_rx_ns: float = 0
    #: Switch port-to-port latency (cut-through, first bit in to first bit out), ns.
    switch_ns: float = 0

    def __post_init__(self):
        if not _is_number(self.link_gbps) or math.isnan(self.link_gbps) or self.link_gbps <= 0:
            raise NicollError(f"fabric link_gbps must be a positive number of Gb/s "
                              f"(math.inf: as fast as the datapath), not {self.link_gbps!r}")
        for name in _BYTE_FIELDS:
            value = getattr(self, name)
            if not _is_int(value) or value < 0:
                raise NicollError(f"fabric {name} must be a non-negative integer number of "
                                  f"bytes, not {value!r}")
        for name in _NS_FIELDS:
            value = getattr(self, name)
            if not _is_number(value) or not math.isfinite(value) or value < 0:
                raise NicollError(f"fabric {name} must be a non-negative number of ns, "
                                  f"not {value!r}")
        if self.mtu_bytes is not None:
            inside = (self.l3_header_bytes + self.l4_header_bytes + self.transport_header_bytes
                      + self.transport_trailer_bytes)
            if not _is_int(self.mtu_bytes) or self.mtu_bytes <= inside:
                raise NicollError(f"fabric mtu_bytes must be None or an integer number of "
                                  f"bytes above the {inside} bytes of L3, L4 and transport "
                                  f"headers it holds, not {self.mtu_bytes!r}")

    # ---- Bytes ------------------------------------------------------------------------------
    @property
    def header_bytes(self):
        """Bytes of a frame besides its payload (L2 header to FCS)."""
        return (self.l2_header_bytes + self.l3_header_bytes + self.l4_header_bytes
                + self.transport_header_bytes + self.transport_trailer_bytes + self.fcs_bytes)

    @property
    def overhead_bytes(self):
        """Bytes on the wire per packet besides its payload (before min-frame padding)."""
        return self.header_bytes + self.preamble_bytes + self.ifg_bytes

    @property
    def max_payload_bytes(self):
        """Largest payload of one packet: the MTU less the L3, L4 and transport bytes in it;
        None when there is no MTU."""
        if self.mtu_bytes is None:
            return None
        return self.mtu_bytes - (self.l3_header_bytes + self.l4_header_bytes
                                 + self.transport_header_bytes + self.transport_trailer_bytes)

    def frame_bytes(self, payload):
        """The frame (L2 header to FCS, padded to the minimum) of one packet."""
        self._check_payload(payload)
        return max(self.min_frame_bytes, self.header_bytes + payload)

    def wire_bytes(self, payload):
        """Bytes one packet occupies on the wire: its frame, preamble, SFD and gap."""
        return self.frame_bytes(payload) + self.preamble_bytes + self.ifg_bytes

    def packets(self, nbytes):
        """The payloads of the packets a message of ``nbytes`` goes in (at least one)."""
        if not _is_int(nbytes) or nbytes < 0:
            raise NicollError(f"a message's length must be a non-negative integer number of "
                              f"bytes, not {nbytes!r}")
        most = self.max_payload_bytes
        if most is None or nbytes <= most:
            return [nbytes]
        full, rest = divmod(nbytes, most)
        return [most] * full + ([rest] if rest else [])

    # ---- Time -------------------------------------------------------------------------------
    @property
    def link_latency_ns(self):
        """One link, MAC to MAC: RS-FEC encoding, the cable, RS-FEC decoding."""
        return self.fec_tx_ns + self.cable_ns + self.fec_rx_ns

    @property
    def hop_ns(self):
        """One hop, NIC to NIC through the switch (first bit): the sender's MAC/PHY, a link,
        the switch, a link, the receiver's MAC/PHY."""
        return (self.mac_phy_tx_ns + self.link_latency_ns + self.switch_ns
                + self.link_latency_ns + self.mac_phy_rx_ns)

    def serialization_ns(self, payload):
        """Time one packet takes on the wire at the link rate (0 for an infinite rate)."""
        bits = 8 * self.wire_bytes(payload)
        return 0.0 if math.isinf(self.link_gbps) else bits / self.link_gbps

    # ---- Cycles -----------------------------------------------------------------------------
    @staticmethod
    def cycles(ns, clock_mhz):
        """``ns`` in cycles of a ``clock_mhz`` clock (a fraction of a cycle kept)."""
        return ns * _check_clock(clock_mhz) / 1000

    def hop_cycles(self, clock_mhz):
        """One hop's latency in whole cycles (rounded up)."""
        return math.ceil(Fraction(self.hop_ns) * Fraction(_check_clock(clock_mhz)) / 1000)

    def serialization_cycles(self, payload, clock_mhz):
        """One packet's time on the wire in cycles (a fraction of a cycle kept)."""
        return self.cycles(self.serialization_ns(payload), clock_mhz)

    def packet_cycles(self, payload, clock_mhz, data_width):
        """Whole cycles one packet of ``payload`` bytes holds a port: its beats at
        ``data_width`` bits, one a cycle, or its time on the wire, whichever is longer."""
        self._check_payload(payload)
        beats = -(-payload // _beat_bytes(data_width))
        clock = _check_clock(clock_mhz)
        if math.isinf(self.link_gbps):
            return beats
        wire = math.ceil(Fraction(8 * self.wire_bytes(payload)) * Fraction(clock)
                         / (Fraction(self.link_gbps) * 1000))
        return max(beats, wire)

    def message_cycles(self, nbytes, clock_mhz, data_width):
        """Whole cycles a message of ``nbytes`` holds a port: the sum over its packets."""
        return sum(self.packet_cycles(p, clock_mhz, data_width) for p in self.packets(nbytes))

    def message_extra_cycles(self, nbytes, clock_mhz, data_width):
        """What the fabric adds to a message beyond its beats at ``data_width`` (0 on
        ``"ideal"``): :meth:`message_cycles` less ``ceil(nbytes / (data_width / 8))``."""
        total = self.message_cycles(nbytes, clock_mhz, data_width)
        return total - -(-nbytes // _beat_bytes(data_width))

    def sim_links(self, clock_mhz, data_width):
        """The :class:`SimLinks` of a simulated cluster at ``clock_mhz`` and ``data_width``.

        The hop's latency (:meth:`hop_cycles`) is split over the two links, the uplink
        taking the odd cycle; the simulated switch's and NICs' own cycles come on top (four
        per hop on ``"ideal"``).  The gap is what the wire needs per packet beyond the beats
        the simulated packet already takes (its header beats and its payload's), at the
        packet size where that is largest, so no packet leaves a port faster than the wire
        carries it; at a core line rate below the link rate it is 0.
        """
        from nicoll.hw.net.packet import header_beats
        hop = self.hop_cycles(clock_mhz)
        if math.isinf(self.link_gbps):
            gap = 0
        else:
            beat = _beat_bytes(data_width)
            head = header_beats(data_width)
            most = self.max_payload_bytes
            sizes = range(0, (most if most is not None else 16 * beat) + 1)
            gap = max(0, max(self.packet_cycles(p, clock_mhz, data_width) - -(-p // beat)
                             - head for p in sizes))
        return SimLinks(uplink=hop - hop // 2, downlink=hop // 2, gap=gap)

    def _check_payload(self, payload):
        if not _is_int(payload) or payload < 0:
            raise NicollError(f"a packet's payload must be a non-negative integer number of "
                              f"bytes, not {payload!r}")
        most = self.max_payload_bytes
        if most is not None and payload > most:
            raise NicollError(f"a packet's payload is at most {most} bytes on this fabric "
                              f"(mtu_bytes = {self.mtu_bytes}), not {payload!r}")


def _check_clock(clock_mhz):
    if not _is_number(clock_mhz) or not math.isfinite(clock_mhz) or clock_mhz <= 0:
        raise NicollError(f"clock_mhz must be a positive number of MHz, not {clock_mhz!r}")
    return clock_mhz


def _beat_bytes(data_width):
    if not _is_int(data_width) or data_width <= 0 or data_width % 8:
        raise NicollError(f"data_width must be a positive multiple of 8 bits, "
                          f"not {data_width!r}")
    return data_width // 8


#: RS(528,514) over 100GBASE-R: a 5280-bit codeword arrives over 4 lanes of 25.78125 Gb/s,
#: and the decoder needs all of it before it can correct (ns).
_RS528_CODEWORD_NS = 5280 / (4 * 25.78125)

#: Named profiles; docs/fabric.md gives the source of every number.
FABRICS = {
    # Today's simulated wire: a beat a cycle, no bytes per packet, no latency beyond the
    # gateware's own (the switch's one-cycle output buffer, the NICs' register slices).
    "ideal": Fabric(),
    # RoCEv2 (IPv4) over 100 GbE, one cut-through switch between the NICs.
    "roce100": Fabric(
        link_gbps=100,
        preamble_bytes=8,               # IEEE 802.3: 7 preamble + 1 SFD
        ifg_bytes=12,                   # IEEE 802.3: minimum IPG, 96 bit times
        l2_header_bytes=14,             # destination 6 + source 6 + EtherType 2
        fcs_bytes=4,                    # CRC-32
        l3_header_bytes=20,             # IPv4, no options
        l4_header_bytes=8,              # UDP (destination port 4791)
        transport_header_bytes=12,      # InfiniBand BTH
        transport_trailer_bytes=4,      # ICRC
        min_frame_bytes=64,             # IEEE 802.3 minimum frame, header to FCS
        mtu_bytes=1500,                 # IEEE 802.3 largest client data (no jumbo frames)
        cable_ns=10.0,                  # assumed 2 m of cable at about 5 ns/m
        # MAC+PCS of the AMD 40G/50G subsystem, low-latency 50G (PG211), plus the E-tile's
        # 100G PMA delay, 105 UI TX / 89 UI RX at 25.78125 Gb/s (no 100G MAC+PCS figure was
        # found): see docs/fabric.md.
        mac_phy_tx_ns=25.6 + 105 / 25.78125,
        mac_phy_rx_ns=58.8 + 89 / 25.78125,
        fec_tx_ns=0.0,                  # assumed: a systematic encoder streams, parity after
        fec_rx_ns=_RS528_CODEWORD_NS,   # lower bound: one codeword, 51.2 ns
        switch_ns=300.0,                # Mellanox Spectrum-2, 300 ns (Linley Group)
    ),
}


def resolve_fabric(fabric):
    """A :class:`Fabric` from a profile name of :data:`FABRICS`, a Fabric, or None (``"ideal"``)."""
    if fabric is None:
        return FABRICS["ideal"]
    if isinstance(fabric, Fabric):
        return fabric
    if isinstance(fabric, str) and fabric in FABRICS:
        return FABRICS[fabric]
    raise NicollError(f"fabric must be a nicoll.Fabric or one of {', '.join(map(repr, FABRICS))}, "
                      f"not {fabric!r}")
