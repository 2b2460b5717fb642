# amaranth: UnusedElaboratable=no
"""Repack units, control and array (seed 003) as built: constructor errors, the layouts,
the ports of each block and of the Verilog top.
"""

import pytest

from nicoll.hw.repack import (HEADER_LAYOUT, RepackControl, RepackArray, RepackUnit,
                              buffer_bytes_needed, length_table_layout, message_beat_layout,
                              unit_config_layout)
from nicoll.hw.sim.repack_top import (CONTROL_PORTS, TOPLEVEL, RepackArrayTop, control_tdata_width,
                                      repack_verilog)


def test_unit_constructor_errors():
    with pytest.raises(TypeError, match=r"^data_width must be an integer, not '64'$"):
        RepackUnit("64", 1024, 4)
    with pytest.raises(ValueError, match=r"^data_width must be one of 64, 128, 256, 512, "
                                         r"not 32$"):
        RepackUnit(32, 1024, 4)
    with pytest.raises(TypeError, match=r"^Buffer capacity must be an integer, not 1024.0$"):
        RepackUnit(64, 1024.0, 4)
    with pytest.raises(ValueError, match=r"^Buffer capacity must be a positive multiple of 8 "
                                         r"bytes up to 2\*\*30, not 1020$"):
        RepackUnit(64, 1020, 4)
    with pytest.raises(ValueError, match=r"^Buffer capacity must be a positive multiple of 16 "
                                         r"bytes up to 2\*\*30, not 0$"):
        RepackUnit(128, 0, 4)
    with pytest.raises(TypeError, match=r"^Largest group must be an integer, not True$"):
        RepackUnit(64, 1024, True)
    with pytest.raises(ValueError, match=r"^Largest group must be between 1 and 256, not 0$"):
        RepackUnit(64, 1024, 0)


def test_control_constructor_errors():
    with pytest.raises(TypeError, match=r"^Largest number of ranks must be an integer, "
                                        r"not None$"):
        RepackControl(None, 2, 4, 64, 1024)
    with pytest.raises(ValueError, match=r"^Largest number of ranks must be between 2 and 256, "
                                         r"not 257$"):
        RepackControl(257, 2, 4, 64, 1024)
    with pytest.raises(TypeError, match=r"^Number of units must be an integer, not 2.5$"):
        RepackControl(8, 2.5, 4, 64, 1024)
    with pytest.raises(ValueError, match=r"^Number of units must be between 1 and 64, not 0$"):
        RepackControl(8, 0, 4, 64, 1024)
    with pytest.raises(ValueError, match=r"^Largest group must be between 1 and 256, not 300$"):
        RepackArray(8, 2, 300, 64, 1024)


def test_layouts():
    assert HEADER_LAYOUT.size == 48
    assert list(HEADER_LAYOUT) == [("rank", HEADER_LAYOUT["rank"]),
                                   ("tag", HEADER_LAYOUT["tag"]),
                                   ("count", HEADER_LAYOUT["count"])]
    assert length_table_layout(64).length == 4 and length_table_layout(512).length == 32
    assert message_beat_layout(128).size == 128 + 16 + 1 + 16
    assert unit_config_layout(4).size == 16 + 16 + 16 + 2 * 4 * 16 + 32 + 32
    assert buffer_bytes_needed(100, 3, 64) == 100 + 3 * 7


def test_ports():
    unit = RepackUnit(64, 1024, 4)
    assert list(unit.signature.members) == ["cfg", "i", "o", "event", "busy", "active",
                                            "errors", "last_error", "busy_cycles"]
    assert unit.signature.members["i"].flow.name == "In"
    assert unit.signature.members["o"].flow.name == "Out"
    assert len(unit.o.payload.data) == 64 and len(unit.o.payload.keep) == 8
    ctl = RepackControl(8, 2, 4, 64, 1024)
    assert list(ctl.signature.members) == [
        "order", "start", "reg", "notice", "unit_cfg_0", "unit_event_0", "unit_cfg_1",
        "unit_event_1", "unit_active", "busy", "status", "errors", "last_error", "cycles",
        "ops"]
    assert ctl.signature.members["unit_active"].shape == 2
    eng = RepackArray(8, 2, 4, 128, 1024)
    assert list(eng.signature.members) == [
        "order", "start", "reg", "notice", "i_0", "i_1", "o_0", "o_1", "busy", "status",
        "errors", "last_error", "cycles", "ops"]
    assert eng.units == 2 and eng.data_width == 128 and eng.unit(1).capacity_bytes == 1024
    for component in (unit, ctl, eng, eng.control, *(eng.unit(k) for k in range(eng.units))):
        component._MustUse__silence = True      # only their signatures are checked


def test_top_ports():
    """The Verilog top of the cocotb bench: AXI4-Stream names cocotbext-axi finds by prefix,
    control payloads zero-extended to whole bytes, the rank in tid / tdest."""
    top = RepackArrayTop(8, 2, 4, 128, 1024)
    members = top.signature.members
    for prefix, layout, flow in CONTROL_PORTS:
        width = control_tdata_width(layout)
        assert width % 8 == 0 and layout.size <= width < layout.size + 8
        assert members[f"{prefix}_tdata"].shape == width
        assert members[f"{prefix}_tvalid"].flow == flow
        assert members[f"{prefix}_tready"].flow != flow
    for k in range(2):
        assert members[f"s_axis_i{k}_tdata"].shape == 128
        assert members[f"s_axis_i{k}_tkeep"].shape == 16
        assert members[f"s_axis_i{k}_tid"].shape == 16
        assert members[f"m_axis_o{k}_tdest"].shape == 16
        assert members[f"m_axis_o{k}_tready"].flow.name == "In"
        assert members[f"unit{k}_busy_cycles"].shape == 32
    assert "s_axis_i2_tdata" not in members
    text = repack_verilog(2, 1, 1, 64, 64)
    assert f"module {TOPLEVEL}(" in text
    assert "input [15:0] s_axis_i0_tid;" in text and "output [15:0] m_axis_o0_tdest;" in text
