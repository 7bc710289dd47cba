"""The learning-rate search's planner (modula_cli/sweep/lr_search.py) on a synthetic objective: a parabola in
log2(LR) whose optimum drifts with the scale, seed noise, and a cliff above which every seed diverges.
Positions are lattice indices: with ``per_grid`` points per grid step, index k is k / per_grid grid steps."""

import math
import random

import numpy as np
import pytest

from modula_cli.analysis.stats import optimum

from modula_cli.sweep.lr_search import (Lattice, SearchError, SearchSettings, Step, first_bracket, plan,
                                        plan_series, predicted_start)


def valley(optimum: float, per_grid: int = 1, seeds: int = 3, noise: float = 0.02, cliff: float = 2.5,
           curvature: float = 0.1, tilt: float = 0.0):
    """Each seed's loss at lattice index k (x = k / per_grid grid steps): curvature·(x − optimum)² + 2 +
    noise, and a per-seed tilt; +inf from optimum + cliff on. The same k always gives the same values."""
    def run(k: int) -> list[float]:
        x = k / per_grid
        if x >= optimum + cliff:
            return [math.inf] * seeds
        rng = np.random.default_rng(abs(k) * 7919 + (k < 0))
        slopes = np.random.default_rng(1).standard_normal(seeds)
        return list(2.0 + curvature * (x - optimum) ** 2 + noise * rng.standard_normal(seeds) + tilt * slopes * x)
    return run


def search(objective, start: float, settings: SearchSettings, batches: list | None = None) -> tuple[dict, Step]:
    """Run one scale's planner to its end as a launcher would: each batch trained whole, then asked again."""
    results: dict[int, list[float]] = {}
    for _ in range(60):
        step = plan(results, start, settings)
        if step.stop is not None:
            return results, step
        if batches is not None:
            batches.append(step.run)
        assert not set(step.run) & set(results), "a finished LR was proposed again"
        results.update({k: objective(k) for k in step.run})
    raise AssertionError("the search did not stop")


def test_the_lattice_keeps_the_grid_values_and_names_the_points_between():
    lattice = Lattice.of_grid([0.25, 0.0625, 0.125, 0.5], per_grid=2)
    assert lattice.grid == (0.0625, 0.125, 0.25, 0.5) and lattice.grid_step == pytest.approx(1.0)
    assert [lattice.lr(k) for k in (0, 2, 6, 8, -2)] == [0.0625, 0.125, 0.5, 1.0, 0.03125]
    assert lattice.lr(1) == float("0.0883883476483")  # 2^-3.5, to 12 significant digits
    assert lattice.index(0.0883883) == 1 and lattice.index(0.1) is None and lattice.index(1.0) == 8
    # whole octaves beyond the grid are exact: the value a wider grid would write, so the same run folder
    assert Lattice.of_grid([2.0 ** -6, 2.0 ** -5]).lr(-3) == 0.001953125 == 2.0 ** -9
    decimal = Lattice.of_grid([0.001, 0.01, 0.1])  # any constant ratio: a grid step of log2(10)
    assert decimal.lr(1) == 0.01 and decimal.lr(3) == pytest.approx(1.0) and decimal.lr(-1) == 0.0001
    with pytest.raises(SearchError, match="evenly spaced in log2"):
        Lattice.of_grid([0.1, 0.2, 0.8])
    with pytest.raises(SearchError, match="at least two positive LRs"):
        Lattice.of_grid([0.1])


def test_the_first_batch_brackets_the_start_on_grid_points_inside_the_bounds():
    assert plan({}, 2.3, SearchSettings()) == Step(run=(1, 2, 3))
    assert plan({}, 2.3, SearchSettings(per_grid=2)) == Step(run=(2, 4, 6))  # one grid step apart, not a half
    assert first_bracket(8.0, SearchSettings(high=8)) == (6, 7, 8)
    assert first_bracket(0.0, SearchSettings(low=0, per_grid=2)) == (0, 2, 4)


def test_a_transfer_that_holds_costs_three_lrs_and_a_far_optimum_is_reached_one_step_at_a_time():
    batches: list = []
    _, step = search(valley(4.0), 4.0, SearchSettings(), batches)
    assert batches == [(3, 4, 5)] and step.reason == "resolution" and step.stop.startswith("resolution reached")
    batches = []
    results, step = search(valley(6.2), 4.0, SearchSettings(), batches)
    assert batches == [(3, 4, 5), (6,), (7,)] and step.reason == "resolution"
    assert min(results, key=lambda k: np.mean(results[k])) == 6
    batches = []
    search(valley(0.2), 4.0, SearchSettings(), batches)
    assert batches[1:] == [(2,), (1,), (0,), (-1,)]  # below the grid's first LR too


def test_a_diverged_lr_counts_as_worse_than_every_finished_one():
    # every seed diverges from one grid step above the optimum: the best LR is bracketed from above by it
    results, step = search(valley(2.0, cliff=0.9), 2.0, SearchSettings())
    assert all(math.isinf(v) for v in results[3]) and 4 not in results  # nothing beyond the cliff
    assert step.reason == "lattice" and step.stop.startswith("the next LR above diverged")
    results, step = search(valley(2.0, cliff=0.9, per_grid=2), 2.0, SearchSettings(per_grid=2))
    assert sorted(results)[-2:] == [5, 6] and math.isinf(results[6][0])  # half a step towards the cliff, not past
    # everything diverges: the search goes down until something trains
    results, step = search(valley(-1.0, cliff=0.5), 4.0, SearchSettings(budget=12))
    assert min(results, key=lambda k: np.mean(results[k])) == -1 and step.reason == "lattice"


def test_refinement_reaches_a_resolution_on_a_finer_lattice_that_the_grid_step_cannot():
    settings = SearchSettings(per_grid=4, resolution=0.3, budget=12)
    results, step = search(valley(2.4, per_grid=4, noise=0.03), 2.0, settings)
    assert step.reason == "resolution", step.stop
    assert any(k % 4 for k in results)  # points between the grid's LRs were tried
    tried = sorted(results)
    fit = optimum(np.array(tried) / 4, np.array([results[k] for k in tried]).T)
    assert abs(fit.log2_optimal_lr - 2.4) <= 0.5  # half a grid step
    coarse_results, coarse = search(valley(2.4, noise=0.03), 2.0, SearchSettings(resolution=0.05))
    assert coarse.reason == "seeds" and "more LRs cannot narrow the 95 % interval" in coarse.stop
    assert sorted(coarse_results) == [1, 2, 3]  # the bracket: LRs two grid steps out would not move the fit


def test_a_wide_interval_buys_lattice_points_only_where_they_can_narrow_it():
    """On half steps the points next to the optimum move the fit, and are bought until the budget. On the grid's
    own step a noisy curve used to buy every LR of a 5-LR grid centred on its optimum (27 of a sweep's 30 runs)
    for an interval no LR could narrow: it now stops at the bracket, and the claim holds: with the whole grid
    trained, the interval is no narrower than the resolution."""
    batches: list = []
    results, step = search(valley(4.0, per_grid=2, noise=0.2, tilt=0.1), 4.0, SearchSettings(per_grid=2, budget=5),
                           batches)
    assert len(results) == 5 and step.reason == "budget" and step.stop.startswith("budget spent: 5 LRs")
    assert all(len(batch) == 1 and abs(batch[0] - 8) <= 4 for batch in batches[1:])  # next to the optimum
    noisy = valley(4.0, noise=0.2, tilt=0.1)
    settings = SearchSettings(budget=5)
    results, step = search(noisy, 4.0, settings)
    assert sorted(results) == [3, 4, 5] and step.reason == "seeds"
    assert "the seeds' noise keeps it wider than 0.75 grid steps" in step.stop and "more seeds would" in step.stop
    grid = np.arange(2, 7)
    low, high = optimum(grid.astype(float), np.array([noisy(k) for k in grid]).T).bounds()
    assert not high - low <= settings.resolution  # open (NaN) or wider: the whole grid could not do it either


def test_the_budget_and_the_bounds_stop_a_scale_at_an_edge_and_say_which():
    _, step = search(valley(12.0), 4.0, SearchSettings(budget=5))
    assert step.reason == "budget" and step.stop == "budget spent with the best LR at the high edge of those tried"
    results, step = search(valley(12.0), 4.0, SearchSettings(high=7))
    assert max(results) == 7 and step.reason == "bound" and step.stop.startswith("high bound reached")
    _, step = search(valley(-4.0), 4.0, SearchSettings(low=1))
    assert step.reason == "bound" and step.stop.startswith("low bound reached")


def test_settings_that_cannot_search_say_so_in_one_line_each():
    assert SearchSettings().problems(4) == []
    problems = SearchSettings(budget=2).problems()  # the settings' own ranges are the schema's (test_search_sweep)
    assert any("search_budget=2: a bracket needs at least 3" in p for p in problems)
    assert "room for a bracket" in SearchSettings(low=2, high=3).problems(2)[0]
    lattice = Lattice.of_grid([0.125, 0.25, 0.5, 1.0])
    assert SearchSettings(low=0, high=2).problems(5, lattice) == [
        "the starting LR 4 lies outside the bounds [0.125, 0.5]"]


@pytest.mark.parametrize("seed", range(6))
def test_a_killed_launch_resumes_where_it_stopped_and_never_trains_an_lr_twice(seed):
    """Any prefix of any batch finished (the rest lost to a kill) replays to the same search."""
    objective, settings = valley(5.3, noise=0.05), SearchSettings(per_grid=2, resolution=0.5, budget=8)
    whole, whole_step = search(objective, 3.0, settings)
    rng = random.Random(seed)
    results: dict[int, list[float]] = {}
    trained: list[int] = []
    for _ in range(80):
        step = plan(results, 3.0, settings)
        if step.stop is not None:
            break
        finished = step.run[: rng.randint(0, len(step.run))] if rng.random() < 0.5 else step.run
        trained += finished
        results.update({k: objective(k) for k in finished})
    assert sorted(trained) == sorted(set(trained)) == sorted(whole)
    assert step == whole_step
    # a batch finished in part: the rest comes back, and the finished part counts as tried
    partial = plan({4: objective(4), 8: objective(8)}, 3.0, settings)  # the first bracket is 4, 6, 8
    assert partial.run == (6,) and partial.tried == (4, 8)


def test_later_scales_start_where_the_earlier_ones_put_the_optimum_and_follow_a_drift():
    # the optimum moves up one grid step per doubling: 2, 3, 4, 5 at positions 5, 6, 7, 8 (log2 of 32 … 256)
    objectives = [valley(2.0 + i) for i in range(4)]
    positions = [5.0, 6.0, 7.0, 8.0]
    results: list[dict[int, list[float]]] = [{} for _ in objectives]
    firsts: dict[int, tuple[int, ...]] = {}
    for _ in range(40):
        plans = plan_series(results, positions, 2.0, SearchSettings())
        todo = [(i, p.step.run) for i, p in enumerate(plans) if p.step.run]
        if not todo:
            break
        for i, run in todo:
            firsts.setdefault(i, run)
            results[i].update({k: objectives[i](k) for k in run})
    assert firsts[0] == firsts[1] == (1, 2, 3)  # the second scale starts at the first one's optimum
    assert firsts[2] == (3, 4, 5) and firsts[3] == (4, 5, 6)  # later ones at the optimum moved on by the drift
    assert all(p.step.stop for p in plans)
    # the smallest scale's best LR (2) was trained at every scale: the regret needs it
    assert all(2 in r for r in results) and len(results[3]) == 4
    assert predicted_start([2.0, 3.1], [5.0, 6.0], 8.0) == pytest.approx(5.3)
    # three anchors: the least-squares line through all of them (numpy's), not the last two's drift (4.0)
    slope, intercept = np.polyfit([5.0, 6.0, 7.0], [2.0, 3.0, 3.5], 1)
    assert predicted_start([2.0, 3.0, 3.5], [5.0, 6.0, 7.0], 8.0) == pytest.approx(intercept + 8 * slope)
    assert predicted_start([2.0, 3.0, 3.5], [5.0, 6.0, 7.0], 8.0) == pytest.approx(13 / 3)


def test_a_scale_waits_until_the_one_before_it_is_bracketed():
    results: list[dict[int, list[float]]] = [{}, {}, {}]
    plans = plan_series(results, [5.0, 6.0, 7.0], 4.0, SearchSettings())
    assert plans[0].step.run == (3, 4, 5) and plans[1].waiting and plans[2].waiting
    objective = valley(8.0)  # the first scale's optimum is far above: it must extend before the next may start
    results[0].update({k: objective(k) for k in (3, 4, 5)})
    plans = plan_series(results, [5.0, 6.0, 7.0], 4.0, SearchSettings())
    assert plans[0].step.run == (6,) and plans[1].waiting
    for k in (6, 7, 8, 9):
        results[0][k] = objective(k)
    plans = plan_series(results, [5.0, 6.0, 7.0], 4.0, SearchSettings())
    assert plans[1].step.run == (7, 8, 9) and plans[2].waiting  # bracketed at 8: the next scale goes out


def test_one_seed_stops_once_bracketed_and_a_refinement_never_exceeds_the_budget():
    batches: list = []
    _, step = search(valley(4.0, seeds=1), 4.0, SearchSettings(), batches)
    assert batches == [(3, 4, 5)] and step.reason == "one seed"  # no interval to narrow: nothing more to buy
    # the optimum halfway between two untried half steps: both are nearest, but only one fits the budget
    tied = {4: [math.inf] * 3, 6: [2.0, 2.01, 1.99], 8: [math.inf] * 3}
    step = plan(tied, 3.0, SearchSettings(per_grid=2, budget=4))
    assert len(step.run) == 1 and step.run[0] in (5, 7)


def test_the_next_scale_starts_from_the_first_bracket_of_the_one_before():
    """The anchor is the fit when a scale was first bracketed, not its latest one: a later scale's start
    must not move while the one before it refines (its first batch would change under a relaunch)."""
    settings = SearchSettings(per_grid=2, resolution=0.05, budget=8)
    objective = valley(2.4, per_grid=2, noise=0.03)
    results: dict[int, list[float]] = {}
    anchors, bracketed = [], None
    for _ in range(10):
        step = plan(results, 2.0, settings)
        anchors.append(step.anchor)
        if step.anchor is not None and bracketed is None:
            bracketed = sorted(results)  # what had finished when the scale was first bracketed
        if step.stop:
            break
        results.update({k: objective(k) for k in step.run})
    first = next(a for a in anchors if a is not None)
    assert all(a == first for a in anchors if a is not None) and len(results) > len(bracketed)
    fit = optimum(np.array(bracketed) / 2, np.array([objective(k) for k in bracketed]).T)
    assert first == pytest.approx(fit.log2_optimal_lr)
