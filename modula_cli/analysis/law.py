"""The transfer law: the optimal LR as a power of the scale, fitted over every measured scale, and the LR it
predicts at a scale nobody swept.

    log2 η*(s) = a + Σ_k b_k · log2 s_k        (one scale axis, or two: width × steps, width × depth, …)

``b_k`` is how far the optimum moves per doubling of axis k (log2 LR, so grid steps of a powers-of-two grid).
The points are the fitted optima of the scales (``stats.optimum``), weighted by their own precision (the
variance of their bootstrap draws); a point whose optimum lies at an edge of its LRs is a bound, not a
value, and is left out. The uncertainty is the bootstrap the optima already carry: every scale's resamples
of whole seeds give a draw of its optimum, and the line fitted through the r-th draw of every scale is the
r-th draw of the law. Scales along the first axis resample independently (separate runs, other shapes); in a
two-axis sweep the points at one first-axis scale resample the same seeds together (seed s at width 64 has the
same initial weights and batches at every horizon, so their noise is shared and stays paired). The 95 % intervals
are those draws' (``stats.interval``: widened for few seeds), and, where the points scatter about the line
more than their own noise explains (reduced χ² > 1, with more points than coefficients), widened by √χ².

With three or more scales of an axis a quadratic term in its log2 scale is fitted the same way: when its
interval excludes 0, the drift is not a power law over these scales and no prediction is made. With two,
nothing checks that the line is straight, and the report says so.

The prediction at a target is the law's value there; its interval is the law's draws there (so it widens
with the distance beyond the scales measured), widened as above. Its coverage, on synthetic sweeps with a
known drift at 1–8 doublings beyond the largest scale, is measured in docs/results/law_coverage.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .stats import Optimum, interval, small_sample_factor

# an optimum's variance is never taken below (this share of a grid step)²: three seeds that agree exactly
# would otherwise give one point all the weight
VARIANCE_FLOOR = 0.1


@dataclass(frozen=True)
class LawPoint:
    """One measured scale: where it sits (log2 of its value on every axis) and its fitted optimum."""

    position: tuple[float, ...]
    optimum: Optimum


@dataclass(frozen=True)
class Estimate:
    """A number with its 95 % interval (NaN ends: no interval, e.g. one seed)."""

    value: float
    low: float
    high: float

    def covers(self, x: float) -> bool:
        return self.low <= x <= self.high


@dataclass(frozen=True)
class Prediction:
    """The law at a target: log2 LR with its 95 % prediction interval, how far beyond (+) or below (−) the
    measured scales the target lies on each axis (doublings; 0 inside them), and ``withheld``: why no LR is
    given (the law is curved, or one seed gives no interval), "" when one is."""

    target: tuple[float, ...]
    log2_lr: Estimate
    doublings: tuple[float, ...]
    withheld: str = ""

    @property
    def lr(self) -> Estimate:
        return Estimate(*(2.0 ** x for x in (self.log2_lr.value, self.log2_lr.low, self.log2_lr.high)))


@dataclass(frozen=True)
class Law:
    """A fitted law over ``points`` (the optima it used) along ``axes``."""

    axes: tuple[str, ...]
    positions: np.ndarray        # (points, axes): log2 scale
    optima: np.ndarray           # (points,): fitted log2 η*
    coefficients: np.ndarray     # (1 + axes,): a, b_1, …
    draws: np.ndarray            # (resamples, 1 + axes)
    seeds: int                   # the fewest seeds behind a point
    # the bootstrap arms' widening for few seeds: one curve's (``stats.small_sample_factor`` of the fewest seeds).
    # Pooling every scale's seeds into Student's t (Σ(n−1) degrees of freedom) was measured too: on skewed
    # curves over 5 scales it covered 67–73 %, since the three-point vertex's bias there does not shrink with
    # seeds (docs/statistics.md, "The transfer law")
    stretch: float
    inflation: float             # √(reduced χ²) when above 1, else 1
    curvature: tuple[Estimate | None, ...]  # per axis: the quadratic term (None: fewer than 3 scales there)

    @property
    def intercept(self) -> float:
        return float(self.coefficients[0])

    def slope(self, axis: int = 0) -> Estimate:
        """Log2 LR per doubling of ``axis``, with its 95 % interval."""
        return self._estimate(self.draws[:, 1 + axis], float(self.coefficients[1 + axis]))

    @property
    def curved(self) -> bool:
        """A quadratic term's interval excludes 0 on some axis."""
        return any(_bounded(c) and not c.covers(0.0) for c in self.curvature)

    @property
    def checked(self) -> bool:
        """Whether straightness was checked: three or more scales on some axis, and seeds to give an interval."""
        return any(_bounded(c) for c in self.curvature)

    def _estimate(self, draws: np.ndarray, value: float) -> Estimate:
        low, high = interval(draws, value, self.seeds, stretch=self.stretch)
        return Estimate(value, value - self.inflation * (value - low), value + self.inflation * (high - value))

    def predict(self, target: Sequence[float]) -> Prediction:
        """The law at ``target`` (log2 scale per axis)."""
        x = np.array([1.0, *target])
        point = float(self.coefficients @ x)
        doublings = tuple(float(max(t - self.positions[:, k].max(), 0.0) + min(t - self.positions[:, k].min(), 0.0))
                          for k, t in enumerate(target))
        estimate = self._estimate(self.draws @ x, point)
        withheld = ""
        if self.seeds < 2:
            withheld = "one seed gives no interval: train 3 or more (train.seed=0,1,2)"
        elif self.curved:
            withheld = "the drift is not a power law over these scales (its curvature's 95 % interval excludes 0)"
        return Prediction(tuple(float(t) for t in target), estimate, doublings, withheld)


def _bounded(estimate: Estimate | None) -> bool:
    return estimate is not None and math.isfinite(estimate.low) and math.isfinite(estimate.high)


def _weights(points: Sequence[LawPoint], floor: float) -> np.ndarray:
    """1 / variance of each optimum's draws (made unbiased for its seed count; at least ``floor``²)."""
    variances = []
    for point in points:
        draws = point.optimum.draws.log2_lr
        draws = draws[np.isfinite(draws)]
        n = max(point.optimum.seeds, 2)
        variance = float(draws.var()) * n / (n - 1) if draws.size > 1 else 0.0
        variances.append(max(variance, floor**2))
    return 1.0 / np.array(variances)


def _solver(design: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The weighted least-squares map from the optima to the coefficients: coefficients = M @ optima."""
    weighted = design * weights[:, None]
    return np.linalg.solve(design.T @ weighted, weighted.T)


def line(positions: Sequence[float], values: Sequence[float]) -> tuple[float, float]:
    """The law's line through bare point estimates (intercept, slope), all weighted alike: where the LR search
    expects the next scale's optimum from the scales it has bracketed (one point: a flat line through it)."""
    if len(values) == 1 or np.unique(positions).size < 2:
        return float(values[-1]), 0.0
    design = np.column_stack([np.ones(len(values)), np.asarray(positions, dtype=float)])
    intercept, slope = _solver(design, np.ones(len(values))) @ np.asarray(values, dtype=float)
    return float(intercept), float(slope)


def usable(points: Sequence[LawPoint]) -> list[LawPoint]:
    """The points a law can use: a fitted optimum inside its LRs (an edge is a bound, not a value)."""
    return [p for p in points if not p.optimum.edge and math.isfinite(p.optimum.log2_optimal_lr)]


def fit_law(axes: Sequence[str], points: Sequence[LawPoint], grid_step: float = 1.0) -> Law | None:
    """The law through ``points`` (edges left out by the caller, ``usable``); None when they cannot fix it:
    fewer distinct positions than coefficients, or the positions do not vary along every axis."""
    axes = tuple(axes)
    if not points:
        return None
    positions = np.array([p.position for p in points], dtype=float).reshape(len(points), len(axes))
    if len(points) < 1 + len(axes) or any(np.unique(positions[:, k]).size < 2 for k in range(len(axes))):
        return None
    design = np.column_stack([np.ones(len(points)), positions])
    if np.linalg.matrix_rank(design) < design.shape[1]:
        return None
    weights = _weights(points, VARIANCE_FLOOR * grid_step)
    optima = np.array([p.optimum.log2_optimal_lr for p in points])
    resampled = _resampled_optima(points)
    solver = _solver(design, weights)
    coefficients = solver @ optima
    draws = resampled @ solver.T
    seeds = min(p.optimum.seeds for p in points)
    spare = len(points) - design.shape[1]
    inflation = 1.0
    if spare > 0:
        chi2 = float(weights @ (optima - design @ coefficients) ** 2)
        inflation = max(1.0, math.sqrt(chi2 / spare))
    stretch = small_sample_factor(seeds) if seeds >= 2 else math.nan
    curvature = tuple(_curvature(design, positions[:, k], weights, optima, resampled, seeds, stretch)
                      for k in range(len(axes)))
    return Law(axes, positions, optima, coefficients, draws, seeds, stretch, inflation, curvature)


def _resampled_optima(points: Sequence[LawPoint]) -> np.ndarray:
    """(resamples, points): the r-th bootstrap draw of every point's optimum; resamples where a point has no
    finite draw are dropped."""
    draws = np.column_stack([p.optimum.draws.log2_lr for p in points])
    return draws[np.isfinite(draws).all(axis=1)]


def _curvature(design: np.ndarray, position: np.ndarray, weights: np.ndarray, optima: np.ndarray,
               resampled: np.ndarray, seeds: int, stretch: float) -> Estimate | None:
    """The quadratic term in one axis's log2 scale (centred: the same coefficient, better conditioned), fitted
    beside the law's own terms; None with fewer than three distinct scales on that axis."""
    if np.unique(position).size < 3:
        return None
    centred = position - position.mean()
    design = np.column_stack([design, centred**2])
    if np.linalg.matrix_rank(design) < design.shape[1]:
        return None
    solver = _solver(design, weights)
    value = float((solver @ optima)[-1])
    low, high = interval(resampled @ solver[-1], value, seeds, stretch=stretch)
    return Estimate(value, low, high)


def curve_curvature(optimum: Optimum) -> float:
    """How fast the cost rises away from the optimum of one scale's mean curve: the quadratic coefficient of
    the parabola through its best LR and two neighbours (cost per (log2 LR)²), NaN at an edge or where the
    three points do not make a valley."""
    best = optimum.best
    if optimum.edge or best <= 0 or best >= len(optimum.log2_lrs) - 1:
        return math.nan
    x = optimum.log2_lrs[best - 1: best + 2]
    y = optimum.mean[best - 1: best + 2]
    if not np.isfinite(y).all():
        return math.nan
    a = float(np.polyfit(x, y, 2)[0])
    return a if a > 0 else math.nan


def implied_regret(prediction: Prediction, curvature: float) -> float:
    """The cost of an LR at the prediction interval's farther end, if the target's curve has ``curvature``
    (the largest measured scale's): a·h², h the longer arm."""
    estimate = prediction.log2_lr
    arm = max(estimate.value - estimate.low, estimate.high - estimate.value)
    return curvature * arm**2 if math.isfinite(arm) and math.isfinite(curvature) else math.nan
