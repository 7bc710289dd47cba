"""How a sweep's table groups its runs: the series and experiment of a row, the knobs a transfer plot may scale
along, and the axes a launch sweeps. What each run's knobs are is its ``config.identity.RunIdentity``."""

from __future__ import annotations

import json

from ..config.identity import SERIES

# A series of the report: one experiment. ``setting`` names what sets it apart from other experiments of the
# same arch, data, optimiser and mode in one folder ("steps=100"; "" when there is no other).
GROUP = (*SERIES, "setting")
# The axes a transfer plot can scale along, in the order the report looks for one that varies.
SCALE_KNOBS = ("width", "depth", "blocks_mass", "context", "batch_size", "steps", "wd")
SERIES_KEYS = ("arch.name", "data.name", "optim.name", "optim.mode")  # settings that name a series, not an experiment


def swept_axes(runs: dict[str, dict]) -> list[str]:
    """The scale knobs a launch sweeps: those its planned runs take several values of."""
    return [knob for knob in SCALE_KNOBS
            if len({json.dumps(knobs.get(knob), default=str) for knobs in runs.values()}) > 1]
