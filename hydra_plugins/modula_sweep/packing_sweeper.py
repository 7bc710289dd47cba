"""Hydra's basic sweeper, packing the swept LRs and seeds into one job per grid point when
``sweep.pack=true`` (Hydra loads sweepers only from the ``hydra_plugins`` package)."""

from __future__ import annotations

from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from omegaconf import DictConfig, OmegaConf

from modula_cli.config.packing import pack_arguments


class PackingSweeper(BasicSweeper):
    def setup(self, *, hydra_context: Any, task_function: Any, config: DictConfig) -> None:
        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
        self.pack = bool(OmegaConf.select(config, "sweep.pack", default=False))

    def _parse_config(self) -> list[str]:
        params = super()._parse_config()
        return pack_arguments(params) if self.pack else params

    def sweep(self, arguments: list[str]) -> Any:
        return super().sweep(pack_arguments(arguments) if self.pack else arguments)
