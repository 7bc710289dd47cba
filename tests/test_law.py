"""The transfer law (analysis/law.py) and the report's prediction (analysis/prediction.py): the line through the
optima against an independent weighted fit, its curvature check, the joint fit over two axes, the prediction
and its interval, the targets it refuses, and the re-analysis of a shared results.csv."""

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from modula_cli.analysis.law import LawPoint, fit_law, usable
from modula_cli.analysis.targets import TargetError, checked_target, parse_target
from modula_cli.analysis.report import main as report_main
from modula_cli.analysis.report import write_report
from modula_cli.analysis.stats import optimum

GRID = np.arange(-8.0, 3.0)  # log2 LR
ROOT = Path(__file__).resolve().parents[1]


def curve(truth: float, seeds: int, rng: np.random.Generator, noise: float = 0.01, sharpness: float = 0.05):
    """values[seed, lr]: a parabola in log2 LR around ``truth``, noise per point and a tilt per seed."""
    values = 2.0 + sharpness * (GRID - truth) ** 2 + noise * rng.standard_normal((seeds, GRID.size))
    return values + noise * rng.standard_normal((seeds, 1)) * GRID[None]


def points(truths, positions, seeds=3, seed=0, **kwargs):
    rng = np.random.default_rng(seed)
    return [LawPoint(tuple(np.atleast_1d(p)), optimum(GRID, curve(t, seeds, rng, **kwargs), rng=rng))
            for t, p in zip(truths, positions)]


def test_the_line_is_the_weighted_least_squares_fit_of_the_optima():
    """numpy's polyfit with weights 1/σ (σ: each optimum's bootstrap spread, made unbiased) is the same line."""
    x = np.log2([32, 64, 128, 256, 512])
    measured = points(-1.0 + 0.3 * x, x, sharpness=0.02)
    law = fit_law(["width"], measured)
    optima = np.array([p.optimum.log2_optimal_lr for p in measured])
    sigma = np.array([max(np.std(p.optimum.draws.log2_lr) * math.sqrt(3 / 2), 0.1) for p in measured])
    slope, intercept = np.polyfit(x, optima, 1, w=1 / sigma)
    assert law.slope().value == pytest.approx(slope, abs=1e-9)
    assert law.intercept == pytest.approx(intercept, abs=1e-9)
    assert law.slope().covers(0.3) and law.slope().low < law.slope().value < law.slope().high


def test_a_flat_curve_counts_less_than_a_sharp_one():
    """The weights are the optima's precision: a point whose optimum the seeds place badly moves the line less."""
    x = np.log2([32, 64, 128])
    sharp = points([-1.0, -1.0, -1.0], x, seed=1)
    rng = np.random.default_rng(5)
    flat = LawPoint((x[2],), optimum(GRID, curve(1.0, 3, rng, noise=0.03, sharpness=0.004), rng=rng))
    weighted = fit_law(["width"], [*sharp[:2], flat])
    optima = np.array([sharp[0].optimum.log2_optimal_lr, sharp[1].optimum.log2_optimal_lr,
                       flat.optimum.log2_optimal_lr])
    unweighted = np.polyfit(x, optima, 1)[0]
    assert abs(weighted.slope().value) < 0.5 * abs(unweighted)


def test_the_prediction_widens_with_the_distance_and_counts_the_doublings():
    x = np.log2([32, 64, 128, 256])
    law = fit_law(["width"], points(-1.0 + 0.25 * x, x))
    near, far = law.predict([np.log2(512)]), law.predict([np.log2(8192)])
    assert near.doublings == (pytest.approx(1.0),) and far.doublings == (pytest.approx(5.0),)
    assert law.predict([np.log2(100)]).doublings == (0.0,)
    assert law.predict([np.log2(8)]).doublings == (pytest.approx(-2.0),)
    width = lambda p: p.log2_lr.high - p.log2_lr.low
    assert width(far) > 2 * width(near)
    assert far.log2_lr.value == pytest.approx(law.intercept + law.slope().value * 13)
    assert far.log2_lr.covers(-1.0 + 0.25 * 13) and not far.withheld
    assert far.lr.value == pytest.approx(2.0**far.log2_lr.value)


def test_a_curved_drift_is_caught_and_no_lr_is_predicted():
    x = np.log2([16, 32, 64, 128, 256])
    curved = fit_law(["width"], points(-1.0 + 0.35 * (x - 6) ** 2, x, noise=0.003))
    assert curved.curved and "not a power law" in curved.predict([12.0]).withheld
    straight = fit_law(["width"], points(-1.0 + 0.35 * x, x, noise=0.003))
    assert straight.checked and not straight.curved and not straight.predict([12.0]).withheld


def test_two_scales_give_a_line_nothing_checks():
    x = np.log2([32, 128])
    law = fit_law(["width"], points([-1.0, -0.5], x))
    assert not law.checked and law.curvature == (None,) and law.inflation == 1.0
    assert law.slope().value == pytest.approx((law.optima[1] - law.optima[0]) / 2)


def test_one_seed_gives_a_point_estimate_and_withholds_the_interval():
    x = np.log2([32, 64, 128])
    law = fit_law(["width"], points([-1.0, -0.8, -0.6], x, seeds=1))
    prediction = law.predict([10.0])
    assert "one seed" in prediction.withheld and math.isnan(prediction.log2_lr.low)
    assert not law.curved and not law.checked  # no interval: nothing says the line bends, nor that it does not


def test_the_joint_law_recovers_both_exponents():
    """Width × steps, the horizon law's case: log2 η* = 1 − 0.5·log2 width + 0.25·log2 steps... with the sign of
    each axis its own."""
    grid = [(w, s) for w in (32, 64, 128) for s in (100, 400, 1600)]
    x = np.log2(np.array(grid, dtype=float))
    truth = 3.0 - 0.5 * x[:, 0] - 0.25 * x[:, 1]
    law = fit_law(["width", "steps"], points(truth, x, noise=0.003))
    assert law.slope(0).covers(-0.5) and law.slope(1).covers(-0.25)
    assert law.slope(0).high < 0 and law.slope(1).high < 0
    assert law.predict(np.log2([1024, 6400])).log2_lr.covers(3.0 - 0.5 * 10 - 0.25 * np.log2(6400))


def test_an_edge_optimum_is_a_bound_and_is_left_out():
    x = np.log2([32, 64, 128])
    measured = points([-1.0, -0.5, 2.5], x)  # the last one's optimum lies beyond the grid's top
    assert measured[2].optimum.edge == "high"
    assert len(usable(measured)) == 2
    assert fit_law(["width"], measured[:1]) is None  # one point fixes no line


@pytest.mark.parametrize(("target", "axes", "message"), [
    ({"depth": 8}, ["width"], "--target depth=8: this sweep varies width, not depth; name width"),
    ({"width": -4}, ["width"], "target width=-4: a scale is a positive number"),
    ({"width": 0}, ["width"], "a scale is a positive number"),
    ({"batch": 64}, ["width"], "batch is not a scale axis; allowed: width, depth, blocks_mass, context, batch_size, "
                               "steps, wd"),
    ({"width": 4096}, [], "this sweep has runs at one scale only"),
    ({"steps": 20000}, ["width", "steps"], "varies width and steps; a target names width (and steps for the joint "
                                           "law)"),
])
def test_a_target_the_sweep_cannot_predict_at_is_one_line(target, axes, message):
    with pytest.raises(TargetError) as error:
        checked_target(target, axes)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_target_below_the_smallest_scale_is_allowed_and_labelled():
    assert checked_target({"width": 8}, ["width"]) == {"width": 8.0}
    assert parse_target("width=4096, steps=2e4") == {"width": 4096.0, "steps": 20000.0}
    assert parse_target("width:4096+steps:20000") == {"width": 4096.0, "steps": 20000.0}  # sweep.target's form
    with pytest.raises(TargetError, match="write axis=value pairs"):
        parse_target("width 4096")


# --- the report ----------------------------------------------------------------------------------------------

def shared_table(tmp_path: Path, truths: dict[tuple[int, int], float], seeds=(0, 1, 2)) -> Path:
    """A results.csv as a report writes it, for a width × steps sweep with known optima."""
    rng = np.random.default_rng(3)
    rows = []
    for (width, steps), truth in truths.items():
        for seed in seeds:
            tilt = 0.003 * rng.standard_normal()
            for x in GRID:
                loss = 2.0 + 0.05 * (x - truth) ** 2 + 0.003 * rng.standard_normal() + tilt * x
                rows.append({"run": f"lr={2 ** x:g},seed={seed},steps={steps},width={width}", "arch": "gpt",
                             "data": "shakespeare", "optimizer": "adam", "mode": "normed", "variant": "paper",
                             "width": width, "steps": steps, "lr": 2.0**x, "seed": seed, "status": "completed",
                             "train_loss": loss, "axes": "steps,width",
                             "setting": f"steps={steps}" if len({s for _, s in truths}) > 1 else ""})
    path = tmp_path / "results.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_the_report_predicts_from_a_shared_results_table(tmp_path, capsys):
    truths = {(w, 400): -1.0 + 0.25 * math.log2(w / 32) for w in (32, 64, 128, 256)}
    table = shared_table(tmp_path, truths)
    out = tmp_path / "again"
    write_report(table, resamples=400, out_dir=out, target={"width": 4096})
    transfer = pd.read_csv(out / "transfer.csv").iloc[0]
    law = pd.read_csv(out / "law.csv").iloc[0]
    optima = pd.read_csv(out / "optimal_lr.csv")
    truth = -1.0 + 0.25 * 7
    assert transfer["target"] == "width=4096" and transfer["target_doublings"] == pytest.approx(4.0)
    assert transfer["predicted_low"] < 2.0**truth < transfer["predicted_high"]
    assert transfer["law_slope_low"] < 0.25 < transfer["law_slope_high"] and transfer["law_check"] == "straight"
    # the prediction is the law's line at log2 4096, and the line is near the plain fit of the optima
    assert math.log2(transfer["predicted_lr"]) == pytest.approx(law["intercept"] + 12 * law["slope"])
    plain = np.polyfit(np.log2(optima["scale"]), optima["log2_optimal_lr_fit"], 1)[0]
    assert law["slope"] == pytest.approx(plain, abs=0.03)
    printed = capsys.readouterr().out
    assert "at width 4096: use LR ≈ 2^" in printed and "4 doublings beyond width 256" in printed
    assert (out / "scale.png").stat().st_size > 0 and (out / "results.csv").exists()


def test_the_report_fits_the_joint_law_of_a_two_axis_sweep(tmp_path):
    truths = {(w, s): 0.5 - 0.5 * math.log2(w / 32) - 0.25 * math.log2(s / 100)
              for w in (32, 64, 128) for s in (100, 400, 1600)}
    out = tmp_path / "again"
    write_report(shared_table(tmp_path, truths), resamples=400, out_dir=out, quiet=True,
                 target={"width": 1024, "steps": 6400})
    law = pd.read_csv(out / "law.csv")
    joint = law[law["axes"] == "width,steps"].iloc[0]
    assert joint["slope_low"] < -0.5 < joint["slope_high"] and joint["second_axis"] == "steps"
    assert joint["second_slope_low"] < -0.25 < joint["second_slope_high"] and joint["points"] == 9
    truth = 0.5 - 0.5 * 5 - 0.25 * 6
    assert joint["predicted_low"] < 2.0**truth < joint["predicted_high"]
    # one law along width per horizon as well, without the target (it names both axes)
    assert (law["axes"] == "width").sum() == 3 and law.loc[law["axes"] == "width", "target"].isna().all()


def test_a_results_table_without_the_needed_columns_is_refused_by_name(tmp_path, capsys):
    table = shared_table(tmp_path, {(32, 400): -1.0, (64, 400): -1.0})
    pd.read_csv(table).drop(columns=["seed", "status"]).to_csv(table, index=False)
    with pytest.raises(SystemExit) as error:
        report_main([str(table)])
    assert "missing: seed, status" in str(error.value) and "\n" not in str(error.value)
    frame = pd.read_csv(shared_table(tmp_path, {(32, 400): -1.0, (64, 400): -1.0}))
    frame.assign(format=7).to_csv(table, index=False)
    with pytest.raises(SystemExit) as error:
        report_main([str(table)])
    assert "results table format 7; this modula-sweep reads format 2" in str(error.value)


def test_a_target_on_an_axis_the_sweep_did_not_vary_is_refused_before_any_fit(tmp_path, monkeypatch):
    import modula_cli.analysis.report as report

    table = shared_table(tmp_path, {(32, 400): -1.0, (64, 400): -1.0})
    monkeypatch.setattr(report, "optimal_lrs", lambda *a, **k: pytest.fail("fitted before checking the target"))
    with pytest.raises(SystemExit) as error:
        report_main([str(table), "--target", "depth=8"])
    assert str(error.value) == ("modula-sweep-report: --target depth=8: this results table varies width, not depth; "
                                "name width")


def test_the_committed_h100_sweep_reanalysed(tmp_path):
    """docs/results/gpu_gpt_width: plain Adam's optimum falls about one grid step per doubling of the width; the
    law over widths 64–512 says so, straight, and the report writes its files beside the table, not over it."""
    source = ROOT / "docs/results/gpu_gpt_width/results.csv"
    result = write_report(source, resamples=400, out_dir=tmp_path, quiet=True, target={"width": 4096})
    law = result["law"].set_index("mode")
    assert law.loc["unnormed", "slope_high"] < -0.85 and law.loc["unnormed", "slope_low"] > -1.1
    assert law.loc["unnormed", "check"] == "straight" and law.loc["unnormed", "points"] == 4
    assert "width 1024 (optimum at the high edge of its LRs)" in law.loc["normed", "excluded"]


def test_a_target_below_the_smallest_scale_is_predicted_and_said_so(tmp_path, capsys):
    truths = {(w, 400): -1.0 + 0.25 * math.log2(w / 32) for w in (32, 64, 128)}
    result = write_report(shared_table(tmp_path, truths), resamples=400, out_dir=tmp_path / "r",
                          target={"width": 8})
    row = result["transfer"].iloc[0]
    assert row["target_doublings"] == pytest.approx(-2.0)
    assert "2 doublings below width 32 (below the scales measured)" in capsys.readouterr().out


def test_scale_png_draws_the_law_out_to_the_target_and_marks_the_prediction(tmp_path, monkeypatch):
    from matplotlib.collections import PolyCollection

    import modula_cli.analysis.plots as plots

    def bands(axes) -> list:
        return [c for c in axes.collections if isinstance(c, PolyCollection)]  # fill_between's

    figures = {}
    monkeypatch.setattr(plots, "_save", lambda fig, path: figures.setdefault(Path(path).name, fig))
    truths = {(w, 400): -1.0 + 0.25 * math.log2(w / 32) for w in (32, 64, 128, 256)}
    result = write_report(shared_table(tmp_path, truths), resamples=400, out_dir=tmp_path / "r", quiet=True,
                          target={"width": 4096})
    left = figures["scale.png"].axes[0]
    predicted = math.log2(result["transfer"].iloc[0]["predicted_lr"])
    stars = [line for line in left.get_lines() if line.get_marker() == "*"]
    assert len(stars) == 1 and stars[0].get_xdata()[0] == 4096
    assert stars[0].get_ydata()[0] == pytest.approx(predicted)
    dotted = [line for line in left.get_lines() if line.get_linestyle() == ":"]
    assert any(max(line.get_xdata()) == pytest.approx(4096) for line in dotted)  # the extrapolation, drawn apart
    low, high = left.get_ylim()
    assert low < math.log2(result["transfer"].iloc[0]["predicted_low"]) and \
        high > math.log2(result["transfer"].iloc[0]["predicted_high"])
    assert any("4096" in text.get_text() for text in left.texts)
    assert "band: law's 95 %" in left.get_title()
    # one seed: the law has no interval, so no band is drawn and the title promises none
    figures.clear()
    (tmp_path / "one").mkdir()
    write_report(shared_table(tmp_path / "one", truths, seeds=(0,)), resamples=400, out_dir=tmp_path / "r1",
                 quiet=True, target={"width": 4096})
    one = figures["scale.png"].axes[0]
    assert bands(left) and not bands(one)
    assert "band" not in one.get_title().replace("no band: one seed", "") and "no band: one seed" in one.get_title()


def test_points_that_scatter_about_the_line_widen_its_intervals_by_root_chi_square():
    """Optima that zigzag about the line by more than their own noise: the intervals widen by √(χ²/(n−2)),
    χ² computed here from the optima and their precision (the weights of the polyfit test)."""
    x = np.log2([32, 64, 128, 256, 512])
    measured = points(-1.0 + 0.2 * x + np.array([0.6, -0.6, 0.6, -0.6, 0.6]), x, noise=0.003)
    law = fit_law(["width"], measured)
    optima = np.array([p.optimum.log2_optimal_lr for p in measured])
    sigma = np.array([max(np.std(p.optimum.draws.log2_lr) * math.sqrt(3 / 2), 0.1) for p in measured])
    slope, intercept = np.polyfit(x, optima, 1, w=1 / sigma)
    chi2 = float(np.sum(((optima - intercept - slope * x) / sigma) ** 2))
    assert law.inflation == pytest.approx(math.sqrt(chi2 / 3)) and law.inflation > 2
    plain = fit_law(["width"], points(-1.0 + 0.2 * x, x, noise=0.003))
    assert plain.inflation < law.inflation


def test_the_regret_the_interval_implies_is_the_curve_s_parabola_at_the_far_end():
    from modula_cli.analysis.law import Estimate, Prediction, curve_curvature, implied_regret

    exact = optimum(GRID, (2.0 + 0.05 * (GRID + 1.3) ** 2)[None].repeat(3, axis=0))
    assert curve_curvature(exact) == pytest.approx(0.05)
    prediction = Prediction((12.0,), Estimate(-2.0, -2.5, -1.2), (4.0,))
    assert implied_regret(prediction, 0.05) == pytest.approx(0.05 * 0.8**2)  # the longer arm, 0.8
    edge = optimum(GRID, (2.0 + 0.05 * (GRID - 5.0) ** 2)[None].repeat(3, axis=0))
    assert math.isnan(curve_curvature(edge))  # no valley inside the LRs: no shape to carry


def test_a_withheld_prediction_leaves_no_lr_to_read_in_the_tables(tmp_path):
    truths = {(w, 400): -1.0 + 0.25 * math.log2(w / 32) for w in (32, 64, 128)}
    result = write_report(shared_table(tmp_path, truths, seeds=(0,)), resamples=400, out_dir=tmp_path / "r",
                          quiet=True, target={"width": 1024})
    row, law = result["transfer"].iloc[0], result["law"].iloc[0]
    assert "one seed" in row["prediction_withheld"] and math.isnan(row["predicted_lr"])
    assert math.isfinite(law["point_lr"]) and "the law's point estimate" in row["prediction"]


def test_an_edge_scale_beyond_the_law_withholds_the_prediction(tmp_path, capsys):
    """Widths 32–128 put the optimum at 2^-1; at width 256 it lies above the grid's top LR (2^2): the law,
    fitted without that bound, says 2^-1 there, which the bound contradicts."""
    truths = {(32, 400): -1.0, (64, 400): -1.0, (128, 400): -1.0, (256, 400): 4.0}
    result = write_report(shared_table(tmp_path, truths), resamples=400, out_dir=tmp_path / "r",
                          target={"width": 1024})
    row = result["transfer"].iloc[0]
    assert "width 256's optimum lies at or above its highest LR tried (4)" in row["prediction_withheld"]
    assert math.isnan(row["predicted_lr"]) and "cannot tell" in capsys.readouterr().out
    consistent = {**truths, (256, 400): -1.0}  # the same law with width 256 inside: predicted
    again = write_report(shared_table(tmp_path, consistent), resamples=400, out_dir=tmp_path / "s", quiet=True,
                         target={"width": 1024})
    assert not again["transfer"].iloc[0]["prediction_withheld"]


def test_scales_without_an_optimum_and_series_at_one_scale_are_said(tmp_path):
    truths = {(w, 400): -1.0 for w in (32, 64, 128)}
    table = shared_table(tmp_path, truths)
    frame = pd.read_csv(table)
    frame.loc[frame["width"] == 64, "status"] = "diverged"
    frame.to_csv(table, index=False)
    law = write_report(table, resamples=400, out_dir=tmp_path / "r", quiet=True, target={"width": 1024})["law"]
    assert "width 64 (no optimum: every LR diverged or failed)" in law.iloc[0]["excluded"]
    assert law.iloc[0]["points"] == 2
    frame = frame[frame["width"] == 32]
    frame.to_csv(table, index=False)
    frame.assign(mode="dualized").pipe(lambda f: pd.concat([pd.read_csv(shared_table(tmp_path, truths)), f])) \
        .to_csv(table, index=False)
    law = write_report(table, resamples=400, out_dir=tmp_path / "s", quiet=True, target={"width": 1024})["law"]
    lone = law[law["mode"] == "dualized"].iloc[0]
    assert lone["line"].startswith("at width 1024: cannot tell: the law needs two scales")


def test_a_shared_table_is_read_strictly_and_never_written_over(tmp_path):
    table = shared_table(tmp_path, {(32, 400): -1.0, (64, 400): -1.0})
    frame = pd.read_csv(table)
    frame.assign(format=[2.0] + [None] * (len(frame) - 1)).to_csv(table, index=False)  # a blank cell: 2.0
    write_report(table, resamples=200, quiet=True)  # its report goes beside it
    assert (tmp_path / "reanalysis" / "law.csv").exists()
    with pytest.raises(ValueError, match="would write over the table it reads"):
        write_report(table, resamples=200, quiet=True, out_dir=tmp_path)
    frame.astype({"width": object}).assign(width=["64w"] + list(frame["width"][1:])).to_csv(table, index=False)
    with pytest.raises(ValueError, match=r"column width holds '64w' \(row 2\), not a number; 1 such cell"):
        write_report(table, resamples=200, quiet=True)


@pytest.mark.parametrize(("text", "message"), [("=4096", "write axis=value pairs"),
                                               ("width=1,width=2", "names width twice")])
def test_a_target_written_wrong_is_one_line(text, message):
    with pytest.raises(TargetError, match=message):
        parse_target(text)


def test_a_preset_target_a_sweep_does_not_vary_is_left_out_not_fatal(tmp_path, caplog):
    """sweep=quick names width 1024 as its target; at one width there is no law: the launch says so once and
    goes on, and the report at the sweep's end is written, predicting nothing. Typed on the command line, the
    same target is refused (tests/test_cli.py)."""
    import json
    import logging

    from helpers import compose_config
    from modula_cli.sweep.final_report import write_sweep_report
    from modula_cli.sweep.launch import _check_target
    from modula_cli.sweep.plan import Plan

    config = compose_config("sweep=quick", "arch.width=8", with_hydra=True)
    runs = {f"lr={lr}": {"width": 8, "lr": lr} for lr in (0.1, 0.2, 0.4)}
    with caplog.at_level(logging.INFO):
        _check_target(config, Plan(runs, []))
    assert "sweep.target width=1024: this sweep has runs at one scale only" in caplog.text
    assert "the preset's target is left out" in caplog.text
    for lr, loss in ((0.1, 2.3), (0.2, 2.1), (0.4, 2.2)):
        run = tmp_path / f"lr={lr}"
        run.mkdir()
        (run / "summary.json").write_text(json.dumps({
            "status": "completed", "train_loss": loss, "arch": "gpt", "data": "shakespeare", "optimizer": "adam",
            "mode": "normed", "width": 8, "lr": lr, "seed": 0}))
    write_sweep_report(config, tmp_path)
    assert (tmp_path / "law.csv").exists() and (tmp_path / "transfer.csv").exists()
    assert "report not written" not in caplog.text
