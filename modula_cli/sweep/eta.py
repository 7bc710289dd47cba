"""How long a sweep has left: each remaining run's time predicted from its size, scaled by how the launch
has gone so far.

A run's time is modelled as ``a · S + b · F``: ``S = steps × depth`` counts the per-layer, per-step work
whose cost does not grow with width (Python dispatch, kernel launches, small tensors), ``F = S × batch ×
context × width²`` the matmuls' FLOPs. Once the runs this launch trained differ in ``F / S`` (two widths,
say), ``a`` and ``b`` are fitted to their times (least squares; the FLOP share of the smallest run kept at
``MIN_FLOP_SHARE`` or more); before that, the overhead is taken as ``PRIOR_OVERHEAD`` of the trained runs'
time. Measured on the quick sweep (2-core CPU, widths 32/64/128: 13/20/55 s a run with 1 thread, 11/14/38 s
with 2) and on a packed width sweep (widths 32–256: 57/91/308/1142 s), a power law fitted to the two
smallest widths underestimated the rest by 1.7×; this model predicts the rest from the smallest width alone
within 16 % (1 thread, packed) and 1.4× too high (2 threads), and from the two smallest within 13 %, 27 %
and 32 % (tests/test_eta.py). The total is scaled by the launch's elapsed time over the time its trained
runs took, which folds in what the model leaves out: start-up, evaluation, and jobs that run in parallel.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

PRIOR_OVERHEAD = 0.75  # share of a small run's time that does not grow with width, until measured
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


def coefficients(trained: Sequence[tuple[Mapping[str, object], float]]) -> tuple[float, float]:
    """``(a, b)`` of ``time = a·S + b·F``, from the trained runs (knobs and seconds each)."""
    x = np.array([sizes(knobs) for knobs, _ in trained])
    t = np.array([seconds for _, seconds in trained])
    ratio = x[:, 1] / x[:, 0]
    if ratio.max() <= ratio.min() * 1.01:  # one size: the terms cannot be told apart yet
        return PRIOR_OVERHEAD * float(np.mean(t / x[:, 0])), (1 - PRIOR_OVERHEAD) * float(np.mean(t / x[:, 1]))
    a, b = np.linalg.lstsq(x, t, rcond=None)[0]
    small = int(np.argmin(x[:, 1]))
    floor = MIN_FLOP_SHARE * t[small] / x[small, 1]
    if b < floor:  # keep the smallest run's time: what the FLOP part gains, the other part gives up
        b = floor
        a = max(0.0, float((t[small] - b * x[small, 1]) / x[small, 0]))
    return max(0.0, float(a)), float(b)


def predicted_seconds(trained: Sequence[tuple[Mapping[str, object], float]],
                      runs: Sequence[Mapping[str, object]]) -> np.ndarray:
    """Each run's time under the model fitted to the trained runs."""
    a, b = coefficients(trained)
    return np.array([a * s + b * f for s, f in (sizes(knobs) for knobs in runs)])


def time_left(trained: Sequence[tuple[Mapping[str, object], float]], remaining: Sequence[Mapping[str, object]],
              elapsed: float) -> float | None:
    """Seconds until the remaining runs end, or ``None`` before any run of this launch was trained."""
    if not trained:
        return None
    if not remaining:
        return 0.0
    took = sum(seconds for _, seconds in trained)
    pace = elapsed / took if took > 0 else 1.0  # overheads and parallel jobs: how the launch really went
    return float(pace * predicted_seconds(trained, remaining).sum())
