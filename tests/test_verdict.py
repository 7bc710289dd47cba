"""The transfer verdict (analysis/verdict.py) and the regret's paired upper bound (analysis/stats.py), on
hand-made inputs with hand-computed answers."""

import math

import numpy as np
import pytest

from modula_cli.analysis.stats import optimum, paired_regret_bound, regret
from modula_cli.analysis.verdict import verdict

SCALES = "width 32 → 256"


def call(shift, low, high, seeds=3, step=1.0, doublings=3.0, widths=(0.5, 0.5), edges=""):
    return verdict(shift, low, high, seeds, step, doublings, widths, SCALES, edges)


def test_an_interval_around_zero_transfers_within_its_farther_end_rounded_up_to_half_a_step():
    said = call(-0.02, -0.21, 0.16)
    assert said.call == "transfers"
    assert said.text == "transfers: η* stays within ±0.5 grid steps (-0.02 [-0.21, +0.16] grid steps, width 32 → 256)"
    assert "within ±1 grid steps" in call(0.54, -0.18, 0.85).text
    assert "within ±1.5 grid steps" in call(0.5, -0.4, 1.3).text
    # the unit is the grid's step: a half-octave grid doubles the steps
    assert "within ±0.5 grid steps (-0.04 [-0.42, +0.32]" in call(-0.02, -0.21, 0.16, step=0.5).text


def test_a_drift_is_told_apart_from_a_move_by_where_the_whole_interval_lies():
    said = verdict(0.30, 0.02, 0.61, 3, 1.0, 2.0, (0.5, 0.5), SCALES, "", (0.5, 1.0))
    assert said.call == "drifts"
    assert said.text == ("drifts up (+0.30 [+0.02, +0.61] grid steps, width 32 → 256, about +0.15 per doubling): "
                         "less than the grid can show for sure over this range; the best grid LR goes from 0.5 to 1")
    assert call(0.30, 0.02, 0.61).text.endswith("over this range")  # without the best LRs, nothing said of them
    assert verdict(0.3, 0.02, 0.61, 3, 1.0, 2.0, (0.5, 0.5), SCALES, "", (0.5, 0.5)).text.endswith(
        "the best grid LR is the same at both ends")
    # reaching past a grid step is not enough to call it a move: the whole interval must lie beyond one
    assert call(0.30, 0.05, 1.05).call == "drifts" and call(0.95, 0.85, 1.00).call == "drifts"
    assert call(-1.08, -1.41, -0.85).call == "drifts"
    moved = call(-2.59, -3.08, -1.89)
    assert moved.call == "moves" and moved.text.startswith("moves down by about 0.9 grid steps per doubling")
    assert call(1.5, 1.02, 2.0).call == "moves"
    # a scale that is not a positive number (weight decay 0): no rate per doubling
    assert call(1.6, 1.2, 2.0, doublings=None).text.startswith("moves up by about 1.6 grid steps (")


@pytest.mark.parametrize("kwargs, reason", [
    (dict(seeds=1), "one seed gives no interval"),
    (dict(edges="width 1024 at the high edge"), "an optimum lies at an edge of the LRs tried (width 1024"),
    (dict(widths=(0.4, 2.5)), "a curve is too flat to place its optimum (95 % interval 2.5 grid steps wide)"),
    (dict(low=-3.0, high=2.0), "the shift's 95 % interval spans 5.0 grid steps"),
    (dict(high=math.nan), "the shift's interval is open"),
    (dict(shift=math.nan), "no shift yet"),
])
def test_what_cannot_be_told_says_why(kwargs, reason):
    arguments = dict(shift=0.1, low=-0.2, high=0.4, **{k: v for k, v in kwargs.items() if k in ("seeds", "edges",
                                                                                               "widths")})
    arguments.update({k: v for k, v in kwargs.items() if k in ("shift", "low", "high")})
    said = call(**arguments)
    assert said.call == "cannot tell" and said.text.startswith("cannot tell: ") and reason in said.text


def test_the_paired_regret_bound_by_hand():
    values = np.array([[2.0, 2.1, 2.5], [2.2, 2.2, 2.6], [2.1, 2.3, 2.7]])  # seeds × LRs; LR 0 is tuned
    # against LR 1: differences −0.1, 0, −0.2: mean −0.1, sd 0.1, t(0.975, 2) = 4.303 → −0.1 + 4.303·0.1/√3
    assert paired_regret_bound(values, 0) == pytest.approx(-0.1 + 4.303 * 0.1 / math.sqrt(3))
    # every other LR clearly worse: the bound is 0; a diverged LR is no competitor
    assert paired_regret_bound(np.array([[1.0, 2.0, np.inf], [1.1, 2.1, np.inf], [0.9, 1.9, np.inf]]), 0) == 0.0


def test_three_seeds_that_agree_on_the_best_lr_no_longer_print_a_zero_width_regret():
    grid = np.arange(-3.0, 2.0)
    rng = np.random.default_rng(3)
    small = optimum(grid, 2.0 + 0.05 * (grid + 1) ** 2 + 0.002 * rng.standard_normal((3, 5)), rng=rng)
    # at the large scale LR 2^-1 is within noise of the best, 2^-1 just ahead in every seed's mean
    curve = np.array([2.3, 2.1, 2.0, 2.004, 2.2])
    noise = np.array([[0.0, 0.0, 0.01, -0.01, 0.0], [0.0, 0.0, -0.01, 0.01, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0]])
    large = optimum(grid, curve + noise, rng=rng)
    point, low, high = regret(small, large)
    assert (point, low) == (0.0, 0.0) and small.best == large.best == 2
    differences = (curve + noise)[:, 2] - (curve + noise)[:, 3]  # −0.014, −0.024, −0.004
    assert high == pytest.approx(differences.mean() + 4.303 * differences.std(ddof=1) / math.sqrt(3))
    assert high > 0.005
