"""What an LR search (``sweep.search=true``) spent, against the full grid it replaced: per scale the LRs it
tried, its runs and their CPU time, the grid's runs and the CPU time they would have taken at the same cost
per run, and why the search stopped there. Read from the search's record, ``search.json``, and the runs'
own summaries (their wall times)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from ..plumbing.wording import counted
from ..results.knobs import GROUP
from .plots import series_label

COLUMNS = ("series", "scale_key", "scale", "lrs_tried", "lowest_lr", "highest_lr", "runs", "finished_runs",
           "grid_runs", "cpu_s", "grid_cpu_s", "state", "reason", "stop")


def _seconds(frame: pd.DataFrame, names: list[str]) -> tuple[float, int]:
    """CPU seconds of the named runs that finished (a packed run's time shared by its members), and their count."""
    rows = frame[frame["run"].isin(names) & frame["wall_time_s"].notna()]
    shared = rows["wall_time_s"] / rows["packed_with"].fillna(1).clip(lower=1)
    return float(shared.sum()), int(len(rows))


def _searched_series(frame: pd.DataFrame, names: list[str], recorded: Any) -> str:
    """The series a search entry searched, named as the report names it (``normed adam (gpt, shakespeare, paper)
    · steps=150``) from the runs it trained; the search's own label while none of them is in the report."""
    rows = frame[frame["run"].isin(names)] if "run" in frame else frame.iloc[:0]
    if not rows.empty and set(GROUP) <= set(rows.columns):
        return series_label(tuple(rows.iloc[0][list(GROUP)]))
    return " ".join(recorded) if isinstance(recorded, list) else str(recorded or "")


def spend_table(frame: pd.DataFrame, search: dict[str, Any]) -> pd.DataFrame:
    """One row per searched scale (``frame``: the report's runs, with ``run`` and ``wall_time_s``)."""
    rows = []
    for entry in search["scales"].values():
        names = list(entry.get("run_names") or [])
        seconds, timed = _seconds(frame, names)
        lrs = [float(lr) for lr in entry.get("lrs") or []]
        grid_runs = int(entry.get("grid_runs") or 0)
        rows.append({"series": _searched_series(frame, names, entry.get("series")),
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
    """The search's lines of the printed report, per series it searched (a folder may hold other experiments,
    and later launches of other kinds): totals against the grid, then one line per scale."""
    lines = []
    for series, rows in spend.groupby("series", sort=False):
        runs, grid = int(rows["runs"].sum()), int(rows["grid_runs"].sum())
        cpu, grid_cpu = float(rows["cpu_s"].sum()), float(rows["grid_cpu_s"].sum(min_count=1))
        share = f" ({runs / grid:.0%})" if grid else ""
        cpu_share = f" ({cpu / grid_cpu:.0%})" if grid_cpu and math.isfinite(grid_cpu) else ""
        of = f" of {series}" if series else ""
        lines.append(f"LR search{of} ({where}): {counted(runs, 'run')} of the full grid's {grid}{share}; CPU time "
                     f"{_duration(cpu)} of the grid's estimated {_duration(grid_cpu)}{cpu_share}")
        for row in rows.itertuples(index=False):
            where_ = f"{row.scale_key.split('.')[-1]} {row.scale}" if row.scale_key else "the scale"
            tried = (f"{row.lrs_tried} LR{'s' if row.lrs_tried != 1 else ''} ({row.lowest_lr:g} … {row.highest_lr:g})"
                     if row.lrs_tried else "no LR yet")
            state = f"stopped: {row.stop}" if row.state == "stopped" or row.reason == "unfinished" else row.state
            lines.append(f"  {where_}: {tried}, {row.runs} of {row.grid_runs} runs; {state}")
    rounds = search.get("rounds") or []
    if lines:
        lines.append(f"  planning {search.get('planning_s', 0):.1f} s over {len(rounds)} round"
                     f"{'s' if len(rounds) != 1 else ''} (the launcher's idle time between rounds)")
    return lines
