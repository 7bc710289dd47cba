"""The report never pools different experiments: one series per experiment, a seed counted once, every
output file agreeing with the others, intervals inside their grid."""

import json
import math
import os
import shutil
import sys

import numpy as np
import pandas as pd
import pytest

from helpers import TINY_TRAIN
from modula_cli.analysis.report import write_report
from modula_cli.analysis.experiments import experiment_labels
from modula_cli.results.knobs import GROUP, SERIES
from modula_cli.results.table import collect
import prewarmed

LRS = "optim.lr=0.05,0.1,0.2"


def quick_cli(tmp_path, sweep_dir, *overrides):
    """The main command (sweep=quick) at toy sizes, into one fixed sweep folder."""
    base = ["sweep=quick", "arch.width=8,16", "arch.depth=1", "arch.heads=2", f"data.root={tmp_path / 'data'}",
            "data.context=8", *TINY_TRAIN, f"hydra.sweep.dir={sweep_dir}"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    result = prewarmed.run([sys.executable, "-m", "modula_cli.train", *base, *overrides], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result


def comparable(frame: pd.DataFrame) -> pd.DataFrame:
    """A report table without the label that only a shared folder needs, in a fixed order."""
    frame = frame.drop(columns=["setting"]).sort_values([c for c in ("scale", "lr") if c in frame]).reset_index(
        drop=True)
    return frame


@pytest.mark.slow
def test_two_experiments_in_one_folder_are_two_series_with_their_own_numbers(tiny_text_root):
    tmp = tiny_text_root.parent
    pooled = tmp / "sweep"
    # the user's sequence: the main command, then a shorter packed run with two seeds into the same folder
    quick_cli(tmp, pooled, LRS, "train.steps=8")
    second = quick_cli(tmp, pooled, "train.seed=0,1", "sweep.pack=true", LRS, "train.steps=4")
    assert "steps=4" in second.stdout and "steps=8" in second.stdout and "2 series" in second.stdout

    curves = pd.read_csv(pooled / "curves.csv")
    optimal = pd.read_csv(pooled / "optimal_lr.csv")
    transfer = pd.read_csv(pooled / "transfer.csv")
    assert sorted(transfer["setting"]) == ["steps=4", "steps=8"]
    seeds = {"steps=4": 2, "steps=8": 1}
    for setting, count in seeds.items():  # no seed counted twice, none borrowed from the other experiment
        assert set(curves.loc[curves["setting"] == setting, "seeds"]) == {count}
        assert set(optimal.loc[optimal["setting"] == setting, "seeds"]) == {count}
        assert transfer.loc[transfer["setting"] == setting, "seeds"].item() == count
    # curves.csv and optimal_lr.csv agree: the best grid LR is the argmin of the mean curve
    for row in optimal.itertuples():
        points = curves[(curves["setting"] == row.setting) & (curves["scale"] == row.scale)]
        assert row.optimal_lr == points.loc[points["mean"].idxmin(), "lr"]
        assert row.mean == pytest.approx(points["mean"].min())
    # intervals never leave the grid they were fitted on
    grid = np.log2([0.05, 0.2])
    for column in ("log2_optimal_lr_low", "log2_optimal_lr_high", "log2_optimal_lr_fit"):
        values = optimal[column].dropna()
        assert ((values >= grid[0] - 1e-9) & (values <= grid[1] + 1e-9)).all(), column

    # each experiment's runs in a folder of their own give exactly the same numbers
    for setting, steps in (("steps=4", 4), ("steps=8", 8)):
        alone = tmp / f"alone_{steps}"
        alone.mkdir()
        for run in pooled.iterdir():
            summary = run / "summary.json"
            if summary.exists() and json.loads(summary.read_text())["settings"]["train.steps"] == steps:
                shutil.copytree(run, alone / run.name)
        write_report(alone, quiet=True, target={"width": 1024})  # sweep=quick's sweep.target
        for name in ("curves", "optimal_lr", "transfer", "law"):
            own = pd.read_csv(alone / f"{name}.csv", keep_default_na=False, na_values=[""])
            shared = pd.read_csv(pooled / f"{name}.csv")
            assert own["setting"].isna().all()  # alone, nothing to tell it apart from
            pd.testing.assert_frame_equal(comparable(own), comparable(shared[shared["setting"] == setting]),
                                          check_dtype=False)


def summary(run_dir, status="completed", loss=2.0, **settings):
    """A finished run as the trainer records it (only what the report reads)."""
    base = {"arch.name": "gpt", "data.name": "shakespeare", "optim.name": "adam", "optim.mode": "normed",
            "arch.width": 32, "train.steps": 400, "optim.beta1": 0.9}
    base.update(settings)
    record = {"status": status, "train_loss": loss, "arch": "gpt", "data": "shakespeare", "optimizer": "adam",
              "mode": "normed", "width": base["arch.width"], "steps": base["train.steps"], "lr": 0.25, "seed": 0,
              "settings": base}
    run_dir.mkdir(parents=True)
    (run_dir / "summary.json").write_text(json.dumps(record))


def test_series_names_say_how_experiments_differ_and_ignore_the_scale(tmp_path):
    summary(tmp_path / "a", **{"arch.width": 32})
    summary(tmp_path / "b", **{"arch.width": 64})
    frame = collect(tmp_path)
    assert set(experiment_labels(frame, "width")) == {""}  # only the scale differs: one series
    summary(tmp_path / "c", **{"arch.width": 64, "optim.beta1": 0.95, "train.steps": 100})
    frame = collect(tmp_path).set_index("run", drop=False)
    labels = experiment_labels(frame, "width")
    assert labels["a"] == labels["b"] == "beta1=0.9, steps=400" and labels["c"] == "beta1=0.95, steps=100"


def test_a_run_planned_by_an_earlier_version_joins_by_its_knobs(tmp_path):
    summary(tmp_path / "done", **{"arch.width": 32})
    manifest = {"runs": {"old": {"arch": "gpt", "data": "shakespeare", "optimizer": "adam", "mode": "normed",
                                 "width": 64, "steps": 400, "lr": 0.25, "seed": 0}}, "launches": {}}
    (tmp_path / "sweep.json").write_text(json.dumps(manifest))
    frame = collect(tmp_path)
    assert set(experiment_labels(frame, "width")) == {""}  # beta1 unknown for "old": not a difference


def test_report_of_a_sweep_with_one_finished_point_gives_no_shift(tmp_path, capsys):
    for width, status in ((32, "completed"), (64, "running")):
        for lr in (0.125, 0.25, 0.5):
            run = tmp_path / f"w{width}_lr{lr}"
            failed = width == 64 and lr == 0.5
            summary(run, status="failed" if failed else status, loss=2 + abs(math.log2(lr) + 2) / 10,
                    **{"arch.width": width})
            record = json.loads((run / "summary.json").read_text())
            (run / "summary.json").write_text(json.dumps({**record, "lr": lr}))
    transfer = write_report(tmp_path)["transfer"]
    assert math.isnan(transfer["shift_log2"].item())
    assert transfer["incomplete"].item() == "width 64: 0 of 3 runs finished (1 failed: a relaunch retries it)"
    assert "no shift yet" in capsys.readouterr().out


def test_results_table_is_sorted_by_numbers(tmp_path):
    for width in (128, 32, 64):
        summary(tmp_path / f"lr=0.25,width={width}", **{"arch.width": width})
    results = write_report(tmp_path, quiet=True)["results"]
    assert list(results["width"]) == [32, 64, 128] and list(GROUP) == [*SERIES, "setting"]
    assert "variant" in SERIES and set(results["variant"]) == {"modular"}  # written before variants: modular


def test_two_lr_sweeps_at_different_contexts_are_two_experiments_not_a_context_sweep(tmp_path, capsys):
    """sweep=lr at context 128, then sweep=lr at context 64 into the same folder: no launch swept the context."""
    runs = {}
    for context, lrs in ((128, (0.125, 0.25, 0.5)), (64, (0.0625, 0.125))):
        for lr in lrs:
            name = f"context={context},lr={lr}"
            summary(tmp_path / name, loss=2 + abs(math.log2(lr) + 2) / 10, **{"data.context": context})
            record = json.loads((tmp_path / name / "summary.json").read_text())
            (tmp_path / name / "summary.json").write_text(json.dumps({**record, "lr": lr, "context": context}))
            runs[name] = {"context": context}
    launches = {"a": {"started": 1.0, "runs": [n for n in runs if "128" in n], "axes": []},
                "b": {"started": 2.0, "runs": [n for n in runs if "=64" in n], "axes": []}}
    (tmp_path / "sweep.json").write_text(json.dumps({"runs": {}, "launches": launches}))
    result = write_report(tmp_path)
    assert sorted(result["curves"]["setting"].unique()) == ["context=128", "context=64"]
    assert result["transfer"].empty  # no scale knob: nothing to transfer along
    assert "2 series" in capsys.readouterr().out


def test_a_shift_between_edge_optima_says_it_is_a_bound(tmp_path, capsys):
    for width in (32, 64):
        for lr in (0.125, 0.25, 0.5):  # the loss falls all the way to the largest LR: optimum at the high edge
            name = f"lr={lr},width={width}"
            summary(tmp_path / name, loss=3 - lr, **{"arch.width": width})
            record = json.loads((tmp_path / name / "summary.json").read_text())
            (tmp_path / name / "summary.json").write_text(json.dumps({**record, "lr": lr}))
    transfer = write_report(tmp_path)["transfer"]
    assert transfer["edges"].item() == "width 32 at the high edge; width 64 at the high edge"
    assert "the shift is a bound; widen the LR grid there" in capsys.readouterr().out


@pytest.mark.slow
def test_a_sweep_of_two_scale_axes_gets_the_joint_law_at_its_target(tiny_text_root):
    """width × steps through the real command: its target names both axes (sweep.target's form, no quotes),
    the launch accepts it, and the report fits the joint law and predicts there (one seed: the point
    estimate, the interval withheld)."""
    tmp = tiny_text_root.parent
    sweep_dir = tmp / "two_axes"
    done = quick_cli(tmp, sweep_dir, "optim.lr=0.1,0.4,1.6,6.4", "train.steps=4,8", "sweep.target=width:64+steps:32")
    law = pd.read_csv(sweep_dir / "law.csv")
    joint = law[law["axes"] == "width,steps"]
    assert len(joint) == 1 and joint["target"].item() == "width=64,steps=32", law.to_string()
    assert joint["points"].item() >= 3 and "one seed" in joint["withheld"].item()
    assert math.isfinite(joint["point_lr"].item()) and math.isnan(joint["predicted_lr"].item())  # withheld
    assert "joint width × steps" in done.stdout and "at width 64, steps 32: cannot tell: one seed" in done.stdout
    assert "experiments that differ in more than the scale" not in done.stdout + done.stderr  # by design
