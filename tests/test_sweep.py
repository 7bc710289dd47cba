"""Sweeps: real multiruns through the launchers, relaunch, failure isolation, grid validation, report."""

import json
import os
import re
import sys
from pathlib import Path

import pandas as pd
import pytest

from helpers import TINY_TRAIN
from modula_cli.analysis.report import write_report
from modula_cli.config.identity import run_name
from modula_cli.optim import lr_grid
import prewarmed

pytestmark = pytest.mark.slow


def sweep_cli(tmp_path, *overrides, sweep_dir, widths="8,16"):
    base = ["arch=gpt", f"arch.width={widths}", "arch.depth=1", "arch.heads=2", f"data.root={tmp_path / 'data'}",
            "data.context=8", "train.steps=6", *TINY_TRAIN, f"hydra.sweep.dir={sweep_dir}"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    return prewarmed.run([sys.executable, "-m", "modula_cli.train", "-m", *base, *overrides], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)


def run_dirs(sweep_dir):
    return sorted(p for p in Path(sweep_dir).iterdir() if p.is_dir())


@pytest.fixture
def text_tmp(tiny_text_root):
    return tiny_text_root.parent


@pytest.mark.parametrize("launcher", ["basic", "submitit_local", "joblib"])
def test_multirun_grid_then_relaunch_skips_everything(launcher, text_tmp):
    sweep_dir = text_tmp / "sweep"
    extra = [] if launcher == "basic" else [f"hydra/launcher={launcher}"]
    if launcher == "submitit_local":
        extra += ["hydra.launcher.timeout_min=10", "hydra.launcher.cpus_per_task=1"]
    if launcher == "joblib":
        extra += ["hydra.launcher.n_jobs=2"]
    # the launchers that start a process per job (a torch import each) get two widths and one LR; the basic one
    # two widths and three
    lrs, widths = ([0.05, 0.1, 0.2], [8, 16]) if launcher == "basic" else ([0.1], [8, 16])
    runs = len(widths) * len(lrs)
    grid = f"optim.lr={','.join(map(str, lrs))}"
    first = sweep_cli(text_tmp, grid, *extra, sweep_dir=sweep_dir, widths=",".join(map(str, widths)))
    assert first.returncode == 0, first.stderr[-3000:]
    names = [p.name for p in run_dirs(sweep_dir) if not p.name.startswith(".")]
    # named from the knob overrides (the data.root path and logging flags stay out)
    assert len(names) == runs and ("arch=gpt,batch_size=8,context=8,depth=1,eval_batches=2,eval_every=10,heads=2,"
                                   f"lr={lrs[0]},steps=6,width=8") in names, names
    assert f"sweep finished: {runs} completed, 0 skipped, 0 diverged, 0 failed" in first.stdout
    results = pd.read_csv(sweep_dir / "results.csv")
    assert len(results) == runs and set(results["status"]) == {"completed"}
    assert sorted(results["width"].unique()) == widths and sorted(results["lr"].unique()) == lrs
    optimal = pd.read_csv(sweep_dir / "optimal_lr.csv")
    assert list(optimal["scale"]) == widths
    assert (sweep_dir / "transfer.png").stat().st_size > 10_000 and (sweep_dir / "scale.png").exists()
    if launcher == "basic":  # (the other launchers log from their own job processes)
        progress = re.findall(r"\[(\d) of 6\]", first.stdout)
        assert sorted(progress) == list("123456"), first.stdout  # one line per run, each count once
    jobs_before = list((sweep_dir / ".submitit").iterdir()) if launcher == "submitit_local" else []
    again = sweep_cli(text_tmp, grid, *extra, sweep_dir=sweep_dir, widths=",".join(map(str, widths)))
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"sweep finished: 0 completed, {runs} skipped, 0 diverged, 0 failed" in again.stdout
    assert f"{runs} finished before (skipped; sweep.rerun=true retrains), 0 to train" in again.stdout
    assert f" of {runs}]" not in again.stdout  # a skipped run is not reported as progress (once said "[6 of 6]" twice)
    # nor sent to the launcher: no job process started (a submitit job folder each, joblib's announcement) only to
    # find its runs finished
    if launcher == "submitit_local":
        assert len(list((sweep_dir / ".submitit").iterdir())) == len(jobs_before)
    if launcher == "joblib":
        assert "Launching jobs" in first.stdout + first.stderr and "Launching jobs" not in again.stdout + again.stderr
    if launcher == "basic":  # retraining everything: the runs of earlier launches are still to do, not done
        rerun = sweep_cli(text_tmp, grid, "sweep.rerun=true", sweep_dir=sweep_dir)
        assert sorted(re.findall(r"\[(\d) of 6\]", rerun.stdout)) == list("123456"), rerun.stdout


def job_overrides(tmp_path, *overrides):
    """A job's task overrides as sweep_cli passes them (the later value of a key wins, as in Hydra)."""
    return ["arch=gpt", "arch.width=8,16", "arch.depth=1", "arch.heads=2", f"data.root={tmp_path / 'data'}",
            "data.context=8", "train.steps=6", *TINY_TRAIN, *overrides]


def test_packed_sweep_over_lrs_and_seeds_is_one_job_per_scale_and_counts_as_the_separate_runs(text_tmp):
    grid = ["optim.lr=0.05,0.1", "train.seed=0,1"]
    packed = sweep_cli(text_tmp, *grid, "sweep.pack=true", sweep_dir=text_tmp / "sweep")
    assert packed.returncode == 0, packed.stderr[-3000:]
    assert "sweep of 8 runs" in packed.stdout  # one job per width: one progress line each
    assert len(re.findall(r"\[\d of 8\]", packed.stdout)) == 2, packed.stdout
    results = pd.read_csv(text_tmp / "sweep" / "results.csv")
    assert len(results) == 8 and set(results["status"]) == {"completed"}
    assert sorted(results["seed"].unique()) == [0, 1] and sorted(results["lr"].unique()) == [0.05, 0.1]
    # each member's folder and fingerprint are its separate run's: the unpacked sweep finds all 8 finished
    # (that the numbers agree too is tested on single runs in test_train.py)
    separate = sweep_cli(text_tmp, *grid, sweep_dir=text_tmp / "sweep")
    assert "already finished; skipping" not in separate.stdout  # counted at the start and the end, quietly
    assert "8 finished before (skipped; sweep.rerun=true retrains), 0 to train" in separate.stdout
    assert "sweep finished: 0 completed, 8 skipped, 0 diverged, 0 failed" in separate.stdout


def test_failed_and_diverged_runs_are_isolated_and_retried(text_tmp):
    sweep_dir = text_tmp / "sweep"
    grid = ["arch.width=8", "optim.mode=unnormed", "optim.lr=0.01,0.02,1000", "train.steps=12"]
    # a disk problem in one run folder (its metrics file is a folder): that run fails at its start
    broken = sweep_dir / run_name(job_overrides(text_tmp, *grid[:2], "optim.lr=0.02", grid[3]))
    (broken / "metrics.jsonl").mkdir(parents=True)
    result = sweep_cli(text_tmp, *grid, sweep_dir=sweep_dir)
    assert result.returncode == 1
    assert "sweep finished: 1 completed, 0 skipped, 1 diverged, 1 failed" in result.stdout
    failed = json.loads((broken / "summary.json").read_text())
    assert failed["status"] == "failed" and "IsADirectoryError" in failed["error"] and failed["lr"] == 0.02
    results = pd.read_csv(sweep_dir / "results.csv")
    assert sorted(results["status"]) == ["completed", "diverged", "failed"]
    optimal = pd.read_csv(sweep_dir / "optimal_lr.csv")
    assert set(optimal["optimal_lr"]) == {0.01}  # diverged and failed runs never win
    # relaunch: finished runs are skipped, the failed one is retried (and fails again)
    again = sweep_cli(text_tmp, *grid, sweep_dir=sweep_dir)
    assert "sweep finished: 0 completed, 2 skipped, 0 diverged, 1 failed" in again.stdout


def test_bad_grid_values_reported_together_before_any_job(text_tmp):
    sweep_dir = text_tmp / "sweep"
    result = sweep_cli(text_tmp, "arch.heads=4", "arch.width=8,30", "optim.lr=-1,0.1", sweep_dir=sweep_dir)
    assert result.returncode != 0
    err = result.stderr
    assert "arch.width=30 is not divisible by arch.heads=4" in err and "optim.lr=-1" in err
    # each problem once, with the grid points it hits: width 30 in 2 of the 4, LR -1 in 2 of the 4
    assert err.count("is not divisible by arch.heads=4") == 1 and err.count("must be a number > 0") == 1
    assert "arch.width=30 is not divisible by arch.heads=4 (2 of 4 grid points, e.g. [" in err
    assert "every learning rate must be a number > 0 (2 of 4 grid points, e.g. [" in err
    assert not any(p.is_dir() for p in sweep_dir.glob("*")) if sweep_dir.exists() else True


def powers_of_two(low: int, high: int) -> str:
    """A grid as the sweeper's params hold it: 2^low … 2^high, comma-separated (integers from 2^0 up)."""
    return ",".join(str(2**e) if e >= 0 else repr(2.0**e) for e in range(low, high + 1))


# docs/design.md, "The paper's sweeps": widths 32 … 1024 at 3 blocks, depths 2 … 64 at width 128, contexts
# 32 … 1024, blocks masses 0.5 … 32 (figures 3, 6, 7); the quick sweep: widths 32, 64, 128 (README)
PRESET_GRIDS = {"width": ("arch.width", powers_of_two(5, 10)), "depth": ("arch.depth", powers_of_two(1, 6)),
                "context": ("data.context", powers_of_two(5, 10)), "mass": ("arch.blocks_mass", "0.5,1,2,4,8,16,32"),
                "quick": ("arch.width", powers_of_two(5, 7)), "batch": ("train.batch_size", powers_of_two(3, 7)),
                "horizon": ("train.steps", "250,500,1000,2000,4000"),
                "weight_decay": ("optim.wd", ",".join(str(4.0**e) for e in range(-3, 1))), "lr": (None, None)}


def test_sweep_presets_compose_with_paper_grids():
    from helpers import compose_config

    assert powers_of_two(5, 10) == "32,64,128,256,512,1024" and powers_of_two(-2, 0) == "0.25,0.5,1"
    for preset, (knob, values) in PRESET_GRIDS.items():
        cfg = compose_config(f"sweep={preset}", with_hydra=True)
        params = cfg.hydra.sweeper.params
        assert cfg.sweep.name == preset and cfg.hydra.mode.name == "MULTIRUN"
        # the scale axis (none for sweep=lr) and the paper's LR grid of the default optimiser × mode, nothing else
        assert dict(params) == {**({knob: values} if knob else {}),
                                "optim.lr": ",".join(map(str, lr_grid(cfg.optim.name, cfg.optim.mode)))}, preset
        if preset == "depth":
            assert cfg.arch.width == 128
    # the LR axis follows the optimiser × mode chosen on the command line
    cfg = compose_config("sweep=width", "optim.mode=unnormed", with_hydra=True)
    assert cfg.hydra.sweeper.params["optim.lr"] == ",".join(str(2.0**e) for e in range(-13, -2))
    assert "hydra" not in compose_config("sweep=width")  # the default leaves it out, as every other test expects
    assert lr_grid("adam", "normed") == [2.0**e for e in range(-6, 3)]
    assert lr_grid("adam", "unnormed") == [2.0**e for e in range(-13, -2)]
    assert lr_grid("sgd", "unnormed") == [2.0**e for e in range(-6, 3)]


@pytest.mark.parametrize("preset, scale_points", [("width", 6), ("depth", 6), ("context", 6), ("mass", 7),
                                                  ("lr", 1), ("quick", 3), ("batch", 5), ("horizon", 5),
                                                  ("weight_decay", 4)])
def test_seeds_are_an_axis_of_every_preset_and_pack_with_the_lrs(preset, scale_points):
    from hydra import compose, initialize_config_dir
    from omegaconf import open_dict

    from modula_cli.config import CONFIG_DIR
    from modula_cli.config.resolvers import register_config
    from modula_cli.sweep.grid import grid_overrides

    register_config()
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[f"sweep={preset}"], return_hydra_config=True)
    grid = len(lr_grid("adam", "normed"))
    for pack, jobs, per_job in ((False, scale_points * grid * 3, 1), (True, scale_points, grid * 3)):
        with open_dict(cfg):
            cfg.hydra.overrides.task = [f"sweep={preset}", "train.seed=0,1,2", f"sweep.pack={pack}"]
            cfg.sweep.pack = pack
        expanded = grid_overrides(cfg)
        assert len(expanded) == jobs
        seeds = [o for o in expanded[0] if o.startswith("train.seed=")]
        assert seeds == (["train.seed=[0,1,2]"] if pack else ["train.seed=0"])
        lrs = next(o for o in expanded[0] if o.startswith("optim.lr="))
        assert len(lrs.split(",")) == per_job // 3 if pack else "[" not in lrs


def make_run(sweep_dir, name, width, lr, status, loss, mode="normed"):
    """A run folder as the trainer leaves it: a summary with its own knobs (``running`` until it ends)."""
    run = sweep_dir / name
    run.mkdir(parents=True)
    knobs = {"arch": "gpt", "data": "shakespeare", "optimizer": "adam", "mode": mode, "width": width, "depth": 3,
             "heads": 4, "blocks_mass": 5.0, "context": 64, "lr": lr, "seed": 0}
    summary = {"status": status or "running", "train_loss": loss, "test_loss": loss, **knobs}
    (run / "summary.json").write_text(json.dumps(summary))


def test_report_on_hand_made_sweep(tmp_path, capsys):
    sweep_dir = tmp_path / "sweep"
    losses = {  # width → {lr: loss}; optimum moves from 2^-2 (w32) to 2^-3 (w64) to 2^-4 (w128)
        32: {2**-4: 3.0, 2**-3: 2.5, 2**-2: 2.0, 2**-1: 2.2},
        64: {2**-4: 2.4, 2**-3: 1.8, 2**-2: 1.9, 2**-1: None},
        128: {2**-4: 1.5, 2**-3: 1.6, 2**-2: 1.7, 2**-1: None},
    }
    for width, row in losses.items():
        for lr, loss in row.items():
            status = "completed" if loss is not None else "diverged"
            make_run(sweep_dir, f"w{width}_lr{lr}", width, lr, status, loss)
    make_run(sweep_dir, "w128_running", 128, 2**-5, None, None)
    write_report(sweep_dir)
    optimal = pd.read_csv(sweep_dir / "optimal_lr.csv").sort_values("scale")
    assert list(optimal["optimal_lr"]) == [0.25, 0.125, 0.0625]
    assert list(optimal["mean"]) == [2.0, 1.8, 1.5] and set(optimal["metric"]) == {"train_loss"}
    # width 32: parabola through (-3, 2.5), (-2, 2.0), (-1, 2.2): vertex -2 + 0.5 * 0.3 / 0.7
    assert optimal["log2_optimal_lr_fit"].iloc[0] == pytest.approx(-2 + 0.15 / 0.7)
    # width 128: the best LR's lower neighbour (2^-5) is still running, so the optimum may lie below it
    assert list(optimal["edge"].fillna("")) == ["", "", "low"]
    # width 128 has a run still going: no shift to it yet, the shift goes to the largest finished point
    transfer = pd.read_csv(sweep_dir / "transfer.csv")
    fit_64 = -3 - 0.5 * 0.5 / -0.7  # parabola through (-4, 2.4), (-3, 1.8), (-2, 1.9)
    assert transfer["shift_log2"].item() == pytest.approx(fit_64 - (-2 + 0.15 / 0.7))
    assert (transfer["smallest"].item(), transfer["largest"].item()) == (32, 64)
    assert transfer["incomplete"].item() == "width 128: 4 of 5 runs finished"
    assert list(optimal["complete"]) == [True, True, False]
    out = capsys.readouterr().out
    assert "width 32 → 64" in out and "INCOMPLETE: 4 of 5 runs finished" in out and "still incomplete" in out
    # the running run diverges: width 128 is complete, its optimum still at the low edge
    summary = json.loads((sweep_dir / "w128_running" / "summary.json").read_text())
    (sweep_dir / "w128_running" / "summary.json").write_text(json.dumps({**summary, "status": "diverged"}))
    result = write_report(sweep_dir)
    optimal = pd.read_csv(sweep_dir / "optimal_lr.csv").sort_values("scale")
    assert list(optimal["edge"].fillna("")) == ["", "", "low"] and list(optimal["at_grid_edge"]) == [False, False, True]
    assert list(optimal["seeds"]) == [1, 1, 1] and optimal["log2_optimal_lr_low"].isna().all()  # 1 seed: no interval
    transfer = pd.read_csv(sweep_dir / "transfer.csv")
    assert transfer["shift_log2"].item() == pytest.approx(-4 - (-2 + 0.15 / 0.7))
    assert transfer["regret"].item() == pytest.approx(1.7 - 1.5)  # width 128 at width 32's 0.25
    assert (transfer["smallest"].item(), transfer["largest"].item()) == (32, 128)
    assert pd.isna(transfer["incomplete"].item())
    assert result["counts"]["diverged"] == 3 and result["counts"]["running"] == 0
    results = pd.read_csv(sweep_dir / "results.csv")
    assert len(results) == 13 and set(results.columns) >= {"width", "lr", "status", "train_loss", "test_loss"}
    assert list(results["width"]) == sorted(results["width"])  # as numbers: 32 before 128
    curves = pd.read_csv(sweep_dir / "curves.csv")
    assert curves.loc[(curves["scale"] == 64) & (curves["lr"] == 0.5), "diverged"].item() == 1
    out = capsys.readouterr().out
    assert "width 32 → 128" in out and "-2.21" in out and "optimum at the low edge" in out
    # grid edge: width 32's optimum at the top of a grid that ends there
    make_run(sweep_dir, "w32_top", 32, 2**0, "completed", 1.0)
    optimal = write_report(sweep_dir, quiet=True)["optimal"]
    assert optimal[optimal["scale"] == 32]["edge"].item() == "high"


def test_report_cli_on_missing_dir(tmp_path):
    result = prewarmed.run([sys.executable, "-m", "modula_cli.analysis.report", str(tmp_path / "nope")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "no sweep directory" in result.stderr


def test_report_puts_several_modes_on_one_figure(tmp_path):
    sweep_dir = tmp_path / "sweep"
    curves = {"normed": {32: {0.125: 2.2, 0.25: 2.0}, 64: {0.125: 2.0, 0.25: 1.9}},
              "unnormed": {32: {0.001: 2.5, 0.002: 2.4}, 64: {0.001: 2.1, 0.002: 2.6}}}
    for mode, widths in curves.items():
        for width, row in widths.items():
            for lr, loss in row.items():
                make_run(sweep_dir, f"{mode}_w{width}_lr{lr}", width, lr, "completed", loss, mode=mode)
    transfer = write_report(sweep_dir, quiet=True)["transfer"].set_index("mode")
    assert transfer.loc["normed", "shift_log2"] == 0.0  # both at the 0.25 edge
    assert transfer.loc["unnormed", "shift_log2"] == pytest.approx(-1.0)
    scale = pd.read_csv(sweep_dir / "scale.csv").sort_values(["mode", "scale"])
    # loss vs width at the LR tuned on width 32: normed 0.25 → (2.0, 1.9); unnormed 0.002 → (2.4, 2.6)
    assert list(scale["tuned_lr"]) == [0.25, 0.25, 0.002, 0.002]
    assert list(scale["mean"]) == [2.0, 1.9, 2.4, 2.6]
    assert transfer.loc["unnormed", "regret"] == pytest.approx(2.6 - 2.1)
    # beside it, each scale's best: the gap is the regret (unnormed at width 64: 2.6 at 0.002, 2.1 at 0.001)
    assert list(scale["best_mean"]) == [2.0, 1.9, 2.4, 2.1] and list(scale["best_lr"]) == [0.25, 0.25, 0.002, 0.001]
    assert list(scale["regret"]) == pytest.approx([0.0, 0.0, 0.0, 0.5])


def test_scale_png_draws_what_its_labels_say_and_the_regret_as_a_gap(tmp_path, monkeypatch):
    """One seed: no interval is drawn, so no label speaks of one, nor of marks that are not drawn; the right
    panel shows the tuned loss and each scale's best loss, the regret as the gap between them."""
    import modula_cli.analysis.plots as plots

    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figures.append(fig))
    sweep_dir = tmp_path / "sweep"
    for width, row in {32: {0.001: 2.5, 0.002: 2.4, 0.004: 2.6}, 64: {0.001: 2.1, 0.002: 2.6, 0.004: 2.9}}.items():
        for lr, loss in row.items():
            make_run(sweep_dir, f"w{width}_lr{lr}", width, lr, "completed", loss, mode="unnormed")
    write_report(sweep_dir, quiet=True)
    left, right = figures[-1].axes[:2]
    assert left.get_ylabel() == "fitted log2 optimal LR (1 seed: no interval)"
    assert left.get_title() == "optimal LR against scale"  # no ○, ▲▼ or × drawn: none named
    assert not left.collections and not [line for line in left.lines if line.get_marker() in ("^", "v", "x")]
    tuned = right.containers[0]  # the error bars of the loss at the LR tuned on width 32
    best = next(line for line in right.lines if line.get_label().endswith("best LR at each scale"))
    assert tuned.get_label().endswith("lr 0.002") and list(tuned.lines[0].get_ydata()) == [2.4, 2.6]
    assert list(best.get_ydata()) == [2.4, 2.1]
    gaps = [line for line in right.lines if line.get_linewidth() == 4]
    assert [sorted(gap.get_ydata()) for gap in gaps] == [[2.4, 2.4], [2.1, 2.6]]
    assert "the gap between them is the regret" in right.get_title()


def test_pack_arguments_folds_only_swept_lrs_and_seeds():
    from modula_cli.config.members import pack_arguments

    assert pack_arguments(["arch.width=32,64", "optim.lr=0.25,0.5", "train.seed=range(3)", "optim.mode=normed",
                           "train.steps=5"]) == ["arch.width=32,64", "optim.lr=[0.25,0.5]", "train.seed=[0,1,2]",
                                                 "optim.mode=normed", "train.steps=5"]
    assert pack_arguments(["optim.lr=0.25", "train.seed=[0,1]"]) == ["optim.lr=0.25", "train.seed=[0,1]"]
    assert pack_arguments(["+train.seed=1,2"]) == ["+train.seed=[1,2]"]


def test_a_report_for_another_metric_leaves_the_sweeps_own_in_place(tmp_path, capsys):
    """`modula-sweep-report DIR --metric test_loss` on a sweep reported by train loss: the sweep's files stay,
    the test-loss report goes beside them into report-test_loss/ (and is found there again)."""
    from modula_cli.analysis.report import main

    sweep_dir = tmp_path / "sweep"
    for width, row in {32: {0.125: 2.2, 0.25: 2.0, 0.5: 2.1}, 64: {0.125: 2.0, 0.25: 1.9, 0.5: 2.2}}.items():
        for lr, loss in row.items():
            make_run(sweep_dir, f"w{width}_lr{lr}", width, lr, "completed", loss)
    main([str(sweep_dir)])  # the sweep's own report: train loss, in the sweep folder
    main([str(sweep_dir), "--metric", "test_loss"])
    assert set(pd.read_csv(sweep_dir / "optimal_lr.csv")["metric"]) == {"train_loss"}
    beside = sweep_dir / "report-test_loss"
    assert set(pd.read_csv(beside / "optimal_lr.csv")["metric"]) == {"test_loss"}
    assert (beside / "transfer.png").exists() and (beside / "scale.csv").exists()
    assert f"report: {beside / 'results.csv'}" in capsys.readouterr().out
    main([str(sweep_dir)])  # and the sweep's metric again: its own folder, the runs counted as before
    assert set(pd.read_csv(sweep_dir / "optimal_lr.csv")["metric"]) == {"train_loss"}
    assert len(pd.read_csv(sweep_dir / "results.csv")) == 6
