# Ref: AMBA 4 AXI4-Stream Protocol Specification (ARM IHI 0051A): tdata, tkeep, tlast, tid
#      (source), tdest (routing), tvalid, tready.
"""A :class:`~nicoll.hw.repack.RepackArray` with flat AXI4-Stream port names, for a Verilog
top that cocotbext-axi ``AxiStreamSource`` / ``AxiStreamSink`` drive unchanged.

Ports of :class:`RepackArrayTop` (``<p>`` is a prefix cocotbext-axi's
``AxiStreamBus.from_prefix`` takes):

========================  ====  =====================================================
prefix                    dir   signals and meaning
========================  ====  =====================================================
``s_axis_order``          in    ``tdata`` = :data:`~nicoll.hw.repack.ORDER_WRITE_LAYOUT`
``s_axis_start``          in    ``tdata`` = :data:`~nicoll.hw.repack.START_LAYOUT`
``s_axis_reg``            in    ``tdata`` = :data:`~nicoll.hw.repack.REGISTRATION_LAYOUT`
``m_axis_notice``         out   ``tdata`` = :data:`~nicoll.hw.repack.NOTICE_LAYOUT`
``s_axis_i<k>``           in    ``tdata``, ``tkeep``, ``tlast``, ``tid`` = the source rank:
                                messages into unit k
``m_axis_o<k>``           out   ``tdata``, ``tkeep``, ``tlast``, ``tdest`` = the destination
                                rank: messages out of unit k
========================  ====  =====================================================

Every prefix also has ``tvalid`` and ``tready``.  The control streams have one beat per item
and no ``tlast``; their ``tdata`` is the layout's bits, zero-extended to whole bytes.  The
array's counters come out as ``busy``, ``status``, ``errors``, ``last_error``, ``cycles``,
``ops``, and per unit ``unit<k>_busy`` and ``unit<k>_busy_cycles``.  Clock and reset are
``clk`` and ``rst`` (the ``sync`` domain).
"""

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..repack.formats import (NOTICE_LAYOUT, ORDER_WRITE_LAYOUT, RANK_WIDTH, REGISTRATION_LAYOUT,
                              START_LAYOUT, RepackError)
from ..repack.array import RepackArray


__all__ = ["TOPLEVEL", "CONTROL_PORTS", "control_tdata_width", "RepackArrayTop",
           "repack_verilog"]

#: Verilog module name of :func:`repack_verilog`.
TOPLEVEL = "nicoll_repack"

#: The control streams: prefix, layout, direction of the data (In: into the array).
CONTROL_PORTS = (
    ("s_axis_order", ORDER_WRITE_LAYOUT, In),
    ("s_axis_start", START_LAYOUT, In),
    ("s_axis_reg", REGISTRATION_LAYOUT, In),
    ("m_axis_notice", NOTICE_LAYOUT, Out),
)


def control_tdata_width(layout):
    """``tdata`` width of a control stream carrying ``layout``: its size in whole bytes."""
    return -(-layout.size // 8) * 8


class RepackArrayTop(wiring.Component):
    """:class:`~nicoll.hw.repack.RepackArray` with AXI4-Stream port names (module docstring).

    Parameters are those of :class:`~nicoll.hw.repack.RepackArray`; the array is
    :attr:`array`.
    """

    def __init__(self, max_ranks, units, max_group, data_width, capacity_bytes):
        self.array = RepackArray(max_ranks, units, max_group, data_width, capacity_bytes)
        # Elaborated exactly when the top is; a top that never is warns for itself.
        self.array._MustUse__silence = True
        members = {}
        for prefix, layout, flow in CONTROL_PORTS:
            back = Out if flow is In else In
            members[f"{prefix}_tdata"] = flow(control_tdata_width(layout))
            members[f"{prefix}_tvalid"] = flow(1)
            members[f"{prefix}_tready"] = back(1)
        for k in range(units):
            members.update({
                f"s_axis_i{k}_tdata": In(data_width),
                f"s_axis_i{k}_tkeep": In(data_width // 8),
                f"s_axis_i{k}_tlast": In(1),
                f"s_axis_i{k}_tid": In(RANK_WIDTH),
                f"s_axis_i{k}_tvalid": In(1),
                f"s_axis_i{k}_tready": Out(1),
            })
        for k in range(units):
            members.update({
                f"m_axis_o{k}_tdata": Out(data_width),
                f"m_axis_o{k}_tkeep": Out(data_width // 8),
                f"m_axis_o{k}_tlast": Out(1),
                f"m_axis_o{k}_tdest": Out(RANK_WIDTH),
                f"m_axis_o{k}_tvalid": Out(1),
                f"m_axis_o{k}_tready": In(1),
            })
        members.update({
            "busy": Out(1),
            "status": Out(RepackError),
            "errors": Out(32),
            "last_error": Out(RepackError),
            "cycles": Out(32),
            "ops": Out(32),
        })
        for k in range(units):
            members[f"unit{k}_busy"] = Out(1)
            members[f"unit{k}_busy_cycles"] = Out(32)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.array = eng = self.array
        ports = {"s_axis_order": eng.order, "s_axis_start": eng.start, "s_axis_reg": eng.reg,
                 "m_axis_notice": eng.notice}
        for prefix, layout, flow in CONTROL_PORTS:
            port = ports[prefix]
            tdata = getattr(self, f"{prefix}_tdata")
            tvalid = getattr(self, f"{prefix}_tvalid")
            tready = getattr(self, f"{prefix}_tready")
            if flow is In:
                m.d.comb += [port.payload.eq(tdata[:layout.size]), port.valid.eq(tvalid),
                             tready.eq(port.ready)]
            else:
                m.d.comb += [tdata.eq(port.payload), tvalid.eq(port.valid),
                             port.ready.eq(tready)]
        for k in range(eng.units):
            i, o = eng.i(k), eng.o(k)
            s = f"s_axis_i{k}_"
            m.d.comb += [
                i.payload.data.eq(getattr(self, s + "tdata")),
                i.payload.keep.eq(getattr(self, s + "tkeep")),
                i.payload.last.eq(getattr(self, s + "tlast")),
                i.payload.rank.eq(getattr(self, s + "tid")),
                i.valid.eq(getattr(self, s + "tvalid")),
                getattr(self, s + "tready").eq(i.ready),
            ]
            p = f"m_axis_o{k}_"
            m.d.comb += [
                getattr(self, p + "tdata").eq(o.payload.data),
                getattr(self, p + "tkeep").eq(o.payload.keep),
                getattr(self, p + "tlast").eq(o.payload.last),
                getattr(self, p + "tdest").eq(o.payload.rank),
                getattr(self, p + "tvalid").eq(o.valid),
                o.ready.eq(getattr(self, p + "tready")),
            ]
            m.d.comb += [
                getattr(self, f"unit{k}_busy").eq(eng.unit(k).busy),
                getattr(self, f"unit{k}_busy_cycles").eq(eng.unit(k).busy_cycles),
            ]
        m.d.comb += [
            self.busy.eq(eng.busy),
            self.status.eq(eng.status),
            self.errors.eq(eng.errors),
            self.last_error.eq(eng.last_error),
            self.cycles.eq(eng.cycles),
            self.ops.eq(eng.ops),
        ]
        return m


def repack_verilog(max_ranks, units, max_group, data_width, capacity_bytes):
    """Verilog of a :class:`RepackArrayTop` as module :data:`TOPLEVEL` (``nicoll_repack``)."""
    from .verilog import simulation_verilog
    top = RepackArrayTop(max_ranks, units, max_group, data_width, capacity_bytes)
    return simulation_verilog(top, TOPLEVEL)
