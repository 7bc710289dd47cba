"""The one line a sweep answers per series: does the optimal LR transfer, at the resolution the data supports?

From the shift of the fitted optimum between the smallest and the largest scale and its 95 % interval, in
grid steps (the LR grid's spacing in log2), and the optima's own intervals at both ends:

- **cannot tell** when one seed gives no interval, an optimum sits at an edge of the LRs tried (the shift is
  a bound), a curve is too flat to place its optimum (its interval wider than ``FLAT`` grid steps), or the
  shift's interval is wider than ``VAGUE`` grid steps;
- **transfers** when the interval includes 0: the optimum stays within ±k grid steps (k: the interval's
  farther end, rounded up to half a step);
- **drifts** when it excludes 0 but stays within one grid step: a move too small to change the best grid LR
  over this range, said with its rate per doubling (it may pass a grid step over a wider range);
- **moves** when it excludes 0 and reaches past a grid step: about k grid steps per doubling.

The thresholds and the interval's coverage at 3 seeds are measured in docs/results/interval_coverage
(``--verdicts``): with 3 seeds a shift of 0 is called "moves" in under 5 % of sweeps.
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
            optimum_widths: tuple[float, float], scales: str, edges: str = "") -> Verdict:
    """``shift``, ``low``, ``high``: log2 LR; ``grid_step``: log2 spacing of the LRs; ``doublings``: log2 of the
    largest scale over the smallest (None when the scale is not a positive number, e.g. weight decay 0);
    ``optimum_widths``: the 95 % interval widths (log2) at the smallest and the largest scale; ``scales``:
    "width 32 → 256"."""
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
    if max(-lo, hi) <= 1:
        return Verdict("drifts", f"drifts {direction} by under one grid step ({measured}{rate}): the best grid LR "
                                 f"holds over this range, a wider one may move it")
    if doublings:
        return Verdict("moves", f"moves {direction} by about {abs(point) / doublings:.1f} grid steps per doubling "
                                f"({measured}): retune the LR at scale")
    return Verdict("moves", f"moves {direction} by about {abs(point):.1f} grid steps ({measured}): retune the LR")
