# Ref: seed 003, steps 7.3-7.5: the repack hub's notices and packets an aggregate command takes.
"""The engine's packet parser: a received packet's header is collected, checked against the
receive in progress and classed (clear-to-send, repack notice, repack output, data of the
receive, or unexpected); a data packet's payload then passes to the unpacker's beat slice, and
anything else is dropped.

The checks are registered a cycle ahead: the sums and compares the decision acts on are made
from the header as it stands once the beat arriving now is stored (while collecting) or from
the stored header (while deciding), so the decision itself only reads flops.  They read the
receive's state too; when that state was just rewritten (a command loaded or a receive
started), the decision waits a cycle for checks made from the new state (``rewriting``).
"""

from types import SimpleNamespace

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .command import ENGINE_ERROR_LAYOUT
from .regions import beat_layout
from ..lib.builder import carry_save
from ..net.packet import ClearCode, PacketKind, header_beats, packet_header_layout, packet_stream
from ..repack.formats import RepackNoticeKind
from ..params import check_data_width, check_int
from ..lib.mirrors import Mirrored

__all__ = ["PacketParser"]


class PacketParser(Mirrored, wiring.Component):
    """Received packets classed and checked; a data packet's payload passed on.

    Parameters
    ----------
    data_width : int
        Bits per beat.
    max_nodes : int
        Node ids a build can name (a clear-to-send from a larger id is unexpected; an
        aggregate packet's slot is below it).
    length_bits : int
        Bits the region walkers count in: an aggregate packet longer than that is a length
        error.

    Members
    -------
    rx : ``In(packet_stream(data_width))``
        The engine's received packets (kinds CLEAR, DATA, REPACK_NOTICE, REPACK_OUT).
    beats : ``Out(stream.Signature(beat_layout(data_width)))``
        A data or repack packet's payload; ``last`` on the message's (or the aggregate
        packet's) last beat only.
    clear : ``In(1)``
        CONTROL.clear.
    rx_bytes, rx_left : ``In(32)``; rx_peer, rx_tag : ``In(16)``; rx_busy, cts_pending : ``In(1)``
        The receive in progress: bytes accepted and still due, its source and tag, whether
        one runs and whether its clear-to-send is yet to leave.
    in_aggregate : ``In(1)``
        An aggregate command runs (its notices and packets are taken).
    rewriting : ``In(1)``
        The receive's state or the command is being rewritten: checks made now are stale.
    send_to, recv_tag, recv_offset, recv_stride : ``In``
        The current command's repack hub, and its receive's tag, offset and stride.
    notice_room : ``In(1)``
        The aggregate sender's queue of SEND notices has room.
    header : ``Out(packet_header_layout())``
        The stored header.
    deciding : ``Out(1)``
        The decision acts this cycle (its checks are not stale).
    accept : ``Out(1)``; after, left : ``Out(32)``
        A data packet is taken: the receive's counts become ``after`` and ``left``.
    cts_valid : ``Out(1)``
        A clear-to-send from ``header.src`` for tag ``header.seq`` is taken.
    event : ``Out(1)``
        A RESEND, ACK or NOTREADY (``header.code``) from ``header.src`` for message
        ``header.seq`` is taken (for the transmit half, docs/faults.md).
    reply : ``Out(1)``; reply_code : ``Out(ClearCode)``
        A reply to ``header.src`` about message ``header.seq`` is due (echoing the pass
        number ``header.arg``; a RESEND names ``rx_bytes``): an ACK when the message's last
        packet is taken, a RESEND at a gap, or the answer to a PROBE.
    notice_push, agg_done, agg_start, agg_final : ``Out(1)``
        A SEND notice is queued; the hub's DONE notice; an aggregate packet's receive
        starts (the packet in ``header``); that packet is a group's final one.
    agg_terms : ``Out(ArrayLayout(32, 2))``; agg_base : ``Out(33)``
        An aggregate packet's offset in the receive region, registered as the two
        carry-save terms of slot × stride and the base (offset + the packet's address).
    errors : ``Out(ENGINE_ERROR_LAYOUT)``
        The bits the parser raises (``unexpected``, ``protocol``, ``length``).
    packets_received : ``Out(1)``; bytes_received : ``Out(32)``
        The counters' bumps.
    """

    def __init__(self, *, data_width, max_nodes, length_bits):
        check_data_width(data_width)
        for name, value in (("max_nodes", max_nodes), ("length_bits", length_bits)):
            check_int(name, value, 1)
        self._data_width = data_width
        self._max_nodes = max_nodes
        self._length_bits = length_bits
        self._mirrors = []
        super().__init__({
            "rx": In(packet_stream(data_width)),
            "beats": Out(stream.Signature(beat_layout(data_width))),
            "clear": In(1),
            "rx_bytes": In(32), "rx_left": In(32), "rx_peer": In(16), "rx_tag": In(16),
            "rx_busy": In(1), "cts_pending": In(1), "in_aggregate": In(1), "rewriting": In(1),
            "send_to": In(16), "recv_tag": In(16), "recv_offset": In(32), "recv_stride": In(32),
            "notice_room": In(1),
            "header": Out(packet_header_layout()),
            "deciding": Out(1),
            "accept": Out(1), "after": Out(32), "left": Out(32),
            "cts_valid": Out(1), "event": Out(1), "reply": Out(1), "reply_code": Out(ClearCode),
            "notice_push": Out(1), "agg_done": Out(1), "agg_start": Out(1), "agg_final": Out(1),
            "agg_terms": Out(data.ArrayLayout(32, 2)), "agg_base": Out(33),
            "errors": Out(ENGINE_ERROR_LAYOUT),
            "packets_received": Out(1), "bytes_received": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        p = self._checks(m)
        self._decide(m, p)
        return m

    def _checks(self, m):
        """The header's collection and its checks, registered a cycle ahead."""
        width = self._data_width
        hbeats = header_beats(width)
        header_size = packet_header_layout().size
        P_HEADER, P_DECIDE, P_PASS, P_DROP = range(4)
        p_state = Signal(range(4))
        collected = Signal(hbeats * width)
        r_index = Signal(range(max(hbeats, 2)))
        got_last = Signal()             # the header's last beat ended the packet
        completes = Signal()
        got = self.header
        m.d.comb += got.eq(collected[:header_size])
        beat = self.rx.payload
        rx_bytes, rx_left = self.rx_bytes, self.rx_left

        # Header checks a cycle ahead: from the header as it stands once the beat arriving
        # now is stored (in P_HEADER) or from the stored header (while P_DECIDE waits).
        if hbeats == 1:
            arriving = beat.data[:header_size]
        else:
            arriving = Cat(collected[:(hbeats - 1) * width], beat.data)[:header_size]
        arriving = data.View(packet_header_layout(), arriving)
        d = SimpleNamespace(**{name: Signal(name=f"d_{name}") for name in (
            "stale", "data_bad", "ends_message", "src_ok", "slot_over",
            "notice", "agg_out", "clear", "data", "data_src", "data_tag", "data_at",
            "data_at_hi", "behind", "behind_hi", "pass_new", "cts", "probe", "left_zero",
            "done_src", "done_tag")})
        done_valid, done_peer, done_tag, gap_told, gap_pass = self._delivery_state()
        d_slot_end = Signal(33)         # addr + length of an aggregate packet
        decide_first = Signal()         # the first cycle in P_DECIDE: d.slot_over is not ready
        d_after, d_left = self.after, self.left     # rx_bytes, rx_left once it is accepted
        agg_stride_q = Signal(32)
        # The slot (the packet's source group) as the product's own operand flops, loaded
        # from the header in every cycle: equal to got's once the header is stored, so the
        # product follows the stored header as before, from flops the placer can put by
        # its logic (from `collected`, which the parser's compares also load, the route to
        # the multiplier then used was 3.0 of the 64-bit core's 7.81 ns path at seed 2 of
        # ff0ac7f).  A group is below max_nodes: slot_bits bits, the rest must be zero.
        slot_bits = max(1, (self._max_nodes - 1).bit_length())
        agg_slot_q = Signal(slot_bits)
        agg_long = Signal()

        # The command's fields the checks read, as copies loaded a cycle after the command
        # (the queue's block-RAM output register, across the block from the parser): from
        # the command, the hub compare and the tag compare were the 64-bit engine's late
        # pins alone at seed 2 of f250adc (the queue -> 4 LUTs -> d_notice, 5.46 ns;
        # d_agg_out, 5.20 ns).  The checks made while a copy is a command behind are stale a
        # cycle longer (d.stale covers DECODE too): only packets of an earlier command can
        # be deciding then (this command's clear-to-send and registration leave after
        # DISPATCH), and `mirrors` holds the copies to the command in every cycle P_DECIDE
        # may act (the hub's copy, send_to, is the engine's: it keeps that mirror).
        send_to_q = self.send_to
        recv_tag_q = Signal.like(self.recv_tag)
        recv_offset_q = Signal.like(self.recv_offset)
        m.d.sync += [recv_tag_q.eq(self.recv_tag), recv_offset_q.eq(self.recv_offset)]
        acting = (p_state == P_DECIDE) & ~d.stale
        m.d.comb += self.deciding.eq(acting)
        self._mirrors += [(Mux(acting, recv_tag_q, 0), Mux(acting, self.recv_tag, 0)),
                          (Mux(acting, recv_offset_q, 0), Mux(acting, self.recv_offset, 0))]

        def header_checks(h, h_last):
            """The registered checks, ``(flop, next value)``, for header ``h`` (``h_last``: its
            last beat ends the packet)."""
            from_hub = h.src == send_to_q
            empty = h.length == 0
            return [
                (d_after, h.length + rx_bytes),
                (d_left, rx_left - h.length),
                # A data packet is bad with more bytes than the region, or as the message's
                # final packet leaving it short, or filling it with more to come: after >
                # total and after == total as compares of the length with what is left, so
                # no compare follows the sum.
                (d.data_bad, (h.length > rx_left) | (h.code[0] != (h.length == rx_left))),
                (d.ends_message, h.length == rx_left),
                # The packet's class, one flag each (the kinds exclude one another), with
                # every header-only condition of its branch in P_DECIDE folded in; P_DECIDE
                # adds only the live state (aggregate command running, receive busy,
                # clear-to-send sent).
                (d.notice, (h.kind == PacketKind.REPACK_NOTICE) & from_hub),
                (d.agg_out, ((h.kind == PacketKind.REPACK_OUT) & from_hub & ~h_last & ~empty
                             & (h.seq[8:16] < recv_tag_q) & (h.seq[8 + slot_bits:16] == 0))),
                (d.clear, h.kind == PacketKind.CLEAR),
                # A data packet of the receive, as three flags ANDed where they are read: as
                # one, its three compares (64 bits) and the kind's were the 64-bit engine's
                # late pin alone at every seed of b0d651b and d5065bf (the header ->
                # d_data, 5.08-5.68 ns); as two, the first (with the source's compare) was
                # a late pin of the 256-bit core at two seeds of 7286a74 (the rx port's
                # register -> d_data, 7 LUTs, 7.93 ns).
                (d.data, (h.kind == PacketKind.DATA) & ~h_last & ~empty),
                (d.data_src, h.src == self.rx_peer),
                (d.data_tag, h.seq == self.rx_tag),
                # The packet's offset is the bytes received so far, as two flags ANDed where
                # they are read: one 32-bit compare and the choice of header behind it were
                # the 256-bit engine's late pins at every seed of 5a1ddfb (the received
                # header -> d_data_at, 5.2-5.7 ns).
                (d.data_at, h.addr[:16] == rx_bytes[:16]),
                (d.data_at_hi, h.addr[16:] == rx_bytes[16:]),
                (d.src_ok, h.src < self._max_nodes),
                *self._delivery_checks(d, h, rx_bytes,
                                       (done_valid, done_peer, done_tag, gap_pass)),
                (d_slot_end, h.addr + h.length),
                # Longer than the walker counts: a length error, with the slot's (below).
                (agg_long, h.length[self._length_bits:] != 0),
                (agg_slot_q, h.seq[8:8 + slot_bits]),
            ]

        # Each check made twice, from the header as it stands once the beat arriving now is
        # stored (P_HEADER) and from the stored header (while P_DECIDE waits), and chosen
        # after: the state's decode selects a few results, not every bit of a header in
        # front of the compares (the 256-bit engine's estimated paths, p_state -> the
        # header's multiplexer -> a 32-bit compare -> d_data_bad, d_ends_message, d_data).
        parsing_header = p_state == P_HEADER
        m.d.sync += [flop.eq(Mux(parsing_header, new, stored))
                     for (flop, new), (_, stored) in zip(header_checks(arriving, beat.last),
                                                         header_checks(got, got_last))]
        m.d.sync += [
            d.stale.eq(self.rewriting),
            d.left_zero.eq(rx_left == 0),
            # An aggregate packet's end in its slot, registered; compared with the stride a
            # cycle later (no adder in front of the compare), so P_DECIDE waits its first
            # cycle on an aggregate packet.  The stride is the multipliers' copy (below),
            # current from DISPATCH, a cycle before AGGREGATE: from the command, the queue's
            # block-RAM output, the compare was 5.74 ns at seed 3 of 447ddd7's 64-bit engine.
            d.slot_over.eq((d_slot_end > agg_stride_q) | agg_long),
            # Where an aggregate packet's bytes land: slot (source) × stride + offset +
            # addr, the product's terms and the sum registered here, added into a register
            # by the engine's receive half.  The sum is read a cycle after P_DECIDE takes
            # the packet, which is two cycles after the header is stored at the earliest
            # (P_DECIDE waits its first cycle on an aggregate packet), so the products are
            # taken from the stored header, a cycle of slack; the stride is a copy of the
            # command's, loaded a cycle after it, so the product's operands are flops that
            # can sit beside it.  The operands came through a multiplexer of the arriving
            # and the stored header (the 256-bit engine's path p_state -> d_agg_hi, 6.91
            # ns), then from the command across the block (the 64-bit engine's, cur ->
            # MULT18X18D -> d_agg_hi, 7.09 ns, 3.07 of it the multiplier; the copy is valid
            # long before an aggregate packet can arrive: the command enters the AGGREGATE
            # state two cycles after it is loaded).  The product was two MULT18X18D,
            # unregistered: the 256-bit engine's latest pin at seed 1 once the walkers
            # counted in mem_size bits (agg_stride_q -> d_agg_lo, 5.74 ns, 2.54 of it the
            # multiplier).
            agg_stride_q.eq(self.recv_stride),
            *(term.eq(value) for term, value in zip(self.agg_terms, carry_save(
                [Mux(agg_slot_q[k], agg_stride_q << k, 0) for k in range(slot_bits)], 32))),
            self.agg_base.eq(recv_offset_q + got.addr),
        ]
        return SimpleNamespace(**{k: x for k, x in locals().items() if k not in ("self", "m")})

    @staticmethod
    def _delivery_state():
        """The delivery protocol's state (docs/faults.md, "Packet-level recovery")."""
        # The last message whose every byte was taken (its source and tag): a late copy of
        # one of its packets is dropped without an error.
        done_valid, done_peer, done_tag = Signal(), Signal(16), Signal(16)
        # A gap was answered with a RESEND (in that pass of the sender's): the next one
        # waits for another pass or an accepted packet, so a gap costs one RESEND a pass.
        gap_told, gap_pass = Signal(), Signal(8)
        return done_valid, done_peer, done_tag, gap_told, gap_pass

    @staticmethod
    def _delivery_checks(d, h, rx_bytes, state):
        """The delivery protocol's registered checks of header ``h``, ``(flop, next value)``."""
        done_valid, done_peer, done_tag, gap_pass = state
        return [
            # Behind the bytes taken: a copy (a duplicate, or a resent pass from an earlier
            # offset), dropped without an error.  As two halves, like data_at.
            (d.behind, h.addr[:16] < rx_bytes[:16]),
            (d.behind_hi, h.addr[16:] < rx_bytes[16:]),
            # A data packet's pass number (``arg``) differs from the pass whose gap was last
            # answered.
            (d.pass_new, h.arg[:8] != gap_pass),
            (d.cts, h.code == ClearCode.CTS.value),
            (d.probe, h.code == ClearCode.PROBE.value),
            (d.done_src, done_valid & (h.src == done_peer)),
            (d.done_tag, h.seq == done_tag),
        ]

    def _decide(self, m, p):
        """The parser's state machine: collect, decide, pass or drop."""
        d, beat, p_state = p.d, p.beat, p.p_state
        P_HEADER, P_DECIDE, P_PASS, P_DROP = p.P_HEADER, p.P_DECIDE, p.P_PASS, p.P_DROP
        hbeats, width, collected, r_index = p.hbeats, p.width, p.collected, p.r_index
        got_last, completes, decide_first = p.got_last, p.completes, p.decide_first
        rx_busy, cts_pending, errors = self.rx_busy, self.cts_pending, self.errors
        # The beat slice's payload whatever the state (its valid is P_PASS's): given in
        # P_PASS alone, each of its 290 bits was ANDed with the state's decode, which then
        # drove every entry's data input (the 256-bit engine's late pins at seed 1 of
        # 5a1ddfb, p_state -> rx_beats.entry0, 5.76 ns, almost all of it routing).
        m.d.comb += [self.beats.payload.data.eq(beat.data),
                     self.beats.payload.keep.eq(beat.keep),
                     self.beats.payload.last.eq(beat.last & completes)]
        # A data packet's accept moves the message's counts by an enable made of flops only:
        # the classes exclude one another, so the decision's priority chain (the clear,
        # notice and repack classes before it, with the live state they read) is not in
        # front of these 64 enables.
        m.d.comb += self.accept.eq(~self.clear & (p_state == P_DECIDE) & ~d.stale & d.data
                                   & d.data_src & d.data_tag & d.data_at & d.data_at_hi
                                   & rx_busy & ~cts_pending & ~d.data_bad)
        with m.If(self.clear):
            m.d.sync += [p_state.eq(P_HEADER), r_index.eq(0), p.done_valid.eq(0),
                         p.gap_told.eq(0)]
        with m.Else():
            with m.Switch(p_state):
                with m.Case(P_HEADER):
                    m.d.comb += self.rx.ready.eq(1)
                    with m.If(self.rx.valid):
                        with m.Switch(r_index):
                            for k in range(hbeats):
                                with m.Case(k):
                                    m.d.sync += collected[k * width:(k + 1) * width].eq(beat.data)
                        with m.If(r_index == hbeats - 1):
                            m.d.sync += [r_index.eq(0), got_last.eq(beat.last),
                                         p_state.eq(P_DECIDE), decide_first.eq(1)]
                        with m.Elif(beat.last):     # shorter than a header: dropped
                            m.d.sync += r_index.eq(0)
                            m.d.comb += errors.unexpected.eq(1)
                        with m.Else():
                            m.d.sync += r_index.eq(r_index + 1)
                with m.Case(P_DECIDE):
                    self._decision(m, p)
                with m.Case(P_PASS):
                    m.d.comb += [self.beats.valid.eq(self.rx.valid),
                                 self.rx.ready.eq(self.beats.ready)]
                    with m.If(self.rx.valid & self.rx.ready & beat.last):
                        m.d.sync += p_state.eq(P_HEADER)
                with m.Case(P_DROP):
                    m.d.comb += self.rx.ready.eq(1)
                    with m.If(self.rx.valid & beat.last):
                        m.d.sync += p_state.eq(P_HEADER)

    def _decision(self, m, p):
        """P_DECIDE: a packet's class, with the live state, decides where it goes."""
        d, got, p_state, got_last = p.d, p.got, p.p_state, p.got_last
        P_HEADER, P_PASS, P_DROP = p.P_HEADER, p.P_PASS, p.P_DROP
        rx_busy, errors, in_aggregate = self.rx_busy, self.errors, self.in_aggregate
        m.d.sync += p.decide_first.eq(0)
        m.d.comb += self.packets_received.eq(~d.stale)
        with m.If(self.rewriting):
            m.d.sync += p.gap_told.eq(0)        # a new receive: no gap answered yet
        with m.If(d.stale):
            pass                        # the checks are being redone
        with m.Elif(d.clear):
            # First: the classes exclude one another, and a clear-to-send depends on no
            # live state, so the table's write decodes from flops.
            with m.If(~d.src_ok):
                m.d.comb += errors.unexpected.eq(1)
            with m.Elif(d.cts):
                # Written from flops a cycle later (the engine's clear-to-send table).
                m.d.comb += self.cts_valid.eq(1)
            with m.Elif(d.probe):
                # Ref: docs/faults.md, "Packet-level recovery": where message seq stands.
                m.d.comb += [self.reply.eq(1), self.packets_received.eq(0)]
                with m.If(~(d.data_src & d.data_tag & rx_busy & ~self.cts_pending)):
                    m.d.comb += self.reply_code.eq(ClearCode.NOTREADY)
                with m.Elif(d.left_zero):
                    m.d.comb += self.reply_code.eq(ClearCode.ACK)
                with m.Else():
                    m.d.comb += self.reply_code.eq(ClearCode.RESEND)
            with m.Else():
                # RESEND, ACK or NOTREADY: the transmit half's (not counted as received).
                m.d.comb += [self.event.eq(1), self.packets_received.eq(0)]
            m.d.sync += p_state.eq(Mux(got_last, P_HEADER, P_DROP))
        with m.Elif(d.notice & in_aggregate):
            # Ref: seed 003, steps 7.3-7.5: SEND (queued; at most one per destination group,
            # so the queue never fills), TAKEN, DELIVERED (nothing to do), DONE.
            with m.If(got.code == RepackNoticeKind.SEND.value):
                with m.If(self.notice_room):
                    m.d.comb += self.notice_push.eq(1)
                with m.Else():
                    m.d.comb += errors.protocol.eq(1)
            with m.If(got.code == RepackNoticeKind.DONE.value):
                m.d.comb += self.agg_done.eq(1)
            m.d.sync += p_state.eq(Mux(got_last, P_HEADER, P_DROP))
        with m.Elif(d.agg_out & in_aggregate):
            with m.If(p.decide_first):
                # d.slot_over is computed from this packet from the next cycle.
                m.d.comb += self.packets_received.eq(0)
            with m.Elif(d.slot_over):
                m.d.comb += errors.length.eq(1)
                m.d.sync += p_state.eq(P_DROP)
            with m.Elif(~rx_busy):
                # The receive half starts from a flop a cycle later: this decision does not
                # fan out to the registers a start loads.
                m.d.comb += [self.bytes_received.eq(got.length), self.agg_start.eq(1)]
                m.d.sync += [p.completes.eq(1), p_state.eq(P_PASS)]
                with m.If(got.code[0]):
                    m.d.comb += self.agg_final.eq(1)
            with m.Else():
                # Wait for the previous packet's bytes to be written.
                m.d.comb += self.packets_received.eq(0)
        with m.Elif(d.data & d.data_src & d.data_tag & rx_busy & ~self.cts_pending):
            with m.If(~(d.data_at & d.data_at_hi)):
                # Not the offset awaited.  Behind it: a copy, dropped.  Past it: a packet
                # was lost; dropped, and the sender asked to resend from the bytes taken,
                # once per gap and pass (docs/faults.md, "Packet-level recovery").
                m.d.sync += p_state.eq(P_DROP)
                with m.If(~(d.behind_hi | (d.data_at_hi & d.behind))
                          & (~p.gap_told | d.pass_new)):
                    m.d.comb += [self.reply.eq(1), self.reply_code.eq(ClearCode.RESEND)]
                    m.d.sync += [p.gap_told.eq(1), p.gap_pass.eq(got.arg[:8])]
            with m.Elif(d.data_bad):
                m.d.comb += errors.length.eq(1)
                m.d.sync += p_state.eq(P_DROP)
            with m.Else():
                m.d.comb += self.bytes_received.eq(got.length)
                m.d.sync += [p.completes.eq(d.ends_message), p_state.eq(P_PASS),
                             p.gap_told.eq(0)]
                with m.If(d.ends_message):
                    # Every byte is here: the sender is told, and a late copy of one of
                    # this message's packets will be dropped.
                    m.d.comb += [self.reply.eq(1), self.reply_code.eq(ClearCode.ACK)]
                    m.d.sync += [p.done_valid.eq(1), p.done_peer.eq(got.src),
                                 p.done_tag.eq(got.seq)]
        with m.Elif(d.data & d.done_src & d.done_tag):
            m.d.sync += p_state.eq(P_DROP)      # a late copy of the last message's packet
        with m.Else():
            m.d.comb += errors.unexpected.eq(1)
            m.d.sync += p_state.eq(Mux(got_last, P_HEADER, P_DROP))
