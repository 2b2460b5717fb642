"""Row slices with their checks: the engine's two memory read stages (the transmit read and
the receive's local read) take rows from a two-entry slice (:class:`~nicoll.hw.lib.skid.CheckedRing`)
whose entries carry flags worked out a cycle ahead, and the row's address beside them."""

from amaranth.hdl import Cat

from ..lib.skid import CheckedRing

__all__ = ["ROW_CHECKS", "row_outside", "row_ring", "check_rows"]


#: Flags a row slice keeps beside each entry, before the row's address: bit 0 the
#: scoreboard's hazard (a write of an earlier receive still in flight), bit 1 the row outside
#: memory.
ROW_CHECKS = 2


def row_outside(row, row_bits):
    """Whether a chunk's or a write's ``row`` lies past the end of a memory of 2**row_bits
    rows (a strided region ran off it)."""
    return (row >> row_bits) != 0


def row_ring(shape, *, row_bits, head_register):
    """A row slice for ``shape`` entries with :func:`check_rows`'s flags."""
    return CheckedRing(shape, checks=ROW_CHECKS + row_bits, head_register=head_register)


def check_rows(m, ring, hazard, *, row_bits):
    """A row slice's flags, for the entry loading and for each entry held: bit 0 ``hazard``,
    bit 1 the row outside memory, then the row's address in memory.  The address rides with
    the flags so that a block RAM's read address is the ring's flag register (or a 2:1 choice
    of two), not the payload's multiplexer at the ring's head pointer: the routed 256-bit
    core's path at seed 2 of fbf2cbb ran from the receive ring's head through that
    multiplexer to the local read's block RAMs (8.33 ns, one hop of 3.5 ns)."""
    def checks(row):
        return Cat(hazard, row_outside(row, row_bits), row[:row_bits])
    m.d.comb += ring.block_new.eq(checks(ring.i.payload.row))
    for k in range(2):
        m.d.comb += ring.block_entry[k].eq(checks(ring.entries[k].row))
