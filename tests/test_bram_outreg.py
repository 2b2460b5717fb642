"""absorb_output_registers on small hand-made yosys netlists: which ports it merges, what
the merged netlist is, and why it leaves a port alone."""

import pytest

from nicoll.hw.synth.bram_outreg import OutputRegisterMerge, absorb_output_registers

CLOCK, ENABLE, OTHER_CLOCK, RESET = 2, 3, 4, 5


def _bram(first_bit, width=2):
    """A DP16KD whose port B reads bits first_bit, first_bit + 1, ... (port A writes)."""
    connections = {"CLKA": [CLOCK], "CLKB": [CLOCK], "RSTA": ["0"], "RSTB": ["0"],
                   "OCEA": ["1"], "OCEB": ["1"], "DIA0": [6]}
    directions = {name: "input" for name in connections}
    for k in range(width):
        connections[f"DOB{k}"] = [first_bit + k]
        directions[f"DOB{k}"] = "output"
    connections["DOB8"] = [first_bit + 50]          # an output nothing reads
    directions["DOB8"] = "output"
    return {"type": "DP16KD", "parameters": {"REGMODE_A": "NOREG", "REGMODE_B": "NOREG",
                                             "GSR": "ENABLED"},
            "connections": connections, "port_directions": directions}


def _flop(d, q, *, ce=None, clock=CLOCK, lsr=None, regset="RESET", gsr="DISABLED"):
    connections = {"CLK": [clock], "DI": [d], "Q": [q]}
    params = {"CLKMUX": "CLK", "CEMUX": "1 ", "LSRMUX": "LSR", "REGSET": regset, "GSR": gsr,
              "SRMODE": "ASYNC"}
    if ce is not None:
        connections["CE"] = [ce]
        params["CEMUX"] = "CE"
    if lsr is not None:
        connections["LSR"] = [lsr]
    return {"type": "TRELLIS_FF", "parameters": params, "connections": connections,
            "port_directions": {"CLK": "input", "DI": "input", "CE": "input", "LSR": "input",
                                "Q": "output"}}


def _netlist(cells):
    return {"modules": {"top": {"ports": {}, "cells": cells, "netnames": {}}}}


def test_a_register_after_the_read_becomes_the_output_register():
    netlist = _netlist({"ram": _bram(10), "q0": _flop(10, 20, ce=ENABLE),
                        "q1": _flop(11, 21, ce=ENABLE)})
    merges = absorb_output_registers(netlist, "top")
    assert merges == [OutputRegisterMerge("ram", "B", 2)]
    cells = netlist["modules"]["top"]["cells"]
    assert set(cells) == {"ram"}
    ram = cells["ram"]
    assert ram["parameters"]["REGMODE_B"] == "OUTREG"
    assert ram["parameters"]["REGMODE_A"] == "NOREG"
    assert ram["parameters"]["GSR"] == "DISABLED"           # the flops' setting
    assert ram["connections"]["OCEB"] == [ENABLE]
    assert ram["connections"]["OCEA"] == ["1"]
    assert (ram["connections"]["DOB0"], ram["connections"]["DOB1"]) == ([20], [21])
    assert ram["connections"]["DOB8"] == [60]                # unread: left as it was


def test_flops_without_an_enable_leave_oce_high():
    netlist = _netlist({"ram": _bram(10), "q0": _flop(10, 20), "q1": _flop(11, 21, gsr="ENABLED")})
    assert absorb_output_registers(netlist, "top")[0].skipped == \
        "its flops differ in their GSR setting"
    netlist = _netlist({"ram": _bram(10), "q0": _flop(10, 20), "q1": _flop(11, 21)})
    assert absorb_output_registers(netlist, "top") == [OutputRegisterMerge("ram", "B", 2)]
    assert netlist["modules"]["top"]["cells"]["ram"]["connections"]["OCEB"] == ["1"]


def _lut(a, z):
    return {"type": "LUT4", "parameters": {}, "connections": {"A": [a], "Z": [z]},
            "port_directions": {"A": "input", "Z": "output"}}


@pytest.mark.parametrize("cells,reason", [
    ({"q0": _flop(10, 20), "l1": _lut(11, 21)}, "DOB1 reaches LUT4.A"),
    ({"q0": _flop(10, 20), "q1": _flop(11, 21), "l1": _lut(11, 22)}, "DOB1 reaches 2 inputs"),
    ({"q0": _flop(10, 20, ce=ENABLE), "q1": _flop(11, 21)},
     "its flops have different clock enables"),
    ({"q0": _flop(10, 20), "q1": _flop(11, 21, clock=OTHER_CLOCK)},
     "DOB1 reaches a flop on another clock or edge"),
    ({"q0": _flop(10, 20), "q1": _flop(11, 21, lsr=RESET)},
     "DOB1 reaches a flop with a set/reset"),
    ({"q0": _flop(10, 20), "q1": _flop(11, 21, regset="SET")},
     "DOB1 reaches a flop that starts at 1"),
])
def test_a_port_that_does_not_match_in_every_bit_is_left_alone(cells, reason):
    cells = {"ram": _bram(10), **cells}
    netlist = _netlist(cells)
    before = repr(netlist)
    assert absorb_output_registers(netlist, "top") == [OutputRegisterMerge("ram", "B", 0, reason)]
    assert repr(netlist) == before


def test_a_used_reset_or_a_top_port_keeps_the_port_as_it_is():
    ram = _bram(10)
    ram["connections"]["RSTB"] = [RESET]
    netlist = _netlist({"ram": ram, "q0": _flop(10, 20), "q1": _flop(11, 21)})
    assert absorb_output_registers(netlist, "top")[0].skipped == \
        "its reset input is used (it would reset the output register)"
    netlist = _netlist({"ram": _bram(10), "q0": _flop(10, 20), "q1": _flop(11, 21)})
    netlist["modules"]["top"]["ports"]["probe"] = {"direction": "output", "bits": [11]}
    assert absorb_output_registers(netlist, "top")[0].skipped == "DOB1 is a port of the top module"


def test_unknown_module():
    with pytest.raises(ValueError, match=r"^The netlist has no module 'core'$"):
        absorb_output_registers(_netlist({}), "core")
