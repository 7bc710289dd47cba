"""Config checks run before any expensive work: every problem is reported at once."""

from __future__ import annotations

from typing import Any

import torch

from .data import DATASETS
from .models import ARCHITECTURES, LANGUAGE_ARCHS
from .optim import OptimConfig, validate_optim

DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("float32", "bfloat16")


class ConfigError(ValueError):
    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid configuration:\n  - " + "\n  - ".join(problems))


def optim_config(cfg: Any) -> OptimConfig:
    from omegaconf import OmegaConf

    return OptimConfig(**OmegaConf.to_container(cfg.optim, resolve=True))


def _positive_int(problems: list[str], key: str, value: Any, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        problems.append(f"{key}={value!r}; must be an integer >= {minimum}")


def config_problems(cfg: Any) -> list[str]:
    """All problems of one composed run config (arch, data, optim, train), without loading anything."""
    problems: list[str] = []
    arch, data, train = cfg.arch, cfg.data, cfg.train
    if arch.name not in ARCHITECTURES:
        problems.append(f"arch.name={arch.name!r}; allowed: {', '.join(ARCHITECTURES)}")
    if data.name not in DATASETS:
        problems.append(f"data.name={data.name!r}; registered: {', '.join(DATASETS)}")
    language = data.name != "cifar10"
    if arch.name in ARCHITECTURES and data.name in DATASETS and (arch.name in LANGUAGE_ARCHS) != language:
        kind = "a language dataset (shakespeare, tinystories, openwebtext)" if arch.name in LANGUAGE_ARCHS \
            else "an image dataset (cifar10)"
        problems.append(f"arch={arch.name} needs {kind}, got data={data.name}")
    for key in ("width", "depth"):
        _positive_int(problems, f"arch.{key}", arch.get(key))
    if "block_depth" in arch:
        _positive_int(problems, "arch.block_depth", arch.block_depth)
    if "heads" in arch:
        _positive_int(problems, "arch.heads", arch.heads)
        if isinstance(arch.heads, int) and arch.heads > 0 and isinstance(arch.width, int) \
                and arch.width % arch.heads:
            problems.append(f"arch.width={arch.width} is not divisible by arch.heads={arch.heads}")
    if arch.get("blocks_mass") is not None and not arch.blocks_mass > 0:
        problems.append(f"arch.blocks_mass={arch.blocks_mass}; must be > 0")
    if "context" in data:
        _positive_int(problems, "data.context", data.context)
    for key in ("steps", "batch_size", "eval_batches", "log_every"):
        _positive_int(problems, f"train.{key}", train.get(key))
    for key in ("eval_every", "checkpoint_every"):
        _positive_int(problems, f"train.{key}", train.get(key), minimum=0)
    if not train.diverge_factor > 1:
        problems.append(f"train.diverge_factor={train.diverge_factor}; must be > 1")
    if train.device not in DEVICES:
        problems.append(f"train.device={train.device!r}; allowed: {', '.join(DEVICES)}")
    elif train.device == "cuda" and not torch.cuda.is_available():
        problems.append("train.device=cuda but no CUDA GPU is visible; use train.device=cpu or auto")
    if train.dtype not in DTYPES:
        problems.append(f"train.dtype={train.dtype!r}; allowed: {', '.join(DTYPES)}")
    elif train.dtype == "bfloat16" and resolve_device(train.device).type == "cuda" \
            and not torch.cuda.is_bf16_supported():
        problems.append("train.dtype=bfloat16 is not supported by this GPU; use train.dtype=float32")
    try:
        problems += validate_optim(optim_config(cfg))
    except TypeError as error:
        problems.append(f"optim: {error}")
    return problems


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device if device in DEVICES else "cpu")


def check_config(cfg: Any) -> None:
    problems = config_problems(cfg)
    if problems:
        raise ConfigError(problems)
