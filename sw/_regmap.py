"""The nicoll register map as data.

Generated from hw/regmap/nicoll.rdl by `nicoll regmap --write` (make docs). Do not edit.
"""

from .regmap import Block, Field, Register, RegisterMap

__all__ = ["REGMAP"]

REGMAP = RegisterMap(
    name='nicoll_regs',
    desc='Control and status registers of one nicoll NIC core, reached through its 32-bit AXI4-Lite slave.',
    size=0x408,
    blocks=(
        Block(name='global', offset=0x000, desc='Identification, build parameters, a scratch register and the cycle counter.', registers=(
            Register(name='ID', address=0x000, offset=0x00, width=32, desc='Constant tag naming the block (four ASCII characters, first character in the top byte).', fields=(
                Field(name='tag', lsb=0, width=32, sw='r', hw='na', reset=0x4e434c4c, desc=''),
            )),
            Register(name='VERSION', address=0x004, offset=0x04, width=32, desc='The driver refuses a block whose major version differs from the one it was written for.', fields=(
                Field(name='minor', lsb=0, width=16, sw='r', hw='na', reset=0x0, desc='Incremented on compatible additions.'),
                Field(name='major', lsb=16, width=16, sw='r', hw='na', reset=0x1, desc='Incremented on incompatible changes.'),
            )),
            Register(name='DATA_WIDTH', address=0x008, offset=0x08, width=32, desc='Width in bits of the network streams and of device memory beats (64, 128, 256 or 512).', fields=(
                Field(name='bits', lsb=0, width=16, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='MAX_NODES', address=0x00c, offset=0x0c, width=32, desc='Largest number of nodes this build can join (width of node id fields and bit vectors).', fields=(
                Field(name='count', lsb=0, width=16, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='NODE_ID', address=0x010, offset=0x10, width=32, desc="This node's id (its rank in the cluster), strapped by the system that instantiates the core.", fields=(
                Field(name='id', lsb=0, width=16, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='MEM_SIZE', address=0x014, offset=0x14, width=32, desc='Size in bytes of the device memory behind the host memory port.', fields=(
                Field(name='bytes', lsb=0, width=32, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='SCRATCH', address=0x018, offset=0x18, width=32, desc='Read/write register with no effect, for bus checks.', fields=(
                Field(name='value', lsb=0, width=32, sw='rw', hw='na', reset=0x0, desc=''),
            )),
            Register(name='CYCLES', address=0x020, offset=0x20, width=64, desc='Free-running count of core clock cycles since reset. Reading the low word latches the high word, so reading low then high gives one consistent 64-bit value.', fields=(
                Field(name='count', lsb=0, width=64, sw='r', hw='w', reset=None, desc=''),
            )),
        )),
        Block(name='alu', offset=0x100, desc='The element-wise reduction ALU (seed 000) and which (op, type) pairs this build computes.', registers=(
            Register(name='ID', address=0x100, offset=0x00, width=32, desc='Constant tag naming the block (four ASCII characters, first character in the top byte).', fields=(
                Field(name='tag', lsb=0, width=32, sw='r', hw='na', reset=0x414c5520, desc=''),
            )),
            Register(name='VERSION', address=0x104, offset=0x04, width=32, desc='The driver refuses a block whose major version differs from the one it was written for.', fields=(
                Field(name='minor', lsb=0, width=16, sw='r', hw='na', reset=0x0, desc='Incremented on compatible additions.'),
                Field(name='major', lsb=16, width=16, sw='r', hw='na', reset=0x1, desc='Incremented on incompatible changes.'),
            )),
            Register(name='OPS_INT8', address=0x110, offset=0x10, width=32, desc='Bit k set: op k is computed on this type (0 sum, 1 prod, 2 min, 3 max, 4 band, 5 bor, 6 bxor, 7 land, 8 lor, 9 lxor).', fields=(
                Field(name='ops', lsb=0, width=10, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='OPS_INT16', address=0x114, offset=0x14, width=32, desc='Bit k set: op k is computed on this type (0 sum, 1 prod, 2 min, 3 max, 4 band, 5 bor, 6 bxor, 7 land, 8 lor, 9 lxor).', fields=(
                Field(name='ops', lsb=0, width=10, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='OPS_INT32', address=0x118, offset=0x18, width=32, desc='Bit k set: op k is computed on this type (0 sum, 1 prod, 2 min, 3 max, 4 band, 5 bor, 6 bxor, 7 land, 8 lor, 9 lxor).', fields=(
                Field(name='ops', lsb=0, width=10, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='OPS_INT64', address=0x11c, offset=0x1c, width=32, desc='Bit k set: op k is computed on this type (0 sum, 1 prod, 2 min, 3 max, 4 band, 5 bor, 6 bxor, 7 land, 8 lor, 9 lxor).', fields=(
                Field(name='ops', lsb=0, width=10, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='OPS_UINT8', address=0x120, offset=0x20, width=32, desc='Bit k set: op k is computed on this type (0 sum, 1 prod, 2 min, 3 max, 4 band, 5 bor, 6 bxor, 7 land, 8 lor, 9 lxor).', fields=(
                Field(name='ops', lsb=0, width=10, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='OPS_UINT16', address=0x124, offset=0x24, width=32, desc='Bit k set: op k is computed on this type (0 sum, 1 prod, 2 min, 3 max, 4 band, 5 bor, 6 bxor, 7 land, 8 lor, 9 lxor).', fields=(
                Field(name='ops', lsb=0, width=10, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='OPS_UINT32', address=0x128, offset=0x28, width=32, desc='Bit k set: op k is computed on this type (0 sum, 1 prod, 2 min, 3 max, 4 band, 5 bor, 6 bxor, 7 land, 8 lor, 9 lxor).', fields=(
                Field(name='ops', lsb=0, width=10, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='OPS_UINT64', address=0x12c, offset=0x2c, width=32, desc='Bit k set: op k is computed on this type (0 sum, 1 prod, 2 min, 3 max, 4 band, 5 bor, 6 bxor, 7 land, 8 lor, 9 lxor).', fields=(
                Field(name='ops', lsb=0, width=10, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='OPS_FLOAT16', address=0x130, offset=0x30, width=32, desc='Bit k set: op k is computed on this type (0 sum, 1 prod, 2 min, 3 max, 4 band, 5 bor, 6 bxor, 7 land, 8 lor, 9 lxor).', fields=(
                Field(name='ops', lsb=0, width=10, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='OPS_BFLOAT16', address=0x134, offset=0x34, width=32, desc='Bit k set: op k is computed on this type (0 sum, 1 prod, 2 min, 3 max, 4 band, 5 bor, 6 bxor, 7 land, 8 lor, 9 lxor).', fields=(
                Field(name='ops', lsb=0, width=10, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='OPS_FLOAT32', address=0x138, offset=0x38, width=32, desc='Bit k set: op k is computed on this type (0 sum, 1 prod, 2 min, 3 max, 4 band, 5 bor, 6 bxor, 7 land, 8 lor, 9 lxor).', fields=(
                Field(name='ops', lsb=0, width=10, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='OPS_FLOAT64', address=0x13c, offset=0x3c, width=32, desc='Bit k set: op k is computed on this type (0 sum, 1 prod, 2 min, 3 max, 4 band, 5 bor, 6 bxor, 7 land, 8 lor, 9 lxor).', fields=(
                Field(name='ops', lsb=0, width=10, sw='r', hw='w', reset=None, desc=''),
            )),
        )),
        Block(name='engine', offset=0x200, desc='Header reserved for the schedule engine (seeds 000, 001, 002).', registers=(
            Register(name='ID', address=0x200, offset=0x00, width=32, desc='Constant tag naming the block (four ASCII characters, first character in the top byte).', fields=(
                Field(name='tag', lsb=0, width=32, sw='r', hw='na', reset=0x454e474e, desc=''),
            )),
            Register(name='VERSION', address=0x204, offset=0x04, width=32, desc='The driver refuses a block whose major version differs from the one it was written for.', fields=(
                Field(name='minor', lsb=0, width=16, sw='r', hw='na', reset=0x1, desc='Incremented on compatible additions.'),
                Field(name='major', lsb=16, width=16, sw='r', hw='na', reset=0x0, desc='Incremented on incompatible changes.'),
            )),
        )),
        Block(name='repack', offset=0x300, desc='Header reserved for the repack (aggregator) units and their control tree (seed 003).', registers=(
            Register(name='ID', address=0x300, offset=0x00, width=32, desc='Constant tag naming the block (four ASCII characters, first character in the top byte).', fields=(
                Field(name='tag', lsb=0, width=32, sw='r', hw='na', reset=0x5250434b, desc=''),
            )),
            Register(name='VERSION', address=0x304, offset=0x04, width=32, desc='The driver refuses a block whose major version differs from the one it was written for.', fields=(
                Field(name='minor', lsb=0, width=16, sw='r', hw='na', reset=0x1, desc='Incremented on compatible additions.'),
                Field(name='major', lsb=16, width=16, sw='r', hw='na', reset=0x0, desc='Incremented on incompatible changes.'),
            )),
        )),
        Block(name='barrier', offset=0x400, desc='Header reserved for the barrier unit with approximate-computing thresholds (seed 004).', registers=(
            Register(name='ID', address=0x400, offset=0x00, width=32, desc='Constant tag naming the block (four ASCII characters, first character in the top byte).', fields=(
                Field(name='tag', lsb=0, width=32, sw='r', hw='na', reset=0x42415252, desc=''),
            )),
            Register(name='VERSION', address=0x404, offset=0x04, width=32, desc='The driver refuses a block whose major version differs from the one it was written for.', fields=(
                Field(name='minor', lsb=0, width=16, sw='r', hw='na', reset=0x1, desc='Incremented on compatible additions.'),
                Field(name='major', lsb=16, width=16, sw='r', hw='na', reset=0x0, desc='Incremented on incompatible changes.'),
            )),
        )),
    ),
)
