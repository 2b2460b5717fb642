"""The driver, unchanged, over every backend: model, amaranth and verilator.

Each test takes the ``cluster`` fixture, parametrized over the three backends; the same
Device / register-layer / transport calls run on each.  Register semantics are those stated
in nicoll.hw.regmap's docstring.
"""

import random

import pytest

import nicoll
from nicoll import NicollError
from nicoll.hw.regmap.generated import REGMAP
from nicoll.hw.ops import DType, ReduceOp
from nicoll.hw.regmap import BusResponse
from nicoll.driver.transport import Transport

from conftest import CLUSTER_KWARGS, NODES as NODES_OF, cluster_kwargs

MEM_SIZE = CLUSTER_KWARGS["mem_size"]

# The Verilator tests share one xdist group (and one build) with the collectives and barrier
# tests; the model cluster starts at once, so its tests spread freely.  The Amaranth cluster
# takes 7 to 10 s to open: its tests are one group of their own, so `--dist loadgroup` runs
# them one after the other on one worker and the module's fixture opens it once (spread over
# both workers and between other files' tests, it was opened twice).
BACKEND_PARAMS = [
    pytest.param("model"),
    pytest.param("amaranth", marks=pytest.mark.xdist_group("amaranth_driver")),
    pytest.param("verilator", marks=[pytest.mark.verilator, pytest.mark.xdist_group("verilator")]),
]


@pytest.fixture(scope="module", params=BACKEND_PARAMS)
def cluster(request):
    with nicoll.Cluster(nodes=NODES_OF[request.param], backend=request.param,
                        **cluster_kwargs(request.param)) as cl:
        yield cl


def _unmapped_addresses():
    mapped = {r.address + 4 * k for r in REGMAP.registers() for k in range(r.words)}
    candidates = [0x0FC, 0x108, 0x2F0, REGMAP.size, REGMAP.size + 0x100, 0xFFFC]
    return [a for a in candidates if a not in mapped]


def test_each_node_reports_its_rank_and_build(cluster):
    assert cluster.nodes == NODES_OF[cluster.backend]
    for rank in range(cluster.nodes):
        dev = cluster.device(rank)
        assert dev.node_id == rank
        assert dev.regs.global_.NODE_ID.read() == rank
        assert dev.data_width == cluster.data_width == cluster_kwargs(cluster.backend)["data_width"]
        assert dev.max_nodes == cluster_kwargs(cluster.backend)["max_nodes"]
        assert dev.mem_size == MEM_SIZE


def test_id_and_version_words_match_the_register_map(cluster):
    dev = cluster.device(0)
    for block in REGMAP.blocks:
        assert dev.regs[block.name].ID.read() == block.id_tag
        fields = dev.regs[block.name].VERSION.read_fields()
        assert (fields["major"], fields["minor"]) == block.version


def test_scratch_round_trip(cluster):
    rng = random.Random(1)
    for rank in range(cluster.nodes):
        scratch = cluster.device(rank).regs.global_.SCRATCH
        for _ in range(8):
            value = rng.getrandbits(32)
            scratch.write(value)
            assert scratch.read() == value


def test_scratch_is_per_node(cluster):
    for rank in range(cluster.nodes):
        cluster.device(rank).regs.global_.SCRATCH.write(0x5000 + rank)
    for rank in range(cluster.nodes):
        assert cluster.device(rank).regs.global_.SCRATCH.read() == 0x5000 + rank


def test_byte_strobes(cluster):
    dev = cluster.device(1)
    scratch = dev.regs.global_.SCRATCH
    scratch.write(0x11223344)
    assert dev.transport.write32(scratch.address, 0xAABBCCDD, strobe=0b0101) == BusResponse.OKAY
    assert scratch.read() == 0x11BB33DD
    assert dev.transport.write32(scratch.address, 0xEEFF0000, strobe=0b1000) == BusResponse.OKAY
    assert scratch.read() == 0xEEBB33DD
    assert dev.transport.write32(scratch.address, 0, strobe=0) == BusResponse.OKAY
    assert scratch.read() == 0xEEBB33DD


def test_field_write_is_read_modify_write(cluster):
    scratch = cluster.device(0).regs.global_.SCRATCH
    scratch.write(0xFFFF0000)
    scratch.value.write(0x1234)
    assert scratch.value.read() == 0x1234


def test_unmapped_address_answers_decerr_and_changes_nothing(cluster):
    dev = cluster.device(2)
    scratch = dev.regs.global_.SCRATCH
    scratch.write(0xCAFEF00D)
    for address in _unmapped_addresses():
        data, response = dev.transport.read32(address)
        assert (data, response) == (0, BusResponse.DECERR), hex(address)
        assert dev.transport.write32(address, 0xFFFFFFFF) == BusResponse.DECERR, hex(address)
    assert scratch.read() == 0xCAFEF00D
    for block in REGMAP.blocks:
        assert dev.regs[block.name].ID.read() == block.id_tag


def test_write_to_read_only_register_changes_nothing(cluster):
    dev = cluster.device(0)
    for name in ("ID", "VERSION", "DATA_WIDTH", "NODE_ID", "MEM_SIZE"):
        reg = dev.regs.global_[name]
        before = reg.read()
        assert dev.transport.write32(reg.address, before ^ 0xFFFFFFFF) == BusResponse.OKAY
        assert reg.read() == before, name
    with pytest.raises(NicollError, match="read-only"):
        dev.regs.global_.NODE_ID.write(5)


def test_bus_error_names_the_register(cluster):
    class Failing(Transport):
        def read32(self, address):
            return 0, BusResponse.SLVERR

        def write32(self, address, data, strobe=0xF):
            return BusResponse.SLVERR

        def mem_write(self, address, data):
            return BusResponse.SLVERR

        def mem_read(self, address, length):
            return b"", BusResponse.SLVERR

    from nicoll.driver.regs import Registers
    address = REGMAP.block("global").register("SCRATCH").address
    with pytest.raises(NicollError, match=rf"SLVERR on read of global\.SCRATCH at {address:#06x}"):
        Registers(Failing()).global_.SCRATCH.read()


def test_cycle_counter_is_64_bit_and_monotonic(cluster):
    dev = cluster.device(0)
    counts = [dev.cycles() for _ in range(5)]
    assert all(b > a for a, b in zip(counts, counts[1:])), counts
    cycles = dev.regs.global_.CYCLES
    # Reading the high word alone returns the value latched by the last low-word read.
    low, _ = dev.transport.read32(cycles.address)
    high_1, _ = dev.transport.read32(cycles.address + 4)
    dev.transport.read32(REGMAP.block("global").register("SCRATCH").address)
    high_2, _ = dev.transport.read32(cycles.address + 4)
    assert high_1 == high_2
    assert dev.transport.write32(cycles.address, 0) == BusResponse.OKAY
    assert dev.cycles() > (high_1 << 32 | low)


def test_device_memory_round_trip(cluster):
    rng = random.Random(7)
    # Every node's memory, but on the Amaranth cluster (2 to 7 s a node there) the last
    # node's only: the nodes' memories are the same gateware, and every node's AXI4 port is
    # written and read there by test_device_memory_is_per_node.
    ranks = [cluster.nodes - 1] if cluster.backend == "amaranth" else range(cluster.nodes)
    for rank in ranks:
        dev = cluster.device(rank)
        image = bytes(rng.getrandbits(8) for _ in range(512))
        dev.mem_write(0, image)
        assert dev.mem_read(0, 512) == image
        # unaligned, odd-length accesses inside the image
        for _ in range(6):
            start = rng.randrange(0, 480)
            length = rng.randrange(1, 512 - start)
            patch = bytes(rng.getrandbits(8) for _ in range(length))
            dev.mem_write(start, patch)
            image = image[:start] + patch + image[start + length:]
            assert dev.mem_read(0, 512) == image
        # the last byte of memory is reachable
        dev.mem_write(MEM_SIZE - 3, b"xyz")
        assert dev.mem_read(MEM_SIZE - 5, 5)[2:] == b"xyz"


def test_device_memory_is_per_node(cluster):
    for rank in range(cluster.nodes):
        cluster.device(rank).mem_write(0x100, bytes([rank]) * 40)
    for rank in range(cluster.nodes):
        assert cluster.device(rank).mem_read(0x100, 40) == bytes([rank]) * 40


def test_backdoor_load_and_dump_agree_with_the_bus(cluster):
    """mem_load / mem_dump reach the same bytes the AXI4 port does, at any alignment, and
    leave the bytes around a partial row alone; on the simulators they take no cycles."""
    rng = random.Random(11)
    dev = cluster.device(cluster.nodes - 1)
    image = bytes(rng.getrandbits(8) for _ in range(600))
    dev.mem_write(0x200, image)
    for _ in range(5):
        start = rng.randrange(0, 560)
        length = rng.randrange(1, 600 - start)
        patch = bytes(rng.getrandbits(8) for _ in range(length))
        before = dev.cycles()
        dev.mem_load(0x200 + start, patch)
        if cluster.backend != "model":
            # Two reads of the counter alone take the same cycles with or without the load.
            idle = dev.cycles()
            assert dev.cycles() - idle == idle - before
        image = image[:start] + patch + image[start + length:]
        assert dev.mem_read(0x200, 600) == image
        assert dev.mem_dump(0x200, 600) == image
        assert dev.mem_dump(0x200 + start, length) == patch
    with pytest.raises(NicollError, match=r"memory load: .* outside device memory"):
        dev.mem_load(MEM_SIZE - 2, b"abc")
    with pytest.raises(NicollError, match=r"memory dump: .* outside device memory"):
        dev.mem_dump(MEM_SIZE, 1)


def test_out_of_range_memory_access_is_refused_and_writes_nothing(cluster):
    dev = cluster.device(0)
    dev.mem_write(MEM_SIZE - 16, bytes(16))
    with pytest.raises(NicollError, match=rf"outside device memory of {MEM_SIZE} bytes"):
        dev.mem_write(MEM_SIZE - 8, bytes(range(16)))
    with pytest.raises(NicollError, match=r"outside device memory"):
        dev.mem_read(MEM_SIZE, 1)
    with pytest.raises(NicollError, match=r"outside device memory"):
        dev.mem_read(-4, 4)
    assert dev.mem_read(MEM_SIZE - 16, 16) == bytes(16)


def test_numpy_arrays_are_written_as_bytes(cluster):
    np = pytest.importorskip("numpy")
    dev = cluster.device(1)
    array = np.arange(37, dtype=np.float32)
    dev.mem_write(64, array)
    back = np.frombuffer(dev.mem_read(64, array.nbytes), dtype=np.float32)
    assert np.array_equal(back, array)


class _Corrupting(Transport):
    """Passes everything through, except that one address reads back a different word."""

    def __init__(self, inner, address, value):
        self.inner, self.address, self.value = inner, address, value

    def read32(self, address):
        data, response = self.inner.read32(address)
        return (self.value, response) if address == self.address else (data, response)

    def write32(self, address, data, strobe=0xF):
        return self.inner.write32(address, data, strobe)

    def mem_write(self, address, data):
        return self.inner.mem_write(address, data)

    def mem_read(self, address, length):
        return self.inner.mem_read(address, length)


def test_device_refuses_a_foreign_id(cluster):
    inner = cluster.device(0).transport
    alu = REGMAP.block("alu")
    with pytest.raises(NicollError,
                       match=r"block 'alu': ID word expected 0x414c5520 \('ALU '\), "
                             r"found 0x12345678"):
        nicoll.Device(_Corrupting(inner, alu.register("ID").address, 0x12345678))


def test_device_refuses_another_major_version(cluster):
    inner = cluster.device(0).transport
    glob = REGMAP.block("global")
    major, minor = glob.version
    with pytest.raises(NicollError, match=rf"VERSION expected major {major} .* found 7\.3"):
        nicoll.Device(_Corrupting(inner, glob.register("VERSION").address, 7 << 16 | 3))


def test_device_refuses_the_wrong_rank(cluster):
    with pytest.raises(NicollError, match="opened as rank 2 reports node id 1"):
        nicoll.Device(cluster.device(1).transport, rank=2)


def test_device_rank_lookup(cluster):
    n = cluster.nodes
    with pytest.raises(NicollError, match=rf"rank must be an int between 0 and {n - 1}, not {n}"):
        cluster.device(n)
    assert repr(cluster).startswith(f"<nicoll.Cluster {n} nodes on {cluster.backend}")


def test_alu_capabilities_are_read_from_the_registers(cluster):
    for rank in range(cluster.nodes):
        assert (cluster.device(rank).alu_capabilities()
                == cluster_kwargs(cluster.backend)["alu_capabilities"])


def test_a_pair_the_build_lacks_is_refused_naming_op_and_dtype(cluster):
    dev = cluster.device(0)
    assert dev.check_reduction("min", "float32") == (ReduceOp.MIN, DType.FLOAT32)
    assert dev.check_reduction("lxor", "uint8") == (ReduceOp.LXOR, DType.UINT8)
    caps = cluster_kwargs(cluster.backend)["alu_capabilities"]
    mask = sum(1 << op.value for op, dtype in caps if dtype == DType.FLOAT64)
    with pytest.raises(NicollError, match=r"op 'prod' on float64 is not in this build: "
                                          rf"the ALU block's OPS_FLOAT64 register reads {mask:#05x}"):
        dev.check_reduction("prod", "float64")
    with pytest.raises(NicollError, match=r"op 'bor' is not defined on float16"):
        dev.check_reduction("bor", "float16")
