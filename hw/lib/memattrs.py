# Ref: yosys `$mem_v2` cell, parameter RD_COLLISION_X_MASK (docs: "Memories", the read port's
#      collision mask: a set bit makes a read that meets a write to the same address undefined).
"""Memory attributes the synthesis flow acts on.

A synchronous read port that is not transparent promises read-before-write: a read of a
row written in the same cycle returns the old value.  An ECP5 block RAM gives no such
promise between its two ports, so yosys emulates it in front of every such port: the
write delayed a cycle, an address compare and a bypass multiplexer as wide as the data.
Where a block never reads a row in the cycle one of its write ports writes it, that logic
never acts; the block then says so by creating its memory with ``attrs=COLLISIONS_DONT_CARE``
(and a comment saying why it holds), and :func:`yosys_collision_commands` makes those
collisions undefined before yosys maps the memory.

Simulation is unaffected: the simulator keeps read-before-write, which is one of the values
an undefined read may return.
"""

__all__ = ["COLLISIONS_DONT_CARE", "yosys_collision_commands"]


#: ``Memory(attrs=...)`` of a memory whose read ports never meet a write of the same row.
COLLISIONS_DONT_CARE = {"nicoll_collisions": "dont_care"}

# The mask is one bit per (read port, write port) pair and its width must match exactly, so
# one command per port count the project's memories may have.
_MAX_READ_PORTS = 8
_MAX_WRITE_PORTS = 4


def yosys_collision_commands():
    """Yosys commands, to run after the design is read: collect the memories and mark every
    collision of those with :data:`COLLISIONS_DONT_CARE` undefined."""
    (name, value), = COLLISIONS_DONT_CARE.items()
    # memory_collect passes over modules that still hold processes.
    commands = ["proc", "memory_collect"]
    for reads in range(1, _MAX_READ_PORTS + 1):
        for writes in range(1, _MAX_WRITE_PORTS + 1):
            bits = reads * writes
            commands.append(
                f"setparam -set RD_COLLISION_X_MASK {bits}'b{'1' * bits} "
                f"a:{name}={value} r:RD_PORTS={reads} %i r:WR_PORTS={writes} %i")
    return commands
