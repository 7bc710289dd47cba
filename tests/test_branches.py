"""Horizons for the price of one run: a WSD horizon sweep trains the stable phase once and branches each cool-down
from it, to the same numbers, bit for bit, as training every horizon from the start."""

import json
import os
import sys

import pandas as pd
import pytest

from helpers import TINY_TRAIN, compose_config
from modula_cli.config.validate import config_problems
from modula_cli.run.trainer import train
import prewarmed

pytestmark = pytest.mark.slow
HORIZONS = (8, 12, 16)


def OVERRIDES(root):  # noqa: N802 - the sweep's settings but its horizons
    return ["arch=gpt", "arch.width=8", "arch.depth=1", "arch.heads=2", f"data.root={root}", "data.context=8",
            *TINY_TRAIN, "optim.mode=normed", "optim.lr=[0.05,0.1]", "train.seed=[0,1]", "optim.schedule=wsd",
            "optim.decay_fraction=0.25", "optim.warmup_steps=2", "optim.grad_clip=1.0"]


def horizon_sweep(root, sweep_dir, *overrides):
    base = [*OVERRIDES(root), f"train.steps={','.join(map(str, HORIZONS))}", f"hydra.sweep.dir={sweep_dir}"]
    return prewarmed.run([sys.executable, "-m", "modula_cli.train", "-m", *base, *overrides], cwd=root.parent,
                         env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=600)


def runs(sweep_dir):
    """Per (horizon, LR, seed): its metrics records and its summary."""
    found = {}
    for summary_path in sweep_dir.rglob("summary.json"):
        summary = json.loads(summary_path.read_text())
        if summary.get("status") != "completed":
            continue
        key = (summary["settings"]["train.steps"], summary["lr"], summary["seed"])
        records = [json.loads(line) for line in (summary_path.parent / "metrics.jsonl").read_text().splitlines()]
        found[key] = ([{k: v for k, v in r.items() if k != "elapsed"} for r in records], summary)  # wall time aside
    return found


def test_branched_cool_downs_equal_separate_runs_in_fewer_steps(tiny_text_root, tmp_path):
    branched = horizon_sweep(tiny_text_root, tmp_path / "branched")
    assert branched.returncode == 0, branched.stderr[-3000:]
    for steps in HORIZONS:  # each horizon on its own, from step 0 (a single run never branches)
        train(compose_config(*OVERRIDES(tiny_text_root), f"train.steps={steps}"), tmp_path / "separate" / str(steps))
    ours, theirs = runs(tmp_path / "branched"), runs(tmp_path / "separate")
    assert len(ours) == len(theirs) == 12
    for key, (lines, summary) in ours.items():
        assert lines == theirs[key][0], key  # every logged loss, and the test losses, to the last bit
        assert summary["train_loss"] == theirs[key][1]["train_loss"]
    # horizon 8 trains from the start and saves its stable phase at step 6; 12 branches there and saves at 9;
    # 16 branches at 9: 8 + 6 + 7 = 21 steps per member instead of 36
    started = {steps: summary.get("branched_from", 0) for (steps, _, _), (_, summary) in ours.items()}
    assert started == {8: 0, 12: 6, 16: 9}
    assert all("branched_from" not in summary for _, summary in theirs.values())
    assert sum(steps - start for steps, start in started.items()) == 21
    table = pd.read_csv(tmp_path / "branched" / "results.csv")
    assert set(table["status"]) == {"completed"} and len(table) == 12


def test_a_horizon_too_short_for_its_warm_up_is_named_before_it_trains():
    problems = config_problems(compose_config("optim.schedule=wsd", "optim.warmup_steps=10", "train.steps=12",
                                              "optim.decay_fraction=0.25"))
    assert problems == ["train.steps=12 is too short for optim.schedule=wsd: its warm-up (10 steps) runs past the "
                        "start of its cool-down (step 9, optim.decay_fraction=0.25); train longer, or shorten the "
                        "warm-up"]
    assert config_problems(compose_config("optim.schedule=wsd", "optim.warmup_steps=9", "train.steps=12",
                                          "optim.decay_fraction=0.25")) == []
