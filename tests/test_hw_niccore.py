# amaranth: UnusedElaboratable=no
"""NicCore and ClusterTop: registers, cycle counter and device memory through the top ports."""

import random

import pytest

from nicoll.hw.regmap.generated import REGMAP
from nicoll.hw.sim import verilog as simverilog
from nicoll.hw.alu import all_capabilities
from nicoll.hw.sim.cluster import ClusterTop
from nicoll.hw.core import NicCore
from nicoll.hw.ops import DType, ReduceOp
from nicoll.hw.regmap import BusResponse
from nicoll.sim.testbench import run_testbenches
from nicoll.sim.axi_model import axi_read, axi_write, axil_read

OKAY = BusResponse.OKAY
GLOBAL = REGMAP.block("global")

#: One ALU pair, for the tests that check the core's registers, memory and Verilog names rather
#: than its ALU (elaborating and simulating every pair takes several times as long).
SMALL_ALU = {(ReduceOp.SUM, DType.INT32)}


def reg(name):
    return GLOBAL.register(name).address






async def read64(ctx, bus, address):
    low, r0 = await axil_read(ctx, bus, address)
    high, r1 = await axil_read(ctx, bus, address + 4)
    assert r0 == r1 == OKAY
    return high << 32 | low


async def check_node(ctx, bus, *, node_id, data_width, max_nodes, mem_size):
    """The identification registers and the cycle counter of one node."""
    for block in REGMAP.blocks:
        assert await axil_read(ctx, bus, block.register("ID").address) == (block.id_tag, OKAY)
    assert await axil_read(ctx, bus, reg("DATA_WIDTH")) == (data_width, OKAY)
    assert await axil_read(ctx, bus, reg("MAX_NODES")) == (max_nodes, OKAY)
    assert await axil_read(ctx, bus, reg("NODE_ID")) == (node_id, OKAY)
    assert await axil_read(ctx, bus, reg("MEM_SIZE")) == (mem_size, OKAY)
    # The counter is sampled when the read's word is gathered.  One read by this bench's
    # master takes six cycles (AR into the slice, decode, gather, the output queue's write
    # and output register, the R handshake), so consecutive low-word reads sample it six
    # cycles apart; twelve apart across a 64-bit read (two reads).
    c0, _ = await axil_read(ctx, bus, reg("CYCLES"))
    c1, _ = await axil_read(ctx, bus, reg("CYCLES"))
    assert c1 - c0 == 6
    c2 = await read64(ctx, bus, reg("CYCLES"))
    c3 = await read64(ctx, bus, reg("CYCLES"))
    assert c2 - c1 == 6 and c3 - c2 == 12


# ---------------------------------------------------------------------------------------------

def test_the_gateware_package_gives_its_blocks():
    import nicoll.hw
    assert {"CSRSlave", "DeviceMemory", "Switch", "NicCore", "ClusterTop", "cluster_verilog",
            "niccore_verilog", "AXI4LiteSignature", "AXI4Signature", "packet_stream",
            "packet_beat_layout"} <= set(nicoll.hw.__all__)


def test_niccore_constructor_errors():
    with pytest.raises(TypeError, match=r"^data_width must be an integer, not '256'$"):
        NicCore(data_width="256")
    with pytest.raises(ValueError, match=r"^data_width must be one of 64, 128, 256, 512, "
                                         r"not 32$"):
        NicCore(data_width=32)
    with pytest.raises(TypeError, match=r"^max_nodes must be an integer, not 8\.0$"):
        NicCore(max_nodes=8.0)
    for bad in (0, 4097):
        with pytest.raises(ValueError, match=rf"^max_nodes must be between 1 and 4096, "
                                             rf"not {bad}$"):
            NicCore(max_nodes=bad)
    with pytest.raises(TypeError, match=r"^mem_size must be an integer, not None$"):
        NicCore(mem_size=None)
    with pytest.raises(TypeError, match=r"^barrier_children must be an integer, not '2'$"):
        NicCore(barrier_children="2")
    for bad in (0, 9):
        with pytest.raises(ValueError, match=rf"^barrier_children must be between 1 and 8, "
                                             rf"not {bad}$"):
            NicCore(barrier_children=bad)
    for bad in (0, 1000, 16, 1 << 32):
        with pytest.raises(ValueError, match=rf"^mem_size must be a power of two, a multiple "
                                             rf"of 32 bytes \(data_width / 8\) and at most "
                                             rf"2147483648, not {bad}$"):
            NicCore(mem_size=bad)
    with pytest.raises(TypeError, match=r"NicCore.__init__\(\) takes 1 positional argument"):
        NicCore(256)


def test_cluster_constructor_errors():
    with pytest.raises(TypeError, match=r"^nodes must be an integer, not '3'$"):
        ClusterTop(nodes="3")
    for bad in (0, 9):
        with pytest.raises(ValueError, match=rf"^nodes must be between 1 and max_nodes \(8\), "
                                             rf"not {bad}$"):
            ClusterTop(nodes=bad, max_nodes=8)
    with pytest.raises(ValueError, match=r"^data_width must be one of"):
        ClusterTop(nodes=2, data_width=48)
    with pytest.raises(TypeError, match=r"missing 1 required keyword-only argument: 'nodes'"):
        ClusterTop()


def test_niccore_ports():
    dut = NicCore(data_width=128, max_nodes=16, mem_size=8192)
    members = dut.signature.members
    assert list(members) == ["s_axil", "s_axi", "net_tx", "net_rx", "node_id"]
    assert len(dut.s_axil.awaddr) == 16 and len(dut.s_axil.wdata) == 32
    assert len(dut.s_axi.awaddr) == 32 and len(dut.s_axi.wdata) == 128
    assert len(dut.s_axi.awid) == 8
    assert len(dut.net_tx.payload.data) == 128 and len(dut.node_id) == 16
    assert members["net_tx"].flow.name == "Out" and members["net_rx"].flow.name == "In"
    assert (dut.data_width, dut.max_nodes, dut.mem_size) == (128, 16, 8192)


def test_niccore_default():
    """The default build: registers, cycle counter, memory, and an idle network port that
    takes what arrives (the barrier unit never refuses a notice).  Simulated with one ALU pair:
    the default ALU (every pair, checked here without simulating it) is three quarters of the
    simulation's cost (16 s against 4 s) and none of this test reads it; the ALU computes
    every pair in tests/test_hw_alu.py and the ALU benches (tests/test_alu_cocotb.py)."""
    assert NicCore().alu_capabilities == all_capabilities()
    dut = NicCore(alu_capabilities=SMALL_ALU)
    rng = random.Random(1)

    async def tb(ctx):
        ctx.set(dut.node_id, 5)
        # Reset value, then free-running.
        assert ctx.get(dut.net_tx.valid) == 0 and ctx.get(dut.net_rx.ready) == 1
        await check_node(ctx, dut.s_axil, node_id=5, data_width=256, max_nodes=64,
                         mem_size=65536)
        ctx.set(dut.node_id, 0xbeef)
        assert await axil_read(ctx, dut.s_axil, reg("NODE_ID")) == (0xbeef, OKAY)
        for addr, length in ((0, 100), (65536 - 77, 77), (4000, 300)):
            data = bytes(rng.getrandbits(8) for _ in range(length))
            assert await axi_write(ctx, dut.s_axi, addr, data) == OKAY
            assert await axi_read(ctx, dut.s_axi, addr, length) == (data, OKAY)
        assert ctx.get(dut.net_tx.valid) == 0 and ctx.get(dut.net_rx.ready) == 1

    run_testbenches(dut, tb, watchdog_cycles=50000)


def test_cycles_start_at_zero():
    # One ALU pair (SMALL_ALU): the counter does not depend on the ALU, whose every pair made
    # this test 5 s instead of 2.
    dut = NicCore(data_width=64, mem_size=1024, alu_capabilities=SMALL_ALU)

    async def tb(ctx):
        # The AR enters the slice at the first clock edge, is decoded at the second and its
        # word gathered at the third, when the counter has counted two cycles from its reset
        # value of zero.
        assert await axil_read(ctx, dut.s_axil, reg("CYCLES")) == (2, OKAY)
        assert await axil_read(ctx, dut.s_axil, reg("CYCLES") + 4) == (0, OKAY)

    run_testbenches(dut, tb, watchdog_cycles=50000)


def test_cluster_three_nodes():
    nodes, data_width, max_nodes, mem_size = 3, 64, 8, 4096
    dut = ClusterTop(nodes=nodes, data_width=data_width, max_nodes=max_nodes, mem_size=mem_size,
                     alu_capabilities=SMALL_ALU)
    assert dut.nodes == nodes and len(dut.cores) == nodes
    rng = random.Random(3)
    images = [bytes(rng.getrandbits(8) for _ in range(512)) for _ in range(nodes)]
    done = []

    def node_tb(i):
        async def tb(ctx):
            bus = dut.s_axil(i)
            await check_node(ctx, bus, node_id=i, data_width=data_width, max_nodes=max_nodes,
                             mem_size=mem_size)
            assert await axi_write(ctx, dut.s_axi(i), 64 * i + 3, images[i]) == OKAY
            done.append(i)
        return tb

    async def check(ctx):
        # The nodes run at the same time; wait until every node has written its image.
        while len(done) < nodes:
            await ctx.tick()
        for i in range(nodes):
            # Each node's memory holds its own image only.
            assert await axi_read(ctx, dut.s_axi(i), 64 * i + 3, 512) == (images[i], OKAY)
            assert await axi_read(ctx, dut.s_axi(i), 0, 64 * i + 3) == (bytes(64 * i + 3), OKAY)
        assert ctx.get(dut.switch_dropped) == 0

    run_testbenches(dut, *(node_tb(i) for i in range(nodes)), check, watchdog_cycles=50000)


@pytest.mark.verilator
@pytest.mark.xdist_group("verilator")
def test_cluster_verilog():
    # The optimized Verilog (cluster_verilog) of the Verilator cluster the suite's cluster
    # tests run, as its build folder keeps it: the same build, not a second conversion (20 s
    # of a core for a two-node cluster).  Both paths of the conversion are checked on a small
    # design in test_simulation_verilog_optimizes_away_only_dead_logic.
    from conftest import NODES, cluster_kwargs
    from nicoll.config import ClusterConfig, build_defaults
    from nicoll.sim.verilator_backend import build_cluster
    nodes, kwargs = NODES["verilator"], cluster_kwargs("verilator")
    max_nodes, capabilities = build_defaults("verilator", nodes, kwargs["max_nodes"],
                                             kwargs["alu_capabilities"])
    config = ClusterConfig(nodes=nodes, data_width=kwargs["data_width"], max_nodes=max_nodes,
                           mem_size=kwargs["mem_size"], alu_capabilities=capabilities)
    text = (build_cluster(config) / "nicoll_cluster.v").read_text()
    assert "module nicoll_cluster(" in text
    last = nodes - 1
    for name in ("n1_s_axil__awaddr", "n0_s_axil__rdata", "n1_s_axi__wdata", "n1_s_axi__awid",
                 "n0_s_axi__rlast", "switch_dropped", "n0_activity", f"n{last}_activity",
                 "cycles"):
        assert f" {name};" in text, name
    assert f"n{nodes}_s_axil" not in text
    # Node 0 has the repack units; the others are built from the core without them.
    assert "module nicoll_niccore(" in text and "module nicoll_niccore_plain(" in text
    assert "nicoll_niccore_plain.core.hub" not in text and "nicoll_niccore.core.hub" in text
    assert text.count("  nicoll_niccore_plain node") == nodes - 1
    # The backdoor reaches each node's memory array by this name.
    rows = kwargs["mem_size"] // (kwargs["data_width"] // 8)
    assert f"reg [{kwargs['data_width'] - 1}:0] mem [{rows - 1}:0];" in text
    # The core's module is niccore_verilog()'s conversion (the CSR bench's top): its ports.
    core = text[text.index("module nicoll_niccore("):]
    core = core[:core.index("endmodule")]
    for name in ("s_axil__awaddr", "s_axi__arlen", "net_tx__tdata", "net_tx__tkeep",
                 "net_tx__tlast", "net_tx__tdest", "net_tx__tvalid", "net_rx__tready",
                 "node_id"):
        assert f" {name};" in core, name


def test_simulation_verilog_drops_only_all_zero_memory_init():
    from amaranth.back import rtlil, verilog
    from amaranth.hdl import Module
    from amaranth.lib import wiring
    from amaranth.lib.memory import Memory
    from amaranth.lib.wiring import In, Out

    original = rtlil.ModuleEmitter.emit_memory

    class Two(wiring.Component):
        addr: In(4)
        zero: Out(8)
        nonzero: Out(8)

        def elaborate(self, platform):
            m = Module()
            m.submodules.z = z = Memory(shape=8, depth=16, init=[])
            m.submodules.n = n = Memory(shape=8, depth=16, init=[0xA5] * 16)
            rz, rn = z.read_port(domain="comb"), n.read_port(domain="comb")
            m.d.comb += [rz.addr.eq(self.addr), rn.addr.eq(self.addr),
                         self.zero.eq(rz.data), self.nonzero.eq(rn.data)]
            return m

    with simverilog._without_zero_memory_init():
        text = verilog.convert(Two(), name="two")
    assert rtlil.ModuleEmitter.emit_memory is original
    assert "8'ha5" in text                    # the non-zero memory keeps its contents
    plain = verilog.convert(Two(), name="two")
    assert plain.count("8'h00") > text.count("8'h00")   # the zero one lost its 16 init words


def test_simulation_verilog_optimizes_away_only_dead_logic():
    from amaranth.hdl import Module, Signal
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out
    from nicoll.hw.sim.verilog import simulation_verilog

    class Counter(wiring.Component):
        en: In(1)
        count: Out(8)

        def elaborate(self, platform):
            m = Module()
            unread = Signal(8)              # a register nothing reads
            m.d.sync += unread.eq(unread + 3)
            with m.If(self.en):
                m.d.sync += self.count.eq(self.count + 1)
            return m

    plain = simulation_verilog(Counter(), "counter", optimize=False)
    optimized = simulation_verilog(Counter(), "counter")
    for text in (plain, optimized):
        assert "module counter(" in text
        for port in ("en", "count", "clk", "rst"):
            assert f" {port};" in text, port
    assert "unread" in plain and "unread" not in optimized

