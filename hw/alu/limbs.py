"""LimbProduct: the registered unsigned product of two limbs of at most 18 bits, one ECP5
MULT18X18D with its own input and output registers, or two fabric registers around a ``*``
elsewhere.

The float multipliers (:mod:`.fpmul`) cut significands into such limbs, and the ALU's integer
products (:mod:`.reduction`) cut elements into 16-bit ones.
"""

from amaranth.hdl import ClockSignal, Const, Instance, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


__all__ = ["LimbProduct", "LIMB_MAX"]


#: Widest unsigned operand of one ECP5 MULT18X18D: significands are cut into limbs no wider.
LIMB_MAX = 18


class LimbProduct(wiring.Component):
    """Unsigned ``p = a × b`` of operands at most 18 bits wide, with a register before and
    after the multiplication, both loaded when ``en`` is high.

    On an ECP5 platform it is one MULT18X18D with its own input and output registers: yosys
    maps a plain ``*`` onto the block but leaves the registers in the fabric, and the
    unregistered block (about 3 ns) with the routing into and out of it limits the clock to
    about 160 MHz; with the registers inside, the block's path is no longer critical.
    Elsewhere (simulation, other devices) it is the same two registers around a ``*``.
    """

    def __init__(self, a_width, b_width):
        for width in (a_width, b_width):
            if not isinstance(width, int) or not 1 <= width <= LIMB_MAX:
                raise ValueError(f"operand widths must be integers from 1 to {LIMB_MAX}, "
                                 f"not {width!r}")
        super().__init__({
            "a": In(a_width),
            "b": In(b_width),
            "en": In(1),
            "p": Out(a_width + b_width),
        })

    def elaborate(self, platform):
        m = Module()
        if _is_ecp5(platform):
            ports = {}
            for k in range(LIMB_MAX):
                ports[f"i_A{k}"] = self.a[k] if k < len(self.a) else Const(0)
                ports[f"i_B{k}"] = self.b[k] if k < len(self.b) else Const(0)
                ports[f"i_C{k}"] = Const(0)
            product = Signal(2 * LIMB_MAX)
            for k in range(2 * LIMB_MAX):
                ports[f"o_P{k}"] = product[k]
            for k in range(4):
                ports[f"i_CLK{k}"] = ClockSignal("sync") if k == 0 else Const(0)
                ports[f"i_CE{k}"] = self.en if k == 0 else Const(0)
                ports[f"i_RST{k}"] = Const(0)
            registered = {"p_REG_INPUTA_CLK": "CLK0", "p_REG_INPUTB_CLK": "CLK0",
                          "p_REG_OUTPUT_CLK": "CLK0"}
            for register in ("INPUTA", "INPUTB", "OUTPUT"):
                registered[f"p_REG_{register}_CE"] = "CE0"
                registered[f"p_REG_{register}_RST"] = "RST0"
            m.submodules.mult = Instance(
                "MULT18X18D",
                **registered,
                p_REG_INPUTC_CLK="NONE", p_REG_PIPELINE_CLK="NONE",
                # Like the fabric registers, these need no reset.
                p_GSR="DISABLED", p_RESETMODE="SYNC",
                p_MULT_BYPASS="DISABLED", p_CAS_MATCH_REG="FALSE", p_SOURCEB_MODE="B_SHIFT",
                i_SIGNEDA=Const(0), i_SIGNEDB=Const(0), i_SOURCEA=Const(0), i_SOURCEB=Const(0),
                **ports)
            m.d.comb += self.p.eq(product)
        else:
            a = Signal.like(self.a, reset_less=True)
            b = Signal.like(self.b, reset_less=True)
            with m.If(self.en):
                m.d.sync += [a.eq(self.a), b.eq(self.b), self.p.eq(a * b)]
        return m


def _is_ecp5(platform):
    if platform is None:
        return False
    from amaranth.vendor import LatticePlatform
    return isinstance(platform, LatticePlatform) and platform.family == "ecp5"
