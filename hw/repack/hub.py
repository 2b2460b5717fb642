# Ref: seed 003 (CN111614581): repack units and their control tree "in a switch or NIC"; the
#      ranks register, are told where to send, send one message per destination subgroup and
#      receive one message per source subgroup.
"""The repack units of a node, on the network (:class:`RepackHub`).

A :class:`~nicoll.hw.repack.RepackArray` (control tree + units) serves every rank of the
cluster from one node.  The hub turns its streams into packets and back:

- a :attr:`~nicoll.hw.net.packet.PacketKind.REPACK_REGISTER` packet from rank ``src`` is that
  rank's registration;
- a :attr:`~nicoll.hw.net.packet.PacketKind.REPACK_IN` packet is one whole source message for the
  unit named by the header's ``arg`` (the transport rank is ``src``);
- every notice of the control tree leaves as a
  :attr:`~nicoll.hw.net.packet.PacketKind.REPACK_NOTICE` control packet;
- each unit's messages leave as :attr:`~nicoll.hw.net.packet.PacketKind.REPACK_OUT` packets of at
  most ``packet_beats`` payload beats.  The header needs the payload's length before the
  payload, so each unit's output is buffered one packet at a time (:class:`MessagePacketizer`).

With ``unit_ports`` each unit has a packet port of its own (``unit_rx_<k>``,
``unit_tx_<k>``), as seed 003's units sit on switch ports: REPACK_IN packets for unit ``k``
come in on its port (the switch steers them there by the header's ``arg``, see
:class:`~nicoll.hw.net.switch.Switch`), its REPACK_OUT packets leave by it, and the hub's own
port carries only registrations and notices.

Registrations wait in a queue of ``max_ranks`` entries, never in the port.  Any other packet
(another kind, a unit number the hub does not have, a message packet with no payload, a
registration while no exchange runs or beyond the queue) is dropped whole and counted in
``dropped``, so nothing can hold up the hub's port.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..net.packet import (DEST_WIDTH, HeaderSender, PacketArbiter, PacketKind, header_beats,
                     packet_beat_layout, packet_header_layout, packet_stream)
from .formats import (HEADER_LAYOUT, ORDER_WRITE_LAYOUT, START_LAYOUT, RepackError,
                      message_beat_layout, message_stream)
from .array import RepackArray
from ..params import is_int
from ..lib.skid import SkidBuffer


__all__ = ["MessagePacketizer", "RepackHub", "DEFAULT_HUB_PACKET_BEATS"]


#: Payload beats of a REPACK_OUT packet by default: a unit's output buffer holds one packet.
DEFAULT_HUB_PACKET_BEATS = 16


class MessagePacketizer(wiring.Component):
    """Cuts the messages of one repack unit into REPACK_OUT packets.

    Up to ``packet_beats`` beats of a message are stored, then sent behind a header naming
    their byte count, the message's tag (read from its first beat, :data:`HEADER_LAYOUT`),
    the destination (the beats' ``rank``), the offset of the packet's first byte in the
    message and, on the message's last packet, ``code`` bit 0.  Input waits while a packet
    is sent.

    Members
    -------
    i : ``In(message_stream(data_width))``
    o : ``Out(packet_stream(data_width))``
    node_id : ``In(16)``
        The ``src`` of the headers.
    """

    def __init__(self, data_width, packet_beats):
        if not is_int(packet_beats):
            raise TypeError(f"packet_beats must be an integer, not {packet_beats!r}")
        if not 1 <= packet_beats <= 65535:
            raise ValueError(f"packet_beats must be between 1 and 65535, not {packet_beats!r}")
        self._data_width = data_width
        self._packet_beats = packet_beats
        super().__init__({
            "i": In(message_stream(data_width)),
            "o": Out(packet_stream(data_width)),
            "node_id": In(DEST_WIDTH),
        })

    def elaborate(self, platform):
        m = Module()
        width = self._data_width
        beat_bytes = width // 8
        depth = self._packet_beats
        hbeats = header_beats(width)
        buf = Memory(shape=width + beat_bytes, depth=depth, init=[])
        m.submodules.buf = buf
        wr = buf.write_port()
        rd = buf.read_port(domain="comb")

        FILL, HEAD, DRAIN = range(3)
        state = Signal(range(3))
        count = Signal(range(depth + 1))      # beats stored
        nbytes = Signal(range(depth * beat_bytes + 1))
        index = Signal(range(max(depth, hbeats, 2)))
        # The index of the packet's last payload beat, set from `count` as the beat that
        # ends the packet is stored (no subtraction in DRAIN: `index == count - 1` there was
        # the routed 64-bit core's path at seed 2, tenth pass, through the take into state).
        last_index = Signal(range(max(depth, 2)))
        final = Signal()
        first = Signal(init=1)                # the next beat starts a message
        tag = Signal(16)
        dest = Signal(DEST_WIDTH)
        offset = Signal(32)

        # The read address is the index in every state (only DRAIN uses the data): chosen by
        # the state, it put two LUTs between the state flop and the LUT RAM's read address,
        # the front of the 64-bit core's routed path at seed 3 of f250adc (state -> the read
        # -> packet_slice0's payload, 7.33 ns).
        m.d.comb += rd.addr.eq(index)

        beat = self.i.payload
        kept = Signal(range(beat_bytes + 1))
        m.d.comb += kept.eq(sum(beat.keep[k] for k in range(beat_bytes)))
        with m.Switch(state):
            with m.Case(FILL):
                m.d.comb += [self.i.ready.eq(1), wr.addr.eq(count),
                             wr.data.eq(Cat(beat.data, beat.keep)), wr.en.eq(self.i.valid)]
                with m.If(self.i.valid):
                    m.d.sync += [count.eq(count + 1), nbytes.eq(nbytes + kept),
                                 dest.eq(beat.rank), first.eq(beat.last)]
                    with m.If(first):
                        m.d.sync += tag.eq(beat.data[HEADER_LAYOUT["tag"].offset:][:16])
                    with m.If(beat.last | (count == depth - 1)):
                        m.d.sync += [final.eq(beat.last), state.eq(HEAD), index.eq(0),
                                     last_index.eq(count)]
            with m.Case(HEAD):
                header = Signal(packet_header_layout())
                bits = Signal(hbeats * width)
                m.d.comb += [header.kind.eq(PacketKind.REPACK_OUT), header.code.eq(final),
                             header.src.eq(self.node_id), header.dst.eq(dest),
                             header.seq.eq(tag), header.length.eq(nbytes),
                             header.addr.eq(offset), bits.eq(header.as_value()),
                             self.o.valid.eq(1), self.o.payload.keep.eq((1 << beat_bytes) - 1)]
                with m.Switch(index):
                    for k in range(hbeats):
                        with m.Case(k):
                            m.d.comb += self.o.payload.data.eq(bits[k * width:(k + 1) * width])
                with m.If(self.o.ready):
                    with m.If(index == hbeats - 1):
                        # The header has gone with this beat: the next packet's offset.
                        m.d.sync += [index.eq(0), state.eq(DRAIN),
                                     offset.eq(Mux(final, 0, offset + nbytes))]
                    with m.Else():
                        m.d.sync += index.eq(index + 1)
            with m.Case(DRAIN):
                last = index == last_index
                m.d.comb += [self.o.valid.eq(1),
                             self.o.payload.data.eq(rd.data[:width]),
                             self.o.payload.keep.eq(rd.data[width:]),
                             self.o.payload.last.eq(last)]
                # DRAIN reads neither count nor nbytes (the offset moved on with the header's
                # last beat), so they clear in every DRAIN cycle, the state their reset:
                # cleared on the last beat's take, behind the downstream ready and the index
                # compare, they were the 256-bit core's late pins at seed 2 of 4eadde1
                # (count and nbytes, LSR, 7.78 and 7.81 ns).
                m.d.sync += [count.eq(0), nbytes.eq(0)]
                with m.If(self.o.ready):
                    m.d.sync += index.eq(index + 1)
                    with m.If(last):
                        m.d.sync += state.eq(FILL)
        m.d.comb += [self.o.payload.dest.eq(dest), self.o.payload.control.eq(0)]
        return m


class RepackHub(wiring.Component):
    """Repack units and control tree on a packet port (see the module docstring).

    Parameters
    ----------
    data_width : int
        Bits per beat of packets and messages.
    max_ranks, units, max_group, capacity_bytes : int
        As for :class:`~nicoll.hw.repack.RepackArray`.
    packet_beats : int
        Largest payload of a REPACK_OUT packet, in beats (each unit buffers one).
    unit_ports : bool
        Each unit on a packet port of its own (see the module docstring).

    Members
    -------
    rx : ``In(packet_stream(data_width))``; tx : ``Out(packet_stream(data_width))``
    unit_rx_<k> : ``In(packet_stream(data_width))``; unit_tx_<k> : ``Out(...)``
        With ``unit_ports``, unit ``k``'s port (:meth:`unit_rx`, :meth:`unit_tx`).
    node_id : ``In(16)``
    order, start : control tree configuration streams (as on ``RepackArray``)
    busy, status, errors, last_error, cycles, ops : as on ``RepackArray``
    dropped : ``Out(32)``
        Packets the hub could not use; wraps.
    held : ``Out(1)``
        A list write or a start taken from ``order`` or ``start`` that the control tree has
        not taken yet (it waits in the hub's register slices).
    """

    def __init__(self, *, data_width, max_ranks, units, max_group, capacity_bytes,
                 packet_beats=DEFAULT_HUB_PACKET_BEATS, unit_ports=False):
        if not isinstance(unit_ports, bool):
            raise TypeError(f"unit_ports must be a bool, not {unit_ports!r}")
        self._array = RepackArray(max_ranks, units, max_group, data_width, capacity_bytes)
        self._array._MustUse__silence = True    # elaborated with the hub
        MessagePacketizer(data_width, packet_beats)._MustUse__silence = True   # checks
        self._data_width = data_width
        self._packet_beats = packet_beats
        self.max_ranks, self.units, self.max_group = max_ranks, units, max_group
        self.capacity_bytes = capacity_bytes
        self.unit_ports = unit_ports
        members = {}
        for k in range(units if unit_ports else 0):
            members[f"unit_rx_{k}"] = In(packet_stream(data_width))
            members[f"unit_tx_{k}"] = Out(packet_stream(data_width))
        super().__init__({
            **members,
            "rx": In(packet_stream(data_width)),
            "tx": Out(packet_stream(data_width)),
            "node_id": In(DEST_WIDTH),
            "order": In(stream.Signature(ORDER_WRITE_LAYOUT)),
            "start": In(stream.Signature(START_LAYOUT)),
            "busy": Out(1),
            "status": Out(RepackError),
            "errors": Out(32),
            "last_error": Out(RepackError),
            "cycles": Out(32),
            "ops": Out(32),
            "dropped": Out(32),
            "held": Out(1),
        })

    @property
    def array(self):
        return self._array

    def unit_rx(self, k):
        """Unit ``k``'s input port (``unit_ports`` only)."""
        return getattr(self, f"unit_rx_{k}")

    def unit_tx(self, k):
        """Unit ``k``'s output port (``unit_ports`` only)."""
        return getattr(self, f"unit_tx_{k}")

    def elaborate(self, platform):
        m = Module()
        width = self._data_width
        units = self.units
        m.submodules.array = array = self._array
        # The host's list writes and start reach the control tree through register slices:
        # they come from the CSR block, across the core, and the tree's state machine takes
        # them (the routed 256-bit core's critical path was that handshake, 8.6 ns routing).
        held = []
        for name in ("order", "start"):
            port = getattr(self, name)
            slice_ = SkidBuffer(port.payload.shape())
            m.submodules[f"{name}_slice"] = slice_
            wiring.connect(m, wiring.flipped(port), slice_.i)
            wiring.connect(m, slice_.o, getattr(array, name))
            held.append(slice_.o.valid)     # set whenever the slice holds an entry
        m.d.comb += self.held.eq(Cat(*held).any())
        for name in ("busy", "status", "errors", "last_error", "cycles", "ops"):
            m.d.comb += getattr(self, name).eq(getattr(array, name))

        # ---- Transmit: notices first, then the units' packets -----------------------------
        # The grant is a flop: the routed 256-bit core's critical path ran from the tree's
        # notice.valid through the choice and the grant to packetizer 0's ready and index
        # (8.8 ns, 7.4 of it routing).  A unit's packets follow each other without a gap.
        shared = 0 if self.unit_ports else units        # units on the hub's own port
        m.submodules.arbiter = arbiter = PacketArbiter(shared + 1, width, registered_grant=True)
        wiring.connect(m, arbiter.o, wiring.flipped(self.tx))
        m.submodules.notices = sender = HeaderSender(width)
        # A register slice between the control tree's notices and the header sender: the
        # sender's ready is its last beat taken by the arbiter, so without it the arbiter's
        # owner ran through the sender into the tree's notice slot (the 64-bit core's path
        # at seed 1 of 914c847: `arbiter.owner` -> the sender's index -> `spare_valid`,
        # 7.86 ns).
        m.submodules.notice_slice = notice_slice = SkidBuffer(array.notice.payload.shape())
        wiring.connect(m, array.notice, notice_slice.i)
        notice, header = notice_slice.o.payload, sender.header.payload
        m.d.comb += [sender.header.valid.eq(notice_slice.o.valid),
                     notice_slice.o.ready.eq(sender.header.ready),
                     header.kind.eq(PacketKind.REPACK_NOTICE), header.code.eq(notice.kind),
                     header.src.eq(self.node_id), header.dst.eq(notice.rank),
                     header.seq.eq(notice.tag), header.arg.eq(notice.unit),
                     header.addr.eq(notice.group)]
        wiring.connect(m, sender.packets, arbiter.i_0)
        for k in range(units):
            packetizer = MessagePacketizer(width, self._packet_beats)
            m.submodules[f"packetizer{k}"] = packetizer
            m.d.comb += packetizer.node_id.eq(self.node_id)
            # Register slices on both sides of the packetizer.  Before it: the packetizer's
            # ready is its state decoded, and the unit posts a DELIVERED event on the take
            # of a message's last beat, so that ready ran into the unit's event register
            # (the routed 256-bit core's path at seed 1, tenth pass: 8.86 ns, 7.7 of it
            # routing).  With the slice, the unit sees a ready from a flop.
            in_slice = SkidBuffer(message_beat_layout(width))
            m.submodules[f"message_slice{k}"] = in_slice
            wiring.connect(m, array.o(k), in_slice.i)
            wiring.connect(m, in_slice.o, packetizer.i)
            # After it: the packetizer's output is a combinational read of its LUT RAM at
            # its beat index, and without the slice that read ran on through the arbiter's
            # multiplexer into the core's transmit slice (the 256-bit core's path at seed 2,
            # ninth pass).
            slice_ = SkidBuffer(packet_beat_layout(width))
            m.submodules[f"packet_slice{k}"] = slice_
            wiring.connect(m, packetizer.o, slice_.i)
            wiring.connect(m, slice_.o, (wiring.flipped(self.unit_tx(k)) if self.unit_ports
                                         else getattr(arbiter, f"i_{k + 1}")))
        self._receive(m, array)
        return m

    def _receive(self, m, array):
        """Registrations and source messages: the hub's port, and with ``unit_ports`` each
        unit's; the drops of all of them counted in ``dropped``."""
        units = self.units
        # Registrations queue here, never in the port: while the tree sends a notice it takes
        # no registration, and a notice for a rank of this node comes in through this same
        # port, so a registration held in the port would block the notice that frees the
        # tree (found at N = 9 with one unit: the first sub-matrix starts while later ranks
        # still register).  Each rank registers once per exchange, so max_ranks entries
        # never overflow; a surplus one (a rank registering twice) is dropped and counted.
        m.submodules.registrations = pending = SyncFIFO(width=DEST_WIDTH, depth=self.max_ranks)
        reg = array.reg
        m.d.comb += [reg.payload.rank.eq(pending.r_data), reg.valid.eq(pending.r_rdy & array.busy),
                     pending.r_en.eq(Mux(array.busy, reg.ready, 1))]
        # Left over when an exchange ends (duplicates): drained, so none reaches the next one.
        leftover = ~array.busy & pending.r_rdy
        width = self._data_width
        if self.unit_ports:
            drops = [_receive_port(m, "port", self.rx, width, pending=pending, busy=array.busy,
                                   unit_inputs={})]
            drops += [_receive_port(m, f"unit{k}", self.unit_rx(k), width, pending=None,
                                    busy=array.busy, unit_inputs={k: array.i(k)})
                      for k in range(units)]
        else:
            drops = [_receive_port(m, "port", self.rx, width, pending=pending, busy=array.busy,
                                   unit_inputs={k: array.i(k) for k in range(units)})]
        # The count adds a registered increment: one carry chain from flops, where adding
        # the strobes themselves put the decision and two chains in one cycle (the 64-bit
        # core's routed critical path, 53 levels).
        strobes = drops + [leftover]
        dropped_inc = Signal(range(len(strobes) + 1))
        m.d.sync += [dropped_inc.eq(sum(strobes)), self.dropped.eq(self.dropped + dropped_inc)]


def _receive_port(m, name, rx, width, *, pending, busy, unit_inputs):
    """The receive side of one of the hub's packet ports, built into ``m`` with signals named
    after ``name``; returns its drop strobe.  A REPACK_REGISTER packet's source goes into the
    FIFO ``pending`` while ``busy`` (an exchange runs) and it has room (``pending`` None: the
    port takes none); a REPACK_IN packet is passed to the unit input ``unit_inputs[arg]``;
    anything else is dropped whole."""
    hbeats = header_beats(width)
    P_HEADER, P_DECIDE, P_REG, P_PASS, P_DROP = range(5)
    state = Signal(range(5), name=f"{name}_state")
    collected = Signal(hbeats * width, name=f"{name}_collected")
    index = Signal(range(max(hbeats, 2)), name=f"{name}_index")
    got = Signal(packet_header_layout(), name=f"{name}_got")
    got_last = Signal(name=f"{name}_got_last")
    units = sorted(unit_inputs)
    target = Signal(range(max(max(units, default=0) + 1, 2)), name=f"{name}_target")
    m.d.comb += got.eq(collected[:packet_header_layout().size])
    beat = rx.payload
    drop = Signal(name=f"{name}_drop")
    # A message for a unit this port serves (the units' numbers are 0..k on the hub's port,
    # one number on a unit's own).
    if len(units) == 1:
        for_unit = got.arg == units[0]
    elif units:
        for_unit = got.arg < len(units)
    else:
        for_unit = 0
    with m.Switch(state):
        with m.Case(P_HEADER):
            m.d.comb += rx.ready.eq(1)
            with m.If(rx.valid):
                with m.Switch(index):
                    for k in range(hbeats):
                        with m.Case(k):
                            m.d.sync += collected[k * width:(k + 1) * width].eq(beat.data)
                with m.If(index == hbeats - 1):
                    m.d.sync += [index.eq(0), got_last.eq(beat.last), state.eq(P_DECIDE)]
                with m.Elif(beat.last):          # shorter than a header
                    m.d.sync += index.eq(0)
                    m.d.comb += drop.eq(1)
                with m.Else():
                    m.d.sync += index.eq(index + 1)
        with m.Case(P_DECIDE):
            registration = got.kind == PacketKind.REPACK_REGISTER
            with m.If(registration if pending is not None else 0):
                m.d.sync += state.eq(P_REG)
            with m.Elif((got.kind == PacketKind.REPACK_IN) & for_unit & ~got_last):
                m.d.sync += [target.eq(got.arg), state.eq(P_PASS)]
            with m.Else():
                m.d.comb += drop.eq(1)
                m.d.sync += state.eq(Mux(got_last, P_HEADER, P_DROP))
        if pending is not None:
            with m.Case(P_REG):
                # One with no exchange running (or no room) is dropped, never held.
                m.d.comb += pending.w_data.eq(got.src)
                with m.If(busy & pending.w_rdy):
                    m.d.comb += pending.w_en.eq(1)
                with m.Else():
                    m.d.comb += drop.eq(1)
                m.d.sync += state.eq(Mux(got_last, P_HEADER, P_DROP))
        with m.Case(P_PASS):
            for k, port in unit_inputs.items():
                m.d.comb += [port.payload.data.eq(beat.data), port.payload.keep.eq(beat.keep),
                             port.payload.last.eq(beat.last), port.payload.rank.eq(got.src)]
                with m.If((target == k) if len(units) > 1 else 1):
                    m.d.comb += [port.valid.eq(rx.valid), rx.ready.eq(port.ready)]
            with m.If(rx.valid & rx.ready & beat.last):
                m.d.sync += state.eq(P_HEADER)
        with m.Case(P_DROP):
            m.d.comb += rx.ready.eq(1)
            with m.If(rx.valid & beat.last):
                m.d.sync += state.eq(P_HEADER)
    return drop
