# amaranth: UnusedElaboratable=no
"""What the CSRSlave tests share: a model of what the access rules of nicoll.hw.regmap say a
bus master sees, built from the generated map, and the map's words, mapped and not, and
registers the tests use.
"""

from nicoll.hw.regmap.generated import REGMAP
from nicoll.hw.regmap import BusResponse


OKAY, DECERR = BusResponse.OKAY, BusResponse.DECERR


class Model:
    """What the access rules of nicoll.hw.regmap say a bus master sees; built from the map."""

    def __init__(self, regmap, inputs):
        self.regmap = regmap
        self.inputs = inputs            # (block, register, field) -> value of hw-driven fields
        self.storage = {}               # register address -> value of its writable bits
        self.shadow = {}
        for r in regmap.registers():
            self.storage[r.address] = sum((f.reset or 0) << f.lsb
                                          for f in r.fields if f.sw_writable)

    def _block(self, reg):
        return next(b for b in self.regmap.blocks if reg in b.registers)

    def value(self, reg):
        value = 0
        for f in reg.fields:
            if f.hw_driven:
                v = self.inputs[self._block(reg).name, reg.name, f.name]
            elif f.sw_writable:
                v = (self.storage[reg.address] >> f.lsb) if f.sw_readable else 0
            else:
                v = f.reset
            value |= (v & ((1 << f.width) - 1)) << f.lsb
        return value

    def read(self, addr):
        hit = self.regmap.decode(addr)
        if hit is None:
            return 0, DECERR
        reg, word = hit
        if word == 0:
            value = self.value(reg)
            self.shadow[reg.address] = value
        else:
            value = self.shadow.get(reg.address, 0)
        return (value >> (32 * word)) & 0xffff_ffff, OKAY

    def write(self, addr, data, strb):
        hit = self.regmap.decode(addr)
        if hit is None:
            return DECERR
        reg, word = hit
        mask = 0
        for f in reg.fields:
            if f.sw_writable:
                mask |= f.mask
        bytemask = sum(0xff << (8 * i) for i in range(4) if strb >> i & 1) << (32 * word)
        mask &= bytemask
        old = self.storage[reg.address]
        self.storage[reg.address] = (old & ~mask) | ((data << (32 * word)) & mask)
        return OKAY


def hw_driven_ports():
    return {(b.name, r.name, f.name): f.width
            for b in REGMAP.blocks for r in b.registers for f in r.fields if f.hw_driven}


def random_inputs(rng):
    return {name: rng.getrandbits(width) for name, width in hw_driven_ports().items()}








def mapped_words():
    return [r.address + 4 * w for r in REGMAP.registers() for w in range(r.words)]


def unmapped_words(addr_width=16):
    mapped = set(mapped_words())
    inside = [a for a in range(0, REGMAP.size, 4) if a not in mapped]
    beyond = [REGMAP.size, 0x800, 0x1000, (1 << addr_width) - 4]
    return inside + [a for a in beyond if a not in mapped]


SCRATCH = REGMAP.block("global").register("SCRATCH")
CYCLES = REGMAP.block("global").register("CYCLES")
