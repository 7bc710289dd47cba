"""One home per concept: the typed schema is where the YAML defaults come from and what types are
checked against; a mode is one registered class; a run's outcome is typed; each report table's columns are
its row's fields."""

import dataclasses
import math
from dataclasses import dataclass

import pytest
import torch
from omegaconf import OmegaConf

from helpers import compose_config, tiny_gpt
from modula_cli.analysis.rows import CurvePoint, OptimalPoint, Transfer, table
from modula_cli.config.run_config import RunConfig
from modula_cli.config.schema import CoordConfig, LoggerConfig, SweepConfig, TrainConfig
from modula_cli.config.validate import config_problems
from modula_cli.models.variant import VARIANTS, Variant
from modula_cli.nn import Linear
from modula_cli.optim import MODES, Mode, OptimConfig, init_state, optimizer_step
from modula_cli.optim.mode_settings import BLOCKS
from modula_cli.plumbing.settings import checked, setting
from modula_cli.results.status import BUSY, PACKED
from modula_cli.results.summary import Outcome
from modula_cli.run.trainer import train


def test_the_yaml_defaults_are_the_schemas():
    cfg = compose_config()
    plain = lambda node: OmegaConf.to_container(node, resolve=True)  # noqa: E731
    assert plain(cfg.train) == dataclasses.asdict(TrainConfig())
    assert plain(cfg.sweep) == dataclasses.asdict(SweepConfig())
    paper = {"normed": {"power_iterations": 1}}  # variant=paper's
    assert plain(cfg.optim) == {**dataclasses.asdict(OptimConfig()), **paper}
    assert plain(compose_config("variant=modular").variant) == dataclasses.asdict(Variant())
    assert plain(compose_config("optim=sgd").optim) == {**dataclasses.asdict(OptimConfig()), "name": "sgd", **paper}
    # every field has its one-line doc, each block's settings too
    for schema in (TrainConfig, SweepConfig, CoordConfig, OptimConfig, LoggerConfig, *BLOCKS.values()):
        assert all(f.metadata.get("doc") for f in dataclasses.fields(schema)), schema


def test_the_logger_schema_is_its_yaml():
    assert OmegaConf.to_container(compose_config().logger) == {"name": "jsonl"}
    wandb = OmegaConf.to_container(compose_config("logger=wandb").logger)
    assert wandb == dataclasses.asdict(LoggerConfig(name="wandb"))


@pytest.mark.parametrize(("overrides", "rerun"), [((), False), (("train.rerun=true",), True),
                                                  (("sweep.rerun=true",), True)])
def test_a_run_is_configured_once_with_typed_values(overrides, rerun):
    """``RunConfig``: what the trainer reads, typed; the builder still gets every key of the arch YAML."""
    cfg = compose_config("arch=gpt", "arch.width=24", "optim.lr=0.5", "logger=wandb", "logger.tags=[a]",
                         "variant=paper", "data.context=16", "train.steps=7", *overrides)
    run = RunConfig.of(cfg, OptimConfig.of(cfg.optim))
    assert (run.train.steps, run.arch.width, run.optim.lr, run.rerun) == (7, 24, 0.5, rerun)
    assert (run.logger.name, run.logger.tags, run.logger.mode) == ("wandb", ["a"], None)
    assert run.variant == VARIANTS["paper"] != Variant()
    assert run.data.name == "shakespeare" and run.data_options["context"] == 16
    assert OmegaConf.to_container(run.builder_arch) == OmegaConf.to_container(cfg.arch, resolve=True)
    with pytest.raises(Exception, match="widht"):  # a builder's misspelt key is an error, not None
        _ = run.builder_arch.widht


@dataclass
class Ranges:
    rate: float = setting(0.5, "in [0, 1)", minimum=0, below=1)
    size: float = setting(1.0, "> 0, finite", above=0)
    factor: float = setting(3.0, "> 1, inf allowed", above=1, finite=False)
    bound: float | None = setting(None, "> 0 or null", above=0)
    share: float = setting(0.5, "in (0, 1)", above=0, below=1)
    cap: float = setting(0.0, "below 1", below=1)
    count: int | None = setting(None, ">= 2 or null", minimum=2)


@pytest.mark.parametrize(("values", "problem"), [
    ({"rate": 0, "size": 1e-9, "factor": math.inf, "bound": None}, None),  # the edges that are allowed
    ({"rate": 1.0}, "x.rate=1.0; must be a number in [0, 1)"),
    ({"rate": -1e-9}, "x.rate=-1e-09; must be a number in [0, 1)"),
    ({"rate": math.nan}, "x.rate=nan; must be a number in [0, 1)"),
    ({"size": 0}, "x.size=0; must be a finite number > 0"),
    ({"size": math.inf}, "x.size=inf; must be a finite number > 0"),
    ({"size": True}, "x.size=True; must be a finite number > 0"),
    ({"size": "1"}, "x.size='1'; must be a finite number > 0"),
    ({"factor": 1}, "x.factor=1; must be a number > 1"),
    ({"factor": math.nan}, "x.factor=nan; must be a number > 1"),
    ({"bound": -2}, "x.bound=-2; must be a finite number > 0 or null"),
    ({"share": 0}, "x.share=0; must be a number in (0, 1)"),
    ({"cap": 1}, "x.cap=1; must be a number in (-inf, 1)"),
    ({"cap": -math.inf}, "x.cap=-inf; must be a number in (-inf, 1)"),
    ({"count": 1}, "x.count=1; must be an integer >= 2 or null"),
    ({"count": 3.0}, "x.count=3.0; must be an integer >= 2 or null (write x.count=3)"),
])
def test_a_numbers_range_is_the_schemas(values, problem):
    problems, _ = checked("x", values, Ranges)
    assert problems == ([problem] if problem else [])


def test_values_keep_the_type_they_were_given():
    """Plain nodes: Hydra does not turn 0 into 0.0, so a fingerprint hashes what the user typed (pinned in
    test_identity.py); the schema still says which type is allowed."""
    cfg = compose_config("optim.wd=0", "arch.blocks_mass=1")
    assert type(cfg.optim.wd) is int and type(cfg.arch.blocks_mass) is int
    assert not config_problems(cfg)


@pytest.mark.parametrize("override, problem", [
    ("train.compile=maybe", "train.compile='maybe'; must be true or false"),
    ("optim.beta1=abc", "optim.beta1='abc'; must be a number in [0, 1)"),
    ("optim.wd=inf", "optim.wd=inf; must be a finite number >= 0"),
    ("arch.blocks_mass=0", "arch.blocks_mass=0; must be a finite number > 0 or null"),
    ("train.steps=abc", "train.steps='abc'; must be an integer >= 1"),
    ("train.device=gpu", "train.device='gpu'; allowed: auto, cpu, cuda"),
    ("sweep.metric=acc", "sweep.metric='acc'; allowed: train_loss, test_loss, test_acc"),
    ("optim.manifold.free=output", "optim.manifold.free=output; must be a list of layer roles, e.g. [output, attn.q]"),
    ("arch.width=0", "arch.width=0; must be an integer >= 1 or null"),
    ("data.context=abc", "data.context='abc'; must be an integer >= 1 or null"),
    ("logger.name=wandbb", "logger.name='wandbb'; allowed: jsonl, wandb"),
    ("logger=wandb logger.mode=onlin", "logger.mode='onlin'; allowed: online, offline, disabled"),
    ("logger=wandb logger.tags=foo", "logger.tags=foo; must be a list of names"),
])
def test_a_wrong_type_is_one_line_naming_the_value_and_what_is_allowed(override, problem):
    assert config_problems(compose_config(*override.split())) == [problem]


def test_a_mistyped_value_is_named_once_and_the_rest_is_still_checked():
    problems = config_problems(compose_config("optim.mode=manifold", "optim.beta2=high", "optim.wd=0.1",
                                              "train.diverge_factor=1"))
    assert problems == ["train.diverge_factor=1; must be a number > 1",
                        "optim.beta2='high'; must be a number in [0, 1)",
                        "optim.wd=0.1 with optim.mode=manifold; each weight's size is held on its manifold (a fixed "
                        "radius, or a radius it learns), never decayed, so weight decay must be 0"]


class SignMode(Mode):
    """A mode written as a user would: Δ = η · sign(u), stateless."""
    name = "sign"

    def update(self, net, weights, u, lr, state, cfg):
        return [lr * torch.sign(piece) for piece in u]


def test_a_new_mode_is_one_class_and_its_registration(monkeypatch, tmp_path, tiny_text_root):
    monkeypatch.setitem(MODES, "sign", SignMode())
    net = Linear(3, 4)
    weights = net.initialize(seed=0)
    before = [w.clone() for w in weights]
    cfg = OptimConfig(name="sgd", mode="sign", lr=0.5, schedule="constant")
    grads = [torch.randn_like(w) for w in weights]
    optimizer_step(net, weights, grads, init_state(weights, cfg), cfg, 0, 10)
    assert torch.allclose(before[0] - weights[0], 0.5 * torch.sign(grads[0]), atol=1e-6)  # step 0 copies g
    # and end to end: the config accepts it, a run trains and records it (one file plus one line, nothing else)
    outcome = train(compose_config(*tiny_gpt(tiny_text_root, "optim.mode=sign", "optim.lr=0.01", "train.steps=4")),
                    tmp_path / "run")
    assert outcome.status == "completed" and outcome.summary["mode"] == "sign"
    monkeypatch.delitem(MODES, "sign")
    assert config_problems(compose_config("optim.mode=sign"))[0].startswith("optim.mode='sign'; allowed: unnormed")


def test_outcomes_say_what_happened():
    done = Outcome.of([{"status": "completed", "train_loss": 1.5}], packed=False)
    assert done.status == "completed" and done.summary["train_loss"] == 1.5 and done.train_loss == 1.5
    assert not done.skipped
    packed = Outcome.of([{"status": "completed", "skipped": True}, {"status": "diverged", "skipped": True}],
                        packed=True)
    assert packed.status == PACKED and packed.skipped and packed.train_loss is None
    with pytest.raises(ValueError, match="no single summary"):
        _ = packed.summary
    busy = Outcome(BUSY, holder="host:123")
    assert busy.members == () and not busy.skipped and busy.holder == "host:123"


def test_each_table_declares_its_columns_once():
    """The report's CSV columns, in order (optimal_lr.csv names its metric in a column of its own)."""
    group = ["arch", "data", "optimizer", "mode", "variant", "setting"]
    assert list(table(CurvePoint, []).columns) == [*group, "scale_knob", "scale", "lr", "log2_lr", "mean", "std",
                                                   "seeds", "diverged", "failed", "missing", "complete"]
    assert list(table(OptimalPoint, []).columns)[:14] == [*group, "scale_knob", "scale", "metric", "optimal_lr",
                                                          "log2_optimal_lr", "mean", "std", "fit"]
    assert list(table(Transfer, []).columns) == [*group, "scale_knob", "smallest", "largest", "shift_log2",
                                                 "shift_log2_low", "shift_log2_high", "regret", "regret_low",
                                                 "regret_high", "tuned_lr", "tied_lr", "tied_gap", "tied_regret",
                                                 "seeds", "metric", "incomplete", "edges", "grid_step", "call",
                                                 "verdict", "law_points", "law_slope", "law_slope_low",
                                                 "law_slope_high", "law_check", "target", "target_doublings",
                                                 "predicted_lr", "predicted_low", "predicted_high",
                                                 "predicted_regret", "prediction_withheld", "prediction"]
