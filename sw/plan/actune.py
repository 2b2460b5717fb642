# Ref: seed 004, fig. 6 (steps s1-s8: the count threshold m) and fig. 7 (steps s11-s18: the
#      time threshold c), /work/shared/seeds/004_*.txt.
"""Tuning the approximate-computing barrier thresholds by a halving search.

The barrier unit (``nicoll.hw.barrier``) releases early when ``m`` nodes have finished
(count threshold) or ``c`` cycles after the first one finished (time threshold).  A smaller
threshold waits less and loses more work, so the program's accuracy falls.  These functions
choose the threshold for a required accuracy: they run the program through a caller-given
``run(threshold) -> accuracy`` and move the threshold by halving steps.

The procedure, as the seed gives it (fig. 6; fig. 7 is the same over cycles):

1. s1-s2: run with the full threshold (m = n; c = e − s) and take its accuracy.
2. s3: take the required accuracy ``ac`` and the tolerance ``t``.
3. s4-s5: run with half the full threshold.
4. s6-s7: while the accuracy is not within ``t`` of ``ac``, move the threshold by
   y_x = full / 2^(x+1) (x = 1, 2, … counts the moves), then run again.
5. s8: keep the threshold whose accuracy is within ``t``.

Two points where this module reads the seed's (machine-translated) text rather than copies it:

- The seed's step s6 reads "if |ac − a| < t, move on; otherwise keep the value", and its
  step s7 moves the threshold *up* when a ≥ ac.  Both are inverted against the purpose the
  seed states (the smallest threshold that still meets the required accuracy, so that
  early finishers wait least): here the search stops once |a − ac| ≤ t, moves the threshold
  *down* when the accuracy is sufficient (a ≥ ac) and *up* when it is not.
- The seed moves by y_x from "n/2" each time; here each move starts from the current
  threshold, which is what makes it a halving search.  Positions are kept exact (fractions)
  and the run uses the threshold rounded up, clamped to 1 .. full; the step "reaches zero"
  when it is under half a unit (a cycle or a node), where rounding can no longer move it.

If the step reaches zero first, the result is the smallest threshold tried whose accuracy
met ``ac`` (the full threshold, whose accuracy must, if nothing smaller did).  Accuracy
curves need not be exactly monotone, but the search assumes that accuracy grows with the
threshold.
"""

import math
from dataclasses import dataclass
from fractions import Fraction
from numbers import Real

from ..errors import NicollError

__all__ = ["TuneResult", "tune_count_threshold", "tune_time_threshold"]


@dataclass(frozen=True)
class TuneResult:
    """What a tuning search found.

    ``threshold``: the chosen m (a node count) or c (cycles); ``accuracy``: its measured
    accuracy; ``converged``: True when that accuracy is within the tolerance of the required
    one, False when the step reached zero first; ``trials``: every ``(threshold, accuracy)``
    run, in order (the full-threshold run first).
    """
    threshold: int
    accuracy: float
    converged: bool
    trials: tuple


def _check_count(name, value, minimum):
    if not isinstance(value, int) or isinstance(value, bool):
        raise NicollError(f"{name} must be an integer, not {value!r}")
    if value < minimum:
        raise NicollError(f"{name} must be at least {minimum}, not {value!r}")


def _check_real(name, value, *, nonnegative=False):
    if not isinstance(value, Real) or isinstance(value, bool) or not math.isfinite(value):
        raise NicollError(f"{name} must be a finite number, not {value!r}")
    if nonnegative and value < 0:
        raise NicollError(f"{name} must not be negative, not {value!r}")


def _measure(run, threshold, what):
    accuracy = run(threshold)
    if not isinstance(accuracy, Real) or isinstance(accuracy, bool) \
            or not math.isfinite(accuracy):
        raise NicollError(f"run({threshold}) must return the accuracy as a finite number, "
                          f"not {accuracy!r} ({what})")
    return accuracy


def _halving_search(run, full, required, tolerance, full_accuracy, what):
    if not callable(run):
        raise NicollError(f"run must be a callable threshold -> accuracy, not {run!r}")
    _check_real("required_accuracy", required)
    _check_real("tolerance", tolerance, nonnegative=True)
    trials = []

    def measure(threshold):
        accuracy = _measure(run, threshold, what)
        trials.append((threshold, accuracy))
        return accuracy

    def within(accuracy):
        return abs(accuracy - required) <= tolerance

    # s1-s2: the full threshold (no early release) gives the best accuracy there is.
    if full_accuracy is None:
        a_full = measure(full)
    else:
        _check_real("full_accuracy", full_accuracy)
        a_full = full_accuracy
        trials.append((full, a_full))
    # s3: the required accuracy must be reachable at all.
    if a_full < required and not within(a_full):
        raise NicollError(
            f"required_accuracy {required!r} is more than the accuracy {a_full!r} of the "
            f"full {what} threshold {full} plus the tolerance {tolerance!r}: no threshold "
            f"reaches it")

    def result(threshold, accuracy, converged):
        return TuneResult(threshold=threshold, accuracy=accuracy, converged=converged,
                          trials=tuple(trials))

    if full == 1:
        return result(1, a_full, within(a_full))
    # s4-s7: start at half, move by full / 2^(x+1).
    position = Fraction(full, 2)
    x = 0
    while True:
        threshold = min(full, max(1, math.ceil(position)))
        accuracy = measure(threshold)
        if within(accuracy):
            return result(threshold, accuracy, True)                # s8
        x += 1
        step = Fraction(full, 2 ** (x + 1))
        if step < Fraction(1, 2):
            break
        position += -step if accuracy >= required else step
    # The step reached zero: the smallest threshold that met the requirement.
    good = [(t, a) for t, a in trials if a >= required]
    threshold, accuracy = min(good) if good else (full, a_full)
    return result(threshold, accuracy, False)


def tune_count_threshold(run, n, required_accuracy, tolerance, *, full_accuracy=None):
    """Choose the count threshold m (seed 004, fig. 6).

    ``run(m) -> accuracy`` runs the program with the barrier in AC count mode and threshold m
    and returns its accuracy (higher is better).  ``n`` is the number of nodes (the full
    threshold, m = n, is a normal barrier).  ``full_accuracy``, if given, is the accuracy
    of a run with m = n that the caller already measured (step s1 is then skipped).
    Returns a :class:`TuneResult`; ``.threshold`` is m, 1 ≤ m ≤ n.
    """
    _check_count("n", n, 1)
    return _halving_search(run, n, required_accuracy, tolerance, full_accuracy, "count")


def tune_time_threshold(run, s, e, required_accuracy, tolerance, *, full_accuracy=None):
    """Choose the time threshold c in cycles (seed 004, fig. 7).

    ``s`` and ``e`` are the cycle stamps of the first and of the last completion of a
    data-collection run (mode 2, ``get_ac_value``); c ranges over 1 .. e − s, where e − s
    releases when everything has finished.  ``run(c) -> accuracy`` runs the program in AC
    time mode with threshold c.  ``full_accuracy`` as for :func:`tune_count_threshold`.
    Returns a :class:`TuneResult`; ``.threshold`` is c.
    """
    _check_count("s", s, 0)
    _check_count("e", e, 0)
    if e <= s:
        raise NicollError(f"e must be later than s, not s = {s!r}, e = {e!r}: the stamps of "
                          f"the first and last completion of a collect-mode run")
    return _halving_search(run, e - s, required_accuracy, tolerance, full_accuracy, "time")
