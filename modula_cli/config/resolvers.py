"""What Hydra needs before it composes a config: the config's own interpolations (``${lr_grid:…}``,
``${run_dirname:…}``, …) and the schemas that hold the fixed groups' defaults (``schema.py``). Registering them
imports no torch (``--help`` composes the config too): what needs the modes loads when a resolver first runs."""

from __future__ import annotations

import re

from omegaconf import OmegaConf

from ..data.storage import data_root
from ..models.variant import folder_suffix, variant_of
from .schema import register_schemas


def lr_grid_string(optimizer: str, mode: str) -> str:
    """The grid as a Hydra sweep value, ``0.015625,0.03125,…`` (one run per LR; ``sweep.pack=true`` packs
    it into one run per grid point)."""
    from ..optim import lr_grid  # the modes' grids: torch, loaded when a sweep's grid is composed, not for --help

    return ",".join(repr(lr) for lr in lr_grid(optimizer, mode))


def run_dirname(overrides: object) -> str:
    """A run folder's name from its overrides (``config/identity.run_name``)."""
    from .identity import run_name  # the modes' settings: torch, loaded when a run's folder is named

    return run_name(list(overrides))


def variant_folder(node: object, arch: str = "") -> str:
    """The sweep folder's suffix for this variant and ``arch.name``: ``_paper``; none for the modular variant, or for
    a plain torch model, to which no variant applies."""
    return folder_suffix(variant_of({"variant": node, "arch": {"name": arch}}))


def register_config() -> None:
    """Register the resolvers and the schemas (each once)."""
    register_schemas()
    if not OmegaConf.has_resolver("lr_grid"):
        OmegaConf.register_new_resolver("lr_grid", lr_grid_string)
    if not OmegaConf.has_resolver("run_dirname"):
        OmegaConf.register_new_resolver("run_dirname", run_dirname)
    if not OmegaConf.has_resolver("folder_name"):  # my_models:my_mlp → my_models-my_mlp in folder names
        OmegaConf.register_new_resolver("folder_name", lambda name: re.sub(r"[^\w.=+-]", "-", str(name)))
    if not OmegaConf.has_resolver("data_folder"):  # --help: where data.root's default is on this machine
        OmegaConf.register_new_resolver("data_folder", lambda: str(data_root(None)))
    if not OmegaConf.has_resolver("variant_folder"):  # the sweep folder's suffix: _paper; none for modular or a
        OmegaConf.register_new_resolver("variant_folder", variant_folder)  # plain torch model (no variant applies)
