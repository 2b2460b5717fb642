# amaranth: UnusedElaboratable=no
"""The nextpnr report parser: the sample report, a report loaded from JSON, the choice of
clock, parse errors and the worst endpoints from the detailed timing.
"""

import json

import pytest

from nicoll.hw.synth import Endpoint, NextpnrReport, parse_nextpnr_report

from synth_helpers import SAMPLE


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
