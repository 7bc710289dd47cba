"""How sure a sweep is: the optimal LR of a loss-vs-LR curve measured over seeds, with a bootstrap interval.

A curve is a matrix ``values[seed, lr]`` of one scale point: the chosen metric, signed so that lower is better,
``+inf`` where that seed diverged (a diverged LR is never an optimum and never averaged away) and NaN where
the run is missing (failed, pending). The optimum is the vertex of the parabola in log2(LR) through the best
grid point of the mean curve and its two neighbours (exact for a parabola; within half a grid step of the
best point whenever that point is lowest). Without a finite neighbour on one side (the grid ends there, or
the next LR diverged or is missing) the optimum is the best grid point and flagged as an edge: the truth may
lie beyond it, so its interval is open on that side.

The interval resamples seeds with replacement, whole seeds at a time: a seed's runs at different LRs share
their initialisation and batches, so their noise is correlated and must stay together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..config.schema import METRICS

LOWER_IS_BETTER = {"train_loss": True, "test_loss": True, "test_acc": False}
assert tuple(LOWER_IS_BETTER) == METRICS  # every metric a sweep may name has a direction
DEFAULT_RESAMPLES = 1000
CONFIDENCE = 0.95


def signed(values: np.ndarray, metric: str) -> np.ndarray:
    """The metric as a cost (lower is better); accuracy is negated."""
    return values if LOWER_IS_BETTER[metric] else -values


@dataclass(frozen=True)
class Vertices:
    """The optimum of each of several mean curves (rows); NaN where a curve has no finite point."""

    log2_lr: np.ndarray     # the fitted optimum, continuous
    value: np.ndarray       # the parabola's value there (the best mean where no parabola fits)
    best: np.ndarray        # index of the best grid point (-1 where none)
    edge_low: np.ndarray    # no finite neighbour below the best point
    edge_high: np.ndarray   # no finite neighbour above the best point


def vertices(log2_lrs: np.ndarray, means: np.ndarray) -> Vertices:
    """Vectorised over the rows of ``means`` (curves × LRs); ``log2_lrs`` ascending."""
    means = np.atleast_2d(means)
    rows, n = means.shape
    finite = np.isfinite(means)
    has_point = finite.any(axis=1)
    best = np.where(has_point, np.argmin(np.where(finite, means, np.inf), axis=1), -1)
    r = np.arange(rows)
    i = np.clip(best, 0, n - 1)
    left, right = np.clip(i - 1, 0, n - 1), np.clip(i + 1, 0, n - 1)
    edge_low = (i == 0) | ~finite[r, left]
    edge_high = (i == n - 1) | ~finite[r, right]
    x0, x1, x2 = log2_lrs[left], log2_lrs[i], log2_lrs[right]
    y0, y1, y2 = means[r, left], means[r, i], means[r, right]
    fits = has_point & ~edge_low & ~edge_high
    with np.errstate(invalid="ignore", divide="ignore"):
        # vertex of the parabola through (x0, y0), (x1, y1), (x2, y2)
        numerator = (x1 - x0) ** 2 * (y1 - y2) - (x1 - x2) ** 2 * (y1 - y0)
        denominator = (x1 - x0) * (y1 - y2) - (x1 - x2) * (y1 - y0)
        convex = fits & (denominator < 0)  # < 0 exactly when the middle point lies below the chord
        x_star = np.where(convex, x1 - 0.5 * numerator / denominator, x1)
        # the parabola's value at its vertex, from its Lagrange form
        l0 = (x_star - x1) * (x_star - x2) / ((x0 - x1) * (x0 - x2))
        l1 = (x_star - x0) * (x_star - x2) / ((x1 - x0) * (x1 - x2))
        l2 = (x_star - x0) * (x_star - x1) / ((x2 - x0) * (x2 - x1))
        value = np.where(convex, l0 * y0 + l1 * y1 + l2 * y2, y1)
    nan = np.full(rows, np.nan)
    return Vertices(np.where(has_point, x_star, nan), np.where(has_point, value, nan), best,
                    edge_low & has_point, edge_high & has_point)


def mean_curve(values: np.ndarray) -> np.ndarray:
    """Mean over seeds per LR, ignoring missing runs; +inf where any seed diverged; NaN where none ran."""
    with np.errstate(invalid="ignore"):
        present = ~np.isnan(values)
        total = np.where(present, values, 0.0).sum(axis=0)
        count = present.sum(axis=0)
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def resampled_means(values: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Mean curves of ``resamples`` bootstrap draws of whole seeds, shape (resamples, LRs)."""
    seeds = values.shape[0]
    weights = rng.multinomial(seeds, np.full(seeds, 1.0 / seeds), size=resamples).astype(float)
    present = ~np.isnan(values)
    finite_part = np.where(present & np.isfinite(values), values, 0.0)
    diverged = (present & np.isinf(values)).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        count = weights @ present.astype(float)
        means = (weights @ finite_part) / count
        means = np.where(weights @ diverged > 0, np.inf, means)  # a drawn diverged seed makes the LR diverged
    return np.where(count > 0, means, np.nan)


# Student's t, 97.5 % quantile, by degrees of freedom (the normal's 1.96 beyond 30).
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
Z_975 = 1.960


def small_sample_factor(seeds: int) -> float:
    """How much wider than the bootstrap's percentiles a 95 % interval from ``seeds`` seeds must be: the
    bootstrap's spread is the estimator's spread times √((n−1)/n), and the mean of n draws follows
    Student's t, not the normal (measured in the tests: three seeds cover the truth 75 % of the time
    without it, about 92 % with it)."""
    if seeds < 2:
        raise ValueError(f"an interval needs at least 2 seeds, got {seeds}")
    t = T_975[seeds - 2] if seeds - 1 <= len(T_975) else Z_975
    return t / Z_975 * math.sqrt(seeds / (seeds - 1))


def interval(draws: np.ndarray, estimate: float, seeds: int, open_low: bool = False,
             open_high: bool = False, stretch: float | None = None) -> tuple[float, float]:
    """A 95 % interval around ``estimate`` from bootstrap draws: the arms of the central percentile
    interval, measured from the draws' median (so an asymmetric spread stays asymmetric, and an estimate
    off the draws' centre still gets both arms), widened by ``small_sample_factor(seeds)`` (or ``stretch``, an
    estimate that pools several curves' seeds: ``law.py``). NaN on an open
    side, and on both sides with fewer than two seeds or no finite draw."""
    draws = draws[np.isfinite(draws)]
    if draws.size == 0 or seeds < 2 or not math.isfinite(estimate):
        return float("nan"), float("nan")
    tail = 100 * (1 - CONFIDENCE) / 2
    low, centre, high = np.percentile(draws, [tail, 50, 100 - tail])
    stretch = small_sample_factor(seeds) if stretch is None else stretch
    low, high = estimate - stretch * (centre - low), estimate + stretch * (high - centre)
    return (float("nan") if open_low else float(low)), (float("nan") if open_high else float(high))


@dataclass(frozen=True)
class Optimum:
    """One scale point's optimum: the point estimate, its interval and the bootstrap draws behind it."""

    log2_lrs: np.ndarray
    mean: np.ndarray          # the mean curve (signed cost; +inf diverged)
    fit: Vertices             # of the mean curve (one row)
    draws: Vertices           # of each resample's mean curve
    resampled: np.ndarray     # the resamples' mean curves
    seeds: int                # seeds behind the best grid point's mean
    values: np.ndarray | None = None  # the curve itself, values[seed, lr] (seeds in the same order at every LR)

    @property
    def log2_optimal_lr(self) -> float:
        return float(self.fit.log2_lr[0])

    @property
    def best(self) -> int:
        return int(self.fit.best[0])

    @property
    def edge(self) -> str:
        return "low" if self.fit.edge_low[0] else "high" if self.fit.edge_high[0] else ""

    def bounds(self) -> tuple[float, float]:
        """The 95 % interval, within the LRs it was fitted on (the optimum cannot be claimed beyond them)."""
        low, high = interval(self.draws.log2_lr, self.log2_optimal_lr, self.seeds, bool(self.fit.edge_low[0]),
                             bool(self.fit.edge_high[0]))
        return _clip(low, high, float(self.log2_lrs.min()), float(self.log2_lrs.max()))


def _clip(low: float, high: float, floor: float, ceiling: float) -> tuple[float, float]:
    """An interval cut to what its grids allow (NaN, an open side, stays NaN)."""
    return (low if math.isnan(low) else min(max(low, floor), ceiling),
            high if math.isnan(high) else max(min(high, ceiling), floor))


def optimum(log2_lrs: np.ndarray, values: np.ndarray, resamples: int = DEFAULT_RESAMPLES,
            rng: np.random.Generator | None = None) -> Optimum:
    """The fitted optimum of one curve ``values[seed, lr]`` (signed cost) and its bootstrap draws."""
    rng = rng if rng is not None else np.random.default_rng(0)
    values = values[~np.isnan(values).all(axis=1)]  # a seed with no finished run yet is no seed here
    mean = mean_curve(values)
    fit = vertices(log2_lrs, mean[None])
    resampled = resampled_means(values, resamples, rng)
    best = int(fit.best[0])
    seeds = int(np.isfinite(values[:, best]).sum()) if best >= 0 else 0
    return Optimum(log2_lrs, mean, fit, vertices(log2_lrs, resampled), resampled, seeds, values)


def shift(small: Optimum, large: Optimum) -> tuple[float, float, float]:
    """η* at the largest scale minus at the smallest (log2), with its interval. The scales are separate
    runs, so their resamples are independent. An edge opens the side it could move the shift to."""
    point = large.log2_optimal_lr - small.log2_optimal_lr
    open_low = bool(large.fit.edge_low[0] or small.fit.edge_high[0])
    open_high = bool(large.fit.edge_high[0] or small.fit.edge_low[0])
    low, high = interval(large.draws.log2_lr - small.draws.log2_lr, point, min(small.seeds, large.seeds),
                         open_low, open_high)
    low, high = _clip(low, high, float(large.log2_lrs.min() - small.log2_lrs.max()),
                      float(large.log2_lrs.max() - small.log2_lrs.min()))
    return point, low, high


# With one seed there is no noise to measure: a difference smaller than this share of the cost is not told
# apart from it. The seeds' spread of a final train loss at one LR: median 2.5 % (quartiles 1.9 %–3.0 %) over
# the 3-seed GPT width sweeps in docs/results/small_gpt_width_paper and gpu_gpt_width.
ONE_SEED_NOISE = 0.025


def tied_lr(small: Optimum) -> int | None:
    """The grid LR beside the small scale's best that ties with it within noise (its index), else None.
    With two seeds or more: the 95 % interval of the seeds' paired difference (a seed's runs share their
    initialisation and batches) holds 0. With one seed: the difference is within ``ONE_SEED_NOISE``."""
    best = small.best
    if best < 0 or small.values is None:
        return None
    ties = []
    for j in (best - 1, best + 1):
        if not 0 <= j < len(small.log2_lrs) or not math.isfinite(small.mean[j]):
            continue
        differences = small.values[:, j] - small.values[:, best]
        differences = differences[np.isfinite(differences)]
        n = differences.size
        if n >= 2:
            t = T_975[n - 2] if n - 1 <= len(T_975) else Z_975
            tie = differences.mean() - t * differences.std(ddof=1) / math.sqrt(n) <= 0
        else:
            tie = n == 1 and abs(differences[0]) <= ONE_SEED_NOISE * abs(small.mean[best])
        if tie:
            ties.append((float(small.mean[j]), j))
    return min(ties)[1] if ties else None


def regret_at(small: Optimum, large: Optimum, tuned: int) -> float:
    """The large scale's cost at the small scale's grid LR ``tuned`` minus its best cost (+inf: it diverges
    there; NaN: not run there)."""
    column = np.flatnonzero(np.isclose(large.log2_lrs, small.log2_lrs[tuned]))
    best = np.min(np.where(np.isnan(large.mean), np.inf, large.mean))
    if not column.size or not np.isfinite(best):
        return float("nan")
    return float(large.mean[column[0]] - best)


def _regret(small_means: np.ndarray, large_means: np.ndarray, small_lrs: np.ndarray,
            large_lrs: np.ndarray) -> np.ndarray:
    """Per row: the large scale's cost at the small scale's best grid LR minus its best cost."""
    finite = np.isfinite(small_means)
    tuned = np.argmin(np.where(finite, small_means, np.inf), axis=1)
    column = {float(lr): j for j, lr in enumerate(large_lrs)}
    index = np.array([column.get(float(small_lrs[t]), -1) for t in tuned])
    rows = np.arange(len(tuned))
    at_tuned = np.where(index >= 0, large_means[rows, np.maximum(index, 0)], np.nan)
    best = np.min(np.where(np.isnan(large_means), np.inf, large_means), axis=1)
    with np.errstate(invalid="ignore"):
        regret = at_tuned - best
    regret[~finite.any(axis=1) | ~np.isfinite(best)] = np.nan
    return regret


def regret(small: Optimum, large: Optimum) -> tuple[float, float, float]:
    """The cost of keeping the smallest scale's best grid LR at the largest scale, with its interval
    (+inf when that LR diverges at the largest scale; NaN when it was not run there).

    The upper end is at least ``paired_regret_bound``: with few seeds every bootstrap resample may agree on
    the best LR at both scales, and a zero-width interval at 0 would claim a certainty that 3 seeds do not
    give."""
    point = float(_regret(small.mean[None], large.mean[None], small.log2_lrs, large.log2_lrs)[0])
    seeds = min(small.seeds, large.seeds)
    draws = _regret(small.resampled, large.resampled, small.log2_lrs, large.log2_lrs)
    if not math.isfinite(point) or seeds < 2:
        return point, float("nan"), float("nan")
    low, high = interval(draws, point, seeds)
    if np.isinf(draws).mean() > (1 - CONFIDENCE) / 2:  # the tuned LR diverges in a real share of resamples
        high = float("inf")
    tuned = small.log2_lrs[int(small.best)]
    column = np.flatnonzero(np.isclose(large.log2_lrs, tuned))
    if large.values is not None and column.size and math.isfinite(high):
        high = max(high, paired_regret_bound(large.values, int(column[0])))
    return point, (max(0.0, low) if math.isfinite(low) else low), high  # a regret is never negative


def paired_regret_bound(values: np.ndarray, tuned: int) -> float:
    """A 95 % upper bound on the true cost of LR ``tuned`` over the truly best LR of ``values[seed, lr]``: the
    largest over the other LRs of the one-sided upper t-bound on the mean paired difference (a seed's runs
    share initialisation and batches, so its differences are tighter than its values); 0 at least."""
    bound = 0.0
    for j in range(values.shape[1]):
        if j == tuned:
            continue
        differences = values[:, tuned] - values[:, j]
        differences = differences[np.isfinite(differences)]
        n = differences.size
        if n < 2:
            continue
        t = T_975[n - 2] if n - 1 <= len(T_975) else Z_975
        bound = max(bound, float(differences.mean() + t * differences.std(ddof=1) / math.sqrt(n)))
    return bound
