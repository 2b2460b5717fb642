"""Device model: a transaction-level Python model of one nicoll node.

It implements the register map's semantics (read from the generated map, so it follows the
SystemRDL source like the gateware does) and a byte array as device memory.  It is the
golden model and the fastest backend.  It has no clock of its own: the cycle counter, shared
by the nodes of a cluster (:class:`~nicoll.model.barrier.ModelClock`), advances by a nominal
cost per bus transaction (:data:`REGISTER_ACCESS_CYCLES`, and one cycle per data beat of a
memory transfer), so it is monotonic and orders events but says nothing about real timing;
the Cluster reports ``cycles=None`` for this backend.  The barrier block is the
zero-latency network model of :mod:`nicoll.model.barrier`, the engine block the zero-latency
model of :mod:`nicoll.model.engine`; both reach the node through :meth:`ModelNode.on_write`,
:meth:`~ModelNode.field`, :meth:`~ModelNode.drive`, and, where one block acts on another
inside the core (the engine signalling done to the barrier unit), :meth:`~ModelNode.peek`
and :meth:`~ModelNode.strobe`.
"""

from nicoll.hw.regmap.generated import REGMAP
from .barrier import BarrierNetworkModel, ModelClock
from .engine import EngineNetworkModel
from nicoll.hw.regmap import BusResponse
from ..driver.transport import Transport

__all__ = ["ModelNode", "REGISTER_ACCESS_CYCLES"]

#: Cycles a register access advances the model's counter (a nominal AXI4-Lite round trip).
REGISTER_ACCESS_CYCLES = 4


class ModelNode(Transport):
    """One node: register file + device memory, reached through the Transport interface."""

    def __init__(self, *, node_id, data_width, max_nodes, mem_size, alu_capabilities=None,
                 regmap=REGMAP, clock=None, barrier=None, engine=None):
        """``clock``, ``barrier`` and ``engine`` are shared by the nodes of one cluster; a node
        made without them gets its own (a cluster of one)."""
        from nicoll.hw.alu import capability_masks
        self.regmap = regmap
        self.data_width = data_width
        self.memory = bytearray(mem_size)
        if clock is None:
            clock = ModelClock() if barrier is None else barrier.clock
        if barrier is None:
            barrier = BarrierNetworkModel(clock, max_nodes)
        if barrier.clock is not clock:
            raise ValueError("the barrier model must run on the node's clock")
        if engine is None:
            engine = EngineNetworkModel(clock, max_nodes)
        if engine.clock is not clock:
            raise ValueError("the engine model must run on the node's clock")
        self.clock = clock
        # Values that hardware drives, by (block, register, field) name.
        self._hw_values = {
            ("global", "DATA_WIDTH", "bits"): lambda: data_width,
            ("global", "MAX_NODES", "count"): lambda: max_nodes,
            ("global", "NODE_ID", "id"): lambda: node_id,
            ("global", "MEM_SIZE", "bytes"): lambda: mem_size,
            ("global", "CYCLES", "count"): lambda: self.clock.now,
        }
        for dtype, mask in capability_masks(alu_capabilities).items():
            self._hw_values["alu", f"OPS_{dtype.name}", "ops"] = lambda mask=mask: mask
        self._on_write = {}     # (block, register) -> callables run after a write
        self._storage = {}      # (register address, field name) -> value
        self._latched = {}      # register address -> value latched by the low-word read
        self._field_keys = {}   # (block, register, field) -> key of self._storage
        self._owner = {}        # register address -> block name
        for block in regmap.blocks:
            for reg in block.registers:
                self._owner[reg.address] = block.name
                for f in reg.fields:
                    if f.is_storage:
                        self._storage[reg.address, f.name] = f.reset or 0
        barrier.attach(self, node_id)
        engine.attach(self, node_id)
        for block in regmap.blocks:
            for reg in block.registers:
                for f in reg.fields:
                    if f.hw_driven and (block.name, reg.name, f.name) not in self._hw_values:
                        raise NotImplementedError(
                            f"device model has no value for hardware field "
                            f"{block.name}.{reg.name}.{f.name}")

    @property
    def cycles(self):
        """The cluster's cycle counter."""
        return self.clock.now

    def _register_value(self, reg):
        block = self._owner[reg.address]
        value = 0
        for f in reg.fields:
            if not f.sw_readable:
                continue
            if f.is_storage:
                v = self._storage[reg.address, f.name]
            elif f.hw_driven:
                v = self._hw_values[block, reg.name, f.name]()
            else:
                v = f.reset or 0
            value |= (v << f.lsb) & f.mask
        return value

    # -- Transport ------------------------------------------------------------------------

    def read32(self, address):
        self.clock.advance(REGISTER_ACCESS_CYCLES)
        hit = self.regmap.decode(address)
        if hit is None:
            return 0, BusResponse.DECERR
        reg, word = hit
        if word == 0:
            value = self._register_value(reg)
            self._latched[reg.address] = value
        else:
            value = self._latched.get(reg.address, 0)
        return (value >> (32 * word)) & 0xFFFF_FFFF, BusResponse.OKAY

    def write32(self, address, data, strobe=0xF):
        self.clock.advance(REGISTER_ACCESS_CYCLES)
        hit = self.regmap.decode(address)
        if hit is None:
            return BusResponse.DECERR
        reg, word = hit
        byte_mask = 0
        for k in range(4):
            if strobe >> k & 1:
                byte_mask |= 0xFF << (8 * k)
        shift = 32 * word
        for f in reg.fields:
            if not f.sw_writable:
                continue        # read-only: the write changes nothing
            write_mask = (byte_mask << shift) & f.mask
            old = self._storage[reg.address, f.name] << f.lsb
            new = (old & ~write_mask) | ((data << shift) & write_mask)
            self._storage[reg.address, f.name] = (new & f.mask) >> f.lsb
        for callback in self._on_write.get((self._owner[reg.address], reg.name), ()):
            callback()
        for f in reg.fields:
            if f.singlepulse:
                self._storage[reg.address, f.name] = 0     # the pulse is over
        return BusResponse.OKAY

    # -- hooks for the blocks the model implements ------------------------------------------

    def on_write(self, block, register, callback):
        """Run ``callback()`` after every bus write to ``block.register`` (while a single-pulse
        field still holds what was written: the model's view of the hardware's pulse)."""
        self.regmap.block(block).register(register)        # KeyError names a bad name
        self._on_write.setdefault((block, register), []).append(callback)

    def field(self, block, register, field):
        """The value software last wrote to a storage field."""
        key = self._field_keys.get((block, register, field))
        if key is None:
            reg = self.regmap.block(block).register(register)
            key = self._field_keys[block, register, field] = (reg.address, reg.field(field).name)
        return self._storage[key]

    def peek(self, block, register, field):
        """The value a field reads now, without a bus access (the clock does not move)."""
        reg = self.regmap.block(block).register(register)
        f = reg.field(field)
        if f.is_storage:
            return self._storage[reg.address, f.name]
        if f.hw_driven:
            return self._hw_values[block, register, field]()
        return f.reset or 0

    def strobe(self, block, register, **fields):
        """Write fields from inside the core, as another block's wires do: no bus access, the
        clock does not move.  The register's write hooks run with the fields set, then every
        field written gets its old value back (a one-cycle strobe)."""
        reg = self.regmap.block(block).register(register)
        saved = {}
        for name, value in fields.items():
            f = reg.field(name)
            if not f.is_storage:
                raise ValueError(f"{block}.{register}.{name} is not a field software writes")
            saved[f.name] = self._storage[reg.address, f.name]
            self._storage[reg.address, f.name] = value & ((1 << f.width) - 1)
        try:
            for callback in self._on_write.get((block, register), ()):
                callback()
        finally:
            for name, value in saved.items():
                self._storage[reg.address, name] = value

    def drive(self, block, register, field, source):
        """Make the hardware-driven field read ``source()``."""
        reg = self.regmap.block(block).register(register)
        if not reg.field(field).hw_driven:
            raise ValueError(f"{block}.{register}.{field} is not driven by hardware")
        self._hw_values[block, register, field] = source

    def _beats(self, address, length):
        width = self.data_width // 8
        return (address + length + width - 1) // width - address // width

    def mem_write(self, address, data):
        self.clock.advance(REGISTER_ACCESS_CYCLES + self._beats(address, len(data)))
        if address < 0 or address + len(data) > len(self.memory):
            return BusResponse.DECERR
        self.memory[address:address + len(data)] = data
        return BusResponse.OKAY

    def mem_read(self, address, length):
        self.clock.advance(REGISTER_ACCESS_CYCLES + self._beats(address, length))
        if address < 0 or address + length > len(self.memory):
            return bytes(length), BusResponse.DECERR
        return bytes(self.memory[address:address + length]), BusResponse.OKAY

    def mem_load(self, address, data):
        # Like the simulators' backdoor: no bus cycles, so the clock stands still.
        if address < 0 or address + len(data) > len(self.memory):
            return BusResponse.DECERR
        self.memory[address:address + len(data)] = data
        return BusResponse.OKAY

    def mem_dump(self, address, length):
        if address < 0 or address + length > len(self.memory):
            return bytes(length), BusResponse.DECERR
        return bytes(self.memory[address:address + length]), BusResponse.OKAY
