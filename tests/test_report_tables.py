"""Each report CSV's columns are exactly its row type's fields, in order, and the scale knob is derived once."""

import dataclasses
import json
import math

import pandas as pd
import pytest

import modula_cli.analysis.report as report
from modula_cli.analysis.report import CurvePoint, OptimalPoint, Transfer, write_report


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
                                       ("transfer", Transfer)])
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
    real = report.scale_knob
    monkeypatch.setattr(report, "scale_knob", lambda frame: calls.append(1) or real(frame))
    write_report(sweep, quiet=False, resamples=200)
    assert len(calls) == 1


def test_the_transfer_table_stays_aligned_with_a_long_series_name():
    from modula_cli.analysis.report import table, transfer_text

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


def test_the_fitted_optimum_sits_below_the_curves_and_the_legend_names_the_line_styles(sweep, monkeypatch):
    import modula_cli.analysis.plots as plots

    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figures.append(fig))
    write_report(sweep, quiet=True, resamples=200)
    ax = figures[0].axes[0]  # transfer.png: one panel (normed adam)
    curve_bottom = min(line.get_ydata().min() for line in ax.lines if line.get_marker() == "o")
    stars = [line for line in ax.lines if line.get_marker() == "*"]
    assert len(stars) == 2  # one per width
    heights = []
    for star in stars:  # a position on the LR axis in a strip of its own, never at a loss value of the curves
        x, y = star.get_transform().transform((star.get_xdata()[0], star.get_ydata()[0]))
        heights.append(ax.transData.inverted().transform((x, y))[1])
    assert max(heights) < curve_bottom
    assert min(ax.get_yticks()) > max(heights)  # no loss ticks in the strip
    assert "dashed: unnormed" not in ax.get_legend().get_title().get_text()  # a normed panel: all solid
