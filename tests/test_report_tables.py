"""Each report CSV's columns are exactly its row type's fields, in order, and the scale knob is derived once."""

import dataclasses
import json
import math

from pathlib import Path

import pandas as pd
import pytest

import modula_cli.analysis.report as report
from modula_cli.analysis.report import write_report
from modula_cli.analysis.prediction import LawRow
from modula_cli.analysis.rows import CurvePoint, OptimalPoint, Transfer


def _run(folder, width: int, lr: float, seed: int, loss: float) -> None:
    folder.mkdir(parents=True)
    settings = {"arch.name": "gpt", "data.name": "shakespeare", "optim.name": "adam", "optim.mode": "normed",
                "arch.width": width}
    (folder / "summary.json").write_text(json.dumps({
        "status": "completed", "train_loss": loss, "arch": "gpt", "data": "shakespeare", "optimizer": "adam",
        "mode": "normed", "width": width, "lr": lr, "seed": seed, "settings": settings}))


@pytest.fixture
def sweep(tmp_path):
    """Two widths × three LRs × two seeds: a valley at 2^-2 (width 32) and 2^-3 (width 64)."""
    for width, best in ((32, -2), (64, -3)):
        for exponent in (-4, -3, -2, -1):
            for seed in (0, 1):
                loss = 2 + 0.1 * (exponent - best) ** 2 + 0.01 * seed
                _run(tmp_path / f"w{width}_lr{exponent}_s{seed}", width, 2.0**exponent, seed, loss)
    return tmp_path


@pytest.mark.parametrize("name, row", [("curves", CurvePoint), ("optimal_lr", OptimalPoint),
                                       ("transfer", Transfer), ("law", LawRow)])
def test_the_csv_columns_are_the_row_fields(sweep, name, row):
    write_report(sweep, quiet=True, resamples=200)
    assert list(pd.read_csv(sweep / f"{name}.csv").columns) == [f.name for f in dataclasses.fields(row)]


def test_the_optimum_rows_carry_the_metric_and_its_values(sweep):
    write_report(sweep, metric="train_loss", quiet=True, resamples=200)
    optimal = pd.read_csv(sweep / "optimal_lr.csv").sort_values("scale")
    assert list(optimal["metric"]) == ["train_loss"] * 2
    assert list(optimal["optimal_lr"]) == [0.25, 0.125]
    assert list(optimal["mean"]) == pytest.approx([2.005, 2.005])  # mean of the two seeds at the best LR
    assert list(optimal["std"]) == pytest.approx([math.sqrt(0.01**2 / 2)] * 2)
    assert list(optimal["fit"]) == pytest.approx([2.005, 2.005])  # an exact parabola's vertex


def test_the_scale_knob_is_derived_once_per_report(sweep, monkeypatch):
    calls = []
    real = report.scale_axes
    monkeypatch.setattr(report, "scale_axes", lambda frame: calls.append(1) or real(frame))
    write_report(sweep, quiet=False, resamples=200)
    assert len(calls) == 1


def test_the_transfer_table_stays_aligned_with_a_long_series_name():
    from modula_cli.analysis.report import transfer_text
    from modula_cli.analysis.rows import table

    def row(setting: str) -> Transfer:
        return Transfer(arch="gpt", data="shakespeare", optimizer="adam", mode="normed", variant="paper",
                        setting=setting, scale_knob="width", smallest=32, largest=256, shift_log2=0.25,
                        shift_log2_low=-0.1, shift_log2_high=0.6, regret=0.01, regret_low=0.0, regret_high=0.03,
                        tuned_lr=0.5, seeds=3, metric="train_loss")
    lines = transfer_text(table(Transfer, [row(""), row("optim.beta1=0.95, train.steps=1000, data.context=256")]))
    header, short, long = lines[1:]
    assert len(long.split("  ")[1]) > 38  # longer than the column used to be
    # every column ends where its heading ends
    for heading, cell in (("from → to", "width 32 → 256"), ("seeds", "3")):
        end = header.index(heading) + len(heading)
        assert short.rindex(cell) + len(cell) == end and long.rindex(cell) + len(cell) == end


def test_the_fitted_optimum_sits_in_a_strip_below_the_curves_one_named_row_per_scale(sweep, monkeypatch):
    import modula_cli.analysis.plots as plots

    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figures.append(fig))
    write_report(sweep, quiet=True, resamples=200)
    curves, strip = figures[0].axes[:2]  # transfer.png: one panel (normed adam) and its strip
    assert not [line for line in curves.lines if line.get_marker() == "*"]  # no star among the losses
    stars = [line for line in strip.lines if line.get_marker() == "*"]
    # a position on the LR axis, in its scale's row: width 32's optimum 2^-2, width 64's 2^-3 (exact parabolas)
    assert [(star.get_xdata()[0], star.get_ydata()[0]) for star in stars] == \
        [pytest.approx((0.25, 1)), pytest.approx((0.125, 2))]
    assert [label.get_text() for label in strip.get_yticklabels()] == ["width 32", "width 64"]
    assert strip.get_shared_x_axes().joined(strip, curves) and strip.get_xlabel() == "learning rate"
    bars = [line for line in strip.lines if line.get_marker() == "|"]  # two seeds: an interval each
    assert len(bars) == 2 and all(bar.get_xdata()[0] <= star.get_xdata()[0] <= bar.get_xdata()[1]
                                  for bar, star in zip(bars, stars))
    title = curves.get_legend().get_title().get_text()
    assert title == "★ below: the fitted optimal LR with its 95% interval"  # nothing diverged; a normed panel




def test_the_search_spend_table_by_hand():
    from modula_cli.analysis.search_spend import spend_table, spend_text

    frame = pd.DataFrame({"run": ["a", "b", "c", "z"], "wall_time_s": [10.0, 30.0, float("nan"), 99.0],
                          "packed_with": [1, 3, 1, 1]})
    search = {"scales": {"s | 32": {"series": "arch=gpt", "scale_key": "arch.width", "scale": "32",
                                    "lrs": [0.25, 0.5, 1.0], "runs": 3, "run_names": ["a", "b", "c"],
                                    "grid_runs": 9, "state": "stopped", "reason": "resolution",
                                    "stop": "resolution reached: 95 % interval 0.30 grid steps wide"}},
              "rounds": [{"planning_s": 0.25}, {"planning_s": 0.5}], "planning_s": 0.75}
    spend = spend_table(frame, search)
    row = spend.iloc[0]
    # a: 10 s; b: a packed run of 3 members, 30 / 3 = 10 s; c: not finished; z: not the search's
    assert (row["cpu_s"], row["finished_runs"], row["grid_cpu_s"]) == (20.0, 2, 90.0)
    assert (row["lrs_tried"], row["lowest_lr"], row["highest_lr"]) == (3, 0.25, 1.0)
    lines = spend_text(spend, search, Path("search.json"))
    assert lines[0] == ("LR search of arch=gpt (search.json): 3 runs of the full grid's 9 (33%); CPU time 0m20s of "
                        "the grid's estimated 1m30s (22%)")
    assert lines[1] == ("  width 32: 3 LRs (0.25 … 1), 3 of 9 runs; stopped: resolution reached: 95 % interval 0.30 "
                        "grid steps wide")
    assert lines[2] == "  planning 0.8 s over 2 rounds (the launcher's idle time between rounds)"


def test_a_search_is_reported_under_the_series_it_searched():
    """A folder that later held a grid sweep of another experiment: the search's lines name the series whose
    runs it trained, as the report names it, and its totals are that series' alone."""
    from modula_cli.analysis.search_spend import spend_table, spend_text

    series = {"arch": "gpt", "data": "shakespeare", "optimizer": "adam", "mode": "normed", "variant": "paper"}
    frame = pd.DataFrame([{**series, "setting": "steps=400", "run": "a", "wall_time_s": 10.0, "packed_with": 1},
                          {**series, "setting": "steps=150", "run": "g", "wall_time_s": 5.0, "packed_with": 1}])
    entry = {"series": "arch=gpt,steps=400", "scale_key": "arch.width", "lrs": [0.5], "runs": 1, "grid_runs": 3,
             "state": "stopped", "stop": "bracketed"}
    search = {"scales": {"a | 32": {**entry, "scale": "32", "run_names": ["a"]},
                         "a | 64": {**entry, "scale": "64", "run_names": ["gone"]}}}
    lines = spend_text(spend_table(frame, search), search, Path("search.json"))
    assert lines[0].startswith("LR search of normed adam (gpt, shakespeare, paper) · steps=400 (search.json): 1 run "
                               "of the full grid's 3"), lines
    # a scale none of whose runs is in the report keeps the search's own label: a series of its own
    assert lines[2].startswith("LR search of arch=gpt,steps=400 (search.json)"), lines
    assert not any("steps=150" in line for line in lines)


def test_a_tie_whose_other_lr_has_no_run_at_the_largest_scale_says_so_instead_of_nan():
    """Width 32's best LR ties with another that was never trained (or never completed) at width 128: the line says
    so and how to get it, never "the regret would be nan"; a tie that was trained gets its regret."""
    row = Transfer(arch="gpt", data="shakespeare", optimizer="adam", mode="normed", variant="paper",
                   scale_knob="width", smallest=32, largest=128, shift_log2=0.15, regret=0.0438, tuned_lr=0.5,
                   tied_lr=0.0625, tied_gap=0.008, tied_regret=math.nan, seeds=1, setting="")
    line = report._transfer_line(row, 40)
    assert "nan" not in line
    assert line.endswith("keeping 0.0625 has no regret to show: it has no completed run at width 128 (train it "
                         "there, e.g. optim.lr=0.0625)")
    trained = report._transfer_line(dataclasses.replace(row, tied_regret=0.0012), 40)
    assert trained.endswith("keeping 0.0625, the regret would be 0.0012")
