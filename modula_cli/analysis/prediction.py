"""The report's use of the transfer law (``law.py``): per series the law over its finished scales, and, for a
target the user names (``--target width=4096``, ``sweep.target={width:4096}``), the LR to use there.

``law.csv`` has one row per law: along the scale knob for every series of the transfer table, and, when a
sweep varies two scale axes (width and steps, width and depth, …), the joint law over both for every
experiment whose series differ only in the second axis. ``transfer.csv`` carries the first kind's columns.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..results.knobs import GROUP, SCALE_KNOBS, SERIES
from .law import Law, LawPoint, Prediction, curve_curvature, fit_law, implied_regret, usable
from .plots import series_label
from .stats import Optimum
from .tables import Transfer, _Series, table, without_axis

Target = dict[str, float]


class TargetError(ValueError):
    """A target the sweep cannot predict at (one line)."""


def parse_target(text: str, name: str = "--target") -> Target:
    """``"width=4096,steps=20000"`` (also ``width:4096+steps:20000``, as ``sweep.target`` writes it without
    quotes) → {"width": 4096.0, "steps": 20000.0}; TargetError on anything else."""
    target: Target = {}
    for part in filter(None, (p.strip() for p in re.split(r"[,+]", str(text)))):
        axis, _, value = part.replace(":", "=", 1).partition("=")
        if not value:
            raise TargetError(f"{name} {text}: write axis=value pairs, e.g. width=4096 or width=4096,steps=20000")
        target[axis.strip()] = _number(axis.strip(), value.strip(), name)
    if not target:
        raise TargetError(f"{name} is empty: name a scale, e.g. width=4096")
    return target


def _number(axis: str, value: Any, name: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not number > 0 or not math.isfinite(number):
        raise TargetError(f"{name} {axis}={value}: a scale is a positive number")
    return number


def checked_target(target: Mapping[str, Any] | None, axes: Sequence[str], where: str = "this sweep",
                   name: str = "--target") -> Target:
    """The target as numbers, for a sweep that varies ``axes`` (scale knobs, first the one its series run
    along); TargetError naming the bad axis or value and what is allowed."""
    if not target:
        return {}
    named = ", ".join(f"{k}={v:g}" if isinstance(v, (int, float)) else f"{k}={v}" for k, v in target.items())
    unknown = [axis for axis in target if axis not in SCALE_KNOBS]
    if unknown:
        raise TargetError(f"{name} {named}: {unknown[0]} is not a scale axis; allowed: {', '.join(SCALE_KNOBS)}")
    if not axes:
        raise TargetError(f"{name} {named}: {where} has runs at one scale only; a law needs a sweep over a scale "
                          f"axis ({', '.join(SCALE_KNOBS)})")
    values = {axis: _number(axis, value, name) for axis, value in target.items()}
    varied = " and ".join(axes)
    missing = [axis for axis in values if axis not in axes]
    if missing:
        raise TargetError(f"{name} {named}: {where} varies {varied}, not {missing[0]}; name "
                          f"{' or '.join(axes)}")
    if axes[0] not in values:
        raise TargetError(f"{name} {named}: {where} varies {varied}; a target names {axes[0]}"
                          + (f" (and {axes[1]} for the joint law)" if len(axes) > 1 else ""))
    return values


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
    check: str = ""            # straight | curved | unchecked (two scales)
    target: str = ""
    target_doublings: float = np.nan  # beyond the largest scale measured (negative: below the smallest)
    predicted_lr: float = np.nan
    predicted_low: float = np.nan
    predicted_high: float = np.nan
    predicted_regret: float = np.nan  # the cost of an LR at the interval's farther end, at the largest curve's shape
    withheld: str = ""         # why no LR is predicted
    line: str = ""


# the columns transfer.csv takes from its series' law along the scale knob
TRANSFER_COLUMNS = {"points": "law_points", "slope": "law_slope", "slope_low": "law_slope_low",
                    "slope_high": "law_slope_high", "check": "law_check", "target": "target",
                    "target_doublings": "target_doublings", "predicted_lr": "predicted_lr",
                    "predicted_low": "predicted_low", "predicted_high": "predicted_high",
                    "predicted_regret": "predicted_regret", "line": "prediction"}
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
    check = {"straight": "straight within its interval", "unchecked": f"{unchecked}: nothing checks that the line "
             "is straight", "curved": "curved: not a power law over these scales"}[_check(law)]
    return f"law: {slopes} over {points}, {check}"


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
         metric: str, axes: Sequence[str]) -> LawRow:
    largest, largest_name = _largest(points, axes)
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
    if law.curvature[0] is not None:
        c = law.curvature[0]
        row = dataclasses.replace(row, curvature=c.value, curvature_low=c.low, curvature_high=c.high)
    if len(axes) > 1:
        second = law.slope(1)
        row = dataclasses.replace(row, second_axis=axes[1], second_slope=second.value, second_slope_low=second.low,
                                  second_slope_high=second.high)
    if not target:
        return row
    prediction = law.predict([math.log2(target[axis]) for axis in axes])
    regret = implied_regret(prediction, curve_curvature(largest)) if largest is not None else math.nan
    lr = prediction.lr
    return dataclasses.replace(
        row, target=_target_text(target, axes), target_doublings=max(prediction.doublings, key=abs),
        predicted_lr=lr.value, predicted_low=lr.low if not prediction.withheld else np.nan,
        predicted_high=lr.high if not prediction.withheld else np.nan,
        predicted_regret=regret if not prediction.withheld else np.nan, withheld=prediction.withheld,
        line=prediction_text(law, prediction, target, step, regret, metric, largest_name) + left_out)


def _points(key: tuple, ready: pd.DataFrame, fits: Mapping[tuple, Optimum], knob: str,
            second: tuple[str, float] | None = None) -> tuple[list[LawPoint], list[str], list[Optimum]]:
    """A series' law points from its finished scales, what was left out, and the optima it uses in scale order."""
    points, excluded, optima = [], [], []
    for _, point in ready.sort_values("scale").iterrows():
        fit = fits[(*key, point["scale"])]
        where = f"{knob} {point['scale']:g}" + (f", {second[0]} {second[1]:g}" if second else "")
        if not point["scale"] > 0:
            excluded.append(f"{where} (not a positive scale)")
        elif fit.edge:
            excluded.append(f"{where} (optimum at the {fit.edge} edge of its LRs)")
        else:
            position = (math.log2(point["scale"]),) + ((math.log2(second[1]),) if second else ())
            points.append(LawPoint(position, fit))
            optima.append(fit)
    return points, excluded, optima


def _largest(points: Sequence[LawPoint], axes: Sequence[str]) -> tuple[Optimum | None, str]:
    """The largest scale a law was fitted on (the farthest along all its axes) and its name, ``width 512``."""
    if not points:
        return None, ""
    last = max(points, key=lambda p: (sum(p.position), p.position))
    return last.optimum, ", ".join(f"{axis} {2 ** x:g}" for axis, x in zip(axes, last.position))


def _ready(optimal: pd.DataFrame, key: tuple) -> pd.DataFrame:
    rows = optimal[(optimal[list(GROUP)] == pd.Series(key, index=list(GROUP))).all(axis=1)]
    return rows[rows["complete"]].dropna(subset=["scale"])


def laws(optimal: pd.DataFrame, fits: Mapping[tuple, Optimum], transfer: pd.DataFrame, metric: str,
         target: Target, axes: Sequence[str], second: Mapping[tuple, float] | None = None
         ) -> tuple[pd.DataFrame, pd.DataFrame, dict[tuple, Law]]:
    """law.csv, transfer.csv with its law columns, and each series' law along the scale knob (for scale.png).
    ``axes``: the scale knobs the sweep varies (the first is the transfer table's); ``second``: per series key,
    its value of the second axis (two-axis sweeps only)."""
    rows, fitted = [], {}
    along_one = target if axes and set(target) == {axes[0]} else {}  # a target on both axes is the joint law's
    transfer = transfer.copy()
    for index, entry in transfer.iterrows():
        key = tuple(entry[column] for column in GROUP)
        knob = entry["scale_knob"]
        if not isinstance(knob, str) or math.isnan(entry["shift_log2"]):
            continue
        ready = _ready(optimal, key)
        points, excluded, optima = _points(key, ready, fits, knob)
        law = fit_law((knob,), usable(points), entry["grid_step"])
        if law is not None:
            fitted[key] = law
        row = _row(key, law, excluded, along_one, entry["grid_step"], points, metric, (knob,))
        rows.append(row)
        for field, column in TRANSFER_COLUMNS.items():
            transfer.at[index, column] = getattr(row, field)
    if len(axes) > 1 and second:
        rows += _joint_rows(optimal, fits, transfer, metric, target if len(target) > 1 else {}, axes, second)
    return table(LawRow, rows), transfer, fitted


def _joint_rows(optimal: pd.DataFrame, fits: Mapping[tuple, Optimum], transfer: pd.DataFrame, metric: str,
                target: Target, axes: Sequence[str], second: Mapping[tuple, float]) -> list[LawRow]:
    """The joint law over both axes, per experiment whose series differ only in the second axis."""
    knob, other = axes[0], axes[1]
    experiments: dict[tuple, list[tuple]] = {}
    for _, entry in transfer.iterrows():
        key = tuple(entry[column] for column in GROUP)
        if key in second and entry["scale_knob"] == knob:
            experiments.setdefault((*key[:len(SERIES)], without_axis(key[-1], other)), []).append(key)
    rows = []
    for experiment, keys in experiments.items():
        if len({second[key] for key in keys}) < 2:
            continue
        points, excluded, steps = [], [], []
        for key in keys:
            found, left, _ = _points(key, _ready(optimal, key), fits, knob, (other, second[key]))
            points += found
            excluded += left
            steps.append(float(transfer.loc[(transfer[list(GROUP)] == pd.Series(key, index=list(GROUP))).all(axis=1),
                                            "grid_step"].iloc[0]))
        step = float(np.median(steps)) if steps else 1.0
        rows.append(_row(experiment, fit_law(axes, usable(points), step), excluded, target, step, points, metric,
                         axes))
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
