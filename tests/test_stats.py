"""The report's statistics on synthetic curves with known answers: the fitted optimum, its bootstrap
interval, shift and regret, edges and divergence."""

import json
import runpy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from modula_cli.analysis.report import write_report
from modula_cli.analysis.stats import (interval, mean_curve, optimum, regret, resampled_means, shift,
                                       small_sample_factor, vertices)
import prewarmed

GRID = np.arange(-6.0, 3.0)  # log2 of the paper's normed grid, 2^-6 … 2^2


def parabola(vertex: float, floor: float = 2.0, curvature: float = 0.1) -> np.ndarray:
    return floor + curvature * (GRID - vertex) ** 2


@pytest.mark.parametrize("vertex", [-2.0, -1.7, 0.45, -4.3])
def test_the_vertex_of_a_parabola_is_recovered_exactly(vertex):
    fit = optimum(GRID, np.stack([parabola(vertex)] * 3))
    assert fit.log2_optimal_lr == pytest.approx(vertex, abs=1e-9)
    assert fit.fit.value[0] == pytest.approx(2.0, abs=1e-9)
    assert fit.edge == "" and fit.seeds == 3
    low, high = fit.bounds()  # identical seeds: every resample gives the same vertex
    assert low == pytest.approx(vertex) and high == pytest.approx(vertex)


def test_vertex_on_an_uneven_grid_matches_a_polynomial_fit():
    x = np.array([-5.0, -3.5, -3.0, -1.0])
    y = np.array([3.0, 2.2, 2.1, 2.6])
    a, b, _ = np.polyfit(x[1:], y[1:], 2)  # the best point (-3) and its neighbours
    assert vertices(x, y[None]).log2_lr[0] == pytest.approx(-b / (2 * a))


# the coverage study's own synthetic sweeps (docs/results/interval_coverage/), used here at fewer sweeps
STUDY = runpy.run_path(str(Path(__file__).resolve().parents[1] / "docs" / "results" / "interval_coverage"
                           / "interval_coverage.py"))
coverage, parabola_at_truth, skewed = STUDY["coverage"], STUDY["parabola"], STUDY["skewed"]


@pytest.mark.parametrize("shape, seeds, least",
                         [(parabola_at_truth, 3, 0.90), (parabola_at_truth, 8, 0.90), (skewed, 3, 0.85)],
                         ids=["parabola-3", "parabola-8", "skewed-3"])
def test_the_interval_covers_the_truth_in_most_synthetic_draws(shape, seeds, least):
    """Per-point noise and a per-seed tilt (which moves each seed's optimum): the 95 % interval covers the
    true optimum in close to 95 % of 200 independent sweeps, where a plain percentile bootstrap covers
    about 75-85 % (docs/results/interval_coverage/ has the whole table)."""
    plain, widened, width = coverage(shape, seeds, 200, np.random.default_rng(1))
    assert widened >= least and widened > plain + 0.04, (plain, widened)
    assert 0.05 < width < 2.0  # informative, not vacuous


def test_identical_curves_have_zero_shift_and_zero_regret():
    rng = np.random.default_rng(2)
    values = parabola(-2.3)[None] + 0.01 * rng.standard_normal((4, GRID.size))
    small, large = optimum(GRID, values), optimum(GRID, values.copy())
    point, low, high = shift(small, large)
    assert point == 0.0 and low <= 0.0 <= high
    lost, lost_low, lost_high = regret(small, large)
    assert lost == 0.0 and 0.0 <= lost_low <= lost_high


def test_a_moving_optimum_gives_its_shift_and_regret():
    small = optimum(GRID, np.stack([parabola(-1.0)] * 3))
    large = optimum(GRID, np.stack([parabola(-3.0)] * 3))
    point, low, high = shift(small, large)
    assert point == pytest.approx(-2.0) and low == pytest.approx(-2.0) and high == pytest.approx(-2.0)
    # keeping 2^-1 at the large scale costs 0.1 * (−1 − (−3))² over its best grid point (2^-3, exact)
    assert regret(small, large)[0] == pytest.approx(0.1 * 4)


@pytest.mark.parametrize("slope, edge", [(-1.0, "high"), (1.0, "low")])
def test_an_optimum_at_the_grid_edge_is_flagged_and_its_interval_open(slope, edge):
    rng = np.random.default_rng(3)
    values = 3.0 + slope * 0.1 * GRID[None] + 0.01 * rng.standard_normal((3, GRID.size))
    fit = optimum(GRID, values)
    assert fit.edge == edge
    assert fit.log2_optimal_lr == (GRID[-1] if edge == "high" else GRID[0])
    low, high = fit.bounds()
    assert np.isnan(high if edge == "high" else low) and not np.isnan(low if edge == "high" else high)


def test_a_diverged_seed_makes_its_lr_diverged_never_averaged():
    values = np.stack([parabola(0.0)] * 3)
    values[1, GRID.tolist().index(1.0)] = np.inf  # seed 1 diverged at 2^1
    mean = mean_curve(values)
    assert np.isinf(mean[GRID.tolist().index(1.0)])
    fit = optimum(GRID, values)
    assert fit.log2_optimal_lr == 0.0 and fit.edge == "high"  # no finite neighbour above 2^0
    draws = resampled_means(values, 500, np.random.default_rng(0))
    column = draws[:, GRID.tolist().index(1.0)]
    # finite exactly when the resample left seed 1 out: probability (2/3)^3
    assert np.isfinite(column).mean() == pytest.approx((2 / 3) ** 3, abs=0.06)


def test_missing_runs_are_left_out_of_the_mean():
    values = np.stack([parabola(-2.0), parabola(-2.0) + 0.2])
    values[1, 0] = np.nan  # failed
    assert mean_curve(values)[0] == pytest.approx(parabola(-2.0)[0])
    assert mean_curve(values)[1] == pytest.approx(parabola(-2.0)[1] + 0.1)


def test_interval_widens_the_percentiles_for_few_seeds_and_opens_on_request():
    draws = np.linspace(0, 1, 101)  # percentiles 2.5 % and 97.5 %: 0.025 and 0.975
    factor = 4.303 / 1.96 * np.sqrt(3 / 2)  # t(2 dof) over z, and the bootstrap's √(n/(n−1)) for 3 seeds
    assert small_sample_factor(3) == pytest.approx(factor)
    assert interval(draws, 0.5, seeds=3) == pytest.approx((0.5 - factor * 0.475, 0.5 + factor * 0.475))
    assert interval(draws, 0.5, seeds=1000) == pytest.approx((0.025, 0.975), abs=1e-3)
    assert np.isnan(interval(draws, 0.5, 3, open_low=True)[0]) and np.isnan(interval(draws, 0.5, 1)[1])
    assert np.isnan(interval(np.array([np.inf]), 0.5, 3)[1])


def write_seeded_sweep(sweep_dir, curves, metric="train_loss"):
    """Run folders as the trainer leaves them, for ``curves[width][seed] = values over GRID``."""
    for width, seeds in curves.items():
        for seed, values in enumerate(seeds):
            for log2_lr, value in zip(GRID, values):
                run = sweep_dir / f"w{width}_lr{log2_lr}_s{seed}"
                run.mkdir(parents=True)
                diverged = not np.isfinite(value)
                summary = {"status": "diverged" if diverged else "completed", "arch": "resmlp", "data": "cifar10",
                           "optimizer": "adam", "mode": "normed", "width": width, "depth": 3, "lr": 2.0**log2_lr,
                           "seed": seed, metric: None if diverged else float(value)}
                (run / "summary.json").write_text(json.dumps(summary))


def test_report_aggregates_seeds_and_maximises_accuracy(tmp_path):
    sweep_dir = tmp_path / "sweep"
    rng = np.random.default_rng(4)
    accuracy = {w: [0.9 - parabola(v, floor=0.0, curvature=0.02) + 0.002 * rng.standard_normal(GRID.size)
                    for _ in range(3)] for w, v in ((32, -2.0), (128, -2.0))}
    accuracy[128][2][-1] = np.inf  # one seed diverged at 2^2 (its accuracy is no number)
    write_seeded_sweep(sweep_dir, accuracy, metric="test_acc")
    result = write_report(sweep_dir, metric="test_acc", quiet=True)
    optimal = result["optimal"].set_index("scale")
    assert optimal["log2_optimal_lr_fit"].to_numpy() == pytest.approx([-2.0, -2.0], abs=0.15)
    assert optimal.loc[32, "mean"] == pytest.approx(np.mean([a[4] for a in accuracy[32]]))
    assert set(optimal["metric"]) == {"test_acc"}
    assert (optimal["seeds"] == 3).all() and optimal.loc[128, "diverged_runs"] == 1
    curves = pd.read_csv(sweep_dir / "curves.csv")
    top = curves[(curves["scale"] == 128) & (curves["lr"] == 4.0)].iloc[0]
    assert (top["seeds"], top["diverged"]) == (2, 1)
    transfer = result["transfer"].iloc[0]
    assert abs(transfer["shift_log2"]) < 0.2 and transfer["shift_log2_low"] < 0 < transfer["shift_log2_high"]
    assert transfer["regret"] == 0.0 and transfer["seeds"] == 3


def test_a_scale_point_where_every_lr_lost_a_seed_has_no_optimum(tmp_path, capsys):
    curves = {32: [parabola(-2.0)] * 2, 64: [parabola(-2.0), np.full(GRID.size, np.inf)]}
    write_seeded_sweep(tmp_path / "sweep", curves)
    result = write_report(tmp_path / "sweep", resamples=200)
    assert list(result["optimal"]["scale"]) == [32] and result["transfer"].empty
    assert "64  no LR trained without a diverged seed: 9 completed, 9 diverged" in capsys.readouterr().out


def test_the_same_run_in_two_folders_counts_once(tmp_path):
    write_seeded_sweep(tmp_path / "sweep", {32: [parabola(-2.0), parabola(-2.0) + 0.1]})
    twin = tmp_path / "sweep" / f"w32_lr{GRID[0]}_s0"
    (tmp_path / "sweep" / "w32_twin").mkdir()
    (tmp_path / "sweep" / "w32_twin" / "summary.json").write_text((twin / "summary.json").read_text())
    result = write_report(tmp_path / "sweep", quiet=True, resamples=200)
    assert len(result["results"]) == 2 * GRID.size and (result["curves"]["seeds"] == 2).all()


def test_interval_keeps_both_arms_when_the_estimate_is_off_the_draws_centre():
    draws = np.linspace(1.0, 1.2, 101)
    low, high = interval(draws, 0.5, seeds=1000)
    assert low == pytest.approx(0.5 - 0.095, abs=2e-3) and high == pytest.approx(0.5 + 0.095, abs=2e-3)


def test_report_rejects_a_metric_no_run_recorded(tmp_path):
    write_seeded_sweep(tmp_path / "sweep", {32: [parabola(-2.0)]})
    with pytest.raises(ValueError, match="test_acc"):
        write_report(tmp_path / "sweep", metric="test_acc", quiet=True)
    with pytest.raises(ValueError, match="resamples=50"):
        write_report(tmp_path / "sweep", resamples=50, quiet=True)


def test_results_table_script_renders_the_report(tmp_path):
    import sys
    from pathlib import Path

    sweep_dir = tmp_path / "sweep"
    write_seeded_sweep(sweep_dir, {w: [parabola(-2.0) + 0.01 * s for s in range(3)] for w in (32, 64)})
    write_report(sweep_dir, quiet=True, resamples=200)
    script = Path(__file__).resolve().parents[1] / "scripts" / "results_table.py"
    out = prewarmed.run([sys.executable, str(script), str(sweep_dir)], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert "| normed adam | 32 | 2^-2 | -2.00 [-2.00, -2.00] | 2.010 ± 0.010 | 3 |" in out
    assert "| normed adam | width 32 → 64 | +0.00 [+0.00, +0.00] | 0.000 [0.000, 0.000] | 3 |" in out


# --- exact values for the statistics' corners (each derived by hand) ------------------------------------------


def test_the_vertex_of_an_uneven_grid_and_its_value_are_the_parabolas():
    x = np.array([0.0, 1.0, 3.0, 4.0])
    parabola = (x - 1.2) ** 2 + 2.0  # lowest grid point x = 1; neighbours 0 and 3 (uneven spacing)
    fit = vertices(x, parabola)
    assert fit.log2_lr[0] == pytest.approx(1.2) and fit.value[0] == pytest.approx(2.0)
    assert (fit.best[0], fit.edge_low[0], fit.edge_high[0]) == (1, False, False)


def test_a_curve_without_a_point_beside_curves_with_one():
    x = np.array([0.0, 1.0, 2.0])
    fit = vertices(x, np.array([[np.nan, np.nan, np.nan], [3.0, 1.0, 2.0], [1.0, 2.0, 3.0]]))
    assert np.isnan(fit.log2_lr[0]) and np.isnan(fit.value[0]) and fit.value.dtype == float
    assert list(fit.best) == [-1, 1, 0] and list(fit.edge_low) == [False, False, True]
    # through (0, 3), (1, 1), (2, 2): y = 1.5x² − 3.5x + 3, lowest at x = 7/6 with y = 3 − 3.5²/6
    assert fit.log2_lr[1] == pytest.approx(7 / 6) and fit.value[1] == pytest.approx(3 - 3.5**2 / 6)
    assert (fit.log2_lr[2], fit.value[2]) == (0.0, 1.0)  # at the edge: the best grid point itself


def test_the_small_sample_factor_at_the_ends_of_its_table():
    assert small_sample_factor(2) == pytest.approx(12.706 / 1.960 * np.sqrt(2))
    assert small_sample_factor(30) == pytest.approx(2.045 / 1.960 * np.sqrt(30 / 29))
    assert small_sample_factor(31) == pytest.approx(2.042 / 1.960 * np.sqrt(31 / 30))  # the table's last row
    assert small_sample_factor(32) == pytest.approx(np.sqrt(32 / 31))  # the normal's 1.96 beyond it
    with pytest.raises(ValueError, match=r"^an interval needs at least 2 seeds, got 1$"):
        small_sample_factor(1)


def test_an_interval_by_hand():
    draws = np.arange(101.0)  # percentiles 2.5, 50 and 97.5: arms of 47.5 either side of the median
    stretch = small_sample_factor(2)
    assert interval(draws, 10.0, 2) == pytest.approx((10.0 - 47.5 * stretch, 10.0 + 47.5 * stretch))
    low, high = interval(np.append(draws, [np.inf, np.nan]), 10.0, 2, open_low=True)
    assert np.isnan(low) and high == pytest.approx(10.0 + 47.5 * stretch)  # non-finite draws are left out
    assert all(np.isnan(interval(draws, 10.0, 1))) and all(np.isnan(interval(np.array([np.inf]), 10.0, 3)))
    assert all(np.isnan(interval(draws, float("nan"), 3)))


def test_mean_curves_and_resampled_means_by_hand():
    values = np.array([[1.0, np.nan, np.inf, np.nan], [3.0, 5.0, 2.0, np.nan]])  # seeds × LRs
    mean = mean_curve(values)
    assert mean[0] == 2.0 and mean[1] == 5.0 and mean[2] == np.inf and np.isnan(mean[3])

    class Fixed:  # a generator whose draws are chosen by hand: seed 0 twice, then each seed once
        def multinomial(self, n, p, size):
            return np.array([[2, 0], [1, 1], [0, 2]])[:size]

    resampled = resampled_means(values, 3, Fixed())
    assert resampled[0, 0] == 1.0 and np.isnan(resampled[0, 1]) and resampled[0, 2] == np.inf
    assert resampled[1, 0] == 2.0 and resampled[1, 1] == 5.0 and resampled[1, 2] == np.inf
    assert resampled[2, 0] == 3.0 and resampled[2, 1] == 5.0 and resampled[2, 2] == 2.0
    assert np.isnan(resampled[:, 3]).all()  # no seed ran there


def test_an_optimum_without_a_generator_is_reproducible_from_seed_0():
    values = np.array([[3.0, 1.0, 2.5, 4.0], [3.2, 1.4, 2.0, 4.1], [2.9, 1.2, 2.2, 3.8]])
    x = np.arange(4.0)
    default = optimum(x, values, resamples=50)
    seeded = optimum(x, values, resamples=50, rng=np.random.default_rng(0))
    assert np.array_equal(default.resampled, seeded.resampled) and default.bounds() == seeded.bounds()
    assert default.seeds == 3 and default.best == 1


def test_an_interval_is_cut_to_the_grid_it_was_fitted_on():
    x = np.arange(3.0)
    wide = optimum(x, np.array([[1.0, 0.0, 1.0], [0.2, 0.0, 3.0], [3.0, 0.0, 0.2]]), resamples=200)
    low, high = wide.bounds()  # the bootstrap's upper arm reaches 2.18 (seed 0): cut at the grid's top, 2
    assert 0.0 <= low <= wide.log2_optimal_lr and high == 2.0


def _optimum_at(best: int, seeds: int = 3, n: int = 5) -> object:
    x = np.arange(float(n))
    rows = [(x - best) ** 2 + 0.05 * k for k in range(seeds)]
    return optimum(x, np.array(rows), resamples=100)


def test_a_shift_between_an_edge_and_an_inner_optimum_is_open_on_the_right_side():
    inner, low_edge, high_edge = _optimum_at(2), _optimum_at(0), _optimum_at(4)
    point, low, high = shift(inner, high_edge)  # the large scale's optimum may lie further up
    assert point == pytest.approx(2.0) and np.isfinite(low) and np.isnan(high)
    point, low, high = shift(inner, low_edge)  # … or further down
    assert point == pytest.approx(-2.0) and np.isnan(low) and np.isfinite(high)
    point, low, high = shift(low_edge, inner)  # the small scale's edge opens the other side
    assert point == pytest.approx(2.0) and np.isfinite(low) and np.isnan(high)
    point, low, high = shift(inner, inner)  # no edge: both sides, within what the grids allow
    assert point == pytest.approx(0.0) and -4.0 <= low <= 0.0 <= high <= 4.0


def test_regret_at_the_first_lr_of_the_large_grid():
    small, large = _optimum_at(0), _optimum_at(2)  # the small scale's best LR is the large grid's first
    point, low, high = regret(small, large)
    assert point == pytest.approx(4.0)  # (0 − 2)² + 0.05 at the tuned LR, minus the best mean 0.05
    assert 0.0 <= low <= point <= high


def test_a_best_lr_that_ties_with_its_neighbour_within_noise_is_named_with_the_other_regret():
    """The quick sweep's case: at the smallest scale 2^-1 and 2^0 are within noise of each other; which one
    'won' decides the regret. The tie is found (seeds: their paired interval holds 0; one seed: within the
    seeds' typical spread), and the regret of keeping the other is computed exactly."""
    from modula_cli.analysis.stats import ONE_SEED_NOISE, regret_at, tied_lr

    grid = np.array([-2.0, -1.0, 0.0, 1.0])
    small_curve = np.array([2.30, 2.0520, 2.0551, 2.40])  # the quick sweep's width 32: 0.5 at 2.0520, 1 at 2.0551
    large_curve = np.array([2.20, 1.9174, 1.8643, 2.10])  # width 128: best at 1
    small, large = optimum(grid, small_curve[None]), optimum(grid, large_curve[None])
    assert tied_lr(small) == 2  # one seed: 0.0031 apart is far inside 2.5 % of 2.05
    assert regret(small, large)[0] == pytest.approx(1.9174 - 1.8643)
    assert regret_at(small, large, 2) == 0.0
    far = small_curve.copy()
    far[2] = 2.0520 * (1 + ONE_SEED_NOISE) + 0.001  # just beyond the one-seed noise
    assert tied_lr(optimum(grid, far[None])) is None
    # three seeds: each seed prefers 2^-1 by a steady 0.05: a real difference, no tie
    offsets = np.array([[0.0], [0.3], [-0.2]])
    steady = np.stack([small_curve] * 3) + offsets
    steady[:, 2] = steady[:, 1] + np.array([0.05, 0.052, 0.048])
    assert tied_lr(optimum(grid, steady)) is None
    # the same means, but the seeds disagree on the sign: their interval holds 0, a tie
    noisy = steady.copy()
    noisy[:, 2] = noisy[:, 1] + np.array([0.15, -0.10, 0.10])
    assert tied_lr(optimum(grid, noisy)) == 2
    assert regret_at(small, optimum(grid, np.stack([large_curve] * 3)), 0) == pytest.approx(2.20 - 1.8643)
