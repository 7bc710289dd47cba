"""A run table's series, scale points and experiments: which knob the sweep scales, which runs belong together
(runs that differ in anything but the scale, the LR and the seed are separate series), and one row per run."""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import numpy as np
import pandas as pd

from ..config.identity import KNOB_KEYS, KNOBS, SERIES, short_keys
from ..results.knobs import GROUP, SCALE_KNOBS
from ..results.status import COMPLETED, DIVERGED
from .plots import series_label

log = logging.getLogger(__name__)


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
