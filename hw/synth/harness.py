"""The synthesis harness and the board table: what a component is built in for a board.

Why a harness: the core's ports are far wider than the board has pins (NicCore at
``data_width=256`` has about 1450 port bits; nextpnr counts 245 I/O sites on the
LFE5UM-45F-8BG381, fewer of them routed to the Versa's connectors), and a port that reaches no
pin lets yosys delete everything behind it.  The harness drives every input port bit from a
shift register fed from one pin and folds every output port bit into one pin, so all of the
core's logic stays observable and nothing is optimized away.

The harness costs logic of its own, a known overhead that results report separately:
:func:`~nicoll.hw.synth.synthesize` counts the harness's flip-flops and LUT4s in the
synthesized netlist (by the names of its registers, :func:`_count_harness_cells`) and reports
them beside the totals; :attr:`SynthHarness.cost` counts them from the harness's structure
before synthesis, an upper bound.
"""

import dataclasses

from amaranth.hdl import Elaboratable, Module, Signal, Cat, Value
from amaranth.lib import io, wiring
from amaranth.lib.wiring import In


__all__ = ["BOARDS", "HarnessCost", "SynthHarness"]


# Board table: how to make the platform and which pins the harness uses.  The core runs in the
# platform's default ``sync`` domain, built from the board's default clock (``clk100`` on the
# Versa) and its reset button; on ECP5 that reset goes through GSR, so the harness and the core
# see a reset-less ``sync`` domain.
@dataclasses.dataclass(frozen=True)
class _Board:
    platform_module: str
    platform_class: str
    serial_in: tuple
    serial_out: tuple

    def platform(self):
        import importlib
        return getattr(importlib.import_module(self.platform_module), self.platform_class)()


BOARDS = {
    # LFE5UM-45F, speed 8: 43.8 k LUT4, 108 DP16KD, 72 MULT18.  The 64-bit core's board.
    "versa_ecp5": _Board(
        platform_module="amaranth_boards.versa_ecp5",
        platform_class="VersaECP5Platform",
        serial_in=("switch", 0),
        serial_out=("led", 0),
    ),
    # LFE5UM5G-85F, speed 8: 83.6 k LUT4, 208 DP16KD, 156 MULT18.  The 256-bit core's board.
    # It has no switch or single LED; the harness uses the two pins of its USB UART.
    "ecpix5_85": _Board(
        platform_module="amaranth_boards.ecpix5",
        platform_class="ECPIX585Platform",
        serial_in=("uart", 0, "rx"),
        serial_out=("uart", 0, "tx"),
    ),
}


def _request_pin(platform, resource, requested):
    """The port of ``resource``: (name, number) or (name, number, subsignal).  ``requested``
    maps (name, number) to the ports already requested, since a resource is requested once."""
    name, number, *subsignal = resource
    if (name, number) not in requested:
        requested[name, number] = platform.request(name, number, dir="-")
    port = requested[name, number]
    for field in subsignal:
        port = getattr(port, field)
    return port


def _check_board(board):
    if not isinstance(board, str):
        raise TypeError(f"Board must be a string, not {board!r}")
    if board not in BOARDS:
        raise ValueError(f"Board must be one of {', '.join(sorted(BOARDS))}, not {board!r}")
    return BOARDS[board]


# Harness ----------------------------------------------------------------------------------

#: Every register of the harness is named with this prefix, so that its flip-flops can be
#: told from the core's in the synthesized netlist (the core's nets are all under ``core.``).
_HARNESS_PREFIX = "harness_"
#: The output tree's nodes are ``harness_fold<level>_<index>``.
_TREE_NAME = "fold"
_TREE_PREFIX = f"{_HARNESS_PREFIX}{_TREE_NAME}"
#: The input shift register is ``harness_chain``.
_CHAIN_NAME = "chain"
_CHAIN_PREFIX = f"{_HARNESS_PREFIX}{_CHAIN_NAME}"


def _register(width, name):
    # Reset-less: the contents are don't-care, and a reset would only add fan-out (on ECP5
    # the platform's GSR initializes them anyway).  ``keep`` on the net, not the register:
    # it stops yosys from dropping the harness name when the same bits also carry a core
    # port's name, so the register can be found by name after synthesis.  A register whose
    # input is constant is still removed (and then counts as nobody's).
    return Signal(width, reset_less=True, name=f"{_HARNESS_PREFIX}{name}", attrs={"keep": 1})


#: Leaves folded by one node of the output tree past its first level: four fill one LUT4.
_TREE_FANIN = 4
#: Leaves folded by one first-level node: each leaf is an (output, mask) pair, so two fill
#: one LUT4.
_FIRST_FANIN = 2


def _tree_widths(leaves):
    """Node counts of each level of the output tree, first level first, down to one node."""
    widths = []
    width = -(-leaves // _FIRST_FANIN)
    widths.append(width)
    while width > 1:
        width = -(-width // _TREE_FANIN)
        widths.append(width)
    return widths


@dataclasses.dataclass(frozen=True)
class HarnessCost:
    """Logic the harness (with the board's clock and reset glue) adds around a core.

    :attr:`SynthHarness.cost` counts it from the harness's structure, before synthesis: an
    upper bound, since synthesis drops the capture register and tree nodes of output bits
    the core ties to a constant, and merges capture registers of output bits that carry the
    same signal.  :func:`~nicoll.hw.synth.synthesize` counts it in the synthesized netlist
    instead, which is what its result reports.
    """
    input_bits: int
    output_bits: int
    ff: int
    lut4: int


class SynthHarness(Elaboratable):
    """Keeps a component's logic alive on a board with two pins.

    - Every input port bit is driven from a shift register fed serially from ``serial_in``
      (a board pin, registered once): synthesis cannot predict any input, so it cannot
      simplify the logic that reads them.  Each stage past the first loads its predecessor
      XOR its own value, not a plain copy (one LUT4 a stage): a core register that only
      registers an input port would otherwise hold what the next stage holds, and yosys
      would merge the two into one flip-flop placed in the chain, away from the logic that
      reads it (the 64-bit core's recorded path was such a merged register).
    - Every output port bit is registered, ANDed with its own bit of that shift register,
      and XOR-reduced in a tree registered at every level (two masked bits per first-level
      LUT4, four bits per LUT4 above it) down to ``serial_out``.  The registers cut every
      harness path to one LUT, so the core's own paths set Fmax.  The masks stop two equal
      output bits from cancelling in the XOR (``a ^ a == 0`` would let yosys delete the
      logic behind both): ``(a & m0) ^ (a & m1)`` still depends on ``a``.

    The harness runs in the ``sync`` domain, as does the core: on a board, the platform's
    default clock (the Versa's 100 MHz ``clk100``) and reset button.  With a platform it
    takes its pins from the board's resources ``serial_in`` and ``serial_out``; without one
    (simulation, RTLIL for inspection) ``serial_in`` and ``serial_out`` are free signals.

    Parameters
    ----------
    core : wiring.Component
        The component to keep alive.  It must have at least one output port bit.
    serial_in, serial_out : (str, int) or (str, int, str)
        Board resources (name, number) for the two pins, or (name, number, subsignal) for a
        pin inside a resource (such as a UART's ``rx``).
    """

    def __init__(self, core, *, serial_in=("switch", 0), serial_out=("led", 0)):
        if not isinstance(core, wiring.Component):
            raise TypeError(f"Core must be a wiring.Component, not {core!r}")
        for what, resource in (("Serial input", serial_in), ("Serial output", serial_out)):
            if not (isinstance(resource, tuple) and len(resource) in (2, 3)
                    and isinstance(resource[0], str) and isinstance(resource[1], int)
                    and all(isinstance(field, str) for field in resource[2:])):
                raise TypeError(f"{what} resource must be a (name, number) or (name, number, "
                                f"subsignal) tuple, not {resource!r}")
        self.core = core
        self._serial_in_resource = serial_in
        self._serial_out_resource = serial_out
        self._inputs = []
        self._outputs = []
        for _path, member, value in core.signature.flatten(core):
            (self._inputs if member.flow == In else self._outputs).append(Value.cast(value))
        self.input_bits = sum(len(value) for value in self._inputs)
        self.output_bits = sum(len(value) for value in self._outputs)
        if self.output_bits == 0:
            raise ValueError(f"Core has no output port bits, so synthesis would remove all "
                             f"of it: {core!r}")
        # One chain bit per input port bit, and one mask bit per output port bit; the two
        # uses share the chain, so it is as long as the larger of them.
        self.chain_length = max(self.input_bits, self.output_bits)
        self.serial_in = Signal(name=f"{_HARNESS_PREFIX}serial_in")
        self.serial_out = Signal(name=f"{_HARNESS_PREFIX}serial_out")

    @property
    def cost(self):
        """:class:`HarnessCost` of this harness around this core, from its structure.

        Flip-flops: the pin register, the chain, the capture register, one per tree node,
        and the two of a board's reset synchronizer.  LUT4s: one per tree node and one per
        chain stage past the first (the board's glue adds an inverter or two for active-low
        pins).  An upper bound; see
        :class:`HarnessCost`.
        """
        tree = _tree_widths(self.output_bits)
        reset_sync = 2
        ff = (1 + self.chain_length + self.output_bits + sum(tree) + reset_sync)
        return HarnessCost(input_bits=self.input_bits, output_bits=self.output_bits,
                           ff=ff, lut4=sum(tree) + self.chain_length - 1)

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = self.core

        if platform is not None:
            requested = {}      # both pins may be subsignals of one resource (a UART)
            m.submodules.serial_in_buffer = pin_in = io.Buffer(
                "i", _request_pin(platform, self._serial_in_resource, requested))
            m.submodules.serial_out_buffer = pin_out = io.Buffer(
                "o", _request_pin(platform, self._serial_out_resource, requested))
            m.d.comb += [
                self.serial_in.eq(pin_in.i),
                pin_out.o.eq(self.serial_out),
            ]

        serial_q = _register(1, "serial_q")
        chain = _register(self.chain_length, _CHAIN_NAME)
        m.d.sync += [
            serial_q.eq(self.serial_in),
            chain.eq(Cat(serial_q, chain[:-1] ^ chain[1:])),
        ]
        offset = 0
        for value in self._inputs:
            m.d.comb += value.eq(chain[offset:offset + len(value)])
            offset += len(value)

        captured = _register(self.output_bits, "captured")
        m.d.sync += captured.eq(Cat(*self._outputs))

        level = []
        for first in range(0, self.output_bits, _FIRST_FANIN):
            last = min(first + _FIRST_FANIN, self.output_bits)
            node = _register(1, f"{_TREE_NAME}0_{len(level)}")
            m.d.sync += node.eq((captured[first:last] & chain[first:last]).xor())
            level.append(node)
        depth = 1
        while len(level) > 1:
            folded = Cat(*level)
            level = []
            for first in range(0, len(folded), _TREE_FANIN):
                node = _register(1, f"{_TREE_NAME}{depth}_{len(level)}")
                m.d.sync += node.eq(folded[first:first + _TREE_FANIN].xor())
                level.append(node)
            depth += 1
        m.d.comb += self.serial_out.eq(level[0])
        return m


# The platform builds its clock and reset glue (reset synchronizer, GSR) in a fragment whose
# nets are named ``cd_sync.*``.
_GLUE_PREFIX = "cd_sync."
_FF_TYPES = frozenset({"TRELLIS_FF"})
_LUT_TYPES = frozenset({"LUT4"})
_IO_TYPES = frozenset({"TRELLIS_IO"})


def _count_harness_cells(netlist, top, *, input_bits, output_bits):
    """:class:`HarnessCost` of the harness as synthesized, from yosys's JSON netlist.

    Flip-flops are the harness's (or the board glue's) when their output is a bit of a net
    the harness (or the glue) named: those names survive synthesis, unlike cell names,
    which yosys takes from whichever alias of a net it prefers.  LUT4s are the harness's
    when all they feed is chain or tree flip-flops, pins or glue; the LUT4s that feed the capture
    register are the core's output logic and stay with the core.
    """
    module = netlist["modules"][top]
    harness_bits, tree_bits, chain_bits, glue_bits = set(), set(), set(), set()
    for net, entry in module["netnames"].items():
        bits = {bit for bit in entry["bits"] if isinstance(bit, int)}
        if net.startswith(_TREE_PREFIX):
            tree_bits |= bits
        if net.startswith(_CHAIN_PREFIX):
            chain_bits |= bits
        if net.startswith(_HARNESS_PREFIX):
            harness_bits |= bits
        elif net.startswith(_GLUE_PREFIX):
            glue_bits |= bits

    def output_bits_of(cell):
        return [bit for port, direction in cell["port_directions"].items()
                if direction == "output" for bit in cell["connections"][port]
                if isinstance(bit, int)]

    # The register driving the output pin loses its harness name to the pin's net, so bits
    # that reach a pin (directly, or through an inverter for an active-low pin) are glue.
    cells = module["cells"]
    sinks = {}
    for name, cell in cells.items():
        for port, direction in cell["port_directions"].items():
            if direction != "output":
                for bit in cell["connections"][port]:
                    sinks.setdefault(bit, set()).add(name)

    def feeds_only(cell, accept):
        fed = set().union(*(sinks.get(bit, set()) for bit in output_bits_of(cell)))
        return bool(fed) and all(accept(sink) for sink in fed)

    def is_pin(name):
        return cells[name]["type"] in _IO_TYPES

    for name, cell in cells.items():
        if cell["type"] in _LUT_TYPES and feeds_only(cell, is_pin):
            glue_bits |= {bit for port, direction in cell["port_directions"].items()
                          if direction == "input" for bit in cell["connections"][port]
                          if isinstance(bit, int)}
    for name, cell in cells.items():
        if is_pin(name):
            glue_bits |= {bit for port, direction in cell["port_directions"].items()
                          if direction != "output" for bit in cell["connections"][port]
                          if isinstance(bit, int)}

    owned_bits = harness_bits | glue_bits
    tree_or_glue_bits = tree_bits | glue_bits
    harness_ff = set()
    fed_by_harness_lut = set()      # tree, chain and glue flip-flops, not the capture register
    for name, cell in cells.items():
        if cell["type"] in _FF_TYPES:
            q = output_bits_of(cell)
            if q and all(bit in owned_bits for bit in q):
                harness_ff.add(name)
                if all(bit in tree_or_glue_bits or bit in chain_bits for bit in q):
                    fed_by_harness_lut.add(name)
    harness_lut = sum(1 for cell in cells.values() if cell["type"] in _LUT_TYPES and
                      feeds_only(cell, lambda sink: sink in fed_by_harness_lut or is_pin(sink)))
    return HarnessCost(input_bits=input_bits, output_bits=output_bits,
                       ff=len(harness_ff), lut4=harness_lut)


def _harness_platform(component_factory, board_info):
    """The :class:`SynthHarness` around ``component_factory()`` and the board's platform,
    as :func:`~nicoll.hw.synth.synthesize` and the logic-depth estimate build them."""
    core = component_factory()
    if not isinstance(core, wiring.Component):
        raise TypeError(f"Component factory must return a wiring.Component, not {core!r}")
    harness = SynthHarness(core, serial_in=board_info.serial_in,
                           serial_out=board_info.serial_out)
    return harness, board_info.platform()
