"""What a run is indexed by in a sweep's tables: its series (arch, data, optimiser, mode, variant) and the
knobs a sweep scales (width, depth, …), read from its composed config."""

from __future__ import annotations

import json
from typing import Any

from omegaconf import OmegaConf

from ..config.identity import experiment_settings
from ..models.variant import name_of as variant_name_of

SERIES = ("arch", "data", "optimizer", "mode", "variant")
# A series of the report: one experiment. ``setting`` names what sets it apart from other experiments of the
# same arch, data, optimiser and mode in one folder ("steps=100"; "" when there is no other).
GROUP = (*SERIES, "setting")
# Each knob of a sweep table and where a run's config holds it.
KNOB_KEYS = {"width": "arch.width", "depth": "arch.depth", "block_depth": "arch.block_depth",
             "blocks_mass": "arch.blocks_mass", "heads": "arch.heads", "context": "data.context",
             "batch_size": "train.batch_size", "steps": "train.steps", "wd": "optim.wd"}
KNOBS = tuple(KNOB_KEYS)
# The axes a transfer plot can scale along, in the order the report looks for one that varies.
SCALE_KNOBS = ("width", "depth", "blocks_mass", "context", "batch_size", "steps", "wd")
SERIES_KEYS = ("arch.name", "data.name", "optim.name", "optim.mode")  # settings that name a series, not an experiment


def knobs_of(cfg: Any, lr: float, seed: int) -> dict[str, Any]:
    """The values a sweep table is indexed by, read from one run's composed config."""
    record: dict[str, Any] = {"arch": cfg.arch.name, "data": cfg.data.name, "optimizer": cfg.optim.name,
                              "mode": cfg.optim.mode, "variant": variant_name_of(cfg)}
    for knob, key in KNOB_KEYS.items():
        value = OmegaConf.select(cfg, key)
        if value is not None:
            record[knob] = value
    return {**record, "lr": float(lr), "seed": int(seed), "settings": experiment_settings(cfg)}


def swept_axes(runs: dict[str, dict]) -> list[str]:
    """The scale knobs a launch sweeps: those its planned runs take several values of."""
    return [knob for knob in SCALE_KNOBS
            if len({json.dumps(knobs.get(knob), default=str) for knobs in runs.values()}) > 1]
