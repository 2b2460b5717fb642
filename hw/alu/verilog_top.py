# Ref: AMBA 4 AXI4-Stream Protocol Specification (IHI0051A), 2.1 (TDATA, TLAST, TUSER: the
#      port names of the top).
"""The ReductionALU as a Verilog top with AXI4-Stream port names, for the cocotb bench of the
ALU alone (tests/test_alu_cocotb.py): :func:`alu_verilog`.
"""

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .reduction import ReductionALU

__all__ = ["alu_verilog"]


class _ALUVerilogTop(wiring.Component):
    """The ALU with AXI4-Stream port names for a Verilog top (cocotbext-axi drives them).

    ``s_axis_a``: tdata, tlast, tuser = op | dtype << 4 (the codes of nicoll.hw.ops);
    ``s_axis_b``: tdata, tlast; ``m_axis_result``: tdata, tlast, tuser = error.
    """

    def __init__(self, data_width, capabilities):
        self.alu = ReductionALU(data_width, capabilities=capabilities)
        members = {}
        for name, user in (("s_axis_a", 8), ("s_axis_b", 0)):
            members[f"{name}_tdata"] = In(data_width)
            members[f"{name}_tlast"] = In(1)
            if user:
                members[f"{name}_tuser"] = In(user)
            members[f"{name}_tvalid"] = In(1)
            members[f"{name}_tready"] = Out(1)
        members.update({"m_axis_result_tdata": Out(data_width), "m_axis_result_tlast": Out(1),
                        "m_axis_result_tuser": Out(1), "m_axis_result_tvalid": Out(1),
                        "m_axis_result_tready": In(1)})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.alu = alu = self.alu
        for port, name in ((alu.a, "s_axis_a"), (alu.b, "s_axis_b")):
            m.d.comb += [port.payload.data.eq(getattr(self, f"{name}_tdata")),
                         port.payload.last.eq(getattr(self, f"{name}_tlast")),
                         port.valid.eq(getattr(self, f"{name}_tvalid")),
                         getattr(self, f"{name}_tready").eq(port.ready)]
        m.d.comb += [alu.a.payload.op.eq(self.s_axis_a_tuser[:4]),
                     alu.a.payload.dtype.eq(self.s_axis_a_tuser[4:]),
                     self.m_axis_result_tdata.eq(alu.result.payload.data),
                     self.m_axis_result_tlast.eq(alu.result.payload.last),
                     self.m_axis_result_tuser.eq(alu.result.payload.error),
                     self.m_axis_result_tvalid.eq(alu.result.valid),
                     alu.result.ready.eq(self.m_axis_result_tready)]
        return m


def alu_verilog(data_width=256, capabilities=None):
    """Verilog of a ReductionALU as module ``nicoll_alu`` with AXI4-Stream port names
    (``s_axis_a_t*``, ``s_axis_b_t*``, ``m_axis_result_t*``); returns ``(text, latency)``."""
    from ..sim.verilog import simulation_verilog
    top = _ALUVerilogTop(data_width, capabilities)
    return simulation_verilog(top, "nicoll_alu"), top.alu.latency
