"""The report's tables, computed from a sweep's run table: the curves (per series, scale point and LR), the
fitted optima with their intervals, and the transfer per series with its verdict. Each table's columns are its
row's fields, declared once; ``report.py`` writes and prints them."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..config.identity import short_keys
from ..plumbing.wording import counted
from ..config.identity import KNOB_KEYS, KNOBS, SERIES
from ..results.knobs import GROUP, SCALE_KNOBS
from ..results.status import COMPLETED, DIVERGED, FAILED, FINISHED
from .plots import series_label
from .stats import (DEFAULT_RESAMPLES, Optimum, optimum, regret, regret_at, shift, signed,
                    tied_lr)
from .verdict import verdict

log = logging.getLogger(__name__)


# --- the report's tables: each one's columns are its row's fields, declared once ---------------------------

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


def scale_axes(frame: pd.DataFrame) -> list[str]:
    """The knobs a sweep scales, in the order of ``SCALE_KNOBS``: those that take several values and that a
    launch swept (``axes``, from sweep.json). Two LR sweeps at different contexts are two experiments, not a
    context sweep; without a record of the swept axes every varying knob may be a scale."""
    recorded = frame["axes"].dropna() if "axes" in frame else pd.Series(dtype=object)
    swept = {axis for axes in recorded.unique() for axis in str(axes).split(",")} if len(recorded) else \
        set(SCALE_KNOBS)
    return [knob for knob in SCALE_KNOBS if knob in swept and frame[knob].nunique(dropna=True) > 1]


def scale_knob(frame: pd.DataFrame) -> str | None:
    """The knob a sweep's series run along (its transfer, plots and law): the first of ``scale_axes``; a
    second one makes each of its values a series of its own."""
    axes = scale_axes(frame)
    return axes[0] if axes else None


def scale_points(frame: pd.DataFrame, knob: str | None):
    """``(series key, scale, rows)`` for every series and scale point of ``knob`` (``scale_knob``; scale
    ``None`` without one)."""
    for key, series in frame.groupby(list(GROUP), dropna=False):
        for scale, group in (series.groupby(knob) if knob else [(None, series)]):
            yield key, scale, group


# --- experiments: runs that differ in anything but the scale, the LR and the seed are separate series -------

SERIES_SETTINGS = ("arch.name", "data.name", "optim.name", "optim.mode")  # already the series' own columns
UNKNOWN = object()  # a setting a run's record does not tell (a run planned by an earlier version)


def _settings_of(row: pd.Series) -> tuple[dict[str, Any], bool]:
    """A run's experiment settings, and whether they are complete (else only its knobs are known)."""
    if isinstance(row["settings"], dict):
        return row["settings"], True
    return {KNOB_KEYS[k]: row[k] for k in KNOBS if not pd.isna(row[k])}, False


def _comparable(value: Any) -> str:
    """One text per value: 400 from a config and 400.0 from a table column are the same setting."""
    if isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
        return repr(float(value))
    return json.dumps(value, sort_keys=True, default=str)


def _value_text(value: Any) -> str:
    if value is UNKNOWN:
        return "?"
    if isinstance(value, float):
        return f"{value:g}"
    return json.dumps(value) if isinstance(value, (list, dict)) else str(value)


def experiment_labels(frame: pd.DataFrame, knob: str | None) -> pd.Series:
    """Per run, what sets its experiment apart from the others of its series (arch, data, optimiser, mode):
    ``"steps=100"``, or ``""`` when they all agree on every setting but the scale knob, LR and seed."""
    labels = pd.Series("", index=frame.index, dtype=object)
    ignored = {*SERIES_SETTINGS, KNOB_KEYS.get(knob or "", "")}
    for _, series in frame.groupby(list(SERIES), dropna=False):
        known = {i: _settings_of(series.loc[i]) for i in series.index}
        keys = sorted({k for settings, _ in known.values() for k in settings} - ignored)
        # absent from a complete record: the setting was at its default before it existed (identity.py)
        values = {i: {k: settings.get(k, "-" if full else UNKNOWN) for k in keys}
                  for i, (settings, full) in known.items()}
        varying = [k for k in keys if len({_comparable(v[k]) for v in values.values() if v[k] is not UNKNOWN}) > 1]
        short = short_keys(varying)
        for i, v in values.items():
            labels[i] = ", ".join(f"{short[k]}={_value_text(v[k])}" for k in varying)
    return labels


def without_axis(setting: str, axis: str) -> str:
    """A series' setting without its value of ``axis`` (``steps=100, wd=0.1`` → ``wd=0.1``)."""
    parts = [p for p in str(setting or "").split(", ") if p and not re.match(rf"^(\S+\.)?{re.escape(axis)}=", p)]
    return ", ".join(parts)


def with_experiments(frame: pd.DataFrame, knob: str | None, second: str | None = None) -> pd.DataFrame:
    """The table with its ``setting`` column, warning when one folder holds several experiments (a second scale
    axis the sweep varies, ``second``, makes series by design: no warning for those)."""
    frame = frame.assign(setting=experiment_labels(frame, knob))
    for key, series in frame.groupby(list(SERIES), dropna=False):
        settings = sorted(series["setting"].unique())
        if second and len({without_axis(setting, second) for setting in settings}) == 1:
            continue
        if len(settings) > 1:
            edited = (" (source: the file that defines the model changed between runs, so its runs are kept apart)"
                      if any("source=" in setting for setting in settings) else "")
            log.warning("%s: this folder holds %d experiments that differ in more than the scale, LR and seed%s; "
                        "each is a series of its own: %s", series_label(key), len(settings), edited,
                        "; ".join(settings))
    return frame


def one_row_per_run(frame: pd.DataFrame, knob: str | None) -> pd.DataFrame:
    """One row per (series, knobs, LR, seed): the same run can sit in two folders (``lr=0.25`` from a
    single-seed launch and ``lr=0.25,seed=0`` from a seeded one). A finished row is kept over others."""
    rank = frame["status"].map({COMPLETED: 0, DIVERGED: 1}).fillna(2)
    keys = [*GROUP, *([knob] if knob else []), "lr", "seed"]
    kept = frame.assign(_rank=rank).sort_values(["_rank", "run"]).drop_duplicates(keys).drop(columns="_rank")
    if len(kept) < len(frame):
        log.warning("%s another run's settings and seed (e.g. folders with and without an explicit "
                    "train.seed=0); each is counted once",
                    "1 run repeats" if len(frame) - len(kept) == 1 else f"{len(frame) - len(kept)} runs repeat")
    return sorted_runs(kept)


def sorted_runs(frame: pd.DataFrame) -> pd.DataFrame:
    """Series, then knobs, LR and seed as numbers (width 32 before 128)."""
    return frame.sort_values([*GROUP, *KNOBS, "lr", "seed", "run"], na_position="last").reset_index(drop=True)


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
