"""The sweep table: one row per run, every folder with a summary and every planned run without one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import OmegaConf

from ..config.identity import experiment_settings
from ..models.variant import HISTORICAL as HISTORICAL_VARIANT
from ..config.identity import KNOBS, SERIES
from .manifest import Manifest
from .status import PENDING, STATUSES
from .summary import as_seen, read_summary

COLUMNS = ("run", *SERIES, *KNOBS, "lr", "seed", "status", "train_loss", "test_loss", "test_acc", "steps_done",
           "wall_time_s", "packed_with", "error", "settings")
NUMERIC = ("lr", "seed", "train_loss", "test_loss", "test_acc", "steps_done", "wall_time_s", "packed_with", *KNOBS)


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
        return experiment_settings(OmegaConf.load(run_dir / "config.yaml"))
    except Exception:  # noqa: BLE001 - missing or unreadable: the run's series is told by its knobs alone
        return None


def status_counts(frame: pd.DataFrame) -> dict[str, int]:
    return {status: int((frame["status"] == status).sum()) for status in STATUSES}
