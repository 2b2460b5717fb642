"""Small helpers the barrier unit's parts share: the constructors' integer check, the index
bits of an id, a compare with a constant, an OR of terms, the split lookup of a routed-id
vector and a balanced priority multiplexer."""

from amaranth.hdl import Cat, Const, Mux
from amaranth.utils import ceil_log2
from ..params import check_int, is_int


__all__ = ["check_int", "check_log_depth", "index_bits", "below", "any_of", "routed_part", "first_set"]


def check_log_depth(log_depth):
    """Raise TypeError / ValueError unless ``log_depth`` (the abort log's entries) is a power
    of two between 16 and 1024."""
    if not is_int(log_depth):
        raise TypeError(f"log_depth must be an integer, not {log_depth!r}")
    if log_depth < 16 or log_depth > 1024 or log_depth & (log_depth - 1):
        raise ValueError(f"log_depth must be a power of two between 16 and 1024, "
                         f"not {log_depth!r}")


def index_bits(n):
    """(bits that index the vector and the route table of ``n`` ids, the low ones of them).
    A lookup of an id in a routed-id vector selects a part by the high bits in one register
    stage and a bit by the low ones in the next (:class:`~.decode.NoticeDecoder`,
    :class:`~.checks.ConfigChecks`)."""
    ibits = max(1, ceil_log2(n))
    return ibits, (ibits + 1) // 2


def below(value, limit):
    """``value < limit`` for a constant ``limit``: for a power of two, the zero test of the
    bits at and above it.  yosys maps the compare with a constant as a carry chain; the
    8-node unit's id checks (node, parent and child ids against the node count) were such
    chains from the configuration ports, its latest pin alone at seed 1 of 0ca1b4c
    (5.21 ns)."""
    if limit > 0 and limit & (limit - 1) == 0:
        bit = limit.bit_length() - 1
        return value[bit:] == 0 if len(value) > bit else Const(1, 1)
    return value < limit


def any_of(terms):
    """The OR of ``terms`` (0 for none)."""
    terms = list(terms)
    return Cat(terms).any() if terms else Const(0)


def routed_part(routed, index, n):
    """The part of a slot's routed-id vector ``routed`` (``n`` bits) that ``index``'s high
    bits select: its ``2**lo`` bits, the vector padded with zeros past ``n``.  A lookup of an
    id selects this part in one register stage and a bit of it by the id's low bits in the
    next."""
    ibits, lo = index_bits(n)
    if ibits <= lo:
        return routed
    padded = Cat(routed, Const(0, (1 << ibits) - n))
    return padded.word_select(index[lo:ibits], 1 << lo)


def first_set(flags, values):
    """(any flag, the value of the first flag set): a balanced priority multiplexer."""
    if len(flags) == 1:
        return flags[0], values[0]
    half = len(flags) // 2
    any_lo, lo = first_set(flags[:half], values[:half])
    any_hi, hi = first_set(flags[half:], values[half:])
    return any_lo | any_hi, Mux(any_lo, lo, hi)
