"""The numpy reference of an all-to-all-v on the repack units (seed 003)."""

import numpy as np

from .repack_checks import _check_matrix

__all__ = ["reference_alltoallv"]


def reference_alltoallv(blocks):
    """The whole exchange in numpy: ``out[j][i] = blocks[i][j]`` (a transpose of the block
    matrix; blocks are 1-D arrays, possibly empty)."""
    n = _check_matrix(blocks)
    return [[np.asarray(blocks[i][j]) for i in range(n)] for j in range(n)]
