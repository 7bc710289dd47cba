"""The one module that uses Hydra's private API (``hydra._internal``, and argparse's table of flags inside
Hydra's parser), for what Hydra 1.3 offers no public hook for. Nothing here replaces or wraps a Hydra
function at run time. tests/test_hydra_internals.py pins each
use to the supported hydra-core range (``SUPPORTED``, as in pyproject.toml): a Hydra upgrade that moves one
fails there, not in a user's sweep.

- ``args_parser``: Hydra's own command-line parser, so that we read ``--config-dir``, ``-m`` and the
  overrides exactly as ``@hydra.main`` will.
- ``GridSweeper``: Hydra's basic sweeper (``hydra/sweeper=basic``) with a public hook on its grid; the packing
  sweeper extends it, and the grid validation expands a sweep the way it will run (``split_sweep``).
- ``flag_actions``: the flags of Hydra's parser, so a flag typed after an override still reaches it.
- ``quiet_job_announcements``: the basic launcher's per-job lines, from its private logger.
- ``composer``: the config loader ``@hydra.main`` builds (the same search path: ``--config-dir`` first), to
  compose a command line before Hydra runs it; ``group_exists`` asks the running Hydra's loader.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode
from omegaconf import DictConfig

SUPPORTED = ">=1.3.2,<1.4"

__all__ = ["SUPPORTED", "args_parser", "composer", "flag_actions", "group_exists", "split_sweep"]  # and GridSweeper,
# on demand


def __getattr__(name: str) -> Any:
    # ``BasicSweeper`` is looked up when asked for: Hydra's plugin scan re-imports its core plugins, and a class
    # taken before that scan is not the one Hydra instantiates (super() then fails in the packing sweeper)
    if name == "GridSweeper":
        return _grid_sweeper()
    raise AttributeError(name)


def _grid_sweeper() -> type:
    """Hydra's basic sweeper with one public hook on its grid, ``grid_arguments``: each sweep parameter of
    ``hydra.sweeper.params`` as Hydra parsed it in, what the grid sweeps out (its own ``_parse_config``)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    class GridSweeper(BasicSweeper):
        def _parse_config(self) -> list[str]:
            return self.grid_arguments(super()._parse_config())

        def grid_arguments(self, params: list[str]) -> list[str]:
            return params

    return GridSweeper


def flag_actions() -> dict[str, argparse.Action]:
    """Each of Hydra's command-line flags (``-m``, ``--config-dir``, …) with what it takes: argparse's own table,
    which it keeps private."""
    return args_parser()._option_string_actions  # noqa: SLF001


def args_parser() -> argparse.ArgumentParser:
    from hydra._internal.utils import get_args_parser

    return get_args_parser()


def split_sweep(overrides: Sequence) -> list[list[str]]:
    """Every job's overrides of a basic-sweeper grid (parsed overrides in, ``key=value`` strings out)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    return [list(job) for batch in BasicSweeper.split_arguments(list(overrides), None) for job in batch]


def group_exists(name: str) -> bool:
    """Whether ``name`` is a config group of the running Hydra application."""
    return GlobalHydra.instance().config_loader().repository.group_exists(name)


def composer(primary: Path, extra: Path | None) -> tuple[Callable[[str, list[str]], DictConfig],
                                                         Callable[[str], bool]]:
    """(compose, is_group) for an application whose configs are in ``primary`` and ``--config-dir extra``:
    ``compose(config_name, overrides)`` as for a multirun (sweep overrides left to the sweeper), with the
    hydra node; ``is_group(name)``."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.utils import create_config_search_path

    search_path = create_config_search_path(str(primary))
    if extra is not None:
        search_path.prepend(provider="command-line", path=f"file://{extra}")
    loader = ConfigLoaderImpl(config_search_path=search_path)

    def compose(config_name: str, overrides: list[str]) -> DictConfig:
        return loader.load_configuration(config_name=config_name, overrides=overrides, run_mode=RunMode.MULTIRUN,
                                         from_shell=True, validate_sweep_overrides=False)
    return compose, loader.repository.group_exists


def quiet_job_announcements() -> None:
    """Hydra's basic launcher announces every job ("#N : overrides", also those a stop skips) through its
    private logger; a run's progress bar and its closing line say it better, in one format."""
    import logging

    logging.getLogger("hydra._internal.core_plugins.basic_launcher").setLevel(logging.WARNING)
