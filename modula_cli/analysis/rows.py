"""The report's tables' rows: each table's columns are its row's fields, declared once (``curves.csv``,
``optimal_lr.csv``, ``transfer.csv``; the law's in ``law.py``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..results.knobs import GROUP

@dataclass(frozen=True)
class _Series:
    """The columns that name a series (``GROUP``), first in every table."""
    arch: str
    data: str
    optimizer: str
    mode: str
    variant: str
    setting: str


assert tuple(f.name for f in dataclasses.fields(_Series)) == GROUP


@dataclass(frozen=True)
class CurvePoint(_Series):
    """curves.csv: a series' metric at one scale point and LR, over its completed seeds."""
    scale_knob: str | None
    scale: float | None
    lr: float
    log2_lr: float
    mean: float
    std: float
    seeds: int
    diverged: int
    failed: int
    missing: int
    complete: bool  # every run of the scale point has finished


@dataclass(frozen=True)
class OptimalPoint(_Series):
    """optimal_lr.csv: a scale point's best grid LR, the fitted optimum and its interval."""
    scale_knob: str | None
    scale: float | None
    metric: str  # what ``mean``, ``std`` and ``fit`` measure (train_loss, test_loss, test_acc)
    optimal_lr: float
    log2_optimal_lr: float
    mean: float  # the metric's mean over seeds at the best grid LR
    std: float
    fit: float  # the fitted curve's value at its optimum
    log2_optimal_lr_fit: float
    log2_optimal_lr_low: float
    log2_optimal_lr_high: float
    optimal_lr_fit: float
    at_grid_edge: bool
    edge: str
    seeds: int
    completed_runs: int
    diverged_runs: int
    grid_size: int
    finished_runs: int
    runs: int
    complete: bool


@dataclass(frozen=True)
class Transfer(_Series):
    """transfer.csv: the optimum's shift and the regret from the smallest to the largest finished scale."""
    scale_knob: str | None = None
    smallest: float = np.nan
    largest: float = np.nan
    shift_log2: float = np.nan
    shift_log2_low: float = np.nan
    shift_log2_high: float = np.nan
    regret: float = np.nan
    regret_low: float = np.nan
    regret_high: float = np.nan
    tuned_lr: float = np.nan
    # the grid LR beside tuned_lr that ties with it at the smallest scale within the seeds' noise (stats.tied_lr),
    # how far apart they are there (signed cost), and the regret of keeping that one instead
    tied_lr: float = np.nan
    tied_gap: float = np.nan
    tied_regret: float = np.nan
    seeds: int = 0
    metric: str = ""
    incomplete: str = ""  # the scale points not finished yet
    edges: str = ""  # the ends whose optimum lies at a grid edge
    grid_step: float = np.nan  # the LRs' spacing in log2: the verdict's unit
    call: str = ""  # the verdict: transfers | drifts | moves | cannot tell (verdict.py)
    verdict: str = ""  # its line
    # the series' transfer law along the scale knob and its prediction at the target (prediction.py, law.csv)
    law_points: int = 0
    law_slope: float = np.nan  # log2 LR per doubling
    law_slope_low: float = np.nan
    law_slope_high: float = np.nan
    law_check: str = ""  # straight | curved | unchecked (two scales)
    target: str = ""
    target_doublings: float = np.nan
    predicted_lr: float = np.nan
    predicted_low: float = np.nan
    predicted_high: float = np.nan
    predicted_regret: float = np.nan
    prediction_withheld: str = ""  # why no LR is predicted (predicted_lr then empty)
    prediction: str = ""  # its line (or the law's, without a target)


def table(row: type, rows: list[Any]) -> pd.DataFrame:
    """The rows as a frame with ``row``'s fields as its columns, in order, even when there are no rows."""
    return pd.DataFrame([dataclasses.asdict(r) for r in rows], columns=[f.name for f in dataclasses.fields(row)])
