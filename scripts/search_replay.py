"""Replay the LR search (``sweep.search=true``) on a finished grid sweep, and compare the two answers on the
same runs.

The search only ever reads finished runs, so on a grid that holds every LR it asks for, its path is the one a
live search would take with the same seeds (training is deterministic per seed): each round's LRs are
looked up in the grid's results instead of trained. Where the search asks for an LR the grid lacks (beyond
its ends, or between its points), that scale stops there and the table says so.

Prints, per series and scale, the LRs the search tried and why it stopped; per series, both answers (best
grid LR per scale, the shift with its interval, the regret, the verdict) and what each cost (runs, CPU
seconds from the runs' own wall times). Writes the same as CSV with ``--out``.

    python scripts/search_replay.py docs/results/small_gpt_width_paper/results.csv --modes normed,dualized,unnormed
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from modula_cli.analysis.experiments import scale_axes
from modula_cli.analysis.tables import optimal_lrs, progress, transfer_table
from modula_cli.analysis.stats import signed
from modula_cli.results.knobs import GROUP
from modula_cli.results.table import read_results_table
from modula_cli.results.status import DIVERGED
from modula_cli.sweep.lr_search import Lattice, SearchSettings, plan_series


def load(path: Path, metric: str) -> pd.DataFrame:
    """A results.csv as the report reads it (``read_results_table``), its series' settings kept."""
    frame = read_results_table(path, metric)
    frame["setting"] = frame["setting"].astype(object).fillna("") if "setting" in frame else ""
    return frame


def scale_knob(frame: pd.DataFrame) -> str:
    return scale_axes(frame)[0]


def lr_values(rows: pd.DataFrame, metric: str) -> list[float] | None:
    """The seeds' signed costs at one LR (+inf diverged), or None when some seed did not finish."""
    if rows.empty or not rows["status"].isin(["completed", DIVERGED]).all():
        return None
    values = signed(rows.sort_values("seed")[metric].to_numpy(float), metric)
    return [math.inf if status == DIVERGED or not math.isfinite(v) else float(v)
            for v, status in zip(values, rows.sort_values("seed")["status"])]


def replay(series: pd.DataFrame, knob: str, metric: str, settings: SearchSettings) -> tuple[pd.DataFrame, list[dict]]:
    """The runs the search would have trained, and per scale what it tried and why it stopped."""
    lattice = Lattice.of_grid(sorted(series["lr"].unique()))
    scales = sorted(series[knob].unique())
    positions = [math.log2(s) for s in scales]
    start = (len(lattice.grid) - 1) / 2
    grid = {scale: {lattice.index(lr): rows for lr, rows in series[series[knob] == scale].groupby("lr")}
            for scale in scales}
    results: list[dict[int, list[float]]] = [{} for _ in scales]
    off_grid: dict[int, list[float]] = {}
    for _ in range(200):
        plans = plan_series(results, positions, start, settings)
        asked = False
        for i, plan in enumerate(plans):
            if i in off_grid:
                continue
            for k in plan.step.run:
                values = lr_values(grid[scales[i]][k], metric) if k in grid[scales[i]] else None
                if values is None:
                    off_grid[i] = [lattice.lr(k) for k in plan.step.run]
                    break
                results[i][k] = values
                asked = True
        if not asked:
            break
    kept, notes = [], []
    for i, scale in enumerate(scales):
        lrs = [lattice.lr(k) for k in sorted(results[i])]
        kept.append(series[(series[knob] == scale) & series["lr"].isin(lrs)])
        plan = plans[i]
        why = (f"asked for LR {', '.join(f'{x:g}' for x in off_grid[i])} outside the grid's runs" if i in off_grid
               else plan.step.stop or "waiting")
        notes.append({"scale": scale, "lrs": lrs, "reason": "off grid" if i in off_grid else plan.step.reason,
                      "stop": why})
    return pd.concat(kept), notes


def answer(frame: pd.DataFrame, knob: str, metric: str, grid_step: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    done = progress(frame, knob)
    optimal, fits = optimal_lrs(frame, metric, knob, done=done)
    return optimal, transfer_table(optimal, fits, metric, done, grid_step)


def narrowed(series: pd.DataFrame, knob: str, metric: str, size: int) -> pd.DataFrame:
    """The series on a grid of ``size`` LRs centred on its smallest scale's best grid LR: a grid already narrowed
    to the valley, as a user who has swept once before would set it."""
    lrs = sorted(series["lr"].unique())
    smallest = series[(series[knob] == series[knob].min()) & (series["status"] == "completed")]
    means = signed(smallest.groupby("lr")[metric].mean(), metric)
    centre = lrs.index(means.idxmin())
    first = min(max(centre - size // 2, 0), max(len(lrs) - size, 0))
    return series[series["lr"].isin(lrs[first:first + size])]


def cpu_seconds(frame: pd.DataFrame) -> float:
    return float((frame["wall_time_s"] / frame["packed_with"].fillna(1).clip(lower=1)).sum())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path, nargs="+", help="a grid sweep's results.csv (several: one table)")
    parser.add_argument("--modes", default=None, help="only these optim.mode series, comma-separated")
    parser.add_argument("--metric", default="train_loss", choices=("train_loss", "test_loss", "test_acc"))
    parser.add_argument("--budget", type=int, default=None, help="LRs per scale (default: the grid's size)")
    parser.add_argument("--resolution", type=float, default=0.75,
                        help="grid steps (default 0.75, as sweep.search_resolution)")
    parser.add_argument("--narrow", type=int, default=None,
                        help="replay on N LRs centred on each series' smallest-scale optimum (a narrowed grid)")
    parser.add_argument("--out", type=Path, default=None, help="write replay.csv and per_scale.csv here")
    args = parser.parse_args(argv)
    rows, per_scale = [], []
    for path in args.results:
        if not path.is_file():
            sys.exit(f"search_replay: no results.csv at {path}")
        frame = load(path, args.metric)
        knob = scale_knob(frame)
        if args.modes:
            frame = frame[frame["mode"].isin(args.modes.split(","))]
        for key, series in frame.groupby(list(GROUP), dropna=False):
            if args.narrow:
                series = narrowed(series, knob, args.metric, args.narrow)
            lrs = sorted(series["lr"].unique())
            step = float(np.median(np.diff(np.log2(lrs))))
            settings = SearchSettings(resolution=args.resolution, budget=args.budget or len(lrs))
            searched, notes = replay(series, knob, args.metric, settings)
            label = f"{key[3]} {key[2]} ({path.parent.name})"
            for note in notes:
                per_scale.append({"series": label, knob: note["scale"], "lrs_tried": len(note["lrs"]),
                                  "lrs": " ".join(f"{x:g}" for x in note["lrs"]), "stop": note["stop"]})
            for what, runs in (("grid", series), ("search", searched)):
                optimal, transfer = answer(runs, knob, args.metric, step)
                t = transfer.iloc[0]
                best = " ".join(f"{lr:g}" for lr in optimal.sort_values("scale")["optimal_lr"])
                rows.append({"series": label, "how": what, "runs": len(runs), "cpu_s": round(cpu_seconds(runs)),
                             "best_lr_per_scale": best, "shift": t["shift_log2"] / step,
                             "shift_low": t["shift_log2_low"] / step, "shift_high": t["shift_log2_high"] / step,
                             "regret": t["regret"], "regret_high": t["regret_high"], "verdict": t["verdict"]})
    table, scales = pd.DataFrame(rows), pd.DataFrame(per_scale)
    with pd.option_context("display.width", 250, "display.max_colwidth", 120, "display.max_columns", 20):
        print(scales.to_string(index=False))
        print()
        for series, pair in table.groupby("series", sort=False):
            grid, search = pair.iloc[0], pair.iloc[1]
            print(f"{series}: search {search['runs']} of {grid['runs']} runs ({search['runs'] / grid['runs']:.0%}), "
                  f"CPU {search['cpu_s'] / grid['cpu_s']:.0%} of the grid's")
            for row in (grid, search):
                print(f"  {row['how']:>6}: best LR per scale {row['best_lr_per_scale']}; shift {row['shift']:+.2f} "
                      f"[{row['shift_low']:+.2f}, {row['shift_high']:+.2f}] grid steps; regret {row['regret']:.4f} "
                      f"(≤ {row['regret_high']:.4f}); {row['verdict']}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.out / "replay.csv", index=False)
        scales.to_csv(args.out / "per_scale.csv", index=False)


if __name__ == "__main__":
    main()
