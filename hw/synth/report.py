"""nextpnr's figures: its ``--report`` JSON read (:func:`parse_nextpnr_report`), the timing
endpoints of its detailed report, and the figures of one synthesis run (:class:`SynthResult`).
"""

import dataclasses
import json
import os
import re
from collections.abc import Mapping


__all__ = ["CriticalPath", "Endpoint", "NextpnrReport", "parse_nextpnr_report",
           "netlist_cell_types", "SynthResult"]


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
        ``hint`` (for a design built by :func:`~nicoll.hw.synth.synthesize`, ``"cd_sync.clk"``:
        the clock net of the ``sync`` domain, which nextpnr names ``$glbnet$cd_sync.clk`` once
        on a global buffer).
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
