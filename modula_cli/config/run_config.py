"""One run's settings, typed (``RunConfig``): built once from the Hydra config after it was checked, and
passed down to the trainer's rooms, which read fields, not ``cfg.group.key`` strings. The Hydra config itself
stays with the entry point and with each member's ``config.yaml``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ..data.config import DataConfig
from ..models.config import ArchConfig
from ..models.variant import Variant, variant_of
from ..optim.config import OptimConfig
from ..plumbing.settings import typed
from .schema import LoggerConfig, TrainConfig


@dataclass(frozen=True)
class RunConfig:
    """A checked run's settings. ``arch`` types the keys every architecture shares; ``builder_arch`` is the arch
    node as its builder takes it (a user's own keys too), and ``data_options`` the dataset builder's keywords."""

    train: TrainConfig
    arch: ArchConfig
    optim: OptimConfig
    variant: Variant
    logger: LoggerConfig
    data: DataConfig
    data_options: dict[str, Any]
    builder_arch: DictConfig
    rerun: bool  # train.rerun or sweep.rerun: retrain a finished run

    @classmethod
    def of(cls, cfg: DictConfig, optim: OptimConfig) -> RunConfig:
        """The settings of ``cfg`` (already checked), with ``optim`` as validation and the defaults made it."""
        data_options = OmegaConf.to_container(cfg.data, resolve=True)
        builder_arch = OmegaConf.create(OmegaConf.to_container(cfg.arch, resolve=True))
        OmegaConf.set_struct(builder_arch, True)  # a builder's misspelt key still raises
        return cls(train=typed(TrainConfig, cfg.train), arch=typed(ArchConfig, cfg.arch), optim=optim,
                   variant=variant_of(cfg), logger=typed(LoggerConfig, cfg.get("logger") or {}),
                   data=typed(DataConfig, data_options), data_options=data_options, builder_arch=builder_arch,
                   rerun=bool(cfg.train.rerun or cfg.sweep.rerun))
