"""Hydra's callback of every launch (``hydra.callbacks`` in configs/config.yaml). Hydra makes it before any run,
single runs too, so it imports the sweep machinery (``launch.SweepHooks``) only when a multirun starts: a
single run's config check answers before training's libraries load."""

from __future__ import annotations

from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class SweepCallback(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from .launch import SweepHooks

        SweepHooks().on_multirun_start(config, **kwargs)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from .launch import SweepHooks

        SweepHooks().on_multirun_end(config, **kwargs)
