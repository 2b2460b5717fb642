"""The engine's packetizer: a message's packed beats cut into data packets, each a header
(kind, source, destination, tag, the packet's length and offset in the message, whether it is
the message's last) and at most ``packet_beats`` payload beats.

Every value a header shows is a flop or a choice of flops: the packet's length, offset and
last-packet flag for the next packet are registered while the current one streams."""

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .regions import beat_layout
from ..net.packet import DEST_WIDTH, PacketKind, header_beats, packet_header_layout, packet_stream
from ..lib.mirrors import Mirrored
from ..params import check_data_width, check_int

__all__ = ["Packetizer"]


class Packetizer(Mirrored, wiring.Component):
    """A message's packed beats as data packets (or one REPACK_IN packet).

    Parameters
    ----------
    data_width : int
        Bits per beat.
    packet_beats : int
        The build's largest payload in beats (a command's ``packet_beats`` 0 means it).
    length_bits : int
        Bits the region walkers count in: a send is at most ``2**length_bits - 1`` bytes.

    Members
    -------
    beats : ``In(stream.Signature(beat_layout(data_width)))``
        The message's packed beats; ``last`` on its last.
    packets : ``Out(packet_stream(data_width))``
        Header beats, then payload beats, packet after packet.
    start, agg_start : ``In(1)``
        A send of the current command starts (its length ``send_length``, its packet size
        ``cmd_packet_beats``, both current from two cycles before), or an aggregate
        message of ``agg_length`` bytes, as one packet.
    send_length : ``In(32)``; cmd_packet_beats : ``In(16)``; agg_length : ``In(32)``
    busy, waiting : ``In(1)``
        The transmit half sends; it waits for the clear-to-send (no beat leaves).
    node_id : ``In(DEST_WIDTH)``; peer, tag : ``In(16)``; unit : ``In(8)``; repack : ``In(1)``
        The header's source, destination, tag, repack unit, and its kind (REPACK_IN or DATA).
    limit_beats : ``In(16)``
        The running message's packet size in beats.
    resume : ``In(1)``; resume_length, resume_offset : ``In(32)``
        Another pass of the running send starts, of ``resume_length`` bytes from byte
        ``resume_offset`` of the message (the length current from a cycle before).
    pass_number : ``In(8)``
        The send's pass, in a data packet's ``arg`` (a repack packet's is ``unit``).
    ended : ``Out(1)``
        The message's last beat left this cycle.
    bytes_sent : ``Out(32)``
        A packet's header left: its payload bytes (the counter's bump).
    """

    def __init__(self, *, data_width, packet_beats, length_bits):
        check_data_width(data_width)
        check_int("packet_beats", packet_beats, 1, 65535)
        check_int("length_bits", length_bits, 1, 32)
        self._data_width = data_width
        self._packet_beats = packet_beats
        self._length_bits = length_bits
        super().__init__({
            "beats": In(stream.Signature(beat_layout(data_width))),
            "packets": Out(packet_stream(data_width)),
            "start": In(1), "agg_start": In(1),
            "send_length": In(32), "cmd_packet_beats": In(16), "agg_length": In(32),
            "busy": In(1), "waiting": In(1),
            "node_id": In(DEST_WIDTH), "peer": In(16), "tag": In(16), "unit": In(8),
            "repack": In(1), "limit_beats": In(16),
            "resume": In(1), "resume_length": In(32), "resume_offset": In(32),
            "pass_number": In(8),
            "ended": Out(1), "bytes_sent": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        p = self._packet_registers(m)
        self._beats_out(m, p)
        return m

    def _packet_registers(self, m):
        """The running packet's length, offset and last flag, and the next packet's."""
        beat_bytes = self._data_width // 8
        tx_packet = self.limit_beats
        remaining = Signal(32)
        offset = Signal(32)
        # The packet's bytes and whether it is the message's last, as flops loaded with
        # `remaining`: from the command at a start, and after a packet's end from
        # `rem_after`, what remains after the current packet, registered a cycle after
        # `remaining` or `packet_bytes` change (a packet's end is at least a header beat and
        # a payload beat after either changes).
        packet_bytes = Signal(32)
        packet_final = Signal()
        rem_after = Signal(32)
        m.d.sync += rem_after.eq(remaining - packet_bytes)
        # A packet's end (not the message's) loads the next packet's registers a cycle
        # later, from `pkt_end_q`, a flop: the take of the last payload beat (the packer's
        # valid, the slice's ready) was the enable of all of them, the 256-bit core's
        # critical path at two seeds (9.0 and 11.1 ns, most of it the fan-out's routing).
        # In that cycle the first header beat goes out, so the header shows the values being
        # loaded: the offset from `offset_next` (a flop) and the length and last-packet flag
        # from `rem_after` (a flop) and a compare.  `rem_after` and `offset_next` are
        # current there: they are registered from values loaded at the previous packet's
        # end, at least a payload beat before.
        pkt_end_q = Signal()
        offset_next = Signal(32)
        m.d.sync += [pkt_end_q.eq(0), offset_next.eq(offset + packet_bytes)]
        limit_next = tx_packet * beat_bytes
        # Whether what remains after the packet fits the next one, a flop registered from
        # `rem_after` a cycle after it: as a compare of `rem_after` read by the header it was
        # a 32-bit carry chain in front of the header's length, the recorded 256-bit core's
        # path (seed 2) (rem_after -> the arbiter's payload, 8 levels, 7.68 ns); as a flop
        # of `remaining <= packet_bytes + limit_next` it was an adder and a compare in one
        # cycle, the 64-bit core's path at seed 3 of 26dfd56 (7.48 ns).  It is current in
        # time: `remaining` and `packet_bytes` load in a cycle t (a start or a packet's end),
        # `rem_after` follows at t + 1 and `fits_next` at t + 2, and the packet's end is read
        # no earlier than t + 3 (a header beat at t + 1, a payload beat at t + 2, `pkt_end_q`
        # at t + 3); packets of one payload beat run at that spacing
        # (tests/test_hw_engine_transfers.py::test_packet_headers).
        fits_next = Signal()
        m.d.sync += fits_next.eq(rem_after <= limit_next)
        h_length = Mux(pkt_end_q, Mux(fits_next, rem_after, limit_next), packet_bytes)
        h_final = Mux(pkt_end_q, fits_next, packet_final)
        h_addr = Mux(pkt_end_q, offset_next, offset)

        def load_packet(length, limit, fits=None):
            fits = (length <= limit) if fits is None else fits
            return [remaining.eq(length), packet_final.eq(fits),
                    packet_bytes.eq(Mux(fits, length, limit))]

        # A command's packet size in bytes and whether its message fits one packet, as
        # flops: the command is loaded two cycles before a send can start (LOAD, then
        # DECODE) and holds until the next LOAD, so both are current when the send starts.
        # A pushed send's length is at most mem_size (its end is checked), so the compare
        # takes the walkers' count bits, and a limit beyond them fits every send: a 32-bit
        # compare from the command was the 64-bit engine's latest pin at seeds 2 and 3 once
        # the walkers' routes were cut (queue -> cur -> cur_fits, 31 levels, 5.59-5.90 ns).
        bits = self._length_bits
        cur_limit = Signal(32)
        cur_limit_big = Signal()
        cur_fits = Signal()
        limit_now = Mux(self.cmd_packet_beats == 0, self._packet_beats,
                        self.cmd_packet_beats) * beat_bytes
        m.d.sync += [cur_limit.eq(limit_now), cur_limit_big.eq(limit_now[bits:] != 0),
                     cur_fits.eq(cur_limit_big | (self.send_length[:bits] <= cur_limit[:bits]))]
        resume_fits = Signal()
        m.d.sync += resume_fits.eq(cur_limit_big
                                   | (self.resume_length[:bits] <= cur_limit[:bits]))

        header = Signal(packet_header_layout())
        m.d.comb += [header.kind.eq(Mux(self.repack, PacketKind.REPACK_IN, PacketKind.DATA)),
                     header.arg.eq(Mux(self.repack, self.unit, self.pass_number)),
                     header.code.eq(h_final),
                     header.src.eq(self.node_id), header.dst.eq(self.peer),
                     header.seq.eq(self.tag), header.length.eq(h_length),
                     header.addr.eq(h_addr)]
        with m.If(pkt_end_q):
            m.d.sync += [*load_packet(rem_after, limit_next, fits_next), offset.eq(offset_next)]
        # An aggregate message travels as one packet: the aggregate sender starts it only
        # when its length is at most 0xFFFF beats' bytes (AggregateSender's registered length
        # check), so it is the last packet without a compare here, where one was a 32-bit
        # carry chain in front of `packet_bytes` and `packet_final`, the 64-bit engine's
        # latest pins at seed 1 of de71e7c (aggregate.length -> packet_bytes, 32 levels,
        # 5.42 ns).  `mirrors` holds the compare true at every aggregate start.
        agg_limit = 0xFFFF * beat_bytes
        self._mirrors = [(Const(1), Mux(self.agg_start, self.agg_length <= agg_limit, 1))]
        with m.If(self.agg_start):
            m.d.sync += load_packet(self.agg_length, agg_limit, Const(1))
        with m.Elif(self.start):
            m.d.sync += load_packet(self.send_length, cur_limit, cur_fits)
        with m.Elif(self.resume):
            m.d.sync += load_packet(self.resume_length, cur_limit, resume_fits)
        return {"header": header, "h_length": h_length, "pkt_end_q": pkt_end_q,
                "offset": offset}

    def _beats_out(self, m, p):
        """A header, then up to ``limit_beats`` beats of the packed stream, until the
        message's last beat."""
        width = self._data_width
        beat_bytes = width // 8
        hbeats = header_beats(width)
        tx_packet = self.limit_beats
        header_bits = Signal(hbeats * width)
        m.d.comb += header_bits.eq(p["header"].as_value())
        in_header = Signal()
        h_index = Signal(range(max(hbeats, 2)))
        # Payload beats of the packet after the one on the output, and whether that one is
        # the packet's last by count: flops, so a beat's `last` is not a compare.
        p_left = Signal(16)
        p_last = Signal()
        with m.If(self.start | self.agg_start):
            m.d.sync += [p["offset"].eq(0), in_header.eq(1), h_index.eq(0)]
        with m.If(self.resume):
            m.d.sync += [p["offset"].eq(self.resume_offset), in_header.eq(1), h_index.eq(0)]
        data_out = self.packets
        out = data_out.payload
        m.d.comb += [out.dest.eq(self.peer), out.control.eq(0)]
        with m.If(in_header):
            m.d.comb += [data_out.valid.eq(self.busy & ~self.waiting),
                         out.keep.eq((1 << beat_bytes) - 1), out.last.eq(0)]
            with m.Switch(h_index):
                for k in range(hbeats):
                    with m.Case(k):
                        m.d.comb += out.data.eq(header_bits[k * width:(k + 1) * width])
            with m.If(data_out.valid & data_out.ready):
                with m.If(h_index == hbeats - 1):
                    m.d.sync += [in_header.eq(0), h_index.eq(0), p_left.eq(tx_packet - 1),
                                 p_last.eq(tx_packet == 1)]
                    m.d.comb += self.bytes_sent.eq(p["h_length"])
                with m.Else():
                    m.d.sync += h_index.eq(h_index + 1)
        with m.Else():
            beats = self.beats
            end_of_packet = p_last | beats.payload.last
            m.d.comb += [data_out.valid.eq(beats.valid & self.busy),
                         beats.ready.eq(data_out.ready & self.busy),
                         out.data.eq(beats.payload.data),
                         out.keep.eq(beats.payload.keep),
                         out.last.eq(end_of_packet)]
            with m.If(data_out.valid & data_out.ready):
                m.d.sync += [p_left.eq(p_left - 1), p_last.eq(p_left == 1)]
                with m.If(end_of_packet):
                    m.d.sync += [in_header.eq(1), p["pkt_end_q"].eq(~beats.payload.last)]
                    with m.If(beats.payload.last):
                        m.d.comb += self.ended.eq(1)
