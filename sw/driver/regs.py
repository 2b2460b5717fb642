"""Register access layer: named blocks, registers and fields over a transport.

Built from the generated register map (``nicoll.hw.regmap.generated.REGMAP``, itself generated from
``hw/regmap/nicoll.rdl``), so no offset is written here::

    regs = Registers(transport)
    regs.global_.SCRATCH.write(0x1234)        # "global" is a Python keyword: add "_"
    regs["global"]["CYCLES"].read()           # 64-bit, low word first
    regs.alu.VERSION.major.read()             # one field
    regs.global_.SCRATCH.value.write(7)       # read-modify-write of one field
    regs.barrier.CONTROL.write_fields(done=1, seq=3)   # one write, unnamed fields 0

Register and field names are matched case-insensitively.  A bus error becomes a
:class:`~nicoll.NicollError` naming the register, its address and the response.
"""

from nicoll.hw.regmap.generated import REGMAP
from ..errors import NicollError
from nicoll.hw.regmap import BusResponse

__all__ = ["Registers", "BlockRegisters", "RegisterHandle", "FieldHandle"]


def _check(response, what, address):
    if response != BusResponse.OKAY:
        raise NicollError(f"bus error {BusResponse(response).name} on {what} at {address:#06x}")


class FieldHandle:
    """One field of one register."""

    def __init__(self, register, field):
        self.register = register
        self.field = field

    def read(self):
        return (self.register.read() & self.field.mask) >> self.field.lsb

    def write(self, value):
        f = self.field
        if not f.sw_writable:
            raise NicollError(f"field {self.register.path}.{f.name} is read-only")
        if not 0 <= value < (1 << f.width):
            raise NicollError(f"value {value!r} does not fit field {self.register.path}.{f.name} "
                              f"of {f.width} bits")
        others = self.register.read() & ~f.mask
        self.register.write(others | (value << f.lsb))

    def __repr__(self):
        return f"<field {self.register.path}.{self.field.name}>"


class RegisterHandle:
    """One register: ``read()`` and ``write()`` the whole value, fields as attributes."""

    def __init__(self, transport, block, register):
        self._transport = transport
        self.block = block
        self.spec = register
        self.path = f"{block.name}.{register.name}"
        self._fields = {f.name.lower(): FieldHandle(self, f) for f in register.fields}

    @property
    def address(self):
        return self.spec.address

    def read(self):
        """Read every 32-bit word, lowest first (the low-word read latches the others)."""
        value = 0
        for k in range(self.spec.words):
            address = self.spec.address + 4 * k
            data, response = self._transport.read32(address)
            _check(response, f"read of {self.path}", address)
            value |= data << (32 * k)
        return value

    def write(self, value):
        if not self.spec.sw_writable:
            raise NicollError(f"register {self.path} is read-only")
        if not 0 <= value < (1 << self.spec.width):
            raise NicollError(f"value {value!r} does not fit register {self.path} "
                              f"of {self.spec.width} bits")
        for k in range(self.spec.words):
            address = self.spec.address + 4 * k
            response = self._transport.write32(address, (value >> (32 * k)) & 0xFFFF_FFFF)
            _check(response, f"write of {self.path}", address)

    def write_fields(self, **values):
        """Write the whole register from field values by name; fields not named are 0."""
        value = 0
        for name, field_value in values.items():
            try:
                f = self._fields[name.lower()].field
            except KeyError:
                raise NicollError(f"register {self.path} has no field {name!r}; it has "
                                  f"{[f.name for f in self.spec.fields]}") from None
            if not f.sw_writable:
                raise NicollError(f"field {self.path}.{f.name} is read-only")
            if not isinstance(field_value, int) or not 0 <= field_value < (1 << f.width):
                raise NicollError(f"value {field_value!r} does not fit field "
                                  f"{self.path}.{f.name} of {f.width} bits")
            value |= field_value << f.lsb
        self.write(value)

    def read_fields(self):
        """All fields of one read, as a dict name -> value."""
        value = self.read()
        return {f.name: (value & f.mask) >> f.lsb for f in self.spec.fields}

    def __getattr__(self, name):
        try:
            return self.__dict__["_fields"][name.lower()]
        except KeyError:
            raise AttributeError(f"register {self.path} has no field {name!r}; it has "
                                 f"{[f.name for f in self.spec.fields]}") from None

    def __repr__(self):
        return f"<register {self.path} @ {self.spec.address:#06x}>"


class BlockRegisters:
    """The registers of one block, as attributes or by ``[name]``."""

    def __init__(self, transport, block):
        self.spec = block
        self._registers = {r.name.lower(): RegisterHandle(transport, block, r)
                           for r in block.registers}

    def __getitem__(self, name):
        try:
            return self._registers[name.lower()]
        except KeyError:
            raise KeyError(f"block {self.spec.name!r} has no register {name!r}; it has "
                           f"{[r.name for r in self.spec.registers]}") from None

    def __getattr__(self, name):
        try:
            return self.__dict__["_registers"][name.lower()]
        except KeyError:
            raise AttributeError(f"block {self.spec.name!r} has no register {name!r}") from None

    def __iter__(self):
        return iter(self._registers.values())


class Registers:
    """Every block of the register map over one node's transport."""

    def __init__(self, transport, regmap=REGMAP):
        self.regmap = regmap
        self._blocks = {b.name.lower(): BlockRegisters(transport, b) for b in regmap.blocks}

    def __getitem__(self, name):
        try:
            return self._blocks[name.lower()]
        except KeyError:
            raise KeyError(f"no register block {name!r}; blocks are "
                           f"{[b.name for b in self.regmap.blocks]}") from None

    def __getattr__(self, name):
        # A trailing underscore reaches names that are Python keywords (global_).
        try:
            return self.__dict__["_blocks"][name.lower().rstrip("_")]
        except KeyError:
            raise AttributeError(f"no register block {name!r}") from None

    def __iter__(self):
        return iter(self._blocks.values())
