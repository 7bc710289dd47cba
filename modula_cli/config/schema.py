"""The config's schema: every setting with its type, default, allowed values and a one-line doc, in one place
per group (train, sweep, logger, coord here; optim in optim/config.py, variant in models/variant.py, arch in
models/config.py, data in data/config.py).

Each dataclass but the logger's is registered in Hydra's ConfigStore (``register_schemas``) and is where the
YAML defaults come from: configs/config.yaml, coord_check.yaml, optim/*.yaml and variant/*.yaml list the schema first
and set only what differs. The schema is stored as plain values, not as a typed node: Hydra would turn a
typed ``optim.wd=0`` into ``0.0``, and a run's fingerprint hashes its settings as given, so a run finished
before the schema existed keeps its fingerprint. Types are checked before launch instead
(``plumbing.settings.checked``), with one line per bad value. ``arch`` and ``data`` are open groups (a builder takes
the keys its YAML gives, and a user's own network may add its own): ``ArchConfig`` and ``DataConfig`` type
their common keys and give their defaults.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from ..data.config import DataConfig
from ..models.config import ArchConfig
from ..models.variant import Variant
from ..optim.config import OptimConfig
from ..plumbing.device import DEVICES
from ..plumbing.settings import setting

def searches(cfg: Any) -> bool:
    """Whether a sweep searches each scale's LRs (``sweep.search=true``) instead of training its whole grid: the
    one place that decides it (the command line's check, the sweeper, the launch and each job ask here)."""
    return OmegaConf.select(cfg, "sweep.search", default=False) is True


METRICS = ("train_loss", "test_loss", "test_acc")  # what a report may optimise (sweep.metric)
DTYPES = ("float32", "bfloat16")
AXES = ("width", "depth")
LOGGERS = ("jsonl", "wandb")
WANDB_MODES = ("online", "offline", "disabled")


@dataclass
class TrainConfig:
    steps: int = setting(1000, "optimiser steps (paper: 10 000)", minimum=1)
    batch_size: int = setting(32, "sequences or images per step (paper: 128)", minimum=1)
    grad_accum: int = setting(1, "micro-batches per step, one after another: the same step as one batch of "
                                 "batch_size, in the memory of batch_size / grad_accum", minimum=1)
    eval_every: int = setting(100, "steps between test-loss evaluations; 0: only at the end", minimum=0)
    eval_batches: int = setting(10, "test batches per evaluation (paper: 100)", minimum=1)
    log_every: int = setting(10, "steps between train-loss logs (a host sync each)", minimum=1)
    seed: Any = setting(0, "an integer >= 0, or a list: one packed member per seed")
    device: str = setting("auto", "auto | cpu | cuda", choices=DEVICES)
    threads: Any = setting("auto", "CPU threads per process: auto (the cores other jobs leave free) | N")
    dtype: str = setting("float32", "float32 | bfloat16 (autocast)", choices=DTYPES)
    compile: bool = setting(False, "torch.compile the loss-and-gradient step and the optimiser update")
    checkpoint_every: int = setting(100, "steps between checkpoints; 0: only on SIGTERM / SIGUSR1", minimum=0)
    keep_checkpoint: bool = setting(False, "keep the final weights (checkpoint.pt) after the run finishes")
    diverge_factor: float = setting(3.0, "stop as diverged once a step's train loss exceeds this multiple of the "
                                         "first (checked at every step); inf: never", above=1, finite=False)
    rerun: bool = setting(False, "retrain even if the run folder holds a finished run")
    branch: bool = setting(True, "optim.schedule=wsd in a sweep: start from the stable phase another horizon's run "
                                 "saved, and save this run's for longer ones (the same numbers, fewer steps)")
    progress: bool = setting(True, "progress bar (only when stderr is a terminal)")
    layer_stats_every: int = setting(0, "N > 0: each layer's geometry every N steps into layer_stats.jsonl",
                                     minimum=0)


@dataclass
class SweepConfig:
    name: str = setting("multirun", "the sweep's folder under outputs/sweeps/ (a preset sets it)")
    rerun: bool = setting(False, "retrain runs that already finished")
    pack: bool = setting(False, "train each scale point's swept LRs and seeds as one packed run")
    metric: str = setting("train_loss", "what the report's optima optimise", choices=METRICS)
    search: bool = setting(False, "search each scale's LRs (bracket, refine, stop) instead of training the whole "
                                  "LR grid (docs/lr_search.md)")
    search_budget: int | None = setting(None, "search: LRs per scale at most, each with every seed (null: the "
                                              "grid's size)")
    search_resolution: float = setting(0.75, "search: stop at a scale once the optimum's 95 % interval is at most "
                                            "this many grid steps wide", above=0)
    search_substeps: int = setting(1, "search: lattice points per grid step (1: grid LRs only; 2: half steps)",
                                   minimum=1, choices=(1, 2, 4, 8))
    search_low: float | None = setting(None, "search: the lowest LR it may try (null: no bound)", above=0)
    search_high: float | None = setting(None, "search: the highest LR it may try (null: no bound)", above=0)
    search_start: float | None = setting(None, "search: the first scale's middle LR (null: the grid's middle)",
                                         above=0)
    target: str | None = setting(None, "the scale to predict the LR at from the transfer law: width:4096, or "
                                       "width:4096+steps:20000 for a sweep of both (null: none)")
    detach: bool = setting(False, "submit the jobs and exit (hydra/launcher=slurm): they run on; "
                                  "`modula-sweep-status <sweep folder>` shows them and writes the report at the end")

@dataclass
class LoggerConfig:
    """Where a run's metrics go besides metrics.jsonl (configs/logger/*.yaml)."""
    name: str = setting("jsonl", "jsonl (metrics.jsonl only) | wandb (Weights & Biases as well)", choices=LOGGERS)
    project: str = setting("modula-sweep", "wandb: the project")
    entity: str | None = setting(None, "wandb: the team or user (null: the credentials' default)")
    group: str | None = setting(None, "wandb: the group (null: the sweep folder's name inside a sweep)")
    mode: str | None = setting(None, "wandb: online | offline | disabled (null: online with credentials, else "
                                     "offline)", choices=WANDB_MODES)
    tags: list[str] = setting([], "wandb: the run's tags")


@dataclass
class CoordConfig:
    axis: str = setting("width", "which arch setting the scales set", choices=AXES)
    widths: list[int] = setting([32, 64, 128, 256, 512], "axis=width: the widths (< 8x or < 3: a tentative verdict)")
    depths: list[int] = setting([1, 2, 4, 8, 16], "axis=depth: the depths (the same rule)")
    modes: list[str] = setting(["unnormed", "normed", "dualized"], "the modes compared")
    mup_depths: list[str] | None = setting(None, "mode mup: the depth recipes compared, each a column of its own "
                                                 "(e.g. [none,depth_mup,completep]); null: optim.mup.depth's",
                                           items="μP depth recipes: none, depth_mup, completep")
    steps: int = setting(4, "updates on the fixed batch (measured after each, and before the first)", minimum=1)
    batch_size: int = setting(8, "sequences or images of the fixed batch", minimum=1)
    tolerance: float = setting(0.3, "width-stable: every layer's |slope| of delta_rms and own_delta_rms <= it",
                               above=0)

    @property
    def scales(self) -> tuple[int, ...]:
        """The axis's scales: the widths or the depths."""
        return tuple(self.widths if self.axis == "width" else self.depths)


# the groups whose values are checked against a schema before launch (variant: models/variant.py's own check)
GROUP_SCHEMAS: dict[str, type] = {"arch": ArchConfig, "data": DataConfig, "train": TrainConfig,
                                  "sweep": SweepConfig, "optim": OptimConfig, "logger": LoggerConfig}


# --- the ConfigStore ---------------------------------------------------------------------------------------

def _plain(schema: type) -> dict[str, Any]:
    return dataclasses.asdict(schema())


def register_schemas() -> None:
    """Store the defaults of every fixed group where the YAML files list them (``_run_schema`` in config.yaml,
    ``_coord_schema`` in coord_check.yaml, ``_schema`` in optim/*.yaml and variant/*.yaml)."""
    store = ConfigStore.instance()
    store.store(name="_run_schema", node={"train": _plain(TrainConfig), "sweep": _plain(SweepConfig)})
    store.store(name="_coord_schema", node={"coord": _plain(CoordConfig)})
    store.store(group="optim", name="_schema", node=_plain(OptimConfig))
    # variant/*.yaml are global (they also set optim.*): their schema names its own package
    store.store(group="variant", name="_schema", node={"variant": _plain(Variant)})
