"""The report's tables, computed from a sweep's run table: the curves (per series, scale point and LR), the
fitted optima with their intervals, and the transfer per series with its verdict (the rows: ``rows.py``;
the series and experiments: ``experiments.py``). ``report.py`` writes and prints them."""

from __future__ import annotations

import dataclasses
import logging
import math
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..plumbing.wording import counted
from ..results.knobs import GROUP
from ..results.status import COMPLETED, DIVERGED, FAILED, FINISHED
from .experiments import scale_points
from .rows import CurvePoint, OptimalPoint, Transfer, table
from .stats import DEFAULT_RESAMPLES, Optimum, optimum, regret, regret_at, shift, signed, tied_lr
from .verdict import verdict

log = logging.getLogger(__name__)


def seed_matrix(group: pd.DataFrame, metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The LRs, the seeds and ``values[seed, lr]``: the signed metric of completed runs, +inf for diverged
    runs, NaN for runs that failed or have not finished."""
    lrs = np.array(sorted(group["lr"].dropna().unique()), dtype=float)
    seeds = np.array(sorted(group["seed"].dropna().unique()))
    values = np.full((len(seeds), len(lrs)), np.nan)
    for row in group.itertuples(index=False):
        if math.isnan(row.lr) or math.isnan(row.seed):
            continue
        s, j = int(np.searchsorted(seeds, row.seed)), int(np.searchsorted(lrs, row.lr))
        if not np.isnan(values[s, j]):  # one_row_per_run keeps one run per cell: a seed counts once
            raise ValueError(f"seed {row.seed:g} at LR {row.lr:g} appears twice in one series ({row.run})")
        if row.status == COMPLETED and not math.isnan(getattr(row, metric)):
            values[s, j] = signed(getattr(row, metric), metric)
        elif row.status == DIVERGED:
            values[s, j] = np.inf
    return lrs, seeds, values


def _point_rng(key: tuple, scale: Any) -> np.random.Generator:
    """Resamples of one scale point that depend on nothing else in the folder: the same runs give the same
    interval alone or beside other experiments."""
    arch, data, optimizer, mode, *_ = key
    where = "-" if scale is None or pd.isna(scale) else f"{float(scale):g}"  # 32 and 32.0 alike
    return np.random.default_rng(zlib.crc32(f"{arch}|{data}|{optimizer}|{mode}|{where}".encode()))


@dataclass(frozen=True)
class Progress:
    """How far one scale point is: runs finished (completed or diverged) of the runs known there (planned or
    started), and how many of the others failed. (An LR that other scale points have and this one lacks does
    not make it incomplete: it was never planned here; an optimum at the edge of its LRs is flagged as such.)"""

    finished: int
    known: int
    failed: int

    @property
    def complete(self) -> bool:
        return self.finished == self.known

    def text(self) -> str:
        """``"8 of 9 runs finished (1 failed: a relaunch retries it)"``; "" when complete."""
        if self.complete:
            return ""
        parts = [f"{self.finished} of {counted(self.known, 'run')} finished"]
        if self.failed:
            parts.append(f"({self.failed} failed: a relaunch retries {'it' if self.failed == 1 else 'them'})")
        return " ".join(parts)


def progress(frame: pd.DataFrame, knob: str | None) -> dict[tuple, Progress]:
    """Per (*series, scale): how far the point is (incomplete: runs pending, running, interrupted or failed)."""
    return {(*key, scale): Progress(int(group["status"].isin(FINISHED).sum()), len(group),
                                    int((group["status"] == FAILED).sum()))
            for key, scale, group in scale_points(frame, knob)}


def curves(frame: pd.DataFrame, metric: str, knob: str | None, done: dict[tuple, Progress] | None = None
           ) -> pd.DataFrame:
    """Per series, scale point and LR: mean, std and count over completed seeds; diverged, failed, missing."""
    rows, done = [], done if done is not None else progress(frame, knob)
    for key, scale, group in scale_points(frame, knob):
        for lr, runs in group.groupby("lr"):
            finished = runs.loc[(runs["status"] == COMPLETED) & runs[metric].notna(), metric]
            diverged, failed = int((runs["status"] == DIVERGED).sum()), int((runs["status"] == FAILED).sum())
            rows.append(CurvePoint(**dict(zip(GROUP, key)), scale_knob=knob, scale=scale, lr=lr,
                                   log2_lr=math.log2(lr), mean=finished.mean() if len(finished) else np.nan,
                                   std=finished.std(ddof=1) if len(finished) > 1 else np.nan, seeds=len(finished),
                                   diverged=diverged, failed=failed,
                                   missing=len(runs) - len(finished) - diverged - failed,
                                   complete=done[(*key, scale)].complete))
    return table(CurvePoint, rows)


def optimal_lrs(frame: pd.DataFrame, metric: str, knob: str | None, resamples: int = DEFAULT_RESAMPLES,
                done: dict[tuple, Progress] | None = None) -> tuple[pd.DataFrame, dict[tuple, Optimum]]:
    """Per series and scale point with a finite mean somewhere: the best grid LR, the fitted optimum and its
    interval, and whether every run of the point has finished (``complete``). Also returns each point's
    ``Optimum`` (keyed by (*series, scale)) for the transfer table."""
    rows, fits = [], {}
    done = done if done is not None else progress(frame, knob)
    for key, scale, group in scale_points(frame, knob):
        rng = _point_rng(key, scale)
        lrs, _, values = seed_matrix(group, metric)
        if not lrs.size or not np.isfinite(values).any():
            continue
        fit = optimum(np.log2(lrs), values, resamples, rng)
        best = fit.best
        if best < 0:  # every LR lost a seed to divergence: no LR to call optimal
            continue
        fits[(*key, scale)] = fit
        at_best = values[:, best][np.isfinite(values[:, best])]
        low, high = fit.bounds()
        point = done[(*key, scale)]
        rows.append(OptimalPoint(**dict(zip(GROUP, key)), scale_knob=knob, scale=scale, metric=metric,
                                 optimal_lr=lrs[best], log2_optimal_lr=math.log2(lrs[best]),
                                 mean=float(signed(at_best.mean(), metric)),
                                 std=float(at_best.std(ddof=1)) if at_best.size > 1 else np.nan,
                                 fit=float(signed(fit.fit.value[0], metric)),
                                 log2_optimal_lr_fit=fit.log2_optimal_lr, log2_optimal_lr_low=low,
                                 log2_optimal_lr_high=high, optimal_lr_fit=2.0**fit.log2_optimal_lr,
                                 at_grid_edge=bool(fit.edge), edge=fit.edge, seeds=fit.seeds,
                                 completed_runs=int(np.isfinite(values).sum()),
                                 diverged_runs=int(np.isinf(values).sum()), grid_size=len(lrs),
                                 finished_runs=point.finished, runs=point.known, complete=point.complete))
    return table(OptimalPoint, rows), fits


def _incomplete_text(key: tuple, knob: str | None, done: dict[tuple, Progress]) -> str:
    """``"width 128: 1 of 9 runs finished"`` for each incomplete point of one series ("" when none)."""
    points = sorted((scale, point) for (*series, scale), point in done.items()
                    if tuple(series) == tuple(key) and not point.complete and scale is not None)
    return "; ".join(f"{knob} {scale:g}: {point.text()}" for scale, point in points)


def grid_step_of(fits: list[Optimum]) -> float:
    """The LRs' spacing in log2: the most common gap between neighbouring LRs of a series' scale points."""
    gaps = np.concatenate([np.diff(np.sort(fit.log2_lrs)) for fit in fits] or [np.array([])])
    gaps = np.round(gaps[gaps > 1e-9], 6)
    if not gaps.size:
        return 1.0
    values, counts = np.unique(gaps, return_counts=True)
    return float(values[np.argmax(counts)])


def _doublings(smallest: Any, largest: Any) -> float | None:
    try:
        small, large = float(smallest), float(largest)
    except (TypeError, ValueError):
        return None
    return math.log2(large / small) if small > 0 and large > 0 else None


def transfer_table(optimal: pd.DataFrame, fits: dict[tuple, Optimum], metric: str,
                   done: dict[tuple, Progress] | None = None, grid_step: float | None = None) -> pd.DataFrame:
    """Per series with two or more scale points: shift of η* and regret from the smallest to the largest
    scale point whose runs have all finished (``done``, from ``progress``; without it every point counts),
    and the verdict (``verdict.py``; ``grid_step``: the LR grid's log2 spacing, else read off the LRs).
    Incomplete points are named in ``incomplete``; with fewer than two complete points there is no shift."""
    rows = []
    for key, points in optimal.groupby(list(GROUP), dropna=False):
        points = points.dropna(subset=["scale"]).sort_values("scale")
        knob = points["scale_knob"].iloc[0] if len(points) else None
        incomplete = _incomplete_text(key, knob, done or {})
        if len(points) < 2 and not incomplete:
            continue
        ready = points[points["complete"]] if done is not None else points
        row = Transfer(**dict(zip(GROUP, key)), scale_knob=knob, metric=metric, incomplete=incomplete)
        if len(ready) >= 2:
            first, last = ready.iloc[0], ready.iloc[-1]
            small, large = fits[(*key, first["scale"])], fits[(*key, last["scale"])]
            moved, moved_low, moved_high = shift(small, large)
            lost, lost_low, lost_high = regret(small, large)
            if (tie := tied_lr(small)) is not None:
                row = dataclasses.replace(row, tied_lr=float(2.0 ** small.log2_lrs[tie]),
                                          tied_gap=float(small.mean[tie] - small.mean[small.best]),
                                          tied_regret=regret_at(small, large, tie))
            row = dataclasses.replace(
                row, smallest=first["scale"], largest=last["scale"], shift_log2=moved, shift_log2_low=moved_low,
                shift_log2_high=moved_high, regret=lost, regret_low=lost_low, regret_high=lost_high,
                tuned_lr=first["optimal_lr"], seeds=min(small.seeds, large.seeds),
                edges="; ".join(f"{knob} {point['scale']:g} at the {point['edge']} edge"
                                for point in (first, last) if point["edge"]))
        step = grid_step or grid_step_of([fit for (*series, _), fit in fits.items() if tuple(series) == tuple(key)])
        said = verdict(row.shift_log2, row.shift_log2_low, row.shift_log2_high, row.seeds, step,
                       _doublings(row.smallest, row.largest),
                       tuple(float(p["log2_optimal_lr_high"] - p["log2_optimal_lr_low"]) for p in
                             (ready.iloc[0], ready.iloc[-1])) if len(ready) >= 2 else (math.nan, math.nan),
                       f"{knob} {row.smallest:g} → {row.largest:g}" if len(ready) >= 2 else "", row.edges,
                       (float(ready.iloc[0]["optimal_lr"]), float(ready.iloc[-1]["optimal_lr"]))
                       if len(ready) >= 2 else None)
        rows.append(dataclasses.replace(row, grid_step=step, call=said.call, verdict=said.text))
    return table(Transfer, rows)
