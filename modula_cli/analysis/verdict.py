"""The one line a sweep answers per series: does the optimal LR transfer, at the resolution the data supports?

From the shift of the fitted optimum between the smallest and the largest scale and its 95 % interval, in
grid steps (the LR grid's spacing in log2), and the optima's own intervals at both ends:

- **cannot tell** when one seed gives no interval, an optimum sits at an edge of the LRs tried (the shift is
  a bound), a curve is too flat to place its optimum (its interval wider than ``FLAT`` grid steps), or the
  shift's interval is wider than ``VAGUE`` grid steps;
- **transfers** when the interval includes 0: the optimum stays within ±k grid steps (k: the interval's
  farther end, rounded up to half a step);
- **moves** when the whole interval lies beyond one grid step (above +1 or below −1): about k grid steps per
  doubling;
- **drifts** when it excludes 0 but reaches within one grid step: a real move, smaller than the grid can show
  for sure over this range, said with its rate per doubling and whether the best grid LR changed.

The thresholds and the interval's coverage at 3 seeds are measured in docs/results/interval_coverage
(``--verdicts``): with 3 seeds a shift of 0 is never called "moves".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FLAT = 2.0   # grid steps: an optimum's interval wider than this cannot place it
VAGUE = 4.0  # grid steps: a shift interval wider than this says nothing
CALLS = ("transfers", "drifts", "moves", "cannot tell")


@dataclass(frozen=True)
class Verdict:
    call: str  # one of CALLS
    text: str  # the line, without the series' name


def _unsure(why: str) -> Verdict:
    return Verdict("cannot tell", f"cannot tell: {why}")


def _half_up(x: float) -> float:
    return max(0.5, math.ceil(x * 2 - 1e-9) / 2)


def verdict(shift: float, low: float, high: float, seeds: int, grid_step: float, doublings: float | None,
            optimum_widths: tuple[float, float], scales: str, edges: str = "",
            best_lrs: tuple[float, float] | None = None) -> Verdict:
    """``shift``, ``low``, ``high``: log2 LR; ``grid_step``: log2 spacing of the LRs; ``doublings``: log2 of the
    largest scale over the smallest (None when the scale is not a positive number, e.g. weight decay 0);
    ``optimum_widths``: the 95 % interval widths (log2) at the smallest and the largest scale; ``scales``:
    "width 32 → 256"; ``best_lrs``: the best grid LR at the smallest and at the largest scale."""
    if math.isnan(shift):
        return _unsure("no shift yet: fewer than two scale points have finished")
    if seeds < 2:
        return _unsure("one seed gives no interval: train 3 or more (train.seed=0,1,2)")
    if edges:
        return _unsure(f"an optimum lies at an edge of the LRs tried ({edges}): widen the LRs there")
    steps = [x / grid_step for x in (shift, low, high)]
    if any(math.isnan(x) for x in steps):
        return _unsure("the shift's interval is open")
    point, lo, hi = steps
    widest = max((w / grid_step for w in optimum_widths if not math.isnan(w)), default=math.inf)
    if widest > FLAT:
        return _unsure(f"a curve is too flat to place its optimum (95 % interval {widest:.1f} grid "
                       f"steps wide): more seeds or longer runs")
    if hi - lo > VAGUE:
        return _unsure(f"the shift's 95 % interval spans {hi - lo:.1f} grid steps: more seeds")
    measured = f"{point:+.2f} [{lo:+.2f}, {hi:+.2f}] grid steps, {scales}"
    rate = ""
    if doublings:
        rate = f", about {point / doublings:+.2f} per doubling"
    if lo <= 0 <= hi:
        return Verdict("transfers", f"transfers: η* stays within ±{_half_up(max(-lo, hi)):g} grid steps "
                                    f"({measured})")
    direction = "up" if point > 0 else "down"
    if lo > 1 or hi < -1:
        per = f"about {abs(point) / doublings:.1f} grid steps per doubling" if doublings else \
            f"about {abs(point):.1f} grid steps"
        return Verdict("moves", f"moves {direction} by {per} ({measured}): retune the LR at scale")
    best = ""
    if best_lrs is not None:
        small, large = best_lrs
        best = ("; the best grid LR is the same at both ends" if math.isclose(small, large) else
                f"; the best grid LR goes from {small:g} to {large:g}")
    return Verdict("drifts", f"drifts {direction} ({measured}{rate}): less than the grid can show for sure over "
                             f"this range{best}")
