"""Threshold tuning (seed 004, figs. 6 and 7) against synthetic accuracy curves."""

import math
import random

import pytest

from nicoll import NicollError
from nicoll.plan.actune import TuneResult, tune_count_threshold, tune_time_threshold


class Counted:
    """An accuracy curve that remembers every threshold it was run with."""

    def __init__(self, f):
        self.f = f
        self.calls = []

    def __call__(self, threshold):
        self.calls.append(threshold)
        return self.f(threshold)


def smallest_meeting(f, full, required):
    return min(t for t in range(1, full + 1) if f(t) >= required)


CURVES = {
    "linear": lambda n: (lambda m: m / n),
    "sqrt": lambda n: (lambda m: math.sqrt(m / n)),
    "square": lambda n: (lambda m: (m / n) ** 2),
    "sigmoid": lambda n: (lambda m: 1 / (1 + math.exp(-10 * (m / n - 0.6)))),
    "step": lambda n: (lambda m: 0.95 if m >= 0.7 * n else 0.2),
    "saturating": lambda n: (lambda m: 1 - math.exp(-5 * m / n)),
}


@pytest.mark.parametrize("curve", sorted(CURVES))
@pytest.mark.parametrize("n", [2, 7, 8, 64, 100])
def test_count_exact_tolerance_finds_the_smallest_threshold(curve, n):
    """With a zero tolerance on a monotone curve the halving search ends at the smallest m
    whose accuracy meets the requirement, in about log2(n) runs."""
    f = CURVES[curve](n)
    for required in (0.3, 0.5, 0.9):
        if f(n) < required:
            continue
        run = Counted(f)
        res = tune_count_threshold(run, n, required, 0.0)
        assert isinstance(res, TuneResult)
        assert res.threshold == smallest_meeting(f, n, required), (curve, n, required, res)
        assert res.accuracy == f(res.threshold)
        assert run.calls[0] == n                                # s1: the full threshold
        assert run.calls[1] == math.ceil(n / 2)                 # s4: half of it
        assert [t for t, _ in res.trials] == run.calls
        assert len(run.calls) <= math.ceil(math.log2(n)) + 2
        assert all(1 <= t <= n for t in run.calls)


@pytest.mark.parametrize("seed", range(40))
def test_count_random_monotone_curves(seed):
    rng = random.Random(seed)
    n = rng.randrange(1, 200)
    steps = [rng.random() ** 3 for _ in range(n)]
    values = [sum(steps[:m]) / sum(steps) for m in range(1, n + 1)]

    def f(m):
        return values[m - 1]

    required = rng.uniform(0, 1)
    tolerance = rng.choice([0.0, 0.01, 0.05])
    res = tune_count_threshold(f, n, required, tolerance)
    if res.converged:
        assert abs(res.accuracy - required) <= tolerance
    else:
        assert res.accuracy >= required
        assert res.threshold == smallest_meeting(f, n, required)


def test_count_stops_as_soon_as_within_tolerance():
    n = 64
    run = Counted(lambda m: m / n)
    # Half the nodes give 0.5, within 0.1 of 0.55: s6 stops at once (s8).
    res = tune_count_threshold(run, n, 0.55, 0.1)
    assert res == TuneResult(threshold=32, accuracy=0.5, converged=True,
                             trials=((64, 1.0), (32, 0.5)))
    # Moves by n/4, then n/8, ...: 32 -> 48 -> 40 -> 44 (0.6875 is within 0.02 of 0.7).
    run = Counted(lambda m: m / n)
    res = tune_count_threshold(run, n, 0.7, 0.02)
    assert run.calls == [64, 32, 48, 40, 44]
    assert res.threshold == 44 and res.converged


def test_count_edge_cases():
    # One node: nothing to search.
    res = tune_count_threshold(lambda m: 1.0, 1, 0.5, 0.1)
    assert res == TuneResult(1, 1.0, False, ((1, 1.0),))
    # Constant accuracy: every threshold meets it, the search walks down to 1.
    res = tune_count_threshold(lambda m: 0.9, 16, 0.5, 0.0)
    assert res.threshold == 1 and not res.converged
    # Only the full threshold meets it.
    res = tune_count_threshold(lambda m: 1.0 if m == 16 else 0.0, 16, 0.5, 0.0)
    assert res.threshold == 16 and res.accuracy == 1.0
    # A requirement just above the full accuracy but within the tolerance is accepted.
    res = tune_count_threshold(lambda m: m / 10, 10, 1.05, 0.1)
    assert res.converged and abs(res.accuracy - 1.05) <= 0.1
    # A measured full accuracy skips step s1.
    run = Counted(lambda m: m / 8)
    res = tune_count_threshold(run, 8, 0.5, 0.0, full_accuracy=1.0)
    assert run.calls[0] == 4 and res.trials[0] == (8, 1.0) and res.threshold == 4
    # Integer accuracies are fine.
    assert tune_count_threshold(lambda m: m, 10, 7, 0).threshold == 7


def test_time_threshold():
    s, e = 1000, 1000 + 4096
    span = e - s

    def f(c):
        return min(1.0, 0.2 + 0.8 * c / 3000)

    run = Counted(f)
    res = tune_time_threshold(run, s, e, 0.9, 0.0)
    assert run.calls[0] == span and run.calls[1] == span // 2        # s14: (call - c0)/2
    assert res.threshold == smallest_meeting(f, span, 0.9)
    assert len(run.calls) <= math.ceil(math.log2(span)) + 2
    res = tune_time_threshold(f, s, e, 0.9, 0.01)
    assert res.converged and abs(res.accuracy - 0.9) <= 0.01
    # The shortest span: c = 1 only.
    assert tune_time_threshold(lambda c: 1.0, 5, 6, 0.5, 0.0).threshold == 1


def test_bad_arguments():
    f = lambda m: m / 8                                     # noqa: E731
    cases = [
        (lambda: tune_count_threshold(f, 0, 0.5, 0.1), r"^n must be at least 1, not 0$"),
        (lambda: tune_count_threshold(f, 8.0, 0.5, 0.1), r"^n must be an integer, not 8\.0$"),
        (lambda: tune_count_threshold(f, True, 0.5, 0.1), r"^n must be an integer, not True$"),
        (lambda: tune_count_threshold(None, 8, 0.5, 0.1),
         r"^run must be a callable threshold -> accuracy, not None$"),
        (lambda: tune_count_threshold(f, 8, "0.5", 0.1),
         r"^required_accuracy must be a finite number, not '0\.5'$"),
        (lambda: tune_count_threshold(f, 8, math.nan, 0.1),
         r"^required_accuracy must be a finite number, not nan$"),
        (lambda: tune_count_threshold(f, 8, 0.5, -0.1),
         r"^tolerance must not be negative, not -0\.1$"),
        (lambda: tune_count_threshold(f, 8, 0.5, math.inf),
         r"^tolerance must be a finite number, not inf$"),
        (lambda: tune_count_threshold(f, 8, 1.5, 0.1),
         r"^required_accuracy 1\.5 is more than the accuracy 1\.0 of the full count threshold "
         r"8 plus the tolerance 0\.1: no threshold reaches it$"),
        (lambda: tune_count_threshold(lambda m: None, 8, 0.5, 0.1),
         r"^run\(8\) must return the accuracy as a finite number, not None \(count\)$"),
        (lambda: tune_count_threshold(f, 8, 0.5, 0.1, full_accuracy="x"),
         r"^full_accuracy must be a finite number, not 'x'$"),
        (lambda: tune_time_threshold(f, 10, 10, 0.5, 0.1),
         r"^e must be later than s, not s = 10, e = 10: "),
        (lambda: tune_time_threshold(f, -1, 10, 0.5, 0.1), r"^s must be at least 0, not -1$"),
        (lambda: tune_time_threshold(f, 0, 2.5, 0.5, 0.1), r"^e must be an integer, not 2\.5$"),
    ]
    for call, message in cases:
        with pytest.raises(NicollError, match=message):
            call()
    # NicollError is a ValueError: callers validating input catch it the usual way.
    with pytest.raises(ValueError):
        tune_count_threshold(f, 0, 0.5, 0.1)
