"""Logic depth after synthesis, without place and route: a check that takes seconds.

nextpnr gives the real figure but takes minutes per block and names one path; yosys's
``synth_ecp5`` netlist already fixes every path's cells.  :func:`netlist_depth` walks that
netlist from each register (or block RAM, or input port) to each register input and gives
every path an *estimated* delay: the cells' own delays plus one routing hop per connection
that leaves a slice.  It does not know placement, so it cannot replace nextpnr: it ranks
paths and catches a regression (a new level of logic on a path that was at the budget) in
the time yosys takes.

The delay figures are for an ECP5 at speed grade 8 and come from nextpnr's own reports of
this design (``build/synth/*/*.report.json``): LUT4 0.18 ns, flip-flop clock-to-output
0.40 ns, setup 0.29 ns, carry 0.04 ns per CCU2C, PFU multiplexers 0.19 ns.  A routing hop
inside a block is taken as :data:`ROUTE_NS`, the median of the routed hops in those reports
(they range from 0.03 to 2.5 ns, longer in a full core than in a block alone).
"""

import dataclasses
import json
import re
import subprocess
from pathlib import Path

__all__ = ["ROUTE_NS", "DepthPath", "DepthReport", "netlist_depth", "measure_logic_depth",
           "short_name"]


#: Estimated delay of a routed connection (ns).
ROUTE_NS = 0.55

_CLK_TO_Q_NS = 0.40
_SETUP_NS = 0.29
# Cell delay from an input pin to an output pin, and which input pins come from inside the
# same slice (no routing hop before them).
_LUT_NS = 0.18
_MUX_NS = 0.19
_CARRY_IN_NS = 0.35        # a data input of a CCU2C to its sum or carry out
_CARRY_THROUGH_NS = 0.04   # carry in to carry out of one CCU2C (two bits)
_CARRY_SUM_NS = 0.20       # carry in to a sum output
# Block RAM without its output register, a multiplier without registers, a LUT RAM read.
_BRAM_CLK_TO_Q_NS = 2.0
_MULT_NS = 3.0
_LUTRAM_READ_NS = 0.40

_IN_SLICE = {("PFUMX", "ALUT"), ("PFUMX", "BLUT"), ("L6MUX21", "D0"), ("L6MUX21", "D1"),
             ("CCU2C", "CIN")}
# Cells whose outputs start paths (sequential) and inputs end them.
_SEQUENTIAL = {"TRELLIS_FF", "DP16KD", "PDPW16KD"}
_PORT_BASE = re.compile(r"^([A-Z]+?)\d*$")


@dataclasses.dataclass(frozen=True)
class DepthPath:
    """One register-to-register path: estimated delay, LUT levels, and its ends."""
    delay_ns: float
    luts: int
    start: str
    end: str
    cells: tuple

    @property
    def fmax_mhz(self):
        return 1000.0 / self.delay_ns


@dataclasses.dataclass(frozen=True)
class DepthReport:
    """The worst paths of a netlist, worst first, and its size."""
    paths: tuple
    lut4: int
    ff: int

    @property
    def worst(self):
        return self.paths[0] if self.paths else None

    def to_text(self, count=5):
        lines = [f"{self.lut4} LUT4, {self.ff} FF; estimated worst paths "
                 f"(routing {ROUTE_NS} ns per hop, not placed):"]
        for path in self.paths[:count]:
            lines.append(f"  {path.delay_ns:5.2f} ns ({path.fmax_mhz:5.1f} MHz) "
                         f"{path.luts:2d} LUT levels  {path.start} -> {path.end}")
        return "\n".join(lines)


def _cell_arc(cell_type, in_port, out_port):
    """Delay from ``in_port`` to ``out_port`` of a combinational cell, or None for no arc."""
    if cell_type == "LUT4":
        return _LUT_NS
    if cell_type in ("PFUMX", "L6MUX21"):
        return _MUX_NS
    if cell_type == "CCU2C":
        if in_port == "CIN":
            return _CARRY_THROUGH_NS if out_port == "COUT" else _CARRY_SUM_NS
        # A data input of the low half reaches both sums and the carry; of the high half, S1
        # and the carry only.
        if in_port.endswith("1") and out_port == "S0":
            return None
        return _CARRY_IN_NS
    if cell_type == "TRELLIS_DPR16X4":
        return _LUTRAM_READ_NS if _port_base(in_port) == "RAD" else None
    if cell_type == "MULT18X18D":
        return _MULT_NS if _port_base(in_port) in ("A", "B") else None
    return None


def _port_base(port):
    match = _PORT_BASE.match(port)
    return match.group(1) if match else port


def _top_module(netlist, top):
    modules = netlist["modules"]
    if top is None:
        tops = [name for name, module in modules.items()
                if int(module.get("attributes", {}).get("top", 0) or 0)]
        if len(tops) != 1:
            raise ValueError(f"Netlist must have exactly one top module, found {tops!r}")
        top = tops[0]
    if top not in modules:
        raise ValueError(f"Module {top!r} is not in the netlist")
    return modules[top]


def short_name(name):
    """A cell name without yosys's mapping suffixes: the signal it was made for."""
    return re.split(r"_(?:TRELLIS|LUT4|PFUMX|L6MUX21|CCU2C|DP16KD)", name, maxsplit=1)[0]


class _Graph:
    """Drivers and combinational arcs of a flattened netlist."""

    def __init__(self, module):
        self.cells = module["cells"]
        self.driver = {}                  # net bit -> (cell, port)
        for name, cell in self.cells.items():
            for port, bits in cell["connections"].items():
                if cell["port_directions"].get(port) == "output":
                    for bit in bits:
                        if isinstance(bit, int):
                            self.driver[bit] = (name, port)
        self.arrival = {}                 # (cell, output port) -> (ns, luts, start, previous)

    def inputs(self, name):
        cell = self.cells[name]
        for port, bits in cell["connections"].items():
            if cell["port_directions"].get(port) == "input":
                for bit in bits:
                    if isinstance(bit, int):
                        yield port, bit

    def source_arrival(self, bit, in_cell_type, in_port):
        """Arrival time at an input pin fed by net ``bit``."""
        if bit not in self.driver:        # a module input port or a constant
            return (0.0, 0, "(input)", None)
        cell, port = self.driver[bit]
        ns, luts, start, _ = self.output_arrival(cell, port)
        hop = 0.0 if (in_cell_type, in_port) in _IN_SLICE else ROUTE_NS
        return (ns + hop, luts, start, (cell, port))

    def output_arrival(self, name, port):
        """Latest arrival at an output pin (iterative, so deep chains do not recurse)."""
        key = (name, port)
        if key in self.arrival:
            return self.arrival[key]
        stack = [key]
        while stack:
            cell_name, out_port = stack[-1]
            if (cell_name, out_port) in self.arrival:
                stack.pop()
                continue
            cell = self.cells[cell_name]
            cell_type = cell["type"]
            if cell_type in _SEQUENTIAL or cell_type not in _COMBINATIONAL:
                delay = _BRAM_CLK_TO_Q_NS if cell_type in ("DP16KD", "PDPW16KD") else \
                    _CLK_TO_Q_NS
                self.arrival[(cell_name, out_port)] = (delay, 0, short_name(cell_name), None)
                stack.pop()
                continue
            pending = []
            best = None
            for in_port, bit in self.inputs(cell_name):
                arc = _cell_arc(cell_type, in_port, out_port)
                if arc is None:
                    continue
                driver = self.driver.get(bit)
                if driver is not None and driver not in self.arrival:
                    pending.append(driver)
                    continue
                if pending:
                    continue
                ns, luts, start, _ = self.source_arrival(bit, cell_type, in_port)
                candidate = (ns + arc, luts + (cell_type == "LUT4"), start, driver)
                if best is None or candidate[0] > best[0]:
                    best = candidate
            if pending:
                stack.extend(pending)
                continue
            self.arrival[(cell_name, out_port)] = best or (0.0, 0, "(constant)", None)
            stack.pop()
        return self.arrival[key]

    def trace(self, driver):
        cells = []
        while driver is not None:
            cells.append(driver[0])
            driver = self.arrival[driver][3]
        return tuple(reversed(cells))


_COMBINATIONAL = {"LUT4", "PFUMX", "L6MUX21", "CCU2C", "TRELLIS_DPR16X4", "MULT18X18D"}


def netlist_depth(netlist, top=None, *, count=20):
    """Estimated worst register-to-register paths of a yosys ``synth_ecp5`` JSON netlist.

    Parameters
    ----------
    netlist : dict or str or os.PathLike
        The netlist (``write_json``), or the path of its file.
    top : str, optional
        The module to analyse; default the one marked ``top``.
    count : int
        How many paths to return, worst first (one per endpoint signal).

    Returns
    -------
    DepthReport
    """
    if not isinstance(netlist, dict):
        with open(netlist, encoding="utf-8") as f:
            netlist = json.load(f)
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ValueError(f"Count must be a positive integer, not {count!r}")
    module = _top_module(netlist, top)
    graph = _Graph(module)
    worst = {}                            # endpoint signal -> DepthPath
    for name, cell in graph.cells.items():
        cell_type = cell["type"]
        if cell_type not in _SEQUENTIAL and cell_type != "TRELLIS_DPR16X4":
            continue
        for port, bit in graph.inputs(name):
            if cell_type == "TRELLIS_DPR16X4" and _port_base(port) == "RAD":
                continue                  # a read address is combinational, not an end
            if port in ("CLK", "CLKA", "CLKB", "WCK"):
                continue
            ns, luts, start, driver = graph.source_arrival(bit, cell_type, port)
            end = short_name(name)
            path = DepthPath(delay_ns=round(ns + _SETUP_NS, 3), luts=luts, start=start,
                             end=end, cells=graph.trace(driver) + (name,))
            if end not in worst or path.delay_ns > worst[end].delay_ns:
                worst[end] = path
    paths = sorted(worst.values(), key=lambda p: (-p.delay_ns, p.end))[:count]
    types = [cell["type"] for cell in graph.cells.values()]
    return DepthReport(paths=tuple(paths), lut4=types.count("LUT4"),
                       ff=types.count("TRELLIS_FF"))


def measure_logic_depth(component_factory, *, name, board="versa_ecp5", build_dir,
                        widelut=True, count=20):
    """Run yosys alone on ``component_factory()`` in the synthesis harness of
    :func:`~nicoll.hw.synth.synthesize` and return :func:`netlist_depth` of its netlist."""
    from ..toolchain import tool_env
    from .flow import SynthesisError, _log_tail, _yosys_overrides, extract_plan
    from .harness import _check_board, _harness_platform

    board_info = _check_board(board)
    build_dir = Path(build_dir).resolve()
    build_dir.mkdir(parents=True, exist_ok=True)
    harness, platform = _harness_platform(component_factory, board_info)
    plan = platform.build(harness, name=name, build_dir=str(build_dir), do_build=False,
                          do_program=False, **_yosys_overrides(widelut))
    extract_plan(plan, build_dir)
    netlist = build_dir / f"{name}.json"
    netlist.unlink(missing_ok=True)
    env = tool_env()
    yosys = env.get("YOSYS", "yosys")
    done = subprocess.run([yosys, "-q", "-l", f"{name}.rpt", f"{name}.ys"], cwd=build_dir,
                          env=env, capture_output=True, text=True)
    if done.returncode != 0 or not netlist.exists():
        raise SynthesisError(f"yosys failed on {name!r} (exit {done.returncode}); build folder "
                             f"{build_dir}\n{_log_tail(build_dir / f'{name}.rpt')}")
    return netlist_depth(netlist, name, count=count)
