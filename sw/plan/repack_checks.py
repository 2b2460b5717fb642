"""The argument checks the host modules of the repack units share: integers (numpy's too),
data widths, N×N block matrices."""

import numpy as np

from nicoll.hw.params import DATA_WIDTHS

from ..errors import NicollError

__all__ = []


def _is_int(value):
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _check_data_width(data_width):
    if not _is_int(data_width) or int(data_width) not in DATA_WIDTHS:
        raise NicollError(f"data_width must be one of {', '.join(map(str, DATA_WIDTHS))}, "
                          f"not {data_width!r}")
    return int(data_width)


def _check_matrix(blocks):
    n = len(blocks)
    if n == 0:
        raise NicollError("the block matrix is empty")
    for i, row in enumerate(blocks):
        if len(row) != n:
            raise NicollError(f"the block matrix must be N×N: row {i} has {len(row)} blocks, "
                              f"N = {n}")
    return n
