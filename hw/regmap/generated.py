"""The nicoll register map as data.

Generated from hw/regmap/nicoll.rdl by `nicoll regmap --write` (make docs). Do not edit.
"""

from . import Block, Field, Register, RegisterMap

__all__ = ["REGMAP"]

REGMAP = RegisterMap(
    name='nicoll_regs',
    desc='Control and status registers of one nicoll NIC core, reached through its 32-bit AXI4-Lite slave.',
    size=0x4b0,
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
        Block(name='engine', offset=0x200, desc='The schedule engine (seeds 000, 001, 002): a queue of step commands the host pushes, run from a start cycle; its status, errors and performance counters.', registers=(
            Register(name='ID', address=0x200, offset=0x00, width=32, desc='Constant tag naming the block (four ASCII characters, first character in the top byte).', fields=(
                Field(name='tag', lsb=0, width=32, sw='r', hw='na', reset=0x454e474e, desc=''),
            )),
            Register(name='VERSION', address=0x204, offset=0x04, width=32, desc='The driver refuses a block whose major version differs from the one it was written for.', fields=(
                Field(name='minor', lsb=0, width=16, sw='r', hw='na', reset=0x0, desc='Incremented on compatible additions.'),
                Field(name='major', lsb=16, width=16, sw='r', hw='na', reset=0x1, desc='Incremented on incompatible changes.'),
            )),
            Register(name='CAPS', address=0x208, offset=0x08, width=32, desc='depth: step commands the queue holds. alu_latency: clock cycles from a received beat entering the reduction ALU to its result.', fields=(
                Field(name='depth', lsb=0, width=16, sw='r', hw='w', reset=None, desc=''),
                Field(name='alu_latency', lsb=16, width=8, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='PACKET', address=0x20c, offset=0x0c, width=32, desc='beats: the largest payload, in beats, a data packet of this build carries.', fields=(
                Field(name='beats', lsb=0, width=16, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='REDUCTION', address=0x210, offset=0x10, width=32, desc='The op (nicoll.hw.ops.ReduceOp) and element type (nicoll.hw.ops.DType) of every reducing step of the queued schedule.', fields=(
                Field(name='op', lsb=0, width=4, sw='rw', hw='r', reset=0x0, desc=''),
                Field(name='dtype', lsb=4, width=4, sw='rw', hw='r', reset=0x0, desc=''),
            )),
            Register(name='CONTROL', address=0x214, offset=0x14, width=32, desc='push = 1: append the command in CMD0 .. CMD10 to the queue (refused with an error while running or when the queue is full; a command naming bytes outside device memory, a node >= MAX_NODES or reserved values is refused and not queued). go = 1: run the queue now. arm = 1: run it in the first cycle CYCLES >= START_AT (ignored while running). A start while an ERRORS bit is set does nothing. clear = 1: empty the queue and clear STATUS, ERRORS and the counters (also stops a running schedule: use it to recover from an error); a write with clear = 1 does only that (its push, go and arm are ignored).', fields=(
                Field(name='push', lsb=0, width=1, sw='w', hw='r', reset=0x0, desc='', singlepulse=True),
                Field(name='go', lsb=1, width=1, sw='w', hw='r', reset=0x0, desc='', singlepulse=True),
                Field(name='arm', lsb=2, width=1, sw='w', hw='r', reset=0x0, desc='', singlepulse=True),
                Field(name='clear', lsb=3, width=1, sw='w', hw='r', reset=0x0, desc='', singlepulse=True),
            )),
            Register(name='STATUS', address=0x218, offset=0x18, width=32, desc='queued: commands in the queue. armed: waiting for START_AT. busy: running. done: the queue ran to its end (every write landed and every packet left). error: any ERRORS bit; the engine stops at the first error.', fields=(
                Field(name='queued', lsb=0, width=16, sw='r', hw='w', reset=None, desc=''),
                Field(name='armed', lsb=16, width=1, sw='r', hw='w', reset=None, desc=''),
                Field(name='busy', lsb=17, width=1, sw='r', hw='w', reset=None, desc=''),
                Field(name='done', lsb=18, width=1, sw='r', hw='w', reset=None, desc=''),
                Field(name='error', lsb=19, width=1, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='STEP', address=0x21c, offset=0x1c, width=32, desc='Commands of the queue finished since the start: a data command when it has sent every beat and taken every received beat, a barrier when it is released.', fields=(
                Field(name='count', lsb=0, width=16, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='CMD0', address=0x220, offset=0x20, width=32, desc='32 bits of the step command PUSH appends, word k holding bits 32k .. 32k+31 of nicoll.hw.engine.COMMAND_LAYOUT.', fields=(
                Field(name='bits', lsb=0, width=32, sw='rw', hw='r', reset=0x0, desc=''),
            )),
            Register(name='CMD1', address=0x224, offset=0x24, width=32, desc='32 bits of the step command PUSH appends, word k holding bits 32k .. 32k+31 of nicoll.hw.engine.COMMAND_LAYOUT.', fields=(
                Field(name='bits', lsb=0, width=32, sw='rw', hw='r', reset=0x0, desc=''),
            )),
            Register(name='CMD2', address=0x228, offset=0x28, width=32, desc='32 bits of the step command PUSH appends, word k holding bits 32k .. 32k+31 of nicoll.hw.engine.COMMAND_LAYOUT.', fields=(
                Field(name='bits', lsb=0, width=32, sw='rw', hw='r', reset=0x0, desc=''),
            )),
            Register(name='CMD3', address=0x22c, offset=0x2c, width=32, desc='32 bits of the step command PUSH appends, word k holding bits 32k .. 32k+31 of nicoll.hw.engine.COMMAND_LAYOUT.', fields=(
                Field(name='bits', lsb=0, width=32, sw='rw', hw='r', reset=0x0, desc=''),
            )),
            Register(name='CMD4', address=0x230, offset=0x30, width=32, desc='32 bits of the step command PUSH appends, word k holding bits 32k .. 32k+31 of nicoll.hw.engine.COMMAND_LAYOUT.', fields=(
                Field(name='bits', lsb=0, width=32, sw='rw', hw='r', reset=0x0, desc=''),
            )),
            Register(name='CMD5', address=0x234, offset=0x34, width=32, desc='32 bits of the step command PUSH appends, word k holding bits 32k .. 32k+31 of nicoll.hw.engine.COMMAND_LAYOUT.', fields=(
                Field(name='bits', lsb=0, width=32, sw='rw', hw='r', reset=0x0, desc=''),
            )),
            Register(name='CMD6', address=0x238, offset=0x38, width=32, desc='32 bits of the step command PUSH appends, word k holding bits 32k .. 32k+31 of nicoll.hw.engine.COMMAND_LAYOUT.', fields=(
                Field(name='bits', lsb=0, width=32, sw='rw', hw='r', reset=0x0, desc=''),
            )),
            Register(name='CMD7', address=0x23c, offset=0x3c, width=32, desc='32 bits of the step command PUSH appends, word k holding bits 32k .. 32k+31 of nicoll.hw.engine.COMMAND_LAYOUT.', fields=(
                Field(name='bits', lsb=0, width=32, sw='rw', hw='r', reset=0x0, desc=''),
            )),
            Register(name='CMD8', address=0x240, offset=0x40, width=32, desc='32 bits of the step command PUSH appends, word k holding bits 32k .. 32k+31 of nicoll.hw.engine.COMMAND_LAYOUT.', fields=(
                Field(name='bits', lsb=0, width=32, sw='rw', hw='r', reset=0x0, desc=''),
            )),
            Register(name='CMD9', address=0x244, offset=0x44, width=32, desc='32 bits of the step command PUSH appends, word k holding bits 32k .. 32k+31 of nicoll.hw.engine.COMMAND_LAYOUT.', fields=(
                Field(name='bits', lsb=0, width=32, sw='rw', hw='r', reset=0x0, desc=''),
            )),
            Register(name='CMD10', address=0x248, offset=0x48, width=32, desc='32 bits of the step command PUSH appends, word k holding bits 32k .. 32k+31 of nicoll.hw.engine.COMMAND_LAYOUT.', fields=(
                Field(name='bits', lsb=0, width=32, sw='rw', hw='r', reset=0x0, desc=''),
            )),
            Register(name='ERRORS', address=0x250, offset=0x50, width=32, desc="queue_full: push with the queue full. running: push while the engine runs. region: a pushed command names an empty region, bytes outside device memory (a strided region is checked at push from offset + length; the rest of its span is checked row by row as it is walked, and the engine stops before the first row outside memory), or a run longer than its stride. peer: a pushed command names a node >= MAX_NODES. command: a pushed command has a reserved action or a barrier with data. unexpected: a data packet that no receive of the running step expects (wrong source, tag or offset); it is dropped. length: a received message holds more or fewer bytes than the receiving region. alu: the reduction ALU refused the op and type (not in this build). protocol: a clear-to-send with a tag other than the one the sender waits for. lost: a send's receiver answered none of PROBE_TRIES probes in a row (docs/faults.md, Packet-level recovery): the network lost every packet between them.", fields=(
                Field(name='queue_full', lsb=0, width=1, sw='r', hw='w', reset=None, desc=''),
                Field(name='running', lsb=1, width=1, sw='r', hw='w', reset=None, desc=''),
                Field(name='region', lsb=2, width=1, sw='r', hw='w', reset=None, desc=''),
                Field(name='peer', lsb=3, width=1, sw='r', hw='w', reset=None, desc=''),
                Field(name='command', lsb=4, width=1, sw='r', hw='w', reset=None, desc=''),
                Field(name='unexpected', lsb=5, width=1, sw='r', hw='w', reset=None, desc=''),
                Field(name='length', lsb=6, width=1, sw='r', hw='w', reset=None, desc=''),
                Field(name='alu', lsb=7, width=1, sw='r', hw='w', reset=None, desc=''),
                Field(name='protocol', lsb=8, width=1, sw='r', hw='w', reset=None, desc=''),
                Field(name='lost', lsb=9, width=1, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='START_AT', address=0x258, offset=0x58, width=64, desc='CONTROL.arm starts the queue in the first cycle CYCLES >= START_AT, so every node of a cluster can start at the same cycle.', fields=(
                Field(name='cycle', lsb=0, width=64, sw='rw', hw='r', reset=0x0, desc=''),
            )),
            Register(name='STARTED_AT', address=0x260, offset=0x60, width=64, desc='', fields=(
                Field(name='cycle', lsb=0, width=64, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='FINISHED_AT', address=0x268, offset=0x68, width=64, desc='', fields=(
                Field(name='cycle', lsb=0, width=64, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='BYTES_SENT', address=0x270, offset=0x70, width=32, desc='', fields=(
                Field(name='count', lsb=0, width=32, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='BYTES_RECEIVED', address=0x274, offset=0x74, width=32, desc='', fields=(
                Field(name='count', lsb=0, width=32, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='PACKETS_SENT', address=0x278, offset=0x78, width=32, desc='', fields=(
                Field(name='count', lsb=0, width=32, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='PACKETS_RECEIVED', address=0x27c, offset=0x7c, width=32, desc='', fields=(
                Field(name='count', lsb=0, width=32, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='ALU_BEATS', address=0x280, offset=0x80, width=32, desc='', fields=(
                Field(name='count', lsb=0, width=32, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='BUSY_CYCLES', address=0x284, offset=0x84, width=32, desc='', fields=(
                Field(name='count', lsb=0, width=32, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='STALL_CYCLES', address=0x288, offset=0x88, width=32, desc='', fields=(
                Field(name='count', lsb=0, width=32, sw='r', hw='w', reset=None, desc=''),
            )),
        )),
        Block(name='repack', offset=0x300, desc="The repack (aggregator) units and their control tree (seed 003), serving every rank of the cluster from this node: rank lists, start of an exchange, status and counters. The ranks' side of an exchange is the engine's aggregate command.", registers=(
            Register(name='ID', address=0x300, offset=0x00, width=32, desc='Constant tag naming the block (four ASCII characters, first character in the top byte).', fields=(
                Field(name='tag', lsb=0, width=32, sw='r', hw='na', reset=0x5250434b, desc=''),
            )),
            Register(name='VERSION', address=0x304, offset=0x04, width=32, desc='The driver refuses a block whose major version differs from the one it was written for.', fields=(
                Field(name='minor', lsb=0, width=16, sw='r', hw='na', reset=0x0, desc='Incremented on compatible additions.'),
                Field(name='major', lsb=16, width=16, sw='r', hw='na', reset=0x1, desc='Incremented on incompatible changes.'),
            )),
            Register(name='CAPS', address=0x308, offset=0x08, width=32, desc='units: repack units of this node (0: none, the block is inert). max_group: the largest subgroup a unit takes.', fields=(
                Field(name='units', lsb=0, width=16, sw='r', hw='w', reset=None, desc=''),
                Field(name='max_group', lsb=16, width=16, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='CAPACITY', address=0x30c, offset=0x0c, width=32, desc="bytes: each unit's data buffer; a sub-matrix needs its byte budget plus (B - 1) bytes per source (B = DATA_WIDTH / 8).", fields=(
                Field(name='bytes', lsb=0, width=32, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='LIMITS', address=0x310, offset=0x10, width=32, desc="max_ranks: the largest N of an exchange. packet_beats: the largest payload, in beats, of a packet a unit's message leaves in.", fields=(
                Field(name='max_ranks', lsb=0, width=16, sw='r', hw='w', reset=None, desc=''),
                Field(name='packet_beats', lsb=16, width=16, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='ORDER', address=0x314, offset=0x14, width=32, desc='Entry index of the SRC or DST rank list (written by CONTROL.write_src / write_dst) is rank; end = 1 ends a subgroup after it.', fields=(
                Field(name='index', lsb=0, width=16, sw='rw', hw='r', reset=0x0, desc=''),
                Field(name='rank', lsb=16, width=16, sw='rw', hw='r', reset=0x0, desc=''),
            )),
            Register(name='CONTROL', address=0x318, offset=0x18, width=32, desc='write_src / write_dst = 1: write ORDER (with end) into the SRC / DST list. start = 1: start an exchange over ranks 0 .. N-1 with BUDGET and TIMEOUT. Lists and start are taken while no exchange runs; STATUS.pending is set until then.', fields=(
                Field(name='write_src', lsb=0, width=1, sw='w', hw='r', reset=0x0, desc='', singlepulse=True),
                Field(name='write_dst', lsb=1, width=1, sw='w', hw='r', reset=0x0, desc='', singlepulse=True),
                Field(name='start', lsb=2, width=1, sw='w', hw='r', reset=0x0, desc='', singlepulse=True),
                Field(name='end', lsb=8, width=1, sw='rw', hw='r', reset=0x0, desc=''),
            )),
            Register(name='N', address=0x31c, offset=0x1c, width=32, desc='n: ranks of the next exchange (1 .. max_ranks).', fields=(
                Field(name='n', lsb=0, width=16, sw='rw', hw='r', reset=0x0, desc=''),
            )),
            Register(name='BUDGET', address=0x320, offset=0x20, width=32, desc='bytes: the byte budget of every sub-matrix (the largest sub-matrix total), checked against the unit buffer at start.', fields=(
                Field(name='bytes', lsb=0, width=32, sw='rw', hw='r', reset=0x0, desc=''),
            )),
            Register(name='TIMEOUT', address=0x324, offset=0x24, width=32, desc='cycles: the cycle budget of every wait of the exchange (a missing registration or message ends it with TIMEOUT).', fields=(
                Field(name='cycles', lsb=0, width=32, sw='rw', hw='r', reset=0x0, desc=''),
            )),
            Register(name='STATUS', address=0x328, offset=0x28, width=32, desc='busy: an exchange runs. pending: a list write or start not yet taken. code: result of the latest exchange (nicoll.hw.repack.RepackError: 0 OK). last_error: code of the latest error counted in ERRORS.', fields=(
                Field(name='busy', lsb=0, width=1, sw='r', hw='w', reset=None, desc=''),
                Field(name='pending', lsb=1, width=1, sw='r', hw='w', reset=None, desc=''),
                Field(name='code', lsb=8, width=4, sw='r', hw='w', reset=None, desc=''),
                Field(name='last_error', lsb=12, width=4, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='ERRORS', address=0x32c, offset=0x2c, width=32, desc='', fields=(
                Field(name='count', lsb=0, width=32, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='CYCLES', address=0x330, offset=0x30, width=32, desc='', fields=(
                Field(name='count', lsb=0, width=32, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='OPS', address=0x334, offset=0x34, width=32, desc='', fields=(
                Field(name='count', lsb=0, width=32, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='DROPPED', address=0x338, offset=0x38, width=32, desc='', fields=(
                Field(name='count', lsb=0, width=32, sw='r', hw='w', reset=None, desc=''),
            )),
        )),
        Block(name='barrier', offset=0x400, desc="The barrier unit (seed 004): tree configuration, approximate-computing thresholds, the node's done strobe, status, cycle stamps and the root's abort log.", registers=(
            Register(name='ID', address=0x400, offset=0x00, width=32, desc='Constant tag naming the block (four ASCII characters, first character in the top byte).', fields=(
                Field(name='tag', lsb=0, width=32, sw='r', hw='na', reset=0x42415252, desc=''),
            )),
            Register(name='VERSION', address=0x404, offset=0x04, width=32, desc='The driver refuses a block whose major version differs from the one it was written for.', fields=(
                Field(name='minor', lsb=0, width=16, sw='r', hw='na', reset=0x0, desc='Incremented on compatible additions.'),
                Field(name='major', lsb=16, width=16, sw='r', hw='na', reset=0x1, desc='Incremented on incompatible changes.'),
            )),
            Register(name='CAPS', address=0x408, offset=0x08, width=32, desc="Child slots of this build's barrier unit (CHILD0 .. CHILD<children-1> are used) and entries of its abort log.", fields=(
                Field(name='children', lsb=0, width=8, sw='r', hw='w', reset=None, desc=''),
                Field(name='log_depth', lsb=16, width=16, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='PARENT', address=0x40c, offset=0x0c, width=32, desc="This node's parent in the barrier tree; valid = 0 makes this node the root.", fields=(
                Field(name='id', lsb=0, width=16, sw='rw', hw='r', reset=0x0, desc=''),
                Field(name='valid', lsb=16, width=1, sw='rw', hw='r', reset=0x0, desc=''),
            )),
            Register(name='CHILD0', address=0x410, offset=0x10, width=32, desc='A child of this node in the barrier tree, used when valid = 1.', fields=(
                Field(name='id', lsb=0, width=16, sw='rw', hw='r', reset=0x0, desc=''),
                Field(name='valid', lsb=16, width=1, sw='rw', hw='r', reset=0x0, desc=''),
            )),
            Register(name='CHILD1', address=0x414, offset=0x14, width=32, desc='A child of this node in the barrier tree, used when valid = 1.', fields=(
                Field(name='id', lsb=0, width=16, sw='rw', hw='r', reset=0x0, desc=''),
                Field(name='valid', lsb=16, width=1, sw='rw', hw='r', reset=0x0, desc=''),
            )),
            Register(name='CHILD2', address=0x418, offset=0x18, width=32, desc='A child of this node in the barrier tree, used when valid = 1.', fields=(
                Field(name='id', lsb=0, width=16, sw='rw', hw='r', reset=0x0, desc=''),
                Field(name='valid', lsb=16, width=1, sw='rw', hw='r', reset=0x0, desc=''),
            )),
            Register(name='CHILD3', address=0x41c, offset=0x1c, width=32, desc='A child of this node in the barrier tree, used when valid = 1.', fields=(
                Field(name='id', lsb=0, width=16, sw='rw', hw='r', reset=0x0, desc=''),
                Field(name='valid', lsb=16, width=1, sw='rw', hw='r', reset=0x0, desc=''),
            )),
            Register(name='CHILD4', address=0x420, offset=0x20, width=32, desc='A child of this node in the barrier tree, used when valid = 1.', fields=(
                Field(name='id', lsb=0, width=16, sw='rw', hw='r', reset=0x0, desc=''),
                Field(name='valid', lsb=16, width=1, sw='rw', hw='r', reset=0x0, desc=''),
            )),
            Register(name='CHILD5', address=0x424, offset=0x24, width=32, desc='A child of this node in the barrier tree, used when valid = 1.', fields=(
                Field(name='id', lsb=0, width=16, sw='rw', hw='r', reset=0x0, desc=''),
                Field(name='valid', lsb=16, width=1, sw='rw', hw='r', reset=0x0, desc=''),
            )),
            Register(name='CHILD6', address=0x428, offset=0x28, width=32, desc='A child of this node in the barrier tree, used when valid = 1.', fields=(
                Field(name='id', lsb=0, width=16, sw='rw', hw='r', reset=0x0, desc=''),
                Field(name='valid', lsb=16, width=1, sw='rw', hw='r', reset=0x0, desc=''),
            )),
            Register(name='CHILD7', address=0x42c, offset=0x2c, width=32, desc='A child of this node in the barrier tree, used when valid = 1.', fields=(
                Field(name='id', lsb=0, width=16, sw='rw', hw='r', reset=0x0, desc=''),
                Field(name='valid', lsb=16, width=1, sw='rw', hw='r', reset=0x0, desc=''),
            )),
            Register(name='ROUTE', address=0x430, offset=0x30, width=32, desc='Writing write = 1 sets the route entry of node id `node` to `slot` (0: not below this node; j + 1: in the subtree of child slot j); clear = 1 empties the table. The unit counts subtree sizes from these writes.', fields=(
                Field(name='node', lsb=0, width=16, sw='rw', hw='r', reset=0x0, desc=''),
                Field(name='slot', lsb=16, width=8, sw='rw', hw='r', reset=0x0, desc=''),
                Field(name='write', lsb=24, width=1, sw='w', hw='r', reset=0x0, desc='', singlepulse=True),
                Field(name='clear', lsb=25, width=1, sw='w', hw='r', reset=0x0, desc='', singlepulse=True),
            )),
            Register(name='ROUTE_READ', address=0x434, offset=0x34, width=32, desc='The route entry of node id ROUTE.node.', fields=(
                Field(name='slot', lsb=0, width=8, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='MODE', address=0x438, offset=0x38, width=32, desc='Used at the root. mode: 0 release when every node completed, 1 approximate computing (release early on a threshold and abort the unfinished nodes), 2 collect the stamps s, mt, e without aborting. sub (mode 1): bit 0 count threshold M, bit 1 time threshold C.', fields=(
                Field(name='mode', lsb=0, width=2, sw='rw', hw='r', reset=0x0, desc=''),
                Field(name='sub', lsb=2, width=2, sw='rw', hw='r', reset=0x1, desc=''),
            )),
            Register(name='M', address=0x43c, offset=0x3c, width=32, desc='Mode 1 with sub bit 0: release when this many nodes completed (1 .. N). Also the count whose arrival stamps MT.', fields=(
                Field(name='count', lsb=0, width=16, sw='rw', hw='r', reset=0x0, desc=''),
            )),
            Register(name='C', address=0x440, offset=0x40, width=64, desc='Mode 1 with sub bit 1: release when C cycles have passed since the first completion (S).', fields=(
                Field(name='cycles', lsb=0, width=64, sw='rw', hw='r', reset=0x0, desc=''),
            )),
            Register(name='ESTIMATE', address=0x448, offset=0x48, width=64, desc='Used at the root: the value carried to every node an early release aborts (ABORT_ESTIMATE there).', fields=(
                Field(name='value', lsb=0, width=64, sw='rw', hw='r', reset=0x0, desc=''),
            )),
            Register(name='DONE_AT', address=0x450, offset=0x50, width=64, desc='CONTROL.arm = 1 makes the unit signal done for barrier CONTROL.seq in the first cycle CYCLES >= DONE_AT, so a host can place its completion at an exact cycle.', fields=(
                Field(name='cycle', lsb=0, width=64, sw='rw', hw='r', reset=0x0, desc=''),
            )),
            Register(name='CONTROL', address=0x458, offset=0x58, width=32, desc='start = 1: begin a region (start_ac_region) in barrier `seq`, clearing vector, counts, stamps, stale count, notice errors and abort log. done = 1: this node finished barrier `seq` now. arm = 1: it finishes barrier `seq` at cycle DONE_AT. Every node must be started, with no barrier in flight, before barriers run.', fields=(
                Field(name='start', lsb=0, width=1, sw='w', hw='r', reset=0x0, desc='', singlepulse=True),
                Field(name='done', lsb=1, width=1, sw='w', hw='r', reset=0x0, desc='', singlepulse=True),
                Field(name='arm', lsb=2, width=1, sw='w', hw='r', reset=0x0, desc='', singlepulse=True),
                Field(name='seq', lsb=16, width=16, sw='rw', hw='r', reset=0x0, desc=''),
            )),
            Register(name='STATUS', address=0x45c, offset=0x5c, width=32, desc='seq: the barrier this node is in. finished: its own completion counted. released: it left barrier seq - 1 (cleared by its next counted done). aborted: an early release killed it unfinished, in barrier ABORT.seq. error: any ERRORS bit. armed: a timed done waits for DONE_AT. s_valid, mt_valid, e_valid: which stamps of barrier ABORT.stamp_seq were recorded. log_overflow: more early releases than the abort log holds.', fields=(
                Field(name='seq', lsb=0, width=16, sw='r', hw='w', reset=None, desc=''),
                Field(name='finished', lsb=16, width=1, sw='r', hw='w', reset=None, desc=''),
                Field(name='released', lsb=17, width=1, sw='r', hw='w', reset=None, desc=''),
                Field(name='aborted', lsb=18, width=1, sw='r', hw='w', reset=None, desc=''),
                Field(name='error', lsb=19, width=1, sw='r', hw='w', reset=None, desc=''),
                Field(name='armed', lsb=20, width=1, sw='r', hw='w', reset=None, desc=''),
                Field(name='s_valid', lsb=21, width=1, sw='r', hw='w', reset=None, desc=''),
                Field(name='mt_valid', lsb=22, width=1, sw='r', hw='w', reset=None, desc=''),
                Field(name='e_valid', lsb=23, width=1, sw='r', hw='w', reset=None, desc=''),
                Field(name='log_overflow', lsb=24, width=1, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='NUMBERS', address=0x460, offset=0x60, width=32, desc='abort_seq: the barrier an abort belongs to. stamp_seq: the barrier S, MT, E, RELEASE_ONES belong to.', fields=(
                Field(name='abort_seq', lsb=0, width=16, sw='r', hw='w', reset=None, desc=''),
                Field(name='stamp_seq', lsb=16, width=16, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='COUNT', address=0x464, offset=0x64, width=32, desc="ones: completions counted in this node's subtree for the current barrier (seed register CNT). total: nodes in this subtree, itself included (N at the root).", fields=(
                Field(name='ones', lsb=0, width=16, sw='r', hw='w', reset=None, desc=''),
                Field(name='total', lsb=16, width=16, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='RELEASE_ONES', address=0x468, offset=0x68, width=32, desc='ones when barrier NUMBERS.stamp_seq was released.', fields=(
                Field(name='ones', lsb=0, width=16, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='ERRORS', address=0x46c, offset=0x6c, width=32, desc="m_range: root, count sub-mode with M = 0 or M > N. c_zero: root, time sub-mode with C = 0. mode: root, MODE.mode = 3 or mode 1 with sub = 0. cfg_*: this node's tree configuration is wrong (id >= MAX_NODES, a route to an invalid slot, own id routed below or a child equal to itself, parent routed below or equal to itself, a child in two slots, a child not routed to its slot, a route write out of range). outside: a completion for a node outside the sending child's subtree. notice: a notice not for this node or from neither parent nor child. A root with an error never releases early; a node with a cfg error counts nothing.", fields=(
                Field(name='m_range', lsb=0, width=1, sw='r', hw='w', reset=None, desc=''),
                Field(name='c_zero', lsb=1, width=1, sw='r', hw='w', reset=None, desc=''),
                Field(name='mode', lsb=2, width=1, sw='r', hw='w', reset=None, desc=''),
                Field(name='cfg_id', lsb=3, width=1, sw='r', hw='w', reset=None, desc=''),
                Field(name='cfg_slot', lsb=4, width=1, sw='r', hw='w', reset=None, desc=''),
                Field(name='cfg_self', lsb=5, width=1, sw='r', hw='w', reset=None, desc=''),
                Field(name='cfg_parent', lsb=6, width=1, sw='r', hw='w', reset=None, desc=''),
                Field(name='cfg_dup', lsb=7, width=1, sw='r', hw='w', reset=None, desc=''),
                Field(name='cfg_child', lsb=8, width=1, sw='r', hw='w', reset=None, desc=''),
                Field(name='cfg_write', lsb=9, width=1, sw='r', hw='w', reset=None, desc=''),
                Field(name='outside', lsb=10, width=1, sw='r', hw='w', reset=None, desc=''),
                Field(name='notice', lsb=11, width=1, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='STALE', address=0x470, offset=0x70, width=32, desc="Notices and done strobes dropped because they carried another barrier's number (an aborted node finishing late); wraps at 2**32.", fields=(
                Field(name='count', lsb=0, width=32, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='RELEASED_AT', address=0x478, offset=0x78, width=64, desc='', fields=(
                Field(name='cycle', lsb=0, width=64, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='S', address=0x480, offset=0x80, width=64, desc='', fields=(
                Field(name='cycle', lsb=0, width=64, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='MT', address=0x488, offset=0x88, width=64, desc='', fields=(
                Field(name='cycle', lsb=0, width=64, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='E', address=0x490, offset=0x90, width=64, desc='', fields=(
                Field(name='cycle', lsb=0, width=64, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='ABORT_ESTIMATE', address=0x498, offset=0x98, width=64, desc='The estimate the abort of barrier NUMBERS.abort_seq carried.', fields=(
                Field(name='value', lsb=0, width=64, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='SELECT', address=0x4a0, offset=0xa0, width=32, desc='entry: the abort-log entry LOG_ENTRY and LOG_IDS show. word: which 32 node ids (32 * word ..) LOG_IDS and VECTOR show.', fields=(
                Field(name='entry', lsb=0, width=10, sw='rw', hw='r', reset=0x0, desc=''),
                Field(name='word', lsb=16, width=16, sw='rw', hw='r', reset=0x0, desc=''),
            )),
            Register(name='LOG_ENTRY', address=0x4a4, offset=0xa4, width=32, desc='seq: the barrier of log entry SELECT.entry. count: early releases logged since start (entry k holds the k-th, modulo the log depth; saturates at 65535).', fields=(
                Field(name='seq', lsb=0, width=16, sw='r', hw='w', reset=None, desc=''),
                Field(name='count', lsb=16, width=16, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='LOG_IDS', address=0x4a8, offset=0xa8, width=32, desc='Bit i: node 32 * SELECT.word + i was aborted in log entry SELECT.entry.', fields=(
                Field(name='ids', lsb=0, width=32, sw='r', hw='w', reset=None, desc=''),
            )),
            Register(name='VECTOR', address=0x4ac, offset=0xac, width=32, desc='Bit i: node 32 * SELECT.word + i completed the current barrier in this subtree (seed register PR).', fields=(
                Field(name='bits', lsb=0, width=32, sw='r', hw='w', reset=None, desc=''),
            )),
        )),
    ),
)
