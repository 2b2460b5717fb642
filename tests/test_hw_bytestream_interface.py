# amaranth: UnusedElaboratable=no
"""RegionWalker, RowPacker and RowUnpacker as built: their layouts, ports and constructor
errors, and the regions module's lanes-below thermometer.
"""

import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import data
from amaranth.sim import Simulator

from nicoll.hw.engine import regions as regions_mod
from nicoll.hw.engine.packer import RowPacker
from nicoll.hw.engine.regions import (REGION_LAYOUT, beat_layout, chunk_layout, read_row_layout,
                                      write_row_layout)
from nicoll.hw.engine.unpacker import RowUnpacker
from nicoll.hw.engine.walker import RegionWalker


def test_layouts():
    assert REGION_LAYOUT == data.StructLayout({"offset": 32, "length": 32, "run": 32,
                                               "stride": 32})
    assert chunk_layout(64, 29) == data.StructLayout({"row": 29, "lo": 3, "n": 4, "last": 1})
    assert chunk_layout(512, 26) == data.StructLayout({"row": 26, "lo": 6, "n": 7, "last": 1})
    assert read_row_layout(128) == data.StructLayout({"data": 128, "lo": 4, "n": 5, "last": 1})
    assert beat_layout(256) == data.StructLayout({"data": 256, "keep": 32, "last": 1})
    assert write_row_layout(64, 10) == data.StructLayout({"row": 10, "data": 64, "mask": 8,
                                                          "last": 1})


def test_ports():
    walker = RegionWalker(64)
    assert list(walker.signature.members) == ["command", "chunks", "busy"]
    assert walker.signature.members["command"].flow.name == "In"
    assert walker.signature.members["chunks"].flow.name == "Out"
    assert walker.row_bits == 29 and len(walker.chunks.payload.row) == 29
    packer = RowPacker(256)
    assert list(packer.signature.members) == ["rows", "beats"]
    assert packer.signature.members["rows"].flow.name == "In"
    assert len(packer.beats.payload.keep) == 32
    unpacker = RowUnpacker(512, addr_width=20)
    assert list(unpacker.signature.members) == ["beats", "chunks", "rows", "overrun",
                                                "underrun", "clear"]
    assert [unpacker.signature.members[n].flow.name for n in unpacker.signature.members] == \
        ["In", "In", "Out", "Out", "Out", "In"]
    assert unpacker.row_bits == 14 and len(unpacker.rows.payload.mask) == 64


def test_constructor_errors():
    for make in (RegionWalker, RowPacker, RowUnpacker, read_row_layout, beat_layout):
        with pytest.raises(TypeError, match=r"^data_width must be an integer, not '64'$"):
            make("64")
        with pytest.raises(TypeError, match=r"^data_width must be an integer, not True$"):
            make(True)
        with pytest.raises(ValueError, match=r"^data_width must be one of 64, 128, 256, 512, "
                                             r"not 32$"):
            make(32)
    with pytest.raises(TypeError, match=r"^checked must be a bool, not 1$"):
        RegionWalker(64, checked=1)
    with pytest.raises(TypeError, match=r"^length_bits must be an integer, not 16.0$"):
        RegionWalker(64, length_bits=16.0)
    for bad in (0, 33):
        with pytest.raises(ValueError, match=rf"^length_bits must be from 1 to 32, not {bad}$"):
            RegionWalker(64, length_bits=bad)
    for make in (RegionWalker, RowUnpacker):
        with pytest.raises(TypeError, match=r"^Address width must be an integer, not 32.0$"):
            make(64, 32.0)
        with pytest.raises(ValueError, match=r"^Address width must be between 7 and 64 for a "
                                             r"data width of 512, not 6$"):
            make(512, addr_width=6)
        with pytest.raises(ValueError, match=r"^Address width must be between 4 and 64 for a "
                                             r"data width of 64, not 65$"):
            make(64, addr_width=65)
    for make in (chunk_layout, write_row_layout):
        with pytest.raises(TypeError, match=r"^Row address width must be an integer, "
                                             r"not None$"):
            make(64, None)
        with pytest.raises(ValueError, match=r"^Row address width must be between 1 and 64, "
                                             r"not 0$"):
            make(64, 0)
        with pytest.raises(ValueError, match=r"^data_width must be one of 64, 128, 256, 512, "
                                             r"not 100$"):
            make(100, 8)


@pytest.mark.parametrize(("count_bits", "lanes"), [(1, 8), (3, 8), (4, 8), (5, 32),
                                                   (6, 32), (7, 32), (3, 5)])
def test_lanes_below_is_a_thermometer(count_bits, lanes):
    """The lane masks of the packer and unpacker (`_lanes_below`, decoded bit by bit from the
    count rather than by a compare per lane): bit j set exactly when j < count, every count
    of the width, counts at and past the lane count included."""
    count = Signal(count_bits)
    mask = Signal(lanes)
    m = Module()
    m.d.comb += mask.eq(regions_mod._lanes_below(count, lanes))
    seen = []

    async def bench(ctx):
        for value in range(1 << count_bits):
            ctx.set(count, value)
            seen.append((ctx.get(mask), sum(1 << j for j in range(lanes) if j < value)))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert len(seen) == 1 << count_bits
    assert [got for got, _ in seen] == [want for _, want in seen]
