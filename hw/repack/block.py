# Ref: seed 003, steps 7.1-7.6: the host writes the source and destination lists and starts.
"""The repack units as a block of the NIC core: the hub (units and control tree) with its
registers (block ``repack`` of the register map), which it owns; NicCore connects the
block's ``csr`` to the register slave and its packet ports to the network."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .hub import DEFAULT_HUB_PACKET_BEATS, RepackHub
from ..bus.csr import drive_fields, register_signature
from ..net.packet import DEST_WIDTH, packet_stream
from ..regmap.generated import REGMAP

__all__ = ["RepackBlock", "repack_block_idle_values"]


def repack_block_idle_values():
    """The repack block's driven fields in a build without units: every one reads 0."""
    return {(reg.name, field.name): 0 for reg in REGMAP.block("repack").registers
            for field in reg.fields if field.hw_driven}


class RepackBlock(wiring.Component):
    """The repack hub and its registers.

    Parameters
    ----------
    The :class:`~nicoll.hw.repack.hub.RepackHub`'s, passed on to it.

    Members
    -------
    csr : ``Out(register_signature(REGMAP.block("repack")))``
        The repack block's registers.
    node_id : ``In(DEST_WIDTH)``
    tx : ``Out(packet_stream(data_width))``; rx : ``In(packet_stream(data_width))``
        The hub's packets (REPACK_REGISTER and REPACK_IN in, the rest out).
    unit_tx_<k>, unit_rx_<k> :
        With ``unit_ports``, the hub's port of unit ``k`` (:meth:`unit_tx`, :meth:`unit_rx`).

    Attributes
    ----------
    hub : :class:`~nicoll.hw.repack.hub.RepackHub`
    """

    def __init__(self, **params):
        self._hub = hub = RepackHub(**params)
        width = params["data_width"]
        self._unit_ports = [f"unit_{name}_{k}" for k in range(hub.units if hub.unit_ports else 0)
                            for name in ("tx", "rx")]
        super().__init__({
            "csr": Out(register_signature(REGMAP.block("repack"))),
            "node_id": In(DEST_WIDTH),
            "tx": Out(packet_stream(width)), "rx": In(packet_stream(width)),
            **{name: hub.signature.members[name] for name in self._unit_ports},
        })

    @property
    def hub(self):
        return self._hub

    def unit_tx(self, k):
        return getattr(self, f"unit_tx_{k}")

    def unit_rx(self, k):
        return getattr(self, f"unit_rx_{k}")

    def elaborate(self, platform):
        m = Module()
        m.submodules.hub = hub = self._hub
        regs = self.csr
        m.d.comb += hub.node_id.eq(self.node_id)
        wiring.connect(m, hub.tx, wiring.flipped(self.tx))
        wiring.connect(m, wiring.flipped(self.rx), hub.rx)
        for name in self._unit_ports:
            if name.startswith("unit_tx"):
                wiring.connect(m, getattr(hub, name), wiring.flipped(getattr(self, name)))
            else:
                wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(hub, name))
        # A list write or start is held until the control tree takes it (it takes them while
        # no exchange runs); the host sees STATUS.pending meanwhile.
        order_valid = Signal()
        start_valid = Signal()
        write_src, write_dst = regs.control.write_src, regs.control.write_dst
        with m.If(write_src | write_dst):
            m.d.sync += [order_valid.eq(1),
                         hub.order.payload.list.eq(Mux(write_dst, 1, 0)),
                         hub.order.payload.index.eq(regs.order.index),
                         hub.order.payload.rank.eq(regs.order.rank),
                         hub.order.payload.end.eq(regs.control.end)]
        with m.Elif(hub.order.ready):
            m.d.sync += order_valid.eq(0)
        with m.If(regs.control.start):
            m.d.sync += [start_valid.eq(1), hub.start.payload.n.eq(regs.n.n),
                         hub.start.payload.budget.eq(regs.budget.bytes),
                         hub.start.payload.timeout.eq(regs.timeout.cycles)]
        with m.Elif(hub.start.ready):
            m.d.sync += start_valid.eq(0)
        m.d.comb += [hub.order.valid.eq(order_valid), hub.start.valid.eq(start_valid)]
        drive_fields(m, regs, REGMAP.block("repack"), {
            ("CAPS", "units"): hub.units,
            ("CAPS", "max_group"): hub.max_group,
            ("CAPACITY", "bytes"): hub.capacity_bytes,
            ("LIMITS", "max_ranks"): hub.max_ranks,
            ("LIMITS", "packet_beats"): DEFAULT_HUB_PACKET_BEATS,
            ("STATUS", "busy"): hub.busy,
            ("STATUS", "pending"): order_valid | start_valid | hub.held,
            ("STATUS", "code"): hub.status,
            ("STATUS", "last_error"): hub.last_error,
            ("ERRORS", "count"): hub.errors,
            ("CYCLES", "count"): hub.cycles,
            ("OPS", "count"): hub.ops,
            ("DROPPED", "count"): hub.dropped,
        })
        return m
