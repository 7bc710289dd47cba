"""Which learning rates a sweep trains next, when it searches instead of training the whole grid: per series,
scale by scale, a search of log2(LR) that brackets the optimum, refines it and stops, as a pure function of
the runs that have finished.

At a scale the loss is one valley in log2(LR). The search starts with three LRs one grid step apart around a
starting point (the grid's middle at the first scale; at a later scale where the scales before it put the
optimum, moved on by their drift), extends the range one grid step at a time while the best LR is at an edge
of those tried (a diverged LR is worse than every finished one), up to hard bounds, then adds lattice points
next to the fitted optimum until its 95 % interval is narrow enough, the scale's budget of LRs is spent, or no
LR left can bring it under the resolution (the fit reads the best LR and its two neighbours in every bootstrap
resample; where the interval is the seeds' noise, only more seeds narrow it).
Every LR gets every seed. Optimum and interval are the report's own (``analysis.stats.optimum``).

Positions are integers on a lattice: ``k`` is log2(LR) = origin + k · grid step / per_grid, so the same LR
is always the same float and the same run folder, and grid points are the grid's own values.

State lives nowhere but in the results: ``plan`` replays a scale's search from nothing over its finished
LRs, so the batch it returns is the same after a killed launcher, a pre-empted job or a second launch into
the same folder (a batch that finished in part comes back as its missing part), and a finished run is never
proposed again.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..analysis.law import line
from ..analysis.stats import CONFIDENCE, interval, optimum

Results = Mapping[int, Sequence[float]]  # lattice index → the seeds' signed costs (+inf: diverged)


class SearchError(ValueError):
    """Settings a search cannot run with: one line per problem."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("; ".join(problems))


@dataclass(frozen=True)
class Lattice:
    """The LRs a search may try: the grid's own values at every ``per_grid``-th point, and the points between
    and beyond them spaced evenly in log2(LR)."""

    grid: tuple[float, ...]  # the sweep's LR grid, ascending
    grid_step: float          # log2 spacing of the grid
    per_grid: int = 1         # lattice points per grid step (1: the grid's step; 2: half steps, …)

    @classmethod
    def of_grid(cls, lrs: Sequence[float], per_grid: int = 1) -> Lattice:
        """The lattice of a grid evenly spaced in log2(LR) (any two LRs: their ratio is the step)."""
        grid = tuple(sorted({float(lr) for lr in lrs}))
        if len(grid) < 2 or grid[0] <= 0:
            raise SearchError([f"optim.lr={','.join(f'{lr:g}' for lr in grid)}: a search needs an LR axis of at "
                               f"least two positive LRs (its spacing is the search's grid step)"])
        steps = np.diff(np.log2(grid))
        if not np.allclose(steps, steps[0], rtol=1e-6, atol=1e-9):
            raise SearchError([f"optim.lr={','.join(f'{lr:g}' for lr in grid)}: a search needs LRs evenly spaced in "
                               f"log2 (a constant ratio, e.g. powers of two)"])
        return cls(grid, float(steps.mean()), per_grid)

    def log2(self, k: int) -> float:
        return math.log2(self.grid[0]) + k * self.grid_step / self.per_grid

    def lr(self, k: int) -> float:
        """The LR at ``k``: a grid value exactly where there is one; a whole number of octaves from the grid's
        first LR exactly (2^-9 is 0.001953125, as a grid that reaches it will write it); else 12 significant
        digits."""
        i, off_grid = divmod(k, self.per_grid)
        if not off_grid and 0 <= i < len(self.grid):
            return self.grid[i]
        octaves = k * self.grid_step / self.per_grid
        if math.isclose(octaves, round(octaves), abs_tol=1e-9):
            return math.ldexp(self.grid[0], round(octaves))
        return float(f"{2.0 ** self.log2(k):.12g}")

    def lr_between(self, steps: float) -> float:
        """The LR ``steps`` grid steps above the grid's first (6 significant digits)."""
        return float(f"{self.grid[0] * 2.0 ** (steps * self.grid_step):.6g}")

    def index(self, lr: float) -> int | None:
        """The lattice point of ``lr``, or None if it lies between points."""
        if not lr > 0:
            return None
        position = (math.log2(lr) - math.log2(self.grid[0])) * self.per_grid / self.grid_step
        k = round(position)
        return k if abs(position - k) < 1e-4 else None



@dataclass(frozen=True)
class SearchSettings:
    """Lattice units throughout (``per_grid`` points per grid step). ``resolution``: stop once the optimum's
    95 % interval is at most this many grid steps wide; ``budget``: LRs per scale at most (each with every
    seed); ``low``/``high``: hard bounds (lattice indices, None: none)."""

    per_grid: int = 1
    resolution: float = 0.75
    budget: int = 9
    low: int | None = None
    high: int | None = None

    def problems(self, start: int | None = None, lattice: Lattice | None = None) -> list[str]:
        """One line per bad setting (``start``: the first scale's starting index, checked against the bounds)."""
        name = (lambda k: f"{lattice.lr(k):g}") if lattice else str
        problems = []
        if self.budget < 3:  # the setting's type is the schema's; this rule holds for a grid-sized budget too
            problems.append(f"sweep.search_budget={self.budget!r}: a bracket needs at least 3 LRs per scale")
        if self.low is not None and self.high is not None and self.high - self.low < 2 * self.per_grid:
            problems.append(f"sweep.search_low={name(self.low)}, sweep.search_high={name(self.high)}: the bounds "
                            f"must leave room for a bracket (three LRs one grid step apart)")
        elif start is not None and not self.inside(start):
            problems.append(f"the starting LR {name(start)} lies outside the bounds "
                            f"[{name(self.low) if self.low is not None else '0'}, "
                            f"{name(self.high) if self.high is not None else 'inf'}]")
        return problems

    def inside(self, k: int) -> bool:
        return (self.low is None or k >= self.low) and (self.high is None or k <= self.high)


@dataclass(frozen=True)
class Step:
    """What a scale does next: train ``run`` (lattice indices, every seed each), or nothing more because of
    ``stop``; ``reason`` is the stop's kind (``resolution``, ``budget``, ``bound``, ``seeds``, ``lattice``,
    ``one seed``).
    ``anchor``: where the scale puts the optimum for the next scale's start (grid steps from the grid's first
    LR), once its best LR is bracketed (or the search there ended without a bracket)."""

    run: tuple[int, ...] = ()
    stop: str | None = None
    reason: str | None = None
    anchor: float | None = None
    tried: tuple[int, ...] = ()  # (``plan``) the finished LRs its replay read, the current batch's included


def first_bracket(start: float, settings: SearchSettings) -> tuple[int, ...]:
    """Three lattice points one grid step apart around ``start`` (grid steps; the centre on a grid point),
    moved inside the bounds."""
    B = settings.per_grid
    centre = round(start) * B
    if settings.low is not None:
        centre = max(centre, settings.low + B)
    if settings.high is not None:
        centre = min(centre, settings.high - B)
    return (centre - B, centre, centre + B)


def _fit(results: Results, per_grid: int):
    tried = np.array(sorted(results))
    seeds = max(len(values) for values in results.values())
    matrix = np.full((seeds, len(tried)), np.nan)
    for column, k in enumerate(tried):
        matrix[: len(results[k]), column] = results[k]
    return tried, optimum(tried / per_grid, matrix, resamples=400)


def next_step(results: Results, start: float, settings: SearchSettings) -> Step:
    """One decision from the finished LRs of a scale (``start`` in grid steps from the grid's first LR)."""
    if not results:
        return Step(run=first_bracket(start, settings))
    B = settings.per_grid
    tried, fit = _fit(results, B)
    best = fit.best
    spent = len(tried) >= settings.budget
    if best < 0 or best == 0:  # every LR diverged, or the lowest tried is best: the valley may go on below
        return _extend(int(tried[0]) - B, "low", settings, spent, tried, best)
    if best == len(tried) - 1:
        return _extend(int(tried[-1]) + B, "high", settings, spent, tried, best)
    anchor = fit.log2_optimal_lr  # bracketed: a worse (or diverged) LR on both sides of the best one
    low, high = fit.bounds()
    width = high - low
    if math.isfinite(width) and width <= settings.resolution:
        return Step(stop=f"resolution reached: 95 % interval {width:.2f} grid steps wide", reason="resolution",
                    anchor=anchor)
    if spent:
        return Step(stop=f"budget spent: {len(tried)} LRs" + _width_text(width), reason="budget", anchor=anchor)
    if fit.seeds < 2:  # no interval to narrow: more LRs would buy nothing
        return Step(stop="bracketed (one seed: no interval)", reason="one seed", anchor=anchor)
    diverged = [int(k) for k, value in zip(tried, fit.mean) if np.isinf(value)]
    nearby = _refinements(tried, int(tried[best]), anchor * B, settings, diverged)
    # the fit reads the best LR and its two neighbours, in every resample
    why = _unnarrowable(tried, fit, settings) if nearby else None
    useless = why is not None
    if nearby and not useless:
        return Step(run=nearby[: settings.budget - len(tried)], anchor=anchor)
    if fit.edge:  # a neighbour diverged: the optimum lies between the best LR and it
        return Step(stop=f"the next LR {'above' if fit.edge == 'high' else 'below'} diverged: the optimum lies "
                         f"within a lattice step of the best LR (sweep.search_substeps places it finer)",
                    reason="lattice", anchor=anchor)
    if useless:
        return Step(stop=f"more LRs cannot narrow the 95 % interval ({why})" + _width_text(width)
                         + "; more seeds would", reason="seeds", anchor=anchor)
    return Step(stop="no lattice point left near the optimum" + _width_text(width)
                + "; more seeds or a finer lattice would narrow it", reason="lattice", anchor=anchor)


def _unnarrowable(tried: np.ndarray, fit, settings: SearchSettings) -> str | None:
    """Why no LR left to try can bring the optimum's interval under the resolution (None: one may). Only where
    the LRs tried are contiguous on the lattice (else a point between them changes the fit itself). A resample
    whose best LR is interior is fitted from LRs already trained; one whose best sits at an end of them would,
    with the LR beyond, be fitted within half a lattice step of that end. Moving every such resample half a
    step towards the estimate is the most that more LRs can do: if the interval stays wider, they cannot."""
    if not np.all(np.diff(tried) == 1):
        return None
    ends = (fit.draws.best == 0) | (fit.draws.best == len(tried) - 1)
    if float(ends.mean()) < (1 - CONFIDENCE) / 2:
        return "every resample's optimum is placed by LRs already trained"
    draws, estimate = fit.draws.log2_lr.copy(), fit.log2_optimal_lr
    half = 0.5 / settings.per_grid
    draws[ends] = np.where(draws[ends] > estimate, np.maximum(draws[ends] - half, estimate),
                           np.minimum(draws[ends] + half, estimate))
    low, high = interval(draws, estimate, fit.seeds)
    if math.isfinite(high - low) and high - low > settings.resolution:
        return f"the seeds' noise keeps it wider than {settings.resolution:g} grid steps"
    return None


def _width_text(width: float) -> str:
    return f", 95 % interval {width:.2f} grid steps wide" if math.isfinite(width) else ", interval open"


def _extend(k: int, side: str, settings: SearchSettings, spent: bool, tried: np.ndarray, best: int) -> Step:
    edge = float(tried[max(best, 0)]) / settings.per_grid  # where the next scale starts if this one ends here
    if not settings.inside(k):
        return Step(stop=f"{side} bound reached with the best LR at the edge of those tried", reason="bound",
                    anchor=edge)
    if spent:
        return Step(stop=f"budget spent with the best LR at the {side} edge of those tried", reason="budget",
                    anchor=edge)
    return Step(run=(k,))


def _refinements(tried: np.ndarray, best: int, vertex: float, settings: SearchSettings,
                 diverged: Sequence[int] = ()) -> tuple[int, ...]:
    """The untried lattice point within two grid steps of the best LR that lies nearest the fitted optimum
    (both nearest, when the optimum sits halfway): it is where the resamples' optima fall. Never beyond an LR
    that diverged."""
    reach = 2 * settings.per_grid
    ceiling = min([k for k in diverged if k > best], default=best + reach + 1)
    floor = max([k for k in diverged if k < best], default=best - reach - 1)
    candidates = [k for k in range(max(best - reach, floor + 1), min(best + reach, ceiling - 1) + 1)
                  if k not in set(tried.tolist()) and settings.inside(k)]
    if not candidates:
        return ()
    distance = {k: abs(k - vertex) for k in candidates}
    nearest = min(distance.values())
    return tuple(sorted(k for k in candidates if math.isclose(distance[k], nearest, abs_tol=1e-9)))


def plan(results: Results, start: float, settings: SearchSettings) -> Step:
    """The next batch of one scale from everything that has finished there, replaying its search from nothing
    (LRs finished outside the replay's path, such as a grid sweep's, are read only when the search asks for
    them). Returns the part of the current batch that has not finished, or the stop; ``anchor`` is the
    replay's first anchor."""
    finished: dict[int, Sequence[float]] = {}
    anchor = None
    while True:
        step = next_step(finished, start, settings)
        anchor = anchor if anchor is not None else step.anchor
        if step.stop is not None:
            return Step(stop=step.stop, reason=step.reason, anchor=anchor, tried=tuple(sorted(finished)))
        missing = tuple(k for k in step.run if k not in results)
        if missing:  # the batch's finished part counts as tried (the record and the report say so)
            done = {k for k in step.run if k not in missing}
            return Step(run=missing, anchor=anchor, tried=tuple(sorted({*finished, *done})))
        finished.update({k: results[k] for k in step.run})


def predicted_start(anchors: Sequence[float], positions: Sequence[float], position: float) -> float:
    """Where a scale's search starts (grid steps), from the anchors of the scales before it at ``positions``
    (log2 of their scale values): the transfer law's line through them (``analysis.law.line``, the report's
    model), at ``position``; the anchor itself while there is one."""
    intercept, slope = line(positions, anchors)
    return intercept + slope * position


@dataclass(frozen=True)
class ScalePlan:
    """One scale of a series: what it trains next (``step.run``), or why it stopped; ``waiting`` while the
    scale before it has not bracketed its optimum (its start is not known yet)."""

    step: Step
    start: float | None
    waiting: bool = False


def plan_series(results: Sequence[Results], positions: Sequence[float], start: float,
                settings: SearchSettings) -> list[ScalePlan]:
    """Every scale of one series (``results`` and ``positions`` in scale order; ``start``: the first scale's
    starting point, grid steps). A later scale starts once the one before it is bracketed; once the first
    scale has stopped, every later scale that stopped without its best LR trains it too (the regret of
    keeping the small scale's LR needs it), budget allowing."""
    plans: list[ScalePlan] = []
    anchors: list[float] = []
    for i, scale_results in enumerate(results):
        if i and not (plans[-1].step.anchor is not None and not plans[-1].waiting):
            plans.append(ScalePlan(Step(), None, waiting=True))
            continue
        begin = start if i == 0 else predicted_start(anchors, positions[:i], positions[i])
        step = plan(scale_results, begin, settings)
        first = plans[0].step if plans else step
        if step.stop is not None and i and first.stop is not None and first.tried:
            tuned = _best({k: results[0][k] for k in first.tried}, settings.per_grid)
            wanted = tuned is not None and tuned not in step.tried and settings.inside(tuned)
            if wanted and len(step.tried) < settings.budget:
                if tuned in scale_results:
                    step = dataclasses.replace(step, tried=tuple(sorted({*step.tried, tuned})))
                else:
                    step = Step(run=(tuned,), anchor=step.anchor, tried=step.tried)
        plans.append(ScalePlan(step, begin))
        if step.anchor is not None:
            anchors.append(step.anchor)
    return plans


def _best(results: Results, per_grid: int) -> int | None:
    """The best LR tried (the report's best grid LR), or None if every LR diverged."""
    tried, fit = _fit(results, per_grid)
    return int(tried[fit.best]) if fit.best >= 0 else None
