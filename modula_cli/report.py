"""The transfer report of a sweep directory: results.csv, optimal_lr.csv, transfer.png (one panel per
optimiser × mode, one curve per scale), scale.png and scale.csv (loss vs scale at the LR tuned on the
smallest scale, every optimiser × mode on one figure: solid normed / dualized, dashed unnormed) and a
terminal summary with the transfer shift (max − min of log2 optimal LR across scales).

Works on partial and in-progress sweeps (planned runs without a summary are ``pending``), and on runs that all
diverged or failed (a line per scale point says so). The rows come from each run's own summary.json.

    modula-sweep-report outputs/sweeps/width/gpt_shakespeare
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

from . import atomic
from .results import COMPLETED, SCALE_KNOBS, SERIES, collect, status_counts


def scale_knob(frame: pd.DataFrame) -> str | None:
    """The knob a sweep scales: the first of width, depth, blocks_mass, context with several values."""
    for knob in SCALE_KNOBS:
        if frame[knob].nunique(dropna=True) > 1:
            return knob
    return None


def _series_label(key: tuple) -> str:
    arch, data, optimizer, mode = key
    return f"{mode} {optimizer} ({arch}, {data})"


def optimal_lrs(frame: pd.DataFrame, metric: str = "train_loss") -> pd.DataFrame:
    """Per series and scale: the argmin LR over completed runs, its loss, and whether it is a grid edge."""
    knob = scale_knob(frame)
    rows = []
    for key, series in frame.groupby(list(SERIES), dropna=False):
        for scale, group in (series.groupby(knob) if knob else [(None, series)]):
            grid = sorted(group["lr"].dropna().unique())
            done = group[(group["status"] == COMPLETED) & group[metric].notna()]
            if done.empty:
                continue
            best = done.loc[done[metric].idxmin()]
            rows.append({**dict(zip(SERIES, key)), "scale_knob": knob, "scale": scale, "optimal_lr": best["lr"],
                         "log2_optimal_lr": math.log2(best["lr"]), metric: best[metric],
                         "at_grid_edge": bool(best["lr"] in (grid[0], grid[-1])) if len(grid) > 1 else True,
                         "completed_runs": len(done), "grid_size": len(grid)})
    columns = [*SERIES, "scale_knob", "scale", "optimal_lr", "log2_optimal_lr", metric, "at_grid_edge",
               "completed_runs", "grid_size"]
    return pd.DataFrame(rows, columns=columns)  # columns even when empty: a sweep may have no completed run


def transfer_shifts(optimal: pd.DataFrame) -> dict[tuple, float]:
    """max − min of log2(optimal LR) across scales, per series (grid steps when the grid is powers of 2)."""
    if optimal.empty:
        return {}
    return {key: float(group["log2_optimal_lr"].max() - group["log2_optimal_lr"].min())
            for key, group in optimal.groupby(list(SERIES), dropna=False)}


def _plot_transfer(frame: pd.DataFrame, optimal: pd.DataFrame, metric: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    knob = scale_knob(frame)
    series_keys = [key for key, _ in frame.groupby(list(SERIES), dropna=False)]
    fig, axes = plt.subplots(1, len(series_keys), figsize=(5.2 * len(series_keys), 4.2), squeeze=False)
    for ax, key in zip(axes[0], series_keys):
        series = frame[(frame[list(SERIES)] == pd.Series(key, index=list(SERIES))).all(axis=1)]
        scales = sorted(series[knob].dropna().unique()) if knob else [None]
        colors = plt.cm.viridis([i / max(1, len(scales) - 1) for i in range(len(scales))])
        finite = series.loc[series["status"] == COMPLETED, metric].dropna()
        top = finite.max() if not finite.empty else 1.0
        for color, scale in zip(colors, scales):
            group = series if scale is None else series[series[knob] == scale]
            group = group.sort_values("lr")
            done = group[group["status"] == COMPLETED]
            label = f"{knob} {scale:g}" if knob else "runs"
            style = "o--" if key[3] == "unnormed" else "o-"  # the paper's convention: dashed unnormed
            ax.plot(done["lr"], done[metric], style, color=color, label=label, markersize=4)
            diverged = group[group["status"] == "diverged"]
            if not diverged.empty:
                ax.plot(diverged["lr"], [top] * len(diverged), "x", color=color, markersize=8)
            best = optimal[(optimal[list(SERIES)] == pd.Series(key, index=list(SERIES))).all(axis=1)]
            if knob:
                best = best[best["scale"] == scale]
            if not best.empty:
                ax.plot(best["optimal_lr"], best[metric], "*", color=color, markersize=14, markeredgecolor="k")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("learning rate")
        ax.set_ylabel(metric.replace("_", " "))
        ax.set_title(_series_label(key), fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, title="★ optimum, × diverged", title_fontsize=8)
    fig.tight_layout()
    atomic.write_with(path, lambda tmp: fig.savefig(tmp, dpi=150))
    plt.close(fig)


def _plot_scale(frame: pd.DataFrame, optimal: pd.DataFrame, metric: str, path: Path) -> pd.DataFrame:
    """Loss vs scale at the LR tuned on the smallest scale; solid normed/dualized, dashed unnormed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    knob = scale_knob(frame)
    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    rows = []
    if knob and not optimal.empty:
        for key, best in optimal.groupby(list(SERIES), dropna=False):
            smallest = best.loc[best["scale"].idxmin()]
            series = frame[(frame[list(SERIES)] == pd.Series(key, index=list(SERIES))).all(axis=1)]
            at_lr = series[(series["lr"] == smallest["optimal_lr"]) & (series["status"] == COMPLETED)]
            at_lr = at_lr.sort_values(knob)
            for _, row in at_lr.iterrows():
                rows.append({**dict(zip(SERIES, key)), "tuned_lr": smallest["optimal_lr"], knob: row[knob],
                             metric: row[metric]})
            style = "--" if key[3] == "unnormed" else "-"
            ax.plot(at_lr[knob], at_lr[metric], style, marker="o",
                    label=f"{_series_label(key)}, lr {smallest['optimal_lr']:g}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel(knob)
    ax.set_ylabel(metric.replace("_", " "))
    ax.set_title("loss at the LR tuned on the smallest scale", fontsize=10)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # nothing to label when no run completed
        ax.legend(fontsize=7)
    fig.tight_layout()
    atomic.write_with(path, lambda tmp: fig.savefig(tmp, dpi=150))
    plt.close(fig)
    return pd.DataFrame(rows)


def _write_csv(frame: pd.DataFrame, path: Path) -> None:
    atomic.write_with(path, lambda tmp: frame.to_csv(tmp, index=False))


def write_report(sweep_dir: Path, metric: str = "train_loss", quiet: bool = False) -> dict:
    """Write the report files into ``sweep_dir`` and print the summary; returns what was computed."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise FileNotFoundError(f"no sweep directory at {sweep_dir}")
    frame = collect(sweep_dir)
    if frame.empty:
        raise FileNotFoundError(f"{sweep_dir} holds no runs (no run folder with a summary.json, no sweep.json)")
    optimal = optimal_lrs(frame, metric)
    shifts = transfer_shifts(optimal)
    _write_csv(frame, sweep_dir / "results.csv")
    _write_csv(optimal, sweep_dir / "optimal_lr.csv")
    _plot_transfer(frame, optimal, metric, sweep_dir / "transfer.png")
    scale_rows = _plot_scale(frame, optimal, metric, sweep_dir / "scale.png")
    _write_csv(scale_rows, sweep_dir / "scale.csv")
    if not quiet:
        print(summary_text(frame, optimal, shifts, metric, sweep_dir))
    return {"results": frame, "optimal": optimal, "shifts": shifts, "counts": status_counts(frame)}


def summary_text(frame: pd.DataFrame, optimal: pd.DataFrame, shifts: dict, metric: str, sweep_dir: Path) -> str:
    lines = [f"Sweep {sweep_dir}: {len(frame)} runs"]
    knob = scale_knob(frame)
    for key, series in frame.groupby(list(SERIES), dropna=False):
        best = optimal[(optimal[list(SERIES)] == pd.Series(key, index=list(SERIES))).all(axis=1)] \
            if not optimal.empty else optimal
        lines.append(f"  {_series_label(key)}")
        lines.append(f"    {knob or 'scale':>12} {'optimal lr':>12} {'log2':>6} {metric:>12}  note")
        for scale, group in (series.groupby(knob) if knob else [(None, series)]):
            row = best[best["scale"] == scale] if knob else best
            label = "-" if scale is None else f"{scale:g}"
            if row.empty:  # no completed run at this point: say what happened instead
                counts = group["status"].value_counts()
                what = ", ".join(f"{n} {status}" for status, n in counts.items())
                lines.append(f"    {label:>12}  no completed run: {what}")
                continue
            row = row.iloc[0]
            note = "at grid edge" if row["at_grid_edge"] else ""
            lines.append(f"    {label:>12} {row['optimal_lr']:>12.6g} {row['log2_optimal_lr']:>6.1f} "
                         f"{row[metric]:>12.4f}  {note}")
        if key in shifts:
            lines.append(f"    transfer shift (max − min log2 optimal LR): {shifts[key]:.1f}")
    lines.append(f"  report: {sweep_dir / 'results.csv'}, optimal_lr.csv, transfer.png, scale.png, scale.csv")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="modula-sweep-report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument("--metric", choices=("train_loss", "test_loss"), default="train_loss")
    args = parser.parse_args(argv)
    try:
        result = write_report(args.sweep_dir, args.metric)
    except (FileNotFoundError, NotADirectoryError, PermissionError) as error:
        sys.exit(f"modula-sweep-report: {error}")
    counts = result["counts"]
    print("  " + ", ".join(f"{v} {k}" for k, v in counts.items() if v))


if __name__ == "__main__":
    main()
