"""The sweep table: one row per run, every folder with a summary and every planned run without one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import OmegaConf

from ..config.identity import experiment_settings
from ..models.variant import HISTORICAL as HISTORICAL_VARIANT
from ..config.identity import KNOBS, SERIES
from .files import CONFIG_FILE
from .manifest import Manifest
from .status import PENDING, STATUSES
from .summary import as_seen, read_summary

COLUMNS = ("run", *SERIES, *KNOBS, "lr", "seed", "status", "train_loss", "test_loss", "test_acc", "steps_done",
           "wall_time_s", "packed_with", "error", "settings")
NUMERIC = ("lr", "seed", "train_loss", "test_loss", "test_acc", "steps_done", "wall_time_s", "packed_with", *KNOBS)
# results.csv's layout: its ``format`` column (tables written before it had none: read by their columns)
RESULTS_FORMAT = 2
# what a shared results.csv must hold for the report to re-run on it; every other column has a default
REQUIRED_COLUMNS = ("run", *(c for c in SERIES if c != "variant"), "lr", "seed", "status")


def collect(sweep_dir: Path) -> pd.DataFrame:
    """One row per run: every folder with a summary, and every planned run without one (``pending``)."""
    manifest = Manifest.read(sweep_dir)
    rows: dict[str, dict] = {}
    for folder in sorted(p for p in sweep_dir.iterdir() if p.is_dir()):
        summary = as_seen(folder, read_summary(folder))
        if summary is not None:
            settings = summary.get("settings") or _settings_from_config(folder)
            rows[folder.name] = {**summary, "run": folder.name, "settings": settings}
    for name, knobs in manifest.runs.items():
        if name not in rows:
            rows[name] = {**knobs, "run": name, "status": PENDING}
    frame = pd.DataFrame([{k: row.get(k) for k in COLUMNS} for row in rows.values()], columns=list(COLUMNS))
    # which knobs the launches swept (None: no launch recorded it; the report then infers the scale knob)
    axes = [record.axes for record in map(manifest.launch, manifest.launches) if record.axes is not None]
    frame["axes"] = ",".join(sorted({axis for swept in axes for axis in swept})) if axes else None
    frame["variant"] = frame["variant"].fillna(HISTORICAL_VARIANT)  # recorded by runs since variants exist
    for column in NUMERIC:
        frame[column] = pd.to_numeric(frame[column], errors="coerce")
    return frame


def _settings_from_config(run_dir: Path) -> dict[str, Any] | None:
    """A summary written before summaries recorded their settings: read them from the run's config.yaml."""
    try:
        return experiment_settings(OmegaConf.load(run_dir / CONFIG_FILE))
    except Exception:  # noqa: BLE001 - missing or unreadable: the run's series is told by its knobs alone
        return None


def status_counts(frame: pd.DataFrame) -> dict[str, int]:
    return {status: int((frame["status"] == status).sum()) for status in STATUSES}


def results_table(frame: pd.DataFrame) -> pd.DataFrame:
    """The run table as results.csv holds it: without the settings (each run's config.yaml has them), with
    its format."""
    return frame.drop(columns="settings").assign(format=RESULTS_FORMAT)


def read_results_table(path: Path, metric: str) -> pd.DataFrame:
    """A results.csv (written by a report, or shared) as ``collect`` returns a folder's runs: ValueError in one
    line for a table of another format or without the columns the report needs (named)."""
    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError, pd.errors.ParserError) as error:
        raise ValueError(f"{path}: not a readable results table ({type(error).__name__}: {error})") from None
    if "format" in frame:
        formats = sorted({str(v) for v in frame["format"].dropna().unique()} - {str(RESULTS_FORMAT),
                                                                               f"{RESULTS_FORMAT:.1f}"})
        if formats:
            raise ValueError(f"{path}: results table format {', '.join(formats)}; this modula-sweep reads format "
                             f"{RESULTS_FORMAT} and the unversioned tables before it: upgrade modula-sweep")
    missing = [c for c in (*REQUIRED_COLUMNS, metric) if c not in frame]
    if missing:
        raise ValueError(f"{path}: a results table needs the columns {', '.join((*REQUIRED_COLUMNS, metric))}; "
                         f"missing: {', '.join(missing)}")
    frame = frame.drop(columns=["format"], errors="ignore")
    for column in COLUMNS:
        if column not in frame:
            frame[column] = None
    frame["variant"] = frame["variant"].fillna(HISTORICAL_VARIANT)
    frame["status"] = frame["status"].fillna(PENDING)
    if "axes" not in frame:
        frame["axes"] = None
    frame["axes"] = frame["axes"].astype(object).where(frame["axes"].notna(), None)
    for column in NUMERIC:
        numbers = pd.to_numeric(frame[column], errors="coerce")
        unread = frame[column].notna() & numbers.isna() & (frame[column].astype(str).str.strip() != "")
        if unread.any():
            first = unread.idxmax()
            raise ValueError(f"{path}: column {column} holds {frame.at[first, column]!r} (row {first + 2}), not a "
                             f"number; {int(unread.sum())} such cell{'s' if unread.sum() != 1 else ''}")
        frame[column] = numbers
    return frame
