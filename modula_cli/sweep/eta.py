"""How long a sweep has left: each remaining run's time predicted from its size, scaled by how the launch
has gone so far.

A run's time is modelled as ``a · S + b · F``: ``S = steps × depth`` counts the per-layer, per-step work
whose cost does not grow with width (Python dispatch, kernel launches, small tensors), ``F = S × batch ×
context × width²`` the matmuls' FLOPs. Once the runs this launch trained differ in ``F / S`` (two widths,
say), ``a`` and ``b`` are fitted to their times (least squares; the FLOP share of the smallest run kept at
``MIN_FLOP_SHARE`` or more); before that, the overhead is taken as ``PRIOR_OVERHEAD`` of the trained runs'
time, and the estimate comes with the range ``PRIOR_RANGE`` gives. Measured on the quick sweep (2-core CPU,
widths 32/64/128: 13/20/55 s a run with 1 thread, 11/14/38 s with 2) and on a packed width sweep (widths
32–256: 57/91/308/1142 s), a power law fitted to the two smallest widths underestimated the rest by 1.7×;
this model predicts the rest from the smallest width alone 3 % low (1 thread), 29 % low (packed) and 1.21×
too high (2 threads), each truth inside the range given with it, and from the two smallest within 13 %, 27 %
and 32 % (tests/test_eta.py). The total is scaled by the launch's elapsed time over the time its trained runs
took, which folds in what the model leaves out: start-up, evaluation, and jobs that run in parallel.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

# The share of a small run's time that does not grow with width, until two sizes have run: what the measured
# sweeps above imply when their smallest width's time predicts a larger width's exactly (quick sweep, 1 thread:
# 0.82 at width 64, 0.79 at 128; 2 threads: 0.91, 0.84; packed: 0.80, 0.71, 0.70 at 64, 128, 256). Until then
# the estimate is given with the range that this spread of shares gives.
PRIOR_OVERHEAD = 0.8
PRIOR_RANGE = (0.70, 0.92)
# The FLOP share of the smallest run is never fitted below this: between two small widths whose times differ
# little (or by noise) a fit would all but drop the part that dominates the largest widths.
MIN_FLOP_SHARE = 0.1


def _knob(knobs: Mapping[str, object], name: str) -> float:
    value = knobs.get(name)
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    return float(value) if ok else 1.0  # absent (no context for images): no factor


def sizes(knobs: Mapping[str, object]) -> tuple[float, float]:
    """``(S, F)`` of one run: its width-independent work and its FLOP-like work."""
    steps_layers = _knob(knobs, "steps") * _knob(knobs, "depth")
    flops = steps_layers * _knob(knobs, "batch_size") * _knob(knobs, "context") * _knob(knobs, "width") ** 2
    return steps_layers, flops


def one_size(trained: Sequence[tuple[Mapping[str, object], float]]) -> bool:
    """Whether the trained runs are all of one size, so that the model's two terms cannot be told apart yet."""
    ratio = np.array([f / s for s, f in (sizes(knobs) for knobs, _ in trained)])
    return bool(ratio.max() <= ratio.min() * 1.01)


def coefficients(trained: Sequence[tuple[Mapping[str, object], float]],
                 prior: float = PRIOR_OVERHEAD) -> tuple[float, float]:
    """``(a, b)`` of ``time = a·S + b·F``, from the trained runs (knobs and seconds each); ``prior``: the
    overhead share taken while they are all of one size."""
    x = np.array([sizes(knobs) for knobs, _ in trained])
    t = np.array([seconds for _, seconds in trained])
    if one_size(trained):
        return prior * float(np.mean(t / x[:, 0])), (1 - prior) * float(np.mean(t / x[:, 1]))
    a, b = np.linalg.lstsq(x, t, rcond=None)[0]
    small = int(np.argmin(x[:, 1]))
    floor = MIN_FLOP_SHARE * t[small] / x[small, 1]
    if b < floor:  # keep the smallest run's time: what the FLOP part gains, the other part gives up
        b = floor
        a = max(0.0, float((t[small] - b * x[small, 1]) / x[small, 0]))
    return max(0.0, float(a)), float(b)


def predicted_seconds(trained: Sequence[tuple[Mapping[str, object], float]],
                      runs: Sequence[Mapping[str, object]], prior: float = PRIOR_OVERHEAD) -> np.ndarray:
    """Each run's time under the model fitted to the trained runs."""
    a, b = coefficients(trained, prior)
    return np.array([a * s + b * f for s, f in (sizes(knobs) for knobs in runs)])


def time_left(trained: Sequence[tuple[Mapping[str, object], float]], remaining: Sequence[Mapping[str, object]],
              elapsed: float, prior: float = PRIOR_OVERHEAD) -> float | None:
    """Seconds until the remaining runs end, or ``None`` before any run of this launch was trained."""
    if not trained:
        return None
    if not remaining:
        return 0.0
    took = sum(seconds for _, seconds in trained)
    pace = elapsed / took if took > 0 else 1.0  # overheads and parallel jobs: how the launch really went
    return float(pace * predicted_seconds(trained, remaining, prior).sum())


def time_left_range(trained: Sequence[tuple[Mapping[str, object], float]], remaining: Sequence[Mapping[str, object]],
                    elapsed: float) -> tuple[float, float, float] | None:
    """``(estimate, low, high)`` seconds left; while one size has run, low and high are the estimates at the
    ends of ``PRIOR_RANGE`` (a larger overhead share predicts less time), after that all three are the fit's."""
    estimate = time_left(trained, remaining, elapsed)
    if estimate is None or not remaining or not one_size(trained):
        return None if estimate is None else (estimate, estimate, estimate)
    low, high = (time_left(trained, remaining, elapsed, prior) for prior in sorted(PRIOR_RANGE, reverse=True))
    return estimate, float(low), float(high)
