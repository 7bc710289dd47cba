"""What an LR search (``sweep.search=true``) spent, against the full grid it replaced: per scale the LRs it
tried, its runs and their CPU time, the grid's runs and the CPU time they would have taken at the same cost
per run, and why the search stopped there. Read from the search's record, ``search.json``, and the runs'
own summaries (their wall times)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

SEARCH_FILE = "search.json"
COLUMNS = ("series", "scale_key", "scale", "lrs_tried", "lowest_lr", "highest_lr", "runs", "finished_runs",
           "grid_runs", "cpu_s", "grid_cpu_s", "state", "reason", "stop")


def read_search(sweep_dir: Path) -> dict[str, Any] | None:
    """``search.json``, or None when the sweep did not search (or the file is unreadable: the report then
    leaves the search's table out and says nothing false)."""
    try:
        body = json.loads((Path(sweep_dir) / SEARCH_FILE).read_text())
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) and isinstance(body.get("scales"), dict) else None


def _seconds(frame: pd.DataFrame, names: list[str]) -> tuple[float, int]:
    """CPU seconds of the named runs that finished (a packed run's time shared by its members), and their count."""
    rows = frame[frame["run"].isin(names) & frame["wall_time_s"].notna()]
    shared = rows["wall_time_s"] / rows["packed_with"].fillna(1).clip(lower=1)
    return float(shared.sum()), int(len(rows))


def spend_table(frame: pd.DataFrame, search: dict[str, Any]) -> pd.DataFrame:
    """One row per searched scale (``frame``: the report's runs, with ``run`` and ``wall_time_s``)."""
    rows = []
    for entry in search["scales"].values():
        names = list(entry.get("run_names") or [])
        seconds, timed = _seconds(frame, names)
        lrs = [float(lr) for lr in entry.get("lrs") or []]
        grid_runs = int(entry.get("grid_runs") or 0)
        series = entry.get("series")
        rows.append({"series": " ".join(series) if isinstance(series, list) else str(series or ""),
                     "scale_key": entry.get("scale_key"),
                     "scale": entry.get("scale"), "lrs_tried": len(lrs),
                     "lowest_lr": min(lrs) if lrs else math.nan, "highest_lr": max(lrs) if lrs else math.nan,
                     "runs": int(entry.get("runs") or 0), "finished_runs": timed, "grid_runs": grid_runs,
                     "cpu_s": seconds, "grid_cpu_s": seconds / timed * grid_runs if timed else math.nan,
                     "state": entry.get("state"), "reason": entry.get("reason"), "stop": entry.get("stop")})
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{minutes}m{rest:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


def spend_text(spend: pd.DataFrame, search: dict[str, Any], where: Path) -> list[str]:
    """The search's lines of the printed report: totals against the grid, then one line per scale."""
    runs, grid = int(spend["runs"].sum()), int(spend["grid_runs"].sum())
    cpu, grid_cpu = float(spend["cpu_s"].sum()), float(spend["grid_cpu_s"].sum(min_count=1))
    rounds = search.get("rounds") or []
    share = f" ({runs / grid:.0%})" if grid else ""
    cpu_share = f" ({cpu / grid_cpu:.0%})" if grid_cpu and math.isfinite(grid_cpu) else ""
    lines = [f"LR search ({where}): {runs} runs of the full grid's {grid}{share}; CPU time {_duration(cpu)} of the "
             f"grid's estimated {_duration(grid_cpu)}{cpu_share}; planning {search.get('planning_s', 0):.1f} s over "
             f"{len(rounds)} round{'s' if len(rounds) != 1 else ''} (the launcher's idle time between rounds)"]
    labels = _distinct(list(spend["series"].astype(str)))
    for row, label in zip(spend.itertuples(index=False), labels):
        where_ = f"{row.scale_key.split('.')[-1]} {row.scale}" if row.scale_key else "the scale"
        series = f"{label}: " if label else ""
        tried = (f"{row.lrs_tried} LR{'s' if row.lrs_tried != 1 else ''} ({row.lowest_lr:g} … {row.highest_lr:g})"
                 if row.lrs_tried else "no LR yet")
        state = f"stopped: {row.stop}" if row.state == "stopped" or row.reason == "unfinished" else row.state
        lines.append(f"  {series}{where_}: {tried}, {row.runs} of {row.grid_runs} runs; {state}")
    return lines


def _distinct(labels: list[str]) -> list[str]:
    """Each series' name (``context=64,mode=normed,…``) without the settings every series shares: ``mode=normed``
    ("" when there is one series)."""
    parts = [label.split(",") for label in labels]
    shared = set.intersection(*(set(p) for p in parts)) if parts else set()
    return [",".join(x for x in p if x not in shared) for p in parts]
