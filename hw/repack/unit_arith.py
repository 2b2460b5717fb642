"""The repack unit's arithmetic: sums and compares built as short carry chains side by side
(each docstring names the path it took off), and one stage of the output's byte rotator.
:class:`~.unit.RepackUnit`'s parts share them."""

from amaranth.hdl import Cat, Const, Value

# Every name here is the unit's parts' own, imported by them: none is public.
__all__ = []


def _tree_sum(values):
    """Sum of ``values`` as a balanced adder tree, log2(len) adders deep (Python's ``sum``
    would build a chain of len - 1)."""
    values = list(values)
    while len(values) > 1:
        values = [values[k] + values[k + 1] if k + 1 < len(values) else values[k]
                  for k in range(0, len(values), 2)]
    return values[0]


def _low_thermometer(index, count):
    """``(2 << (index - 1) % count) - 1`` for ``index`` >= 1 and ``count`` a power of two (or
    ``index`` <= ``count``): bits 0 .. (index - 1) mod count set.  Each bit is a function of
    index's low bits alone (bit e: index mod count is 0 or above e), where the subtract,
    shift and subtract put two carry chains in front of the mask (the 256-bit unit's late
    pin alone at seed 3 of abe24a0, the configuration -> tb_mask, 5.03 ns)."""
    index = Value.cast(index)
    bits = max(1, (count - 1).bit_length())
    low = index[:bits] if count > 1 else Const(0, 1)
    wrap = low == 0 if count > 1 else Const(1, 1)
    return Cat(wrap | (low > e) for e in range(count))


def _sum_exceeds(a, b, limit):
    """``a + b > limit`` for unsigned ``a``, ``b`` and a signed ``limit``, as one carry chain:
    the sign of ``a + b + ~limit`` (that is ``a + b - limit - 1``), its three operands first
    reduced to two by a carry-save stage (one LUT per bit).  Written as an add and then a
    compare, it is two chains in series (the 64-bit repack unit's worst path)."""
    n = max(len(a), len(b), len(limit)) + 2
    x = Cat(a, Const(0, n - len(a)))
    y = Cat(b, Const(0, n - len(b)))
    z = Cat(~limit, (~limit[-1]).replicate(n - len(limit)))
    half = x ^ y ^ z
    carry = Cat(Const(0, 1), (x & y) | (x & z) | (y & z))[:n]
    return ~(half + carry)[n - 1]


def _exceeds(a, b, limit):
    """``a + b > limit`` (``a > limit`` when ``b`` is None) for unsigned ``a`` and ``b`` that
    sum to fewer bits than ``limit`` has (a table beat's sum, against a byte budget): the
    carry chain is as wide as the sum, and the limit's high bits (all zero, or a negative
    sign) are tested beside it.  The whole width's chain in front of the budget flag was
    the repack unit's late pin alone on the 45F at seed 2 of 4eadde1 (room_bytes ->
    the compare -> in_q.over, 5.42 ns)."""
    a, limit = Value.cast(a), Value.cast(limit)
    k = len(a) if b is None else max(len(a), len(Value.cast(b))) + 1
    signed = limit.shape().signed
    top = len(limit) - signed                  # magnitude bits
    if k >= top:
        return a > limit if b is None else _sum_exceeds(a, b, limit)
    negative = limit[-1] if signed else Const(0, 1)
    low = limit[:k]
    low_over = a > low if b is None else _sum_exceeds(a, b, Cat(low, Const(0, 1)).as_signed())
    return negative | ((limit[k:top] == 0) & low_over)


def _greater(a, b, split):
    """``a > b`` (unsigned) from two compares of halves side by side, split at bit
    ``split``, and one LUT: two short carry chains in parallel where one ran the width (a
    32-bit compare in front of the configuration slice was the repack unit's late pin alone
    on the 45F at seed 2 of 4eadde1, 5.15 ns)."""
    a, b = Value.cast(a), Value.cast(b)
    return (a[split:] > b[split:]) | ((a[split:] == b[split:]) & (a[:split] > b[:split]))


def _rotate_bytes(value, amount, at):
    """``value`` rotated right by ``amount << at`` bytes (byte q + amount·2**at moves to byte
    q): one stage of a staged byte rotator.  The offset is ``amount`` with zeros below it,
    wiring only, so no adder sits in front of the shifter."""
    return Cat(value, value).bit_select(Cat(Const(0, 3 + at), amount), len(value))


def _ends_in_row(left, room, lane_bits, small):
    """``left <= room`` for a room of at most one row (``2**lane_bits`` bytes): LB+1 bits
    compared, given ``small``, a flag kept beside ``left`` that the rest of it is zero."""
    left = Value.cast(left)
    return small & (left[:lane_bits + 1] <= room)
