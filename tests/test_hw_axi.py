"""AXI4 / AXI4-Lite / AXI4-Stream signatures: members, directions, argument checks."""

import pytest
from amaranth.lib import wiring

from nicoll.hw.bus.axi import AXI4LiteSignature, AXI4Signature, AXI4StreamSignature


def flows(sig):
    return {name: (member.flow.name, member.shape)
            for name, member in sig.members.items()}


def test_axi4lite_members():
    sig = AXI4LiteSignature(12)
    assert flows(sig) == {
        "awaddr": ("Out", 12), "awprot": ("Out", 3), "awvalid": ("Out", 1), "awready": ("In", 1),
        "wdata": ("Out", 32), "wstrb": ("Out", 4), "wvalid": ("Out", 1), "wready": ("In", 1),
        "bresp": ("In", 2), "bvalid": ("In", 1), "bready": ("Out", 1),
        "araddr": ("Out", 12), "arprot": ("Out", 3), "arvalid": ("Out", 1), "arready": ("In", 1),
        "rdata": ("In", 32), "rresp": ("In", 2), "rvalid": ("In", 1), "rready": ("Out", 1),
    }
    assert AXI4LiteSignature(12, 64).members["wstrb"].shape == 8
    assert sig == AXI4LiteSignature(12) and sig != AXI4LiteSignature(13)
    assert repr(sig) == "AXI4LiteSignature(12, data_width=32)"


def test_axi4_members():
    sig = AXI4Signature(32, 256, 4)
    f = flows(sig)
    # Every signal cocotbext-axi's AxiBus requires.
    required = {
        "awid", "awaddr", "awlen", "awsize", "awburst", "awvalid", "awready",
        "wdata", "wlast", "wvalid", "wready", "bid", "bvalid", "bready",
        "arid", "araddr", "arlen", "arsize", "arburst", "arvalid", "arready",
        "rid", "rdata", "rlast", "rvalid", "rready",
    }
    assert required <= set(f)
    assert set(f) - required == {"awlock", "awcache", "awprot", "awqos", "wstrb", "bresp",
                                 "arlock", "arcache", "arprot", "arqos", "rresp"}
    assert f["awlen"] == ("Out", 8) and f["arsize"] == ("Out", 3) and f["awburst"] == ("Out", 2)
    assert f["wdata"] == ("Out", 256) and f["wstrb"] == ("Out", 32)
    assert f["rid"] == ("In", 4) and f["bid"] == ("In", 4) and f["awid"] == ("Out", 4)
    assert f["rdata"] == ("In", 256) and f["rlast"] == ("In", 1)
    assert sig == AXI4Signature(32, 256, 4) and sig != AXI4Signature(32, 256, 8)
    assert repr(sig) == "AXI4Signature(addr_width=32, data_width=256, id_width=4)"


def test_axi4stream_members():
    sig = AXI4StreamSignature(64, 16)
    assert flows(sig) == {"tdata": ("Out", 64), "tkeep": ("Out", 8), "tlast": ("Out", 1),
                          "tdest": ("Out", 16), "tvalid": ("Out", 1), "tready": ("In", 1)}
    assert sig == AXI4StreamSignature(64, 16) and sig != AXI4StreamSignature(64, 8)
    with_user = AXI4StreamSignature(64, 16, user_width=1)
    assert flows(with_user)["tuser"] == ("Out", 1) and with_user.user_width == 1
    with pytest.raises(ValueError, match=r"User width must be at least 0, not -1"):
        AXI4StreamSignature(64, 16, user_width=-1)


def test_slave_port_direction():
    """A slave declares In(signature): seen from it, AWVALID is an input, AWREADY an output."""
    sig = wiring.Signature({"bus": wiring.In(AXI4LiteSignature(8))})
    members = {".".join(path): m.flow.name for path, m in sig.members.flatten()}
    assert members["bus.awvalid"] == "In" and members["bus.awready"] == "Out"
    assert members["bus.rdata"] == "Out" and members["bus.rready"] == "In"


def test_errors():
    with pytest.raises(TypeError, match=r"^Address width must be an integer, not '16'$"):
        AXI4LiteSignature("16")
    with pytest.raises(ValueError, match=r"^Address width must be at least 1, not 0$"):
        AXI4LiteSignature(0)
    with pytest.raises(ValueError, match=r"^Address width must be at most 64, not 65$"):
        AXI4Signature(65, 64, 4)
    with pytest.raises(ValueError, match=r"^Data width must be one of 32, 64, not 128$"):
        AXI4LiteSignature(16, 128)
    with pytest.raises(ValueError, match=r"^Data width must be one of 8, 16, 32, 64, 128, "
                                         r"256, 512, 1024, not 24$"):
        AXI4Signature(32, 24, 4)
    with pytest.raises(TypeError, match=r"^ID width must be an integer, not True$"):
        AXI4Signature(32, 64, True)
    with pytest.raises(ValueError, match=r"^ID width must be at least 1, not 0$"):
        AXI4Signature(32, 64, 0)
    with pytest.raises(ValueError, match=r"^Data width must be a positive multiple of 8, "
                                         r"not 20$"):
        AXI4StreamSignature(20, 16)
    with pytest.raises(ValueError, match=r"^Destination width must be at least 1, not 0$"):
        AXI4StreamSignature(64, 0)
