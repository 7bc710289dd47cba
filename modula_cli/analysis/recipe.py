"""The recipe a predicted LR belongs to: the optimiser settings of a series' runs (law.csv's ``recipe`` column),
and, for ``modula-sweep-report … --target … --recipe``, the lines of Python that build that optimiser for the
user's own loop (``modula_cli.optimizer``) from one of the series' run configs, at the target and the predicted
LR."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ..config.identity import KNOB_KEYS
from ..results.files import CONFIG_FILE
from ..results.knobs import GROUP
from ..results.status import COMPLETED
from .plots import series_label

# What the LR belongs to besides the LR: the optimiser's settings and the length and size of the steps.
RECIPE_PREFIXES = ("optim.", "train.steps", "train.batch_size")


def recipe_of(settings: Any) -> str:
    """``optim.beta2=0.99 optim.mode=mup …``: a run's settings that the optimiser's LR depends on."""
    if not isinstance(settings, Mapping):
        return ""
    return " ".join(f"{key}={value}" for key, value in sorted(settings.items())
                    if key.startswith(RECIPE_PREFIXES) and key != "optim.lr")


def with_recipes(law: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
    """law.csv with each law's ``recipe`` filled: the settings of its series' runs."""
    law = law.copy()
    for index, row in law.iterrows():
        runs = _series_runs(frame, tuple(row[c] for c in GROUP))
        law.at[index, "recipe"] = recipe_of(runs["settings"].iloc[0]) if len(runs) else ""
    return law


def _series_runs(frame: pd.DataFrame, key: tuple) -> pd.DataFrame:
    match = pd.Series(True, index=frame.index)
    for column, value in zip(GROUP, key):
        if column in frame:
            same = frame[column].astype(object).fillna("") == ("" if value != value else value)
            match &= same
    return frame[match]


def recipe_lines(law: pd.DataFrame, frame: pd.DataFrame, sweep_dir: Path) -> list[str]:
    """Per law with a prediction: the Python that builds its optimiser at the target, from a finished run's
    config (the largest scale's); a law whose runs' folders are not here (a shared table) says so."""
    lines = []
    for row in law.itertuples(index=False):
        predicted = getattr(row, "predicted_lr", float("nan"))
        if not isinstance(predicted, float) or not math.isfinite(predicted) or not row.target:
            continue
        key = tuple(getattr(row, c) for c in GROUP)
        runs = _series_runs(frame, key)
        runs = runs[runs["status"] == COMPLETED]
        config = _config_of(runs, sweep_dir, str(row.axes).split(",")[0])
        lines.append(f"# {series_label(key)}: the optimiser its runs trained with, at {row.target} and the predicted "
                     f"LR (95 % interval {row.predicted_low:.3g} … {row.predicted_high:.3g})")
        if config is None:
            lines.append("#   (no run folder of this series is here: run it where the sweep's folders are)")
            continue
        overrides = [*_target_overrides(str(row.target)), f"optim.lr={predicted:.4g}"]
        quoted = ", ".join(f'"{o}"' for o in overrides)
        lines += ["import modula_cli", "",
                  f'opt = modula_cli.optimizer(model, "{config}", {quoted})',
                  "# then, per step: loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)", ""]
    return lines


def _config_of(runs: pd.DataFrame, sweep_dir: Path, knob: str) -> Path | None:
    """A finished run's config.yaml, from the largest scale first."""
    ordered = runs.sort_values(knob, ascending=False) if knob in runs else runs
    for name in ordered["run"]:
        for found in sorted((sweep_dir / str(name)).rglob(CONFIG_FILE)) if (sweep_dir / str(name)).is_dir() else []:
            return found
    return None


def _target_overrides(target: str) -> Sequence[str]:
    """``width=4096,steps=20000`` → ``arch.width=4096``, ``train.steps=20000``."""
    overrides = []
    for part in target.replace(" ", "").split(","):
        axis, _, value = part.partition("=")
        number = float(value)
        overrides.append(f"{KNOB_KEYS.get(axis, axis)}={int(number) if number.is_integer() else number}")
    return overrides
