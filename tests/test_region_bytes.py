"""nicoll.region_bytes against the definition of a region, byte by byte, over every small shape."""

import itertools

import numpy as np

from nicoll import region_bytes


def by_definition(offset, length, run, stride):
    """Each stream byte's address: run k starts at offset + k * stride (contiguous when run
    is 0 or at least the length)."""
    if run == 0 or run >= length:
        return [offset + i for i in range(length)]
    return [offset + (i // run) * stride + i % run for i in range(length)]


SHAPES = [(offset, length, run, stride)
          for offset, length in itertools.product((0, 3, 8, 13), range(0, 12))
          for run in range(0, 13) for stride in range(max(run, 1), run + 5)]


def test_every_function_agrees_with_the_definition():
    for shape in SHAPES:
        want = by_definition(*shape)
        spans = region_bytes.intervals(*shape)
        assert [a for lo, hi in spans for a in range(lo, hi)] == want, shape
        assert region_bytes.end(*shape) == (max(want) + 1 if want else shape[0]), shape
        got = np.arange(64)[region_bytes.byte_addresses(*shape)].tolist()
        assert got == want, shape
        for width in (1, 4, 8):
            # A row counts once per run that touches it.
            _, length, run, _ = shape
            step = run if 0 < run < length else max(length, 1)
            per_run = [{a // width for a in want[k:k + step]} for k in range(0, length, step)]
            assert region_bytes.rows(*shape, width=width) == sum(map(len, per_run)), (shape, width)


def test_a_slice_of_the_stream():
    shape = (5, 20, 3, 7)
    want = by_definition(*shape)
    for start in range(0, 21):
        for stop in range(start, 21):
            spans = region_bytes.intervals(*shape, start, stop)
            assert [a for lo, hi in spans for a in range(lo, hi)] == want[start:stop]


def test_strided():
    assert region_bytes.strided(0, 10, 3, 4)
    assert not region_bytes.strided(0, 10, 0, 4) and not region_bytes.strided(0, 10, 10, 12)
