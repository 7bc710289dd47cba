"""Hydra's basic sweeper, packing the swept LRs and seeds into one job per grid point when
``sweep.pack=true``, and searching each scale's LRs batch by batch instead of launching the whole grid when
``sweep.search=true`` (Hydra loads sweepers only from the ``hydra_plugins`` package)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf

from modula_cli.config.hydra_internals import GridSweeper


class PackingSweeper(GridSweeper):
    PLACES_JOBS = True  # every job takes its place from the launch (sweep/job_place.py): the launch checks it
    def setup(self, *, hydra_context: Any, task_function: Any, config: DictConfig) -> None:
        from modula_cli.sweep.job_place import JobPlace, PlacedTask  # here: Hydra imports every plugin at start-up

        # every launcher's jobs take their place from this launch (its folder, data, threads), not the environment
        task_function = PlacedTask.of(task_function, JobPlace.here(config))
        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
        self.pack = bool(OmegaConf.select(config, "sweep.pack", default=False))
        from modula_cli.config.schema import searches  # here: Hydra imports every plugin at start-up

        self.search = searches(config)

    def grid_arguments(self, params: list[str]) -> list[str]:
        return _packed(params) if self.pack else params

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        """Nothing left to check: the launch composed and checked every job of the grid, as each will compose
        itself, before the first one started (``modula_cli.sweep.plan.validate_grid``); Hydra's own check would
        compose every job of the batch a second time (its launcher composes each a third, to run it)."""

    def sweep(self, arguments: list[str]) -> Any:
        if self.search:
            from modula_cli.sweep.search import search_sweep

            return search_sweep(self, self.config)
        from modula_cli.sweep.cluster import UnfinishedJobsOnly

        self.launcher = UnfinishedJobsOnly(self.launcher, self.config)  # a finished job is not launched again
        return super().sweep(_packed(arguments) if self.pack else arguments)


def _packed(arguments: list[str]) -> list[str]:
    # imported here: Hydra imports every plugin at start-up, before a mistyped command is answered
    from modula_cli.config.members import pack_arguments

    return pack_arguments(arguments)
