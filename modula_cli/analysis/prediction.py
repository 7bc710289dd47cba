"""The report's use of the transfer law (``law.py``): per series the law over its finished scales, and, for a
target the user names (``--target width=4096``, ``sweep.target={width:4096}``), the LR to use there.

``law.csv`` has one row per law: along the scale knob for every series of the transfer table, and, when a
sweep varies two scale axes (width and steps, width and depth, …), the joint law over both for every
experiment whose series differ only in the second axis. ``transfer.csv`` carries the first kind's columns.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..results.knobs import GROUP, SERIES
from .law import Law, LawPoint, Prediction, curve_curvature, fit_law, implied_regret, usable
from .plots import series_label
from .stats import Optimum
from .experiments import without_axis
from .rows import Transfer, _Series, table
from .tables import Progress, grid_step_of
from .targets import Target


@dataclass(frozen=True)
class LawRow(_Series):
    """law.csv: one fitted law. Slopes in log2 LR per doubling of their axis (grid steps of a powers-of-two
    grid); the prediction's LRs plain."""
    axes: str = ""
    points: int = 0            # scales with an optimum inside their LRs (the law's points)
    excluded: str = ""         # scales left out: optimum at an edge of the LRs, or a non-positive scale
    seeds: int = 0
    intercept: float = np.nan  # log2 η* at scale 1 on every axis
    slope: float = np.nan      # along the first axis
    slope_low: float = np.nan
    slope_high: float = np.nan
    second_axis: str = ""
    second_slope: float = np.nan
    second_slope_low: float = np.nan
    second_slope_high: float = np.nan
    inflation: float = np.nan  # the intervals' widening for scatter about the line (√ reduced χ², ≥ 1)
    curvature: float = np.nan  # quadratic term along the first axis (three scales or more)
    curvature_low: float = np.nan
    curvature_high: float = np.nan
    second_curvature: float = np.nan  # the same along the second axis
    second_curvature_low: float = np.nan
    second_curvature_high: float = np.nan
    check: str = ""            # straight | curved | unchecked (two scales, or one seed)
    target: str = ""
    target_doublings: float = np.nan  # beyond the largest scale measured (negative: below the smallest)
    point_lr: float = np.nan   # the law's value at the target, given or withheld
    predicted_lr: float = np.nan  # the LR to use there (empty where the prediction is withheld)
    predicted_low: float = np.nan
    predicted_high: float = np.nan
    predicted_regret: float = np.nan  # the cost of an LR at the interval's farther end, at the largest curve's shape
    withheld: str = ""         # why no LR is predicted
    line: str = ""
    recipe: str = ""           # the settings the LR belongs to (the optimiser's, steps, batch: ``recipe.py``)


# the columns transfer.csv takes from its series' law along the scale knob
TRANSFER_COLUMNS = {"points": "law_points", "slope": "law_slope", "slope_low": "law_slope_low",
                    "slope_high": "law_slope_high", "check": "law_check", "target": "target",
                    "target_doublings": "target_doublings", "predicted_lr": "predicted_lr",
                    "predicted_low": "predicted_low", "predicted_high": "predicted_high",
                    "predicted_regret": "predicted_regret", "withheld": "prediction_withheld",
                    "line": "prediction"}
assert set(TRANSFER_COLUMNS.values()) <= {f.name for f in dataclasses.fields(Transfer)}


def _target_text(target: Mapping[str, float], axes: Sequence[str]) -> str:
    return ",".join(f"{axis}={target[axis]:g}" for axis in axes if axis in target)


def _check(law: Law) -> str:
    return "curved" if law.curved else "straight" if law.checked else "unchecked"


def _per_doubling(law: Law, axis: int, step: float) -> str:
    slope = law.slope(axis)
    if math.isnan(slope.low):
        return f"{slope.value / step:+.2f} grid steps per doubling of {law.axes[axis]}"
    return (f"{slope.value / step:+.2f} [{slope.low / step:+.2f}, {slope.high / step:+.2f}] grid steps per doubling "
            f"of {law.axes[axis]}")


def law_text(law: Law, step: float) -> str:
    """``law: +0.13 [+0.05, +0.21] grid steps per doubling of width over 4 scales, straight within its interval``"""
    slopes = ", ".join(_per_doubling(law, k, step) for k in range(len(law.axes)))
    points = f"{len(law.optima)} {'scales' if len(law.axes) == 1 else 'points'}"
    unchecked = "one seed" if law.seeds < 2 and len(law.optima) > 2 else "two scales"
    bent = " and ".join(axis for axis, c in zip(law.axes, law.curvature) if c is not None and math.isfinite(c.low)
                        and not c.covers(0.0))
    check = {"straight": "straight within its interval", "unchecked": f"{unchecked}: nothing checks that the line "
             "is straight", "curved": f"curved along {bent}: not a power law over these scales"}[_check(law)]
    scatter = (f"; the optima scatter about it {law.inflation:.1f}× their own noise (its intervals widened so)"
               if law.inflation > 1.5 else "")
    return f"law: {slopes} over {points}, {check}{scatter}"


def _where(target: Mapping[str, float], axes: Sequence[str]) -> str:
    return ", ".join(f"{axis} {target[axis]:g}" for axis in axes)


def _distance(prediction: Prediction, law: Law) -> str:
    parts = []
    for k, axis in enumerate(law.axes):
        d = prediction.doublings[k]
        if d > 0:
            parts.append(f"{d:.3g} doubling{'s' if d != 1 else ''} beyond {axis} {2 ** law.positions[:, k].max():g}")
        elif d < 0:
            parts.append(f"{-d:.3g} doubling{'s' if d != -1 else ''} below {axis} {2 ** law.positions[:, k].min():g} "
                         f"(below the scales measured)")
    return ", ".join(parts) or "inside the scales measured"


def prediction_text(law: Law, prediction: Prediction, target: Mapping[str, float], step: float, regret: float,
                    metric: str, largest: str) -> str:
    """``at width 4096: use LR ≈ 2^-0.9 = 0.54 [0.38, 0.76], 5 doublings beyond width 128 (law: …)``"""
    lr, log2 = prediction.lr, prediction.log2_lr
    where = _where(target, law.axes)
    said = f"LR ≈ 2^{log2.value:+.2f} = {lr.value:.3g}"
    if prediction.withheld:
        return (f"at {where}: cannot tell: {prediction.withheld} (the law's point estimate: {said}; "
                f"{law_text(law, step)})")
    cost = (f"; an LR at the interval's far end costs about {regret:.3g} in {metric} if the curve keeps the shape "
            f"it has at {largest}") if math.isfinite(regret) else ""
    return (f"at {where}: use {said} [{lr.low:.3g}, {lr.high:.3g}], {_distance(prediction, law)} "
            f"({law_text(law, step)}){cost}")


def _row(key: tuple, law: Law | None, excluded: list[str], target: Target, step: float, points: Sequence[LawPoint],
         metric: str, axes: Sequence[str], edges: Sequence[tuple[str, LawPoint]] = ()) -> LawRow:
    row = LawRow(**dict(zip(GROUP, key)), axes=",".join(axes), excluded="; ".join(excluded))
    if law is None:
        needed = "two scales" if len(axes) == 1 else f"{len(axes) + 1} points across its {len(axes)} axes"
        why = (f"the law needs {needed} with an optimum inside their LRs" +
               (f" (left out: {'; '.join(excluded)})" if excluded else ""))
        line = f"at {_where(target, axes)}: cannot tell: {why}" if target else f"no law: {why}"
        return dataclasses.replace(row, target=_target_text(target, axes), withheld=why, line=line)
    slope = law.slope(0)
    left_out = f"; left out: {'; '.join(excluded)}" if excluded else ""
    row = dataclasses.replace(row, points=len(law.optima), seeds=law.seeds, intercept=law.intercept,
                              slope=slope.value, slope_low=slope.low, slope_high=slope.high,
                              inflation=law.inflation, check=_check(law), line=law_text(law, step) + left_out)
    for prefix, c in zip(("", "second_"), law.curvature):
        if c is not None:
            row = dataclasses.replace(row, **{f"{prefix}curvature": c.value, f"{prefix}curvature_low": c.low,
                                              f"{prefix}curvature_high": c.high})
    if len(axes) > 1:
        second = law.slope(1)
        row = dataclasses.replace(row, second_axis=axes[1], second_slope=second.value, second_slope_low=second.low,
                                  second_slope_high=second.high)
    if not target:
        return row
    position = [math.log2(target[axis]) for axis in axes]
    prediction = law.predict(position)
    if not prediction.withheld and (beyond := _edge_beyond_law(law, edges, step)):
        prediction = dataclasses.replace(prediction, withheld=beyond)
    nearest, nearest_name = _nearest(points, axes, position)
    regret = implied_regret(prediction, curve_curvature(nearest)) if nearest is not None else math.nan
    lr, given = prediction.lr, not prediction.withheld
    return dataclasses.replace(
        row, target=_target_text(target, axes), target_doublings=max(prediction.doublings, key=abs),
        point_lr=lr.value, predicted_lr=lr.value if given else np.nan, predicted_low=lr.low if given else np.nan,
        predicted_high=lr.high if given else np.nan, predicted_regret=regret if given else np.nan,
        withheld=prediction.withheld,
        line=prediction_text(law, prediction, target, step, regret, metric, nearest_name) + left_out)


def _edge_beyond_law(law: Law, edges: Sequence[tuple[str, LawPoint]], step: float) -> str:
    """Why the law is contradicted by a scale it left out: an optimum at the high edge of its LRs lies at least
    half a grid step below the best LR (the parabola's vertex can lie that far below it), so a law whose whole
    interval there is lower cannot hold (and the mirror image at a low edge). "" when none contradicts it."""
    for where, point in edges:
        best = point.optimum.log2_lrs[point.optimum.best]
        there = law.predict(list(point.position)).log2_lr
        if point.optimum.edge == "high" and there.high < best - step / 2:
            return (f"{where}'s optimum lies at or above its highest LR tried ({2 ** best:g}), above the law's "
                    f"interval there ({2 ** there.low:.3g} to {2 ** there.high:.3g}): widen the LRs there")
        if point.optimum.edge == "low" and there.low > best + step / 2:
            return (f"{where}'s optimum lies at or below its lowest LR tried ({2 ** best:g}), below the law's "
                    f"interval there ({2 ** there.low:.3g} to {2 ** there.high:.3g}): widen the LRs there")
    return ""


def _points(key: tuple, ready: pd.DataFrame, fits: Mapping[tuple, Optimum], knob: str,
            second: tuple[str, float] | None = None
            ) -> tuple[list[LawPoint], list[str], list[tuple[str, LawPoint]]]:
    """A series' law points from its finished scales, what was left out, and the scales left out for an
    optimum at an edge of their LRs (bounds the law must not contradict)."""
    points, excluded, edges = [], [], []
    for _, point in ready.sort_values("scale").iterrows():
        fit = fits[(*key, point["scale"])]
        where = f"{knob} {point['scale']:g}" + (f", {second[0]} {second[1]:g}" if second else "")
        if not point["scale"] > 0:
            excluded.append(f"{where} (not a positive scale)")
            continue
        position = (math.log2(point["scale"]),) + ((math.log2(second[1]),) if second else ())
        if fit.edge:
            excluded.append(f"{where} (optimum at the {fit.edge} edge of its LRs)")
            edges.append((where, LawPoint(position, fit)))
        else:
            points.append(LawPoint(position, fit))
    return points, excluded, edges


def _nearest(points: Sequence[LawPoint], axes: Sequence[str], target: Sequence[float]
             ) -> tuple[Optimum | None, str]:
    """The scale a law was fitted on nearest the target (its curve's shape stands in for the target's), and its
    name, ``width 512``."""
    if not points:
        return None, ""
    near = min(points, key=lambda p: (sum((x - t) ** 2 for x, t in zip(p.position, target)), -sum(p.position)))
    return near.optimum, ", ".join(f"{axis} {2 ** x:g}" for axis, x in zip(axes, near.position))


def _ready(series: pd.DataFrame) -> pd.DataFrame:
    """A series' optimal_lr rows whose runs have all finished (the transfer table's rule)."""
    return series[series["complete"]].dropna(subset=["scale"])


def laws(optimal: pd.DataFrame, fits: Mapping[tuple, Optimum], transfer: pd.DataFrame, metric: str,
         target: Target, axes: Sequence[str], second: Mapping[tuple, float] | None = None,
         done: Mapping[tuple, Progress] | None = None) -> tuple[pd.DataFrame, pd.DataFrame, dict[tuple, Law]]:
    """law.csv, transfer.csv with its law columns, and each series' law along the scale knob (for scale.png).
    ``axes``: the scale knobs the sweep varies (the first is the transfer table's); ``second``: per series key,
    its value of the second axis (two-axis sweeps only); ``done``: each scale point's progress (a finished point
    with no optimum is named among those left out)."""
    rows, fitted = [], {}
    transfer = transfer.copy()
    if not axes:
        return table(LawRow, rows), transfer, fitted
    knob = axes[0]
    along_one = target if set(target) == {knob} else {}  # a target on both axes is the joint law's
    where = {tuple(entry[c] for c in GROUP): index for index, entry in transfer.iterrows()}
    for key, series in optimal.groupby(list(GROUP), dropna=False, sort=False):
        key = tuple(key)
        step = _grid_step(transfer, where.get(key), fits, key)
        points, excluded, edges = _points(key, _ready(series), fits, knob)
        excluded += _without_optimum(key, series, done, knob)
        law = fit_law((knob,), usable(points), step)
        if law is not None:
            fitted[key] = law
        row = _row(key, law, excluded, along_one, step, points, metric, (knob,), edges)
        rows.append(row)
        if key in where:
            for field, column in TRANSFER_COLUMNS.items():
                transfer.at[where[key], column] = getattr(row, field)
    if len(axes) > 1 and second:
        rows += _joint_rows(optimal, fits, transfer, metric, target if len(target) > 1 else {}, axes, second, done)
    return table(LawRow, rows), transfer, fitted


def _grid_step(transfer: pd.DataFrame, index: Any, fits: Mapping[tuple, Optimum], key: tuple) -> float:
    """The series' grid step: the transfer table's, else read off its LRs."""
    if index is not None and math.isfinite(transfer.at[index, "grid_step"]):
        return float(transfer.at[index, "grid_step"])
    return grid_step_of([fit for (*series, _), fit in fits.items() if tuple(series) == key])


def _without_optimum(key: tuple, series: pd.DataFrame, done: Mapping[tuple, Progress] | None, knob: str,
                     suffix: str = "") -> list[str]:
    """The series' finished scale points with no optimum (every LR lost a seed, or nothing completed)."""
    known = {scale for (*k, scale), point in (done or {}).items() if tuple(k) == key and point.complete}
    missing = sorted(scale for scale in known - set(series["scale"]) if scale is not None and scale == scale)
    return [f"{knob} {scale:g}{suffix} (no optimum: every LR diverged or failed)" for scale in missing]


def _joint_rows(optimal: pd.DataFrame, fits: Mapping[tuple, Optimum], transfer: pd.DataFrame, metric: str,
                target: Target, axes: Sequence[str], second: Mapping[tuple, float],
                done: Mapping[tuple, Progress] | None) -> list[LawRow]:
    """The joint law over both axes, per experiment whose series differ only in the second axis."""
    knob, other = axes[0], axes[1]
    experiments: dict[tuple, list[tuple[tuple, pd.DataFrame]]] = {}
    for key, series in optimal.groupby(list(GROUP), dropna=False, sort=False):
        key = tuple(key)
        if key in second:
            experiments.setdefault((*key[:len(SERIES)], without_axis(key[-1], other)), []).append((key, series))
    rows = []
    for experiment, members in experiments.items():
        if len({second[key] for key, _ in members}) < 2:
            continue
        points, excluded, edges, steps = [], [], [], []
        for key, series in members:
            found, left, bounds = _points(key, _ready(series), fits, knob, (other, second[key]))
            points += found
            edges += bounds
            excluded += left + _without_optimum(key, series, done, knob, f", {other} {second[key]:g}")
            steps.append(_grid_step(transfer, None, fits, key))
        step = float(np.median(steps))
        rows.append(_row(experiment, fit_law(axes, usable(points), step), excluded, target, step, points, metric,
                         axes, edges))
    return rows


def law_lines(law_table: pd.DataFrame) -> list[str]:
    """The lines printed under the verdict: per law, the prediction at the target, or the law alone."""
    if law_table.empty:
        return []
    rows = list(law_table.itertuples(index=False))
    width = max(38, *(len(_label(row)) for row in rows))
    lines = ["Transfer law (log2 η* = a + b·log2 scale over the finished scales, 95 % intervals over seeds; "
             "docs/statistics.md, \"The transfer law\"):"]
    return lines + [f"  {_label(row):<{width}} {row.line}" for row in rows]


def _label(row: Any) -> str:
    label = series_label(tuple(getattr(row, column) for column in GROUP))
    return label + (f" · joint {row.axes.replace(',', ' × ')}" if "," in str(row.axes) else "")
