# Ref: AMBA 4 AXI4-Stream Protocol Specification (IHI0051A), 2.2.1 (handshake: once TVALID is
#      asserted it stays asserted, with stable payload, until the transfer) and 2.4.4 (TDEST
#      routing; packets are not interleaved on one output).
"""A crossbar switch joining the nodes of a simulated cluster.

Each port ``i`` has an input ``rx_i`` (the packets node ``i`` sends) and an output ``tx_i``
(the packets node ``i`` receives).  A packet goes to the output named by the ``dest`` field of
its first beat and its beats stay together: each output has a round-robin arbiter that keeps
its grant from the first beat a packet moves until that packet's ``last`` beat.

- Lossless: a beat moves only when the output can take it; an input waits otherwise.
- Control first: a packet whose first beat has ``control`` set wins the arbitration over
  bulk packets waiting for the same output (it still waits for the packet already moving).
- Fair: when a packet ends, the input after its source gets the highest priority, so every
  input that keeps requesting an output is served within ``ports`` packets (bulk packets:
  within ``ports`` packets plus the control packets that overtake them).
- Deadlock-free: an input only waits on the one output its current packet goes to, and an
  output only waits on its receiver, so there is no cycle of waits inside the switch.
- Packets for the same output from different inputs are interleaved packet by packet; the
  beats of one input keep their order, so packets between a pair of nodes arrive in order.
- A packet whose ``dest`` is ``ports`` or more is taken at full rate and dropped; ``dropped``
  counts such packets (wrapping at 2**32).
- Repack steering (``steering``, a :class:`RepackSteering`): the switch holds seed 003's
  repack units, each on a port of its own.  A REPACK_IN packet for the hub's node id goes
  to the port of the unit its header's ``arg`` names (the kind and ``arg`` are read from the
  first beat, where the header starts); every other packet goes by ``dest``.

Every output has a two-entry register slice (:class:`~nicoll.hw.lib.skid.SkidBuffer`), so
``tx_i.valid`` and ``tx_i.payload`` come from flops and no combinational path runs from one
node's ready to another node's valid.  A beat crosses the switch in one cycle.
"""

from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from dataclasses import dataclass

from .packet import (DEST_WIDTH, PacketKind, packet_beat_layout, packet_header_layout,
                     packet_stream)
from ..lib.skid import SkidBuffer


__all__ = ["RepackSteering", "Switch"]


@dataclass(frozen=True)
class RepackSteering:
    """Where a switch sends the repack units' messages: REPACK_IN packets whose ``dest`` is
    ``hub`` go to port ``first_port + arg`` for ``arg < units`` (others to ``hub``)."""
    hub: int
    first_port: int
    units: int

    def __post_init__(self):
        for name in ("hub", "first_port", "units"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise TypeError(f"RepackSteering.{name} must be a non-negative int, "
                                f"not {value!r}")
        if not self.units:
            raise ValueError("RepackSteering needs at least one unit, not 0")


#: Largest number of ports: every value of the ``dest`` field can name a port.
MAX_PORTS = 1 << DEST_WIDTH


class Switch(wiring.Component):
    """Packet crossbar with ``ports`` inputs and outputs, ``data_width`` bits per beat.

    Members
    -------
    rx_<i> : ``In(packet_stream(data_width))`` for each port
    tx_<i> : ``Out(packet_stream(data_width))`` for each port
    dropped : ``Out(32)``
        Number of packets dropped because their ``dest`` names no port.
    steering : :class:`RepackSteering` or None
        The ports of the repack units (see the module docstring).
    """

    def __init__(self, ports, data_width, *, steering=None):
        if not isinstance(ports, int) or isinstance(ports, bool):
            raise TypeError(f"Number of ports must be an integer, not {ports!r}")
        if not 1 <= ports <= MAX_PORTS:
            raise ValueError(f"Number of ports must be between 1 and {MAX_PORTS}, not {ports!r}")
        # packet_stream() checks the data width.
        sig = packet_stream(data_width)
        if steering is not None:
            self._MustUse__silence = True       # until the checks pass: never built if not
            if not isinstance(steering, RepackSteering):
                raise TypeError(f"steering must be a RepackSteering or None, not {steering!r}")
            if max(steering.hub, steering.first_port + steering.units - 1) >= ports:
                raise ValueError(f"{steering!r} names a port past the switch's {ports}")
            header = packet_header_layout()
            unit_bits = max(steering.units - 1, 1).bit_length()
            if header["arg"].offset + unit_bits > data_width:
                raise ValueError(f"the header's arg does not start in the first beat of "
                                 f"{data_width} bits")
            self._MustUse__silence = False
        self._steering = steering
        self._ports = ports
        self._data_width = data_width
        members = {}
        for i in range(ports):
            members[f"rx_{i}"] = In(sig)
        for i in range(ports):
            members[f"tx_{i}"] = Out(sig)
        members["dropped"] = Out(32)
        super().__init__(members)

    @property
    def ports(self):
        return self._ports

    @property
    def data_width(self):
        return self._data_width

    def rx(self, i):
        return getattr(self, f"rx_{i}")

    def tx(self, i):
        return getattr(self, f"tx_{i}")

    def elaborate(self, platform):
        m = Module()
        n = self._ports
        rx = [self.rx(i) for i in range(n)]
        tx = [self.tx(i) for i in range(n)]
        layout = packet_beat_layout(self._data_width)

        # ---- Inputs: where the packet at the head of each input goes ------------------------
        # The first beat's dest is remembered so later beats follow it whatever they carry.
        target = []
        new_drops = []
        ready_terms = [[] for _ in range(n)]
        for i in range(n):
            in_packet = Signal(name=f"rx{i}_in_packet")
            held_dest = Signal(DEST_WIDTH, name=f"rx{i}_dest")
            dest = Mux(in_packet, held_dest, self._first_beat_target(rx[i].payload))
            t = Signal(DEST_WIDTH, name=f"rx{i}_target")
            m.d.comb += t.eq(dest)
            target.append(t)
            drop = Signal(name=f"rx{i}_drop")
            if n < MAX_PORTS:
                m.d.comb += drop.eq(t >= n)
            with m.If(rx[i].valid & rx[i].ready):
                m.d.sync += [in_packet.eq(~rx[i].payload.last), held_dest.eq(t)]
            # A dropped packet is counted once, on its first beat.
            new_drops.append(rx[i].valid & drop & ~in_packet)
            ready_terms[i].append(drop)

        m.d.sync += self.dropped.eq(self.dropped + sum(new_drops))

        payloads = Array(rx[i].payload.as_value() for i in range(n))
        lasts = Array(rx[i].payload.last for i in range(n))

        # ---- Outputs: one round-robin arbiter and buffer each ---------------------------------
        for o in range(n):
            m.submodules[f"tx{o}_buffer"] = buf = SkidBuffer(layout)
            wiring.connect(m, buf.o, wiring.flipped(tx[o]))
            if n == 1:
                # One input: no arbitration.
                req = Signal(1, name=f"tx{o}_req")
                m.d.comb += req.eq(rx[0].valid & (target[0] == o))
                m.d.comb += [
                    buf.i.valid.eq(req),
                    buf.i.payload.eq(rx[0].payload),
                ]
                ready_terms[0].append(req & buf.i.ready)
                continue

            req = Signal(n, name=f"tx{o}_req")
            m.d.comb += req.eq(Cat(rx[i].valid & (target[i] == o) for i in range(n)))

            locked = Signal(name=f"tx{o}_locked")       # inside a packet: grant is held
            grant_r = Signal(range(n), name=f"tx{o}_grant_r")
            prio = Signal(range(n), name=f"tx{o}_prio")   # input with the highest priority

            # Control packets first: when any waits, only they take part in the round.
            control = Signal(n, name=f"tx{o}_control")
            m.d.comb += control.eq(req & Cat(rx[i].payload.control for i in range(n)))
            cand = Signal(n, name=f"tx{o}_cand")
            m.d.comb += cand.eq(Mux(control.any(), control, req))

            # Round robin: the lowest candidate index at or above prio, else the lowest one.
            upper = Signal(n, name=f"tx{o}_upper")
            m.d.comb += upper.eq(cand & Cat(prio <= i for i in range(n)))
            pick_upper = Signal(range(n), name=f"tx{o}_pick_upper")
            pick_any = Signal(range(n), name=f"tx{o}_pick_any")
            for i in reversed(range(n)):
                with m.If(upper[i]):
                    m.d.comb += pick_upper.eq(i)
                with m.If(cand[i]):
                    m.d.comb += pick_any.eq(i)
            pick = Mux(upper.any(), pick_upper, pick_any)

            grant = Signal(range(n), name=f"tx{o}_grant")
            m.d.comb += grant.eq(Mux(locked, grant_r, pick))
            active = req.bit_select(grant, 1)
            move = Signal(name=f"tx{o}_move")
            # Between packets the offer to the buffer may switch to another input while the
            # buffer is full; that is harmless here because the buffer only samples its input
            # when it takes it, and the inputs themselves keep their beats until they move.
            m.d.comb += [
                move.eq(active & buf.i.ready),
                buf.i.valid.eq(active),
                buf.i.payload.eq(payloads[grant]),
            ]
            for i in range(n):
                ready_terms[i].append(move & (grant == i))

            last = lasts[grant]
            with m.If(move):
                with m.If(last):
                    m.d.sync += [
                        locked.eq(0),
                        prio.eq(Mux(grant == n - 1, 0, grant + 1)),
                    ]
                with m.Else():
                    m.d.sync += [locked.eq(1), grant_r.eq(grant)]

        for i in range(n):
            m.d.comb += rx[i].ready.eq(Cat(ready_terms[i]).any())
        return m

    def _first_beat_target(self, beat):
        """The output a packet starting with ``beat`` goes to: its ``dest``, or with steering
        a repack unit's port (see the module docstring)."""
        steering = self._steering
        if steering is None:
            return beat.dest
        header = packet_header_layout()
        kind = beat.data[header["kind"].offset:][:header["kind"].width]
        # The arg as far as the first beat holds it (all of it from 128 bits on; its low 8
        # bits at 64): a header whose arg runs on into the next beat is steered by those,
        # and the unit's own port checks the whole arg (the hub's receiver drops a message
        # for another unit).
        arg = beat.data[header["arg"].offset:][:DEST_WIDTH]
        arg_bits = max(steering.units - 1, 1).bit_length()
        steer = ((beat.dest == steering.hub) & (kind == PacketKind.REPACK_IN.value)
                 & (arg < steering.units))
        return Mux(steer, steering.first_port + arg[:arg_bits], beat.dest)
