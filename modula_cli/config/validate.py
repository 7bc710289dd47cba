"""Config checks run before any expensive work: every problem is reported at once, one line each."""

from __future__ import annotations

import warnings
from typing import Any

import torch
from omegaconf import OmegaConf

from ..data import CONFIG_ONLY_KEYS, DATASETS, DataUnavailable, dataset_entry
from ..data.config import DataConfig
from ..models import (ARCHITECTURES, DATA_KINDS, ModelError, builtin_roles, data_kind_problem, import_builder,
                      is_import_path)
from ..models.config import ArchConfig
from ..models.variant import variant_problems
from ..optim import OptimConfig, validate_optim
from ..optim.mode_settings import move_old_spellings, new_spelling, old_spelling_line, spelling_conflicts
from ..optim.schedule import decay_start
from ..plumbing.device import resolve_device
from ..plumbing.settings import checked, listed, typed
from ..plumbing.suggest import unknown_key
from ..plumbing.threads import threads_problem
from .schema import GROUP_SCHEMAS, SweepConfig, TrainConfig

# no key may be added to these from the command line
CHECKED_GROUPS = ("arch", "data", "optim", "train", "sweep", "variant")


class ConfigError(ValueError):
    def __init__(self, problems: list[str]):
        self.problems = problems
        # one problem, one line; several, one line each under a header
        super().__init__(f"invalid configuration: {problems[0]}" if len(problems) == 1 else
                         "invalid configuration:\n  - " + "\n  - ".join(problems))


def _arch_problems(arch: Any, data: Any) -> list[str]:
    problems: list[str] = []
    shape = typed(ArchConfig, arch)
    if is_import_path(str(arch.name)):
        try:
            import_builder(arch.name)  # importable and callable; its type and shapes are checked when built
        except ModelError as error:
            problems.append(str(error))
        if (kind := shape.data_kind) is not None and kind not in DATA_KINDS:
            problems.append(f"arch.data_kind={kind!r}; allowed: {', '.join(DATA_KINDS)} (or leave it out: "
                            f"the architecture takes both)")
    elif arch.name not in ARCHITECTURES:
        problems.append(f"arch.name={arch.name!r}; allowed: {', '.join(ARCHITECTURES)}, or an import path "
                        f"package.module:function of your own (docs/extending.md)")
    if data.name in DATASETS and (problem := data_kind_problem(arch, data.name, DATASETS[data.name].kind)):
        problems.append(problem)
    if shape.heads and shape.width and shape.width % shape.heads:
        problems.append(f"arch.width={shape.width} is not divisible by arch.heads={shape.heads}")
    return problems


def data_problems(data: Any) -> list[str]:
    """The dataset's own facts: its name, its source, and a context that fits its guard and its splits."""
    if data.name not in DATASETS and not is_import_path(str(data.name)):
        return [f"data.name={data.name!r}; registered: {', '.join(DATASETS)}, or an import path "
                f"package.module:function of your own (docs/extending.md)"]
    entry = dataset_entry(str(data.name))
    options = {k: v for k, v in OmegaConf.to_container(data, resolve=True).items() if k not in CONFIG_ONLY_KEYS}
    problems = [p for p in [entry.source_problem(**options)] if p]
    if typed(DataConfig, data).context is None:  # an image dataset, or a context already named mistyped
        return problems
    limit = typed(DataConfig, data).max_context
    if limit is not None and data.context > limit:
        problems.append(f"data.context={data.context} exceeds data.max_context={limit} (a guard against typos; "
                        f"raise data.max_context to train on longer contexts)")
    try:
        sizes = entry.split_sizes(**options) or {}
    except DataUnavailable as error:  # a source that is there but cannot be read as this dataset reads it
        return [*problems, str(error)]
    for split, tokens in sizes.items():
        if data.context + 1 > tokens:
            problems.append(f"data.context={data.context} needs {data.context + 1} tokens per window, but the "
                            f"{split} split of {data.name} has {tokens}")
    return problems


def _train_problems(train: TrainConfig, devices_here: bool = True) -> list[str]:
    problems = _seed_problems(train.seed)
    if train.batch_size % train.grad_accum:
        problems.append(f"train.grad_accum={train.grad_accum} does not divide train.batch_size={train.batch_size}; "
                        f"use a divisor of it (each step's micro-batches are equal)")
    if problem := threads_problem(train.threads):
        problems.append(problem)
    if not devices_here:  # a cluster's jobs check their own node's GPU when they start
        return problems
    if train.device == "cuda" and not torch.cuda.is_available():
        problems.append("train.device=cuda but no CUDA GPU is visible; use train.device=cpu or auto")
    if train.dtype == "bfloat16" and resolve_device(train.device).type == "cuda" \
            and not torch.cuda.is_bf16_supported():
        problems.append("train.dtype=bfloat16 is not supported by this GPU; use train.dtype=float32")
    return problems


def _seed_problems(seed: Any) -> list[str]:
    """``train.seed``: an integer >= 0, or a packed list of distinct ones (two members would share a folder)."""
    seeds = list(seed) if listed(seed) else [seed]
    if not seeds or any(not isinstance(s, int) or isinstance(s, bool) or s < 0 for s in seeds):
        return [f"train.seed={seed}; must be an integer >= 0; for several seeds: train.seed=0,1,2 (a sweep, -m or "
                f"a preset) or train.seed=[0,1,2] (packed into one run)"]
    if len(set(seeds)) < len(seeds):
        return [f"train.seed={seed}; a packed list must not repeat a seed"]
    return []


def _sweep_problems(sweep: SweepConfig, data_name: str) -> list[str]:
    """``sweep.metric``: what the report optimises must be something the runs record."""
    if sweep.metric == "test_acc" and data_name in DATASETS and DATASETS[data_name].kind != "image":
        return [f"sweep.metric=test_acc needs an image dataset (data={data_name} records losses only)"]
    return []


def _wsd_problems(optim: dict, train: TrainConfig) -> list[str]:
    """A WSD run needs a stable phase: its warm-up must end before its cool-down starts (each horizon of a sweep
    is checked, so a horizon too short for the warm-up is named before any run trains)."""
    if optim.get("schedule") != "wsd" or not isinstance(optim.get("decay_fraction"), (int, float)):
        return []
    fraction = optim.get("warmup_fraction")
    warmup = round(fraction * train.steps) if isinstance(fraction, (int, float)) else optim.get("warmup_steps") or 0
    start = decay_start(train.steps, optim["decay_fraction"])
    if isinstance(warmup, int) and warmup > start:
        return [f"train.steps={train.steps} is too short for optim.schedule=wsd: its warm-up ({warmup} steps) runs "
                f"past the start of its cool-down (step {start}, optim.decay_fraction={optim['decay_fraction']}); "
                f"train longer, or shorten the warm-up"]
    return []


def config_problems(cfg: Any, devices_here: bool = True) -> list[str]:
    """All problems of one composed run config (arch, data, optim, train, sweep, variant), loading nothing
    heavy (``devices_here``: the run trains on this machine, so its GPU is checked here). Each value's type
    first (the schemas); then each group's own rules, on its values with any
    mistyped one at its default (so a wrong type is named once, and nothing else trips over it). A config file's
    mode settings in their old flat spelling are read into their blocks first, in place, each with one warning."""
    if "optim" in cfg:  # a config file's old spellings (before the settings blocks) read into their blocks first
        for key in move_old_spellings(cfg.optim):
            warnings.warn(old_spelling_line(key), FutureWarning, stacklevel=2)  # once per setting and process
        if conflicts := spelling_conflicts(cfg.optim):
            return [f"{key}={cfg.optim[key.partition('.')[2]]} (its old spelling, in a config file) and "
                    f"{new_spelling(key)}={OmegaConf.select(cfg, new_spelling(key))} both set it: keep one"
                    for key in conflicts]
    problems, values = [], {}
    for group, schema in GROUP_SCHEMAS.items():
        if group in cfg:
            found, values[group] = checked(group, cfg[group], schema)
            problems += found
    arch, data = OmegaConf.create(values["arch"]), OmegaConf.create(values["data"])
    train = typed(TrainConfig, values["train"])
    problems += _arch_problems(arch, data) + data_problems(data) + _train_problems(train, devices_here)
    if "sweep" in values:
        problems += _sweep_problems(typed(SweepConfig, values["sweep"]), data.name)
    problems += _wsd_problems(values.get("optim", {}), train)
    problems += variant_problems(cfg.get("variant"))  # a config from before variants has none: modular
    try:
        opt = OptimConfig.of(values["optim"])
    except TypeError as error:
        return problems + [f"optim: {error}"]
    # a user's network's roles are not known yet: checked again once built; the arch as typed, so that a
    # mistyped value (named above) is not also taken for a missing one
    return problems + validate_optim(opt, builtin_roles().get(arch.name), cfg.arch if "arch" in cfg else arch)


def unknown_key_problems(overrides: list[str], cfg: Any) -> list[str]:
    """``+train.stepz=5`` adds a key nothing reads: name it, and the key that was probably meant."""
    problems = []
    for override in overrides:
        if not override.startswith("+") or override.startswith("++"):
            continue
        key = override.lstrip("+").partition("=")[0]
        group, _, rest = key.partition(".")
        if group in CHECKED_GROUPS and rest:
            problems.append(unknown_key(key, cfg, added=True))
    return problems


def check_config(cfg: Any, overrides: list[str] | None = None, devices_here: bool = True) -> None:
    problems = unknown_key_problems(overrides or [], cfg) + config_problems(cfg, devices_here)
    if problems:
        raise ConfigError(problems)


def checked_optim(cfg: Any) -> OptimConfig:
    """Check the whole run config, then build its optimiser settings (once per run)."""
    check_config(cfg)
    return OptimConfig.of(cfg.optim)
