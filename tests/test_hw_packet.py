"""Packet stream layout and signature."""

import pytest
from amaranth.lib import data, stream

from nicoll.hw import packet as packet_mod
from nicoll.hw.packet import packet_beat_layout, packet_stream


def test_all():
    assert packet_mod.__all__ == ["DEST_WIDTH", "packet_beat_layout", "packet_stream"]


@pytest.mark.parametrize("data_width", [64, 128, 256, 512])
def test_layout(data_width):
    layout = packet_beat_layout(data_width)
    assert layout == data.StructLayout({"data": data_width, "keep": data_width // 8,
                                        "last": 1, "dest": 16})
    sig = packet_stream(data_width)
    assert isinstance(sig, stream.Signature)
    assert sig == stream.Signature(layout)
    assert set(sig.members) == {"payload", "valid", "ready"}


def test_host_packs_with_the_same_layout():
    """A beat built on the host with the layout's const() has the fields where gateware expects."""
    layout = packet_beat_layout(64)
    bits = layout.const({"data": 0x1122334455667788, "keep": 0xff, "last": 1,
                         "dest": 7}).as_value().value
    assert bits & ((1 << 64) - 1) == 0x1122334455667788
    assert (bits >> 64) & 0xff == 0xff
    assert (bits >> 72) & 1 == 1
    assert (bits >> 73) & 0xffff == 7


def test_errors():
    with pytest.raises(TypeError, match=r"^Data width must be an integer, not 64\.0$"):
        packet_beat_layout(64.0)
    with pytest.raises(ValueError, match=r"^Data width must be a positive multiple of 8, "
                                         r"not 0$"):
        packet_stream(0)
