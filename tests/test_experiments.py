"""Every experiment config composes, and every job of its grid passes validation (nothing is trained)."""

import math
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from modula_cli.config import CONFIG_DIR
from modula_cli.config.resolvers import register_config
from modula_cli.optim import lr_grid
from modula_cli.sweep.grid import grid_overrides
from modula_cli.sweep.plan import validate_grid

EXPERIMENTS = sorted(str(p.relative_to(CONFIG_DIR / "experiment").with_suffix(""))
                     for p in (CONFIG_DIR / "experiment").rglob("*.yaml") if not p.name.startswith("_"))
# docs/design.md, "The paper's sweeps": widths 32 … 1024, depths 2 … 64, contexts 32 … 1024, blocks masses 0.5 … 32
PAPER_AXES = {"arch.width": [2**e for e in range(5, 11)], "arch.depth": [2**e for e in range(1, 7)],
              "data.context": [2**e for e in range(5, 11)], "arch.blocks_mass": [2.0**e for e in range(-1, 6)]}
# and the LR grids: 2^-6 … 2^2, except 2^-13 … 2^-3 for unnormed Adam
PAPER_LRS = {("adam", "unnormed"): [2.0**e for e in range(-13, -2)]}
FIGURES = ["fig1", "fig3", "fig4", "fig5", "fig6", "fig7", "fig8", "fig9", "fig10", "fig11", "fig12"]


def test_every_paper_figure_has_a_config():
    for figure in FIGURES:
        assert any(e.startswith(f"paper/{figure}_") for e in EXPERIMENTS), figure
    assert {"small/gpt_width", "small/gpt_depth", "small/resmlp_width"} <= set(EXPERIMENTS)


# Each grid is validated job by job for the experiment's own optimiser × mode; one figure also for SGD.
CASES = [(e, None) for e in EXPERIMENTS] + [("paper/fig9_gpt_openwebtext_width", ("sgd", "unnormed"))]


@pytest.mark.parametrize("experiment, pair", CASES)
def test_experiment_grid_is_valid(experiment, pair):
    register_config()
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        overrides = [f"experiment={experiment}"] + ([f"optim={pair[0]}", f"optim.mode={pair[1]}"] if pair else [])
        cfg = compose("config", overrides=overrides, return_hydra_config=True)
        assert cfg.hydra.mode.name == "MULTIRUN"
        plan = validate_grid(cfg)
    # one planned run folder per job, or per (LR, seed) member of a packed job
    members = [math.prod(len(o.split("=", 1)[1].strip("[]").split(",")) if "=[" in o else 1 for o in job)
               for job in grid_overrides(cfg)]
    assert len(plan.runs) == sum(members) >= 4
    assert [job for job, _ in plan.jobs] == grid_overrides(cfg)  # each job with the runs it trains
    assert sorted(name for _, names in plan.jobs for name in names) == sorted(plan.runs)
    if experiment.startswith("paper/"):
        assert cfg.train.steps == 10000 and cfg.train.batch_size == 128 and cfg.train.eval_batches == 100
        assert cfg.sweep.name == "paper_" + Path(experiment).name
        params = {key: [float(v) for v in str(value).split(",")] for key, value in cfg.hydra.sweeper.params.items()
                  if key in (*PAPER_AXES, "optim.lr")}
        axes = set(params) - {"optim.lr"}
        assert len(axes) == 1 and all(params[axis] == PAPER_AXES[axis] for axis in axes), params
        paper_lrs = PAPER_LRS.get((cfg.optim.name, cfg.optim.mode), [2.0**e for e in range(-6, 3)])
        assert params["optim.lr"] == paper_lrs == lr_grid(cfg.optim.name, cfg.optim.mode)
