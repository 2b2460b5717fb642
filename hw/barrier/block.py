"""The barrier unit as a block of the NIC core: the unit with its registers (block
``barrier`` of the register map), which it owns, and its notices as header-only control
packets; NicCore connects the block's ``csr`` to the register slave and its packet ports to
the network."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .layouts import BARRIER_ERROR_LAYOUT
from .unit import BarrierUnit
from ..bus.csr import drive_fields, register_signature
from ..lib.deadline import Deadline
from ..net.packet import DEST_WIDTH, HeaderReceiver, HeaderSender, PacketKind, packet_stream
from ..regmap.generated import REGMAP

__all__ = ["BarrierBlock"]


class BarrierBlock(wiring.Component):
    """The barrier unit, its registers and its notice packets.

    Parameters
    ----------
    data_width : int
        Bits per beat of the packet ports.
    max_nodes, max_children : int
        The unit's (:class:`~nicoll.hw.barrier.BarrierUnit`); the unit is built with
        ``dst_checked=True`` (a notice names its destination, which the receiver checks).

    Members
    -------
    csr : ``Out(register_signature(REGMAP.block("barrier")))``
        The barrier's registers.
    now : ``In(64)``; node_id : ``In(DEST_WIDTH)``
        The cycle counter and the node's id.
    engine_done : ``In(1)``; engine_done_seq : ``In(16)``
        The engine reached barrier ``engine_done_seq`` (a barrier command).
    seq : ``Out(16)``
        The unit's current barrier number (the engine waits for it to move on).
    tx : ``Out(packet_stream(data_width))``; rx : ``In(packet_stream(data_width))``
        Notices as header-only BARRIER packets.

    Attributes
    ----------
    unit : :class:`~nicoll.hw.barrier.BarrierUnit`
    """

    def __init__(self, *, data_width, max_nodes, max_children):
        self._data_width = data_width
        self._barrier_children = max_children
        self._unit = BarrierUnit(max_nodes, max_children, dst_checked=True)
        super().__init__({
            "csr": Out(register_signature(REGMAP.block("barrier"))),
            "now": In(64), "node_id": In(DEST_WIDTH),
            "engine_done": In(1), "engine_done_seq": In(16), "seq": Out(16),
            "tx": Out(packet_stream(data_width)), "rx": In(packet_stream(data_width)),
        })

    @property
    def unit(self):
        return self._unit

    def elaborate(self, platform):
        m = Module()

        def reg(register, field):
            """The port of a software-written barrier field."""
            return getattr(getattr(self.csr, register.lower()), field)

        m.submodules.barrier = unit = self._unit
        m.submodules.notice_tx = sender = HeaderSender(self._data_width)
        k = self._barrier_children
        # The receiver compares each notice's src with the parent (peer 0) and the children.
        m.submodules.notice_rx = receiver = HeaderReceiver(self._data_width, peers=1 + k)

        slot_too_big = self._configuration(m, unit, reg)
        armed = self._completion(m, unit, reg)
        self._notices(m, unit, sender, receiver)
        self._values(m, unit, reg, slot_too_big, armed)
        wiring.connect(m, sender.packets, wiring.flipped(self.tx))
        wiring.connect(m, wiring.flipped(self.rx), receiver.packets)
        return m

    def _configuration(self, m, unit, reg):
        """The unit's configuration from the registers; returns the flag of a route write
        naming a slot the unit cannot hold."""
        k = self._barrier_children
        # Configuration.  A route write naming a slot the unit cannot hold is not passed on
        # (its narrow route_data would alias a real slot); it raises cfg_write like the
        # unit's own range check, until the table is cleared.
        slot = reg("ROUTE", "slot")
        slot_too_big = Signal()
        with m.If(reg("ROUTE", "clear")):
            m.d.sync += slot_too_big.eq(0)
        with m.Elif(reg("ROUTE", "write") & (slot > k)):
            m.d.sync += slot_too_big.eq(1)
        m.d.comb += [
            unit.now.eq(self.now),
            unit.node_id.eq(self.node_id),
            unit.parent_id.eq(reg("PARENT", "id")),
            unit.has_parent.eq(reg("PARENT", "valid")),
            unit.route_addr.eq(reg("ROUTE", "node")),
            unit.route_data.eq(slot),
            unit.route_we.eq(reg("ROUTE", "write") & (slot <= k)),
            unit.route_clear.eq(reg("ROUTE", "clear")),
            unit.mode.eq(reg("MODE", "mode")),
            unit.ac_sub.eq(reg("MODE", "sub")),
            unit.m.eq(reg("M", "count")),
            unit.c.eq(reg("C", "cycles")),
            unit.estimate.eq(reg("ESTIMATE", "value")),
            unit.start.eq(reg("CONTROL", "start")),
            unit.start_seq.eq(reg("CONTROL", "seq")),
            unit.log_index.eq(reg("SELECT", "entry")),
        ]
        for j in range(k):
            m.d.comb += [unit.child_id[j].eq(reg(f"CHILD{j}", "id")),
                         unit.child_valid[j].eq(reg(f"CHILD{j}", "valid"))]
        return slot_too_big

    def _completion(self, m, unit, reg):
        """This node's completion: now, at DONE_AT, or the engine's barrier command; returns
        the armed flag."""
        # Done now (CONTROL.done), or at cycle DONE_AT (CONTROL.arm): the timed form lets a
        # host place completions of several nodes at exact cycles of the shared clock.
        armed = Signal()
        armed_seq = Signal.like(unit.done_seq)
        m.submodules.done_deadline = done_deadline = Deadline()
        m.d.comb += [done_deadline.now.eq(self.now), done_deadline.at.eq(reg("DONE_AT", "cycle"))]
        fire = armed & done_deadline.reached & ~reg("CONTROL", "done")
        with m.If(reg("CONTROL", "start")):
            m.d.sync += armed.eq(0)
        with m.Elif(reg("CONTROL", "arm")):
            m.d.sync += [armed.eq(1), armed_seq.eq(reg("CONTROL", "seq"))]
        with m.Elif(fire):
            m.d.sync += armed.eq(0)
        engine_strobe, engine_seq = self.engine_done, self.engine_done_seq
        m.d.comb += self.seq.eq(unit.seq)
        m.d.comb += [
            unit.done.eq(reg("CONTROL", "done") | fire | engine_strobe),
            unit.done_seq.eq(Mux(reg("CONTROL", "done"), reg("CONTROL", "seq"),
                                 Mux(fire, armed_seq, engine_seq))),
        ]
        return armed

    def _notices(self, m, unit, sender, receiver):
        """The unit's notices to and from header-only packets."""
        k = self._barrier_children
        # Notices travel as header-only control packets: code = notice kind, arg = subject,
        # value = estimate.  Ref: seed 004, fig. 1 (solid and dashed arrows).
        notice, header = unit.tx.payload, sender.header.payload
        m.d.comb += [
            sender.header.valid.eq(unit.tx.valid),
            unit.tx.ready.eq(sender.header.ready),
            header.kind.eq(PacketKind.BARRIER),
            header.code.eq(notice.kind),
            header.src.eq(notice.src),
            header.dst.eq(notice.dst),
            header.seq.eq(notice.seq),
            header.arg.eq(notice.subject),
            header.value.eq(notice.estimate),
        ]
        header = receiver.header.payload
        notice = unit.rx.payload
        m.d.comb += [
            receiver.header.ready.eq(1),        # the unit's rx is always ready
            receiver.node_id.eq(self.node_id),
            receiver.peer_id[0].eq(unit.parent_id),
            *[receiver.peer_id[1 + j].eq(unit.child_id[j]) for j in range(k)],
            unit.rx_to_me.eq(receiver.to_node),
            unit.rx_from_parent.eq(receiver.from_peer[0]),
            unit.rx_from_child.eq(receiver.from_peer[1:]),
            unit.rx.valid.eq(receiver.header.valid & (header.kind == PacketKind.BARRIER)),
            # A code beyond the notice kinds arrives as kind 3, which the unit refuses.
            notice.kind.as_value().eq(Mux(header.code < 4, header.code, 3)),
            notice.src.eq(header.src),
            notice.dst.eq(header.dst),
            notice.seq.eq(header.seq),
            notice.subject.eq(header.arg),
            notice.estimate.eq(header.value),
        ]

    def _values(self, m, unit, reg, slot_too_big, armed):
        """The fields the unit drives."""
        k = self._barrier_children
        def word(bits, index):
            """32 bits of ``bits`` starting at bit 32 * ``index``; 0 beyond its end."""
            words = -(-len(bits) // 32)
            padded = Signal(32 * words)
            out = Signal(32)
            m.d.comb += padded.eq(bits)
            with m.Switch(index):
                for w in range(words):
                    with m.Case(w):
                        m.d.comb += out.eq(padded[32 * w:32 * (w + 1)])
            return out

        errors = unit.errors
        values = {
            ("CAPS", "children"): k,
            ("CAPS", "log_depth"): unit.log_depth,
            ("ROUTE_READ", "slot"): unit.route_rdata,
            ("STATUS", "seq"): unit.seq,
            ("STATUS", "finished"): unit.finished,
            ("STATUS", "released"): unit.released,
            ("STATUS", "aborted"): unit.aborted,
            ("STATUS", "error"): unit.error | slot_too_big,
            ("STATUS", "armed"): armed,
            ("STATUS", "s_valid"): unit.stamp_valid.s,
            ("STATUS", "mt_valid"): unit.stamp_valid.mt,
            ("STATUS", "e_valid"): unit.stamp_valid.e,
            ("STATUS", "log_overflow"): unit.log_overflow,
            ("NUMBERS", "abort_seq"): unit.abort_seq,
            ("NUMBERS", "stamp_seq"): unit.stamp_seq,
            ("COUNT", "ones"): unit.ones,
            ("COUNT", "total"): unit.total,
            ("RELEASE_ONES", "ones"): unit.release_ones,
            ("STALE", "count"): unit.stale,
            ("RELEASED_AT", "cycle"): unit.released_at,
            ("S", "cycle"): unit.s,
            ("MT", "cycle"): unit.mt,
            ("E", "cycle"): unit.e,
            ("ABORT_ESTIMATE", "value"): unit.abort_estimate,
            ("LOG_ENTRY", "seq"): unit.log_seq,
            ("LOG_ENTRY", "count"): unit.log_count,
            ("LOG_IDS", "ids"): word(unit.log_ids, reg("SELECT", "word")),
            ("VECTOR", "bits"): word(unit.vector, reg("SELECT", "word")),
            ("ERRORS", "cfg_write"): errors.cfg_write | slot_too_big,
        }
        for name in BARRIER_ERROR_LAYOUT.members:
            values.setdefault(("ERRORS", name), getattr(errors, name))
        drive_fields(m, self.csr, REGMAP.block("barrier"), values)
