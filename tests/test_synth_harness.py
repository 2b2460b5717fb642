# amaranth: UnusedElaboratable=no
"""The synthesis harness (SynthHarness): its ports, its cost in LUT4 and FF, its argument
errors, its behaviour in the Amaranth simulator, and the count of its own cells in a netlist
made by hand.
"""

import random

import pytest
from amaranth.sim import Simulator

from nicoll.hw.synth import harness as harness_mod
from nicoll.hw.synth import HarnessCost, SynthHarness

from synth_helpers import Echo, MacMem, InputsOnly


def test_harness_counts_ports():
    harness = SynthHarness(Echo())
    assert (harness.input_bits, harness.output_bits, harness.chain_length) == (12, 11, 12)


def test_harness_cost():
    # MacMem: 42 input bits, 48 output bits; tree 24 + 6 + 2 + 1 nodes; a chain of 48
    # stages, 47 of them an XOR.
    cost = SynthHarness(MacMem()).cost
    assert cost == HarnessCost(input_bits=42, output_bits=48,
                               ff=1 + 48 + 48 + 33 + 2, lut4=33 + 47)


def test_harness_errors():
    with pytest.raises(TypeError, match=r"^Core must be a wiring\.Component, not 1$"):
        SynthHarness(1)
    with pytest.raises(ValueError, match=r"^Core has no output port bits"):
        SynthHarness(InputsOnly())
    with pytest.raises(TypeError,
                       match=r"^Serial input resource must be a \(name, number\) or \(name, "
                             r"number, subsignal\) tuple, not 'switch'$"):
        SynthHarness(Echo(), serial_in="switch")
    with pytest.raises(TypeError,
                       match=r"^Serial output resource must be a \(name, number\) or \(name, "
                             r"number, subsignal\) tuple, not \('led', '0'\)$"):
        SynthHarness(Echo(), serial_out=("led", "0"))
    with pytest.raises(TypeError, match=r"^Serial output resource must be .* not \('uart', 0, 1\)$"):
        SynthHarness(Echo(), serial_out=("uart", 0, 1))


def _parity(value):
    return bin(value).count("1") & 1


def test_harness_behaviour():
    """Every core input follows the serial shift register, and serial_out is the masked
    parity tree of the registered outputs, cycle by cycle, against a register-level model."""
    core = Echo()
    harness = SynthHarness(core)
    n_in, n_out, length = harness.input_bits, harness.output_bits, harness.chain_length
    rng = random.Random(7)
    bits = [rng.getrandbits(1) for _ in range(200)]

    def outputs(chain):
        a, b = chain & 0xff, (chain >> 8) & 0xf
        return (a ^ 0x5a) | (b >> 1) << 8

    def fold(value, width, fanin):
        return [_parity((value >> i) & ((1 << fanin) - 1)) for i in range(0, width, fanin)]

    def pack(nodes):
        return sum(bit << i for i, bit in enumerate(nodes))

    async def testbench(ctx):
        serial_q = chain = captured = 0
        levels = [[0] * 6, [0] * 2, [0]]  # 11 outputs: ceil(11/2) = 6, then 2, then 1
        for bit in bits:
            ctx.set(harness.serial_in, bit)
            await ctx.tick()
            levels = [fold(captured & chain, n_out, 2),
                      fold(pack(levels[0]), 6, 4),
                      fold(pack(levels[1]), 2, 4)]
            captured = outputs(chain)
            # Stage 0 loads the pin's register; stage k > 0 loads stage k - 1 XOR itself.
            chain = (((chain << 1) ^ chain) & ~1 | serial_q) & ((1 << length) - 1)
            serial_q = bit
            assert ctx.get(core.a) == chain & 0xff
            assert ctx.get(core.b) == (chain >> 8) & 0xf
            assert ctx.get(harness.serial_out) == levels[2][0]

    assert n_in == 12
    sim = Simulator(harness)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()


def _cell(kind, **ports):
    directions = {"Q": "output", "Z": "output", "O": "output"}
    return {"type": kind,
            "port_directions": {port: directions.get(port, "input") for port in ports},
            "connections": {port: bits for port, bits in ports.items()}}


def test_count_harness_cells():
    """Harness flip-flops are found by the names of the nets they drive, harness LUT4s by
    what they feed; the core's output logic feeding the capture register stays the core's."""
    netlist = {"modules": {"top": {
        "netnames": {
            "harness_chain": {"bits": [10, 11]},
            "core.a": {"bits": [10, 11]},          # a core input: the same bits as the chain
            "harness_captured": {"bits": [12, "0"]},
            "harness_fold0_0": {"bits": [13]},
            "core.acc": {"bits": [20]},
            "cd_sync.U$2_Q": {"bits": [30]},
            "led": {"bits": [40]},
        },
        "cells": {
            "chain0": _cell("TRELLIS_FF", CLK=[1], DI=[2], Q=[10]),
            "chain1_logic": _cell("LUT4", A=[10], B=[11], C=["0"], D=["0"], Z=[14]),
            "chain1": _cell("TRELLIS_FF", CLK=[1], DI=[14], Q=[11]),
            "acc": _cell("TRELLIS_FF", CLK=[1], DI=[21], Q=[20]),
            "acc_logic": _cell("LUT4", A=[10], B=[20], C=["0"], D=["0"], Z=[21]),
            "out_logic": _cell("LUT4", A=[20], B=[11], C=["0"], D=["0"], Z=[22]),
            "capture": _cell("TRELLIS_FF", CLK=[1], DI=[22], Q=[12]),
            "fold_logic": _cell("LUT4", A=[12], B=[10], C=["0"], D=["0"], Z=[23]),
            "fold": _cell("TRELLIS_FF", CLK=[1], DI=[23], Q=[13]),
            "last": _cell("TRELLIS_FF", CLK=[1], DI=[13], Q=[24]),   # name lost to the pin
            "inverter": _cell("LUT4", A=[24], B=["0"], C=["0"], D=["0"], Z=[40]),
            "led_io": _cell("TRELLIS_IO", I=[40], B=[41]),
            "rst_inv": _cell("LUT4", A=[3], B=["0"], C=["0"], D=["0"], Z=[31]),
            "rst_sync": _cell("TRELLIS_FF", CLK=[1], DI=[31], Q=[30]),
        },
    }}}
    cost = harness_mod._count_harness_cells(netlist, "top", input_bits=2, output_bits=2)
    # FF: chain0, chain1, capture, fold, last, rst_sync; LUT4: chain1_logic, fold_logic,
    # inverter, rst_inv.
    assert cost == HarnessCost(input_bits=2, output_bits=2, ff=6, lut4=4)
