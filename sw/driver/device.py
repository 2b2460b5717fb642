"""Device: one nicoll NIC, opened over a transport.

Opening a device reads every block's ID and VERSION words and refuses a device whose tag or
major version differs from what this driver was generated for (both expectations come from
the register map, ``hw/regmap/nicoll.rdl``).  It then reads the build parameters.
"""

import numpy as np

from nicoll.hw.regmap.generated import REGMAP
from .repack import RepackDriver
from .barrier import BarrierDriver
from .engine import EngineDriver
from ..errors import NicollError
from nicoll.hw.regmap import BusResponse
from .regs import Registers

__all__ = ["Device", "tag_text"]


def tag_text(tag):
    """A block tag as its four ASCII characters, for messages ("NCLL")."""
    raw = int(tag).to_bytes(4, "big")
    if all(0x20 <= b < 0x7F for b in raw):
        return raw.decode("ascii")
    return "?"


class Device:
    """One node: register access, device memory and the build parameters it reports."""

    def __init__(self, transport, *, rank=None, regmap=REGMAP):
        self.transport = transport
        self.regs = Registers(transport, regmap)
        self._check_headers(regmap)
        g = self.regs.global_
        self.data_width = g.DATA_WIDTH.bits.read()
        self.max_nodes = g.MAX_NODES.count.read()
        self.node_id = g.NODE_ID.id.read()
        self.mem_size = g.MEM_SIZE.bytes.read()
        if rank is not None and self.node_id != rank:
            raise NicollError(f"node opened as rank {rank} reports node id {self.node_id}")
        #: The barrier block (seed 004): :class:`~nicoll.driver.barrier.BarrierDriver`.
        self.barrier = BarrierDriver(self.regs, node_id=self.node_id, max_nodes=self.max_nodes)
        #: The collective engine (seeds 000, 001, 002):
        #: :class:`~nicoll.driver.engine.EngineDriver`.
        self.engine = EngineDriver(self.regs, node_id=self.node_id, data_width=self.data_width,
                                   mem_size=self.mem_size)
        #: The repack block (seed 003): :class:`~nicoll.driver.repack.RepackDriver`.
        self.repack = RepackDriver(self.regs)

    def _check_headers(self, regmap):
        for block in regmap.blocks:
            regs = self.regs[block.name]
            found_tag = regs.ID.read()
            if found_tag != block.id_tag:
                raise NicollError(
                    f"block {block.name!r}: ID word expected {block.id_tag:#010x} "
                    f"({tag_text(block.id_tag)!r}), found {found_tag:#010x} ({tag_text(found_tag)!r}); "
                    f"this is not a nicoll device or its register map differs from the driver's")
            major, minor = block.version
            found = regs.VERSION.read_fields()
            if found["major"] != major:
                raise NicollError(
                    f"block {block.name!r}: VERSION expected major {major} (driver {major}.{minor}), "
                    f"found {found['major']}.{found['minor']}; rebuild the gateware or the driver "
                    f"from the same register map")

    # -- reduction ALU ----------------------------------------------------------------------

    def alu_capabilities(self):
        """The (ReduceOp, DType) pairs this build's ALU computes, read from its registers."""
        from nicoll.hw.ops import DType, ReduceOp
        pairs = set()
        for dtype in DType:
            mask = self.regs.alu[f"OPS_{dtype.name}"].ops.read()
            pairs |= {(op, dtype) for op in ReduceOp if mask >> op.value & 1}
        return frozenset(pairs)

    def check_reduction(self, op, dtype):
        """Refuse an op/dtype pair MPI leaves undefined or this build's ALU lacks; returns
        the (ReduceOp, DType) pair."""
        from ..ops import check_op_dtype
        op, dtype = check_op_dtype(op, dtype)
        register = self.regs.alu[f"OPS_{dtype.name}"]
        mask = register.ops.read()
        if not mask >> op.value & 1:
            raise NicollError(f"op {op.mpi_name!r} on {dtype.numpy_name} is not in this build: "
                              f"the ALU block's {register.spec.name} register reads {mask:#05x} "
                              f"(bit {op.value} clear)")
        return op, dtype

    # -- counters -------------------------------------------------------------------------

    def cycles(self):
        """The free-running 64-bit cycle counter (one consistent read)."""
        return self.regs.global_.CYCLES.read()

    def idle(self, cycles):
        """Let the device run ``cycles`` cycles without bus traffic (in a simulator, the whole
        cluster runs them at once); on hardware and the model this returns at once.  Waits
        that poll a status call it between reads, so a simulator spends its time simulating
        rather than answering reads."""
        if not isinstance(cycles, int) or isinstance(cycles, bool) or cycles < 0:
            raise NicollError(f"idle cycles must be a non-negative int, not {cycles!r}")
        if cycles:
            self.transport.idle(cycles)

    # -- device memory --------------------------------------------------------------------

    def _check_range(self, address, length, what):
        if not isinstance(address, int) or isinstance(address, bool):
            raise NicollError(f"{what}: address must be an int, not {address!r}")
        if address < 0 or length < 0 or address + length > self.mem_size:
            raise NicollError(
                f"{what}: bytes {address:#x}..{address + length:#x} lie outside device memory "
                f"of {self.mem_size} bytes (0x0..{self.mem_size:#x})")

    def mem_write(self, address, data):
        """Write bytes (or a numpy array's bytes) to device memory at ``address``, over the
        node's AXI4 port."""
        self._write(address, data, self.transport.mem_write, "memory write")

    def mem_read(self, address, length):
        """Read ``length`` bytes of device memory at ``address``, over the node's AXI4 port."""
        return self._read(address, length, self.transport.mem_read, "memory read")

    def mem_load(self, address, data):
        """Put bytes (or a numpy array's bytes) into device memory at ``address`` by the
        fastest way the backend has: the simulators write their memory arrays directly
        (no bus cycles, no simulated time), the model as :meth:`mem_write` without advancing
        its clock.  For bulk data whose transfer time is not being measured."""
        self._write(address, data, self.transport.mem_load, "memory load")

    def mem_dump(self, address, length):
        """Read ``length`` bytes of device memory at ``address`` by the fastest way the
        backend has (the counterpart of :meth:`mem_load`)."""
        return self._read(address, length, self.transport.mem_dump, "memory dump")

    def _write(self, address, data, move, what):
        if isinstance(data, np.ndarray):
            data = np.ascontiguousarray(data).tobytes()
        data = bytes(data)
        self._check_range(address, len(data), what)
        if data:
            response = move(address, data)
            if response != BusResponse.OKAY:
                raise NicollError(f"{what} at {address:#x}: bus error {BusResponse(response).name}")

    def _read(self, address, length, move, what):
        self._check_range(address, length, what)
        if length == 0:
            return b""
        data, response = move(address, length)
        if response != BusResponse.OKAY:
            raise NicollError(f"{what} at {address:#x}: bus error {BusResponse(response).name}")
        return data

    def describe(self):
        """What the device reports about itself, as a dict."""
        out = {"node_id": self.node_id, "data_width": self.data_width,
               "max_nodes": self.max_nodes, "mem_size": self.mem_size}
        for block in self.regs:
            version = block.VERSION.read_fields()
            out[f"{block.spec.name}_version"] = f"{version['major']}.{version['minor']}"
        return out

    def __repr__(self):
        return (f"<nicoll.Device node {self.node_id}: data_width {self.data_width}, "
                f"mem {self.mem_size} B>")
