# amaranth: UnusedElaboratable=no
"""CSRSlave as built: its ports, the register signature, constructor errors, and a map
other than the generated one.
"""

import random

import pytest

from nicoll.hw.regmap.generated import REGMAP
from nicoll.hw.bus.csr import CSRSlave
from nicoll.hw.regmap import Block, Field, Register, RegisterMap

from nicoll.sim.testbench import run_testbenches
from nicoll.sim.axi_model import axil_read, axil_write

from hw_csr_helpers import Model, hw_driven_ports


def test_ports():
    dut = CSRSlave()
    members = dut.signature.members
    for (block, register, field), width in hw_driven_ports().items():
        # Each block's registers are one member, the block's view flipped: on the slave a
        # field the block drives is an input.
        assert members[block].flow.name == "In"
        inner = members[block].signature.members[register.lower()].signature.members
        assert inner[field.lower()].flow.name == "In"
        assert len(dut.port(block, register, field)) == width
    # The ports NicCore relies on.
    for key, width in [(("global", "CYCLES", "count"), 64), (("global", "NODE_ID", "id"), 16),
                       (("global", "DATA_WIDTH", "bits"), 16),
                       (("global", "MAX_NODES", "count"), 16),
                       (("global", "MEM_SIZE", "bytes"), 32)]:
        assert len(dut.port(*key)) == width
    assert dut.bus.awaddr.shape().width == 16


def test_port():
    dut = CSRSlave()
    assert dut.port("global", "CYCLES", "count") is getattr(dut, "global").cycles.count
    assert dut.port("engine", "CONTROL", "push") is dut.engine.control.push
    with pytest.raises(TypeError, match=r"^Register name must be a string, not 3$"):
        dut.port("global", 3, "count")
    with pytest.raises(ValueError, match=r"^The register map has no port for field "
                                         r"global\.SCRATCH\.value$"):
        dut.port("global", "SCRATCH", "value")


def test_register_signature():
    from nicoll.hw.bus.csr import register_signature
    engine = REGMAP.block("engine")
    members = register_signature(engine).members
    # Read by the block: CONTROL's strobes; driven by it: STATUS.
    assert members["control"].signature.members["push"].flow.name == "In"
    assert members["status"].signature.members["busy"].flow.name == "Out"
    # Registers with no port (ID, VERSION: constants) have no member.
    assert "id" not in members and "version" not in members


def test_constructor_errors():
    with pytest.raises(TypeError, match=r"^Register map must be a RegisterMap, not 'REGMAP'$"):
        CSRSlave("REGMAP")
    with pytest.raises(TypeError, match=r"^Address width must be an integer, not '16'$"):
        CSRSlave(addr_width="16")
    with pytest.raises(ValueError, match=(
            rf"^Address width must be between {REGMAP.addr_width} \(to reach every register\) "
            rf"and 32, not 8$")):
        CSRSlave(addr_width=8)
    with pytest.raises(ValueError, match=r"and 32, not 33$"):
        CSRSlave(addr_width=33)
    bad = RegisterMap(name="bad", desc="", size=8, blocks=(
        Block(name="b", offset=0, desc="", registers=(
            Register(name="R", address=0, offset=0, width=32, desc="", fields=(
                Field(name="f", lsb=0, width=8, sw="rw", hw="w", reset=0),
            )),
        )),
    ))
    with pytest.raises(ValueError, match=r"^Field b\.R\.f has unsupported access "
                                         r"sw='rw' hw='w'$"):
        CSRSlave(bad)


def test_other_map():
    """A map with a hardware-readable storage field, a gap and a write-only field."""
    other = RegisterMap(name="other", desc="", size=0x10, blocks=(
        Block(name="blk", offset=0, desc="", registers=(
            Register(name="CTRL", address=0x4, offset=0x4, width=32, desc="", fields=(
                Field(name="go", lsb=0, width=1, sw="rw", hw="r", reset=1),
                Field(name="mode", lsb=4, width=6, sw="rw", hw="r", reset=0x15),
                Field(name="key", lsb=16, width=8, sw="w", hw="na", reset=0),
                Field(name="ver", lsb=28, width=4, sw="r", hw="na", reset=0xa),
            )),
        )),
    ))
    dut = CSRSlave(other, addr_width=4)
    model = Model(other, {})
    rng = random.Random(7)

    async def tb(ctx):
        assert ctx.get(dut.blk.ctrl.go) == 1 and ctx.get(dut.blk.ctrl.mode) == 0x15
        assert await axil_read(ctx, dut.bus, 0x4) == model.read(0x4)
        for _ in range(40):
            addr, data, strb = rng.choice([0x0, 0x4, 0x8, 0xc]), rng.getrandbits(32), rng.getrandbits(4)
            assert await axil_write(ctx, dut.bus, addr, data, strb) == model.write(addr, data, strb)
            assert await axil_read(ctx, dut.bus, 0x4) == model.read(0x4)
            storage = model.storage[0x4]
            assert ctx.get(dut.blk.ctrl.go) == storage & 1
            assert ctx.get(dut.blk.ctrl.mode) == (storage >> 4) & 0x3f

    run_testbenches(dut, tb)
